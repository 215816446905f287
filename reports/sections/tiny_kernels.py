"""Tiny-kernels section: a histogram of the launch durations (log-spaced bins, binned here from the analyzer's
``launch_durations``, one row per timed launch) and the kernels launched tiny."""

from __future__ import annotations

import plotly.graph_objects as go

from reports.chart_budget import log_histogram
from reports.figures import figure_html, table_html

HISTOGRAM_BINS_PER_DECADE = 10

TABLE_COLUMNS = [
    "kernel",
    "launches",
    "launch_share",
    "gpu_time_ns",
    "mean_dur_ns",
    "share_of_all_gpu_time",
    "grid_size",
    "block_size",
    "kernel_name",
]


def render(result) -> str:
    durations = result.tables.get("launch_durations")
    hist = log_histogram(durations["dur_ns"], HISTOGRAM_BINS_PER_DECADE) if durations is not None else None
    if hist is None or not len(hist):
        return '<p class="muted">No kernel durations in this input.</p>'
    limit_ns = result.meta["max_dur_ns"]  # the analysis's threshold
    colors = ["#c0392b" if hi <= limit_ns else "#2471a3" for hi in hist["bin_hi"]]
    fig = go.Figure(
        go.Bar(
            x=(hist["bin_lo"] * hist["bin_hi"]) ** 0.5 / 1000.0,  # ns → µs
            y=hist["count"],
            marker_color=colors,
            customdata=hist[["bin_lo", "bin_hi", "total"]].to_numpy() / 1000.0,
            hovertemplate="%{customdata[0]:.2f}–%{customdata[1]:.2f} µs: %{y} launches, "
            "%{customdata[2]:,.1f} µs of GPU time<extra></extra>",
        )
    )
    fig.add_vline(x=limit_ns / 1000.0, line=dict(dash="dash", color="#c0392b"))
    fig.update_layout(
        title=f"Launch durations (red: under the {limit_ns / 1000:g} µs bound)",
        xaxis=dict(title="duration (µs, log scale)", type="log"),
        yaxis_title="launches",
        height=360,
    )
    stats = result.tables.get("kernels")
    body = (
        "<h3>Kernels launched under the bound</h3><div class='scroll'>"
        + table_html(stats[[c for c in TABLE_COLUMNS if c in stats.columns]], "tiny-kernels")
        + "</div>"
        if stats is not None and len(stats)
        else '<p class="muted">No launch under the bound.</p>'
    )
    return figure_html(fig, div_id="fig-tiny-kernels") + body
