"""Memory-access section: each kernel's share of excess global sectors (uncoalesced accesses) and where they are."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from reports.chart_budget import kernel_axis
from reports.figures import figure_html, table_html

MAX_BARS = 30
TABLE_COLUMNS = [
    "kernel",
    "launches",
    "gpu_time_ns",
    "share",
    "excess_share_pct",
    "access",
    "top_location",
    "est_loss_share",
    "flagged",
    "excess_sectors",
    "sectors",
    "ld_sectors_per_request",
    "st_sectors_per_request",
    "ld_bytes_per_sector",
    "st_bytes_per_sector",
    "memory_throughput_pct",
    "source_lines",
    "excess_source",
    "access_source",
    "kernel_name",
]


def render(result) -> str:
    stats = result.tables.get("kernels")
    if stats is None or not len(stats):
        if result.findings:
            return f'<p class="muted">{html.escape(result.findings[0].recommendation)}</p>'
        return '<p class="muted">No global-memory sector metrics in this input.</p>'
    threshold = result.meta["excess_share_pct"]  # the analysis's threshold
    top = stats[stats["excess_share_pct"].notna()].sort_values("gpu_time_ns", ascending=False).head(MAX_BARS)
    names, ticks = kernel_axis(top["kernel"], top.get("kernel_name"))  # short on the axis, full on hover
    hover = top[["access", "top_location", "share", "est_loss_share"]].astype(object)
    hover = hover.where(hover.notna(), "").to_numpy()
    fig = go.Figure(
        go.Bar(
            y=names,
            x=top["excess_share_pct"],
            orientation="h",
            marker_color=["#c0392b" if f else "#7f8c8d" for f in top["flagged"]],
            customdata=[[html.escape(str(v)) if isinstance(v, str) else v for v in row] for row in hover],
            hovertemplate="%{y}<br>%{x:.1f} % of its L2 sectors are excess<br>%{customdata[0]} %{customdata[1]}"
            "<br>GPU time share %{customdata[2]:.1%}, recoverable %{customdata[3]:.1%} of all GPU time<extra></extra>",
        )
    )
    fig.add_vline(x=threshold, line=dict(dash="dot", color="#999", width=1))
    fig.update_layout(
        title="Excess global sectors per kernel (% of its L2 sectors; red = flagged), heaviest kernels first",
        xaxis=dict(title="excess sectors, % of the kernel's global L2 sectors", range=[0, 105]),
        yaxis=dict(autorange="reversed", automargin=True, tickmode="array", tickvals=names, ticktext=ticks),
        height=max(300, 24 * len(top) + 120),
        showlegend=False,
    )
    notes = "".join(f"<p class='muted'>{html.escape(n)}</p>" for n in result.meta.get("notes", []))
    cols = [c for c in TABLE_COLUMNS if c in stats.columns]
    return (
        figure_html(fig, div_id="fig-memory-access")
        + f"<p class='muted'>Flagged at ≥ {threshold:g} % excess sectors (ncu's theoretical vs ideal sectors per "
        "instruction); the recoverable share assumes the kernel's time follows its memory traffic.</p>"
        + notes
        + "<div class='scroll'>"
        + table_html(stats[cols], "memory-access-kernels")
        + "</div>"
    )
