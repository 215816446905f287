"""Speed-of-light section: memory vs compute throughput per kernel, marker size = GPU time."""
from __future__ import annotations

import plotly.graph_objects as go

from reports.figures import figure_html, table_html

COLORS = {"memory-bound": "#2471a3", "compute-bound": "#1e8449", "latency-bound": "#c0392b",
          "balanced": "#7d3c98", "unknown": "#888888"}


def render(result) -> str:
    stats = result.tables.get("kernels")
    if stats is None or not len(stats):
        return '<p class="muted">No speed-of-light metrics in this input.</p>'
    fig = go.Figure()
    peak = max(float(stats["gpu_time_ns"].max()), 1.0)
    for cls, g in stats.groupby("bound", sort=True):
        fig.add_trace(go.Scatter(
            x=g["memory_throughput_pct"], y=g["sm_throughput_pct"], mode="markers", name=str(cls),
            text=g["kernel"], customdata=g[["gpu_time_ns", "launches"]].to_numpy(),
            hovertemplate="%{text}<br>memory %{x:.1f} %<br>compute %{y:.1f} %<br>"
                          "GPU time %{customdata[0]:,.0f} ns in %{customdata[1]} launches<extra></extra>",
            marker=dict(size=(8 + 40 * (g["gpu_time_ns"] / peak) ** 0.5).tolist(), color=COLORS.get(cls, "#888"),
                        opacity=0.75, line=dict(width=1, color="#333"))))
    fig.update_layout(title="Speed of light: memory vs compute throughput (% of peak)",
                      xaxis=dict(title="memory throughput % of peak", range=[0, 105]),
                      yaxis=dict(title="compute (SM) throughput % of peak", range=[0, 105]), height=480)
    cols = ["kernel", "launches", "gpu_time_ns", "share", "sm_throughput_pct", "memory_throughput_pct",
            "dram_throughput_pct", "bound"]
    return figure_html(fig, div_id="fig-sol") + "<div class='scroll'>" + table_html(stats[cols], "sol-kernels") + "</div>"
