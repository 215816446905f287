"""Launch-configuration section: grid, block and waves per kernel with the time each shape loses."""

from __future__ import annotations

import plotly.graph_objects as go

from reports.chart_budget import kernel_axis
from reports.figures import figure_html, table_html

TABLE_COLUMNS = [
    "kernel",
    "launches",
    "configs",
    "gpu_time_ns",
    "share",
    "grid_size",
    "block_size",
    "sm_count",
    "waves_per_sm",
    "idle_sm_pct",
    "last_wave_idle_pct",
    "wasted_lane_pct",
    "small_grid_loss_share",
    "tail_loss_share",
    "lane_loss_share",
    "kernel_name",
]
MAX_BARS = 20


def render(result) -> str:
    stats = result.tables.get("kernels")
    if stats is None or not len(stats):
        return '<p class="muted">No launch statistics in this input.</p>'
    parts = []
    lossy = stats[(stats["small_grid_loss_share"] + stats["tail_loss_share"] + stats["lane_loss_share"]) > 0]
    if len(lossy):
        top = lossy.head(MAX_BARS)
        names, ticks = kernel_axis(top["kernel"], top.get("kernel_name"))  # short on the axis, full on hover
        fig = go.Figure(
            [
                go.Bar(
                    y=names,
                    x=100 * top[f"{c}_loss_share"],
                    name=label,
                    orientation="h",
                    hovertemplate="%{y}<br>" + label + ": %{x:.2f} % of GPU time<extra></extra>",
                )
                for c, label in (
                    ("small_grid", "idle SMs (small grid)"),
                    ("tail", "partial last wave"),
                    ("lane", "idle lanes (block not a warp multiple)"),
                )
            ]
        )
        fig.update_layout(
            title="Estimated GPU time lost to the launch shape",
            barmode="stack",
            xaxis_title="% of profiled GPU time",
            yaxis=dict(autorange="reversed", automargin=True, tickmode="array", tickvals=names, ticktext=ticks),
            height=max(300, 24 * len(top) + 140),
        )
        parts.append(figure_html(fig, div_id="fig-launch-config"))
    sms = result.meta.get("sm_count")
    if sms == sms and sms is not None:
        parts.append(
            f"<p class='muted'>The GPU has {int(sms)} SMs. Kernels shorter than the tiny-kernel bound "
            "are not judged here (see Tiny kernels). Grid, block, waves and the idle shares are those of the launch "
            "shape carrying most of a kernel's GPU time (<i>Launch shapes</i>: how many it ran); the losses sum "
            "every launch.</p>"
        )
    cols = [c for c in TABLE_COLUMNS if c in stats.columns]
    parts.append("<div class='scroll'>" + table_html(stats[cols], "launch-config-kernels") + "</div>")
    return "\n".join(parts)
