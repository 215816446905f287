"""Host syncs: the table of sync locations and a timeline of one step with its sync points."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from reports.figures import figure_html, table_html

TABLE_COLUMNS = {
    "location": "location",
    "function": "function",
    "op": "op",
    "calls": "calls",
    "count_per_step": "count / step",
    "blocked_ms_per_step": "host blocked ms / step",
    "gpu_idle_ms_per_step": "GPU idle ms / step",
    "share_of_step": "share of step",
}


def render(result) -> str:
    parts = []
    locations = result.tables.get("locations")
    if locations is None or not len(locations):
        return '<p class="muted">No host synchronisation found.</p>'
    if not locations["line_exact"].all():
        parts.append(
            '<p class="muted">Locations from a bare profiler trace name the user function (and the line it '
            "starts at); the exact line that synced is not in the trace. Run under "
            "<code>gpudiag profile</code> to get exact lines.</p>"
        )
    cols = [c for c in TABLE_COLUMNS if c in locations]
    view = locations[(["rank"] if "rank" in locations else []) + cols].rename(columns=TABLE_COLUMNS)
    parts.append(f"<div class='scroll'>{table_html(view, 'sync-locations', float_fmt='{:,.3f}')}</div>")
    busy, points = result.tables.get("timeline_busy"), result.tables.get("timeline_syncs")
    if busy is not None and len(busy):
        step = int(busy["step"].iloc[0])
        fig = go.Figure()
        fig.add_trace(
            go.Bar(
                base=busy["start_ms"],
                x=busy["end_ms"] - busy["start_ms"],
                y=["GPU"] * len(busy),
                orientation="h",
                name="GPU busy",
                marker_color="#4c78a8",
                hovertemplate="busy %{base:.3f}–%{x:.3f} ms<extra></extra>",
            )
        )
        if points is not None and len(points):
            fig.add_trace(
                go.Scatter(
                    x=points["t_ms"],
                    y=["host"] * len(points),
                    mode="markers",
                    name="sync",
                    marker=dict(symbol="x", size=12, color="#e45756"),
                    text=[
                        f"{o} at {loc}: blocked {b:.3f} ms, GPU idle {g:.3f} ms"
                        for o, loc, b, g in zip(
                            points["op"], points["location"], points["blocked_ms"], points["gpu_idle_ms"]
                        )
                    ],
                    hovertemplate="%{text}<extra></extra>",
                )
            )
        label = f"step {step}" if step >= 0 else "the whole trace"
        fig.update_layout(
            title=f"GPU busy time and host syncs in {html.escape(label)} (median-length step)",
            xaxis_title="ms from the step's start",
            barmode="overlay",
            height=260,
        )
        parts.append(figure_html(fig))
    return "\n".join(parts)
