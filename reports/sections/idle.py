"""GPU idle time: a per-step stacked bar of busy time and idle causes, and the per-stream breakdown."""

from __future__ import annotations

import plotly.graph_objects as go

from reports.figures import figure_html, table_html

CAUSES = (
    ("busy_ms", "busy", "#4c78a8"),
    ("idle_sync_ms", "idle: held by syncs", "#e45756"),
    ("idle_host_ms", "idle: waiting for host launch", "#f58518"),
    ("idle_short_ms", "idle: short kernel gaps", "#bab0ac"),
    ("idle_other_ms", "idle: other streams / events", "#72b7b2"),
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
    if per_step is not None and len(per_step):
        for rank, rows in per_step.groupby("rank"):
            labels = [str(s) if s >= 0 else "all" for s in rows["step"]]
            fig = go.Figure()
            for col, name, color in CAUSES:
                fig.add_trace(go.Bar(x=labels, y=rows[col], name=name, marker_color=color))
            fig.update_layout(
                barmode="stack",
                title=f"Rank {rank}: GPU time per step",
                xaxis_title="step",
                yaxis_title="ms",
                xaxis_type="category",
                height=380,
            )
            parts.append(figure_html(fig))
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
