"""GPU idle time: a per-step stacked bar of busy time and idle causes, and the per-stream breakdown.

Over the mark budget (a long run: thousands of steps × five causes) consecutive steps are grouped:
a bar is then the mean per step of its group, and a marker shows the group's slowest step, so a
spike stays visible; the title says the group size.
"""

from __future__ import annotations

from html import escape

import plotly.graph_objects as go

from reports import chart_budget
from reports.chart_budget import binning_note, group_consecutive
from reports.figures import CAUSE_COLORS, figure_html, table_html

# the per-step table's columns as stacked bars: (column, legend name, colour of its cause, diagnose.findings.CAUSES)
CAUSES = (
    ("busy_ms", "busy", CAUSE_COLORS["compute"]),
    ("idle_sync_ms", "idle: held by syncs", CAUSE_COLORS["sync"]),
    ("idle_host_ms", "idle: waiting for host launch", CAUSE_COLORS["host"]),
    ("idle_short_ms", "idle: short kernel gaps", CAUSE_COLORS["short"]),
    ("idle_other_ms", "idle: other streams / events", CAUSE_COLORS["other"]),
    ("idle_unlinked_ms", "idle: cause not in the trace", CAUSE_COLORS["unlinked"]),
)


def render(result) -> str:
    parts = []
    breakdown = result.tables.get("breakdown")
    if breakdown is None or not len(breakdown):
        return '<p class="muted">No GPU activity in the trace.</p>'
    view = breakdown[["rank", "idle_pct", "compute_pct", "non_compute_pct"]].rename(
        columns={"idle_pct": "GPU idle %", "compute_pct": "compute %", "non_compute_pct": "non-compute %"}
    )
    parts.append(table_html(view, "idle-breakdown"))
    per_step = result.tables.get("per_step")
    sources = {r: s for r, s in (result.meta.get("step_source") or {}).items() if s and s != "ProfilerStep annotations"}
    if sources:  # the trace had no ProfilerStep ranges: say what its steps are
        words = {"whole trace": "none (no ProfilerStep and nothing repeats at the top): figures are over the span"}
        said = "; ".join(
            f"rank {r}: {words.get(s, s)}" if len(sources) > 1 else words.get(s, s) for r, s in sorted(sources.items())
        )
        parts.append(f'<p class="muted">Steps of the trace: {escape(said)}.</p>')
    if per_step is not None and len(per_step):
        for rank, rows in per_step.groupby("rank"):
            parts.append(_per_step_figure(rank, rows.sort_values("step", kind="stable")))
    streams = result.tables.get("per_stream")
    if streams is not None and len(streams):
        parts.append("<h3>Idle time per stream (HTA's categories)</h3>")
        parts.append(
            table_html(
                streams.assign(idle_ms=streams["idle_ns"] / 1e6)[
                    ["rank", "stream", "idle_category", "idle_ms", "idle_ratio"]
                ],
                "idle-streams",
                float_fmt="{:,.3f}",
            )
        )
    return "\n".join(parts)


def _per_step_figure(rank, rows) -> str:
    fig = go.Figure()
    title = f"Rank {rank}: GPU time per step"
    if len(rows) * len(CAUSES) <= chart_budget.MAX_MARKS:
        labels = [str(s) if s >= 0 else "all" for s in rows["step"]]
        for col, name, color in CAUSES:
            fig.add_trace(go.Bar(x=labels, y=rows[col], name=name, marker_color=color))
    else:
        group, size = group_consecutive(len(rows), chart_budget.MAX_MARKS // (len(CAUSES) + 1))
        cols = [c for c, _, _ in CAUSES]
        grouped = rows[cols].assign(total_ms=rows[cols].sum(axis=1), group=group, step=rows["step"].to_numpy())
        g = grouped.groupby("group", sort=True)
        means = g[cols].mean()
        steps = g["step"].agg(["first", "last"])
        slowest = grouped.loc[g["total_ms"].idxmax()]
        labels = [f"{a}–{b}" for a, b in zip(steps["first"], steps["last"])]
        for col, name, color in CAUSES:
            fig.add_trace(go.Bar(x=labels, y=means[col], name=f"{name} (mean per step)", marker_color=color))
        fig.add_trace(
            go.Scatter(
                x=labels,
                y=slowest["total_ms"],
                mode="markers",
                name="slowest step of the group",
                marker=dict(symbol="line-ew-open", size=10, color="#222"),
                customdata=slowest[["step"]].to_numpy(),
                hovertemplate="slowest: step %{customdata[0]}, %{y:.3f} ms<extra></extra>",
            )
        )
        title += (
            f"<br><sub>{binning_note(f'{size:,} steps', len(labels))} (mean per step; of {len(rows):,} steps)</sub>"
        )
    fig.update_layout(
        barmode="stack",
        title=title,
        xaxis_title="step",
        yaxis_title="ms",
        xaxis_type="category",
        height=380,
    )
    return figure_html(fig)
