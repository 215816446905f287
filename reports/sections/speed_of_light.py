"""Speed-of-light section: memory vs compute throughput per kernel, marker area = GPU time.

One marker per kernel within the mark budget; past it the lightest kernels are drawn as one
"other" marker (their GPU time summed, throughputs weighted by it).
"""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from reports import chart_budget
from reports.chart_budget import top_n_other
from reports.figures import figure_html, table_html

COLORS = {
    "memory-bound": "#2471a3",
    "compute-bound": "#1e8449",
    "latency-bound": "#c0392b",
    "balanced": "#7d3c98",
    "unknown": "#888888",
}
TABLE_COLUMNS = [
    "kernel",
    "launches",
    "gpu_time_ns",
    "share",
    "bound",
    "limiter_unit",
    "limiter_pct",
    "next_unit",
    "next_pct",
    "sm_throughput_pct",
    "memory_throughput_pct",
    "dram_throughput_pct",
    "flop_rate_pct",
    "dram_bytes_per_flop",
    "ridge_bytes_per_flop",
    "roofline_ns",
    "roofline_saving_share",
    "kernel_name",
]


def render(result) -> str:
    stats = result.tables.get("kernels")
    if stats is None or not len(stats):
        if result.findings:
            return f'<p class="muted">{html.escape(result.findings[0].recommendation)}</p>'
        return '<p class="muted">No speed-of-light metrics in this input.</p>'
    bound, latency = result.meta["bound_pct"], result.meta["latency_pct"]  # the analysis's thresholds
    fig = go.Figure()
    peak = max(float(stats["gpu_time_ns"].max()), 1.0)
    drawn, rest = top_n_other(stats, "gpu_time_ns", chart_budget.MAX_MARKS - 16)
    if len(rest):
        drawn = pd.concat([drawn, _other(rest)], ignore_index=True)
    for cls, g in drawn.groupby("bound", sort=True):
        fig.add_trace(
            go.Scatter(
                x=g["memory_throughput_pct"],
                y=g["sm_throughput_pct"],
                mode="markers",
                name=str(cls),
                text=[html.escape(k) for k in g["kernel"]],
                customdata=[
                    [t, n, sh, html.escape(str(u or "–")), p]
                    for t, n, sh, u, p in zip(
                        g["gpu_time_ns"],
                        g["launches"],
                        g["share"],
                        g.get("limiter_unit", [None] * len(g)),
                        g.get("limiter_pct", [float("nan")] * len(g)),
                    )
                ],
                hovertemplate="%{text}<br>memory %{x:.1f} % of peak<br>compute %{y:.1f} % of peak<br>"
                "limiter %{customdata[3]} at %{customdata[4]:.1f} % of peak<br>"
                "GPU time %{customdata[0]:,.0f} ns (%{customdata[2]:.1%}) in %{customdata[1]} launches"
                "<extra></extra>",
                marker=dict(
                    size=g["gpu_time_ns"].tolist(),
                    sizemode="area",
                    sizeref=peak / 45.0**2,
                    sizemin=5,
                    color=COLORS.get(cls, "#888"),
                    opacity=0.75,
                    line=dict(width=1, color="#333"),
                ),
            )
        )
    for v in (bound, latency):
        fig.add_vline(x=v, line=dict(dash="dot", color="#999", width=1))
        fig.add_hline(y=v, line=dict(dash="dot", color="#999", width=1))
    fig.update_layout(
        title="Speed of light: memory vs compute throughput (% of peak), marker area = GPU time",
        xaxis=dict(title="memory throughput % of peak", range=[0, 105]),
        yaxis=dict(title="compute (SM) throughput % of peak", range=[0, 105]),
        height=500,
    )
    if len(rest):
        fig.update_layout(
            title=f"{fig.layout.title.text}<br><sub>{len(rest):,} lightest kernels drawn as one marker</sub>"
        )
    cols = [c for c in TABLE_COLUMNS if c in stats.columns]
    return (
        figure_html(fig, div_id="fig-sol")
        + f"<p class='muted'>Bound at ≥ {bound:g} % of peak on one unit; latency-bound under {latency:g} % on both. "
        "The limiter is the unit of ncu's SOL breakdown nearest its peak; next is the highest unit off "
        "the limiter's path (what the kernel would reach if the limiter stopped limiting). The roofline (where the "
        "capture has ncu's SpeedOfLight_RooflineChart metrics, as in --set full): the kernel's FLOPs at its "
        "precision's peak, its DRAM bytes at peak bandwidth, or its integer work at the ALU pipe's peak, whichever "
        "takes longest; the ridge is the DRAM bytes per FLOP at which the two peaks meet.</p>"
        + "<div class='scroll'>"
        + table_html(stats[cols], "sol-kernels")
        + "</div>"
    )


def _other(rest: pd.DataFrame) -> pd.DataFrame:
    """The kernels past the budget as one row: GPU time, launches and share summed, throughputs weighted
    by GPU time (as the per-kernel figures weight launches by duration)."""
    w = rest["gpu_time_ns"].fillna(0.0)
    row = {"kernel": f"other ({len(rest):,} kernels)", "bound": "other", "limiter_unit": "mixed"}
    for col in ("gpu_time_ns", "launches", "share"):
        row[col] = float(rest[col].sum()) if col in rest else float("nan")
    for col in ("memory_throughput_pct", "sm_throughput_pct"):
        ok = rest[col].notna() & (w > 0)
        row[col] = float((rest[col][ok] * w[ok]).sum() / w[ok].sum()) if ok.any() else float("nan")
    return pd.DataFrame([row])
