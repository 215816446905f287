"""Occupancy section: achieved vs theoretical occupancy per kernel, and the limiter table."""

from __future__ import annotations

import plotly.graph_objects as go

from reports.chart_budget import kernel_axis
from reports.figures import figure_html, table_html

MAX_BARS = 30
TABLE_COLUMNS = [
    "kernel",
    "launches",
    "gpu_time_ns",
    "share",
    "achieved_occupancy_pct",
    "theoretical_occupancy_pct",
    "gap_pts",
    "grid_ceiling_pct",
    "grid_limited_launches",
    "limiter",
    "sol_limiter_unit",
    "sol_limiter_pct",
    "blocks_per_sm",
    "registers_per_thread",
    "shared_mem_per_block_bytes",
    "grid_size",
    "block_size",
    "kernel_name",
]


def render(result) -> str:
    stats = result.tables.get("kernels")
    if stats is None or not len(stats):
        return '<p class="muted">No occupancy metrics in this input.</p>'
    top = stats.head(MAX_BARS)
    names, ticks = kernel_axis(top["kernel"], top.get("kernel_name"))  # short on the axis, full on hover
    fig = go.Figure(
        [
            go.Bar(
                y=names,
                x=top["theoretical_occupancy_pct"],
                name="theoretical",
                orientation="h",
                marker_color="#d5dbdb",
                customdata=top[["limiter"]].fillna("").to_numpy(),
                hovertemplate="%{y}<br>theoretical %{x:.1f} % (limiter: %{customdata[0]})<extra></extra>",
            ),
            go.Bar(
                y=names,
                x=top["achieved_occupancy_pct"],
                name="achieved",
                orientation="h",
                marker_color="#2471a3",
                hovertemplate="%{y}<br>achieved %{x:.1f} %<extra></extra>",
            ),
        ]
    )
    fig.update_layout(
        title=f"Achieved vs theoretical occupancy ({len(top)} heaviest kernels)",
        barmode="overlay",
        xaxis=dict(title="% of the SM's warp slots", range=[0, 100]),
        yaxis=dict(autorange="reversed", automargin=True, tickmode="array", tickvals=names, ticktext=ticks),
        height=max(320, 24 * len(top) + 140),
    )
    cols = [c for c in TABLE_COLUMNS if c in stats.columns]
    return (
        figure_html(fig, div_id="fig-occupancy")
        + "<p class='muted'>Grid's occupancy ceiling: the occupancy each launch's grid allows (the blocks an SM "
        "actually gets), duration-weighted; a launch whose gap it explains is counted under <i>Limited by the "
        "grid</i>, left to the launch configuration and not judged here.</p>"
        + "<div class='scroll'>"
        + table_html(stats[cols], "occupancy-kernels")
        + "</div>"
    )
