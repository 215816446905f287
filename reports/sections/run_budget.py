"""Run budget section: the run's wall time, process start to exit, as one stacked bar per rank, and its tables.

Draws ``result.tables["parts"]`` as the analyzer made it (the parts of a rank add up to its wall time), in the order
``result.meta["parts"]`` gives, each part in its colour of the verdict's run bar (``RUN_PART_COLORS``). Under it,
what each rank's wall time runs from and to and the analyzer's notes on what could not be told apart, the parts'
table, and the timed work (evaluations, checkpoints, compiles, gpudiag's own work) most costly first.
"""

from __future__ import annotations

import html

from reports.figures import figure_html, run_part_color, table_html
from reports.format import ms_human, n_things, short_location

# the parts' table as shown: each part's wall time and share under names that carry their unit (``ms`` carries none)
PART_COLUMNS = {
    "rank": "rank",
    "label": "label",
    "ms": "wall_ms",
    "share": "share_of_run",
    "location": "location",
    "library_location": "library_location",
    "detail": "detail",
}
# the timed work as shown: ``timed_ms`` as the record measured it, ``counted_ms`` what the budget gives its part
# after the overlaps (gpudiag's own work, then compilation, then named work, then imports)
WORK_COLUMNS = {
    "part": "part",
    "what": "what",
    "name": "name",
    "step": "step",
    "phase": "phase",
    "ms": "timed_ms",
    "counted_ms": "counted_ms",
    "location": "location",
    "library_location": "library_location",
}
MAX_WORK_ROWS = 200


def render(result) -> str:
    parts = result.tables.get("parts")
    if parts is None or not len(parts):
        return '<p class="muted">No run budget for this input.</p>'
    ranks = result.meta.get("ranks") or {}
    out = [_chart(parts, result.meta.get("parts"))]
    for rank, meta in sorted(ranks.items()):
        out.append(f'<p class="muted">{html.escape(_notes(rank, meta, len(ranks) > 1))}</p>')
    shown = _text_locations(parts[[c for c in PART_COLUMNS if c in parts.columns]]).rename(columns=PART_COLUMNS)
    out.append(f"<div class='scroll'>{table_html(shown, 'run-budget-parts')}</div>")
    out += _work_table(result.tables.get("work"))
    return "\n".join(out)


def _notes(rank, meta: dict, many_ranks: bool) -> str:
    who = f"Rank {rank}: " if many_ranks else ""
    text = f"{who}{ms_human(meta.get('wall_ms', 0.0))}, {meta.get('wall_of') or 'the process start to its exit'}."
    for note in meta.get("notes", ()):
        text += f" Note: {note}."
    return text


def _work_table(work) -> list[str]:
    if work is None or not len(work):
        return []
    work = work.sort_values("counted_ms", ascending=False, kind="stable")
    shown = _text_locations(work[[c for c in WORK_COLUMNS if c in work.columns]]).rename(columns=WORK_COLUMNS)
    left_out = len(shown) - MAX_WORK_ROWS
    note = (
        f'<p class="muted">{n_things(left_out, "more timed piece")} of work, each shorter than those shown, '
        "are left out here.</p>"
        if left_out > 0
        else ""
    )
    return [
        f"<h3>Timed work, most costly first ({n_things(len(work), 'record')})</h3>",
        '<p class="muted">Timed: as the record measured it; counted: what its part holds after overlaps '
        "(gpudiag's own work, then compilation, then evaluation and checkpoints, then imports).</p>",
        f"<div class='scroll'>{table_html(shown.head(MAX_WORK_ROWS), 'run-budget-work')}</div>{note}",
    ]


def _text_locations(df):
    """The location columns as text, a missing one None (a NaN there would read as a number)."""
    columns = [c for c in ("location", "library_location") if c in df.columns]
    return df.assign(**{c: df[c].astype(object).where(df[c].notna(), None) for c in columns})


def _chart(parts, order) -> str:
    import plotly.graph_objects as go

    bars = parts.assign(bar=[f"rank {r}" for r in parts["rank"]])
    names = list(order or ()) + [p for p in dict.fromkeys(parts["part"]) if p not in (order or ())]
    fig = go.Figure()
    for part in names:
        rows = bars[(bars["part"] == part) & (bars["ms"].fillna(0) > 0)]
        if not len(rows):
            continue
        where = [" at " + short_location(loc) if short_location(loc) else "" for loc in rows["location"].astype(object)]
        fig.add_bar(
            y=rows["bar"],
            x=rows["ms"] / 1000.0,
            orientation="h",
            name=str(rows["label"].iloc[0]),
            marker_color=run_part_color(str(part)),  # the colour of the verdict's run bar
            customdata=list(zip(rows["ms"], rows["share"], where)),
            hovertemplate="%{customdata[0]:,.1f} ms (%{customdata[1]:.1%} of the run)%{customdata[2]}<extra></extra>",
        )
    fig.update_layout(
        barmode="stack",
        title="Where the run's time goes, process start to exit (each bar adds up to its rank's wall time)",
        xaxis_title="s",
        height=max(140 + 40 * parts["rank"].nunique(), 90 + 22 * len(fig.data)),  # room for every legend entry
        yaxis=dict(autorange="reversed"),
        legend=dict(traceorder="normal"),
    )
    return figure_html(fig, div_id="fig-run-budget")
