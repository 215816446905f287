"""Step-time budget section: one stacked bar per budget (median step, slow steps, traced steps) and its table.

Draws ``result.tables["budget"]`` as the analyzer made it: each bar's parts add up to its wall time;
a negative remainder (the traced parts read high) is drawn as 0 and said in the notes. Which steps
each part was measured in, warm-up and gpudiag's own steps follow as text and tables.
"""

from __future__ import annotations

import html

from reports.figures import cause_color, figure_html, table_html, titled_tables
from reports.format import agree, ms_human, n_things

TABLE_COLUMNS = ["rank", "column", "wall_ms", "steps", "label", "ms", "share", "measured_in"]


def render(result) -> str:
    budget = result.tables.get("budget")
    if budget is None or not len(budget):
        return '<p class="muted">No step-time budget for this input.</p>'
    parts = [_chart(budget)]
    for rank, meta in sorted((result.meta.get("ranks") or {}).items()):
        parts.append(f'<p class="muted">{html.escape(_notes(rank, meta, len(result.meta["ranks"]) > 1))}</p>')
    parts.append(f"<div class='scroll'>{table_html(budget[TABLE_COLUMNS], 'step-budget-parts')}</div>")
    titles = (("slow_steps", "Slow steps"), ("traced_steps", "Traced steps (gpudiag's trace window)"))
    parts += titled_tables(result.tables, titles, "step-budget")
    return "\n".join(parts)


def _notes(rank, meta: dict, many_ranks: bool) -> str:
    who = f"Rank {rank}: " if many_ranks else ""
    text = (
        f"{who}{n_things(meta.get('warmup_steps', 0), 'warm-up step')} ({ms_human(meta.get('warmup_ms', 0.0))} in "
        f"all) and {n_things(meta.get('instrumented_steps', 0), 'step')} inside gpudiag's trace window "
        f"({ms_human(meta.get('instrumented_ms', 0.0))}) are kept out of the figures; "
        f"{n_things(meta.get('steady_steps', 0), 'steady step')} {agree(meta.get('steady_steps', 0), 'remains', 'remain')}."
    )
    for note in meta.get("notes", ()):
        text += f" Note: {note}."
    return text


def _chart(budget) -> str:
    import plotly.graph_objects as go

    many_ranks = budget["rank"].nunique() > 1
    budget = budget.assign(
        bar=[f"{c} (rank {r})" if many_ranks else str(c) for c, r in zip(budget["column"], budget["rank"])]
    )
    fig = go.Figure()
    for part, rows in budget.groupby("part", sort=False):
        rows = rows[rows["shown_ms"].fillna(0) > 0]
        if not len(rows):
            continue
        fig.add_bar(
            y=rows["bar"],
            x=rows["shown_ms"],
            orientation="h",
            name=str(rows["label"].iloc[0]),
            marker_color=cause_color(str(part)),  # a part is its cause's colour, as in the verdict's bar
            customdata=rows[["share", "measured_in"]].to_numpy(),
            hovertemplate="%{x:,.3f} ms (%{customdata[0]:.1%}), measured in %{customdata[1]}<extra></extra>",
        )
    fig.update_layout(
        barmode="stack",
        title="Where a step's time goes (each bar adds up to its wall time)",
        xaxis_title="ms",
        height=160 + 60 * budget["bar"].nunique(),
        yaxis=dict(autorange="reversed"),
    )
    return figure_html(fig, div_id="fig-step-budget")
