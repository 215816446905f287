"""L2 section: the kernel × launch-order heatmap of L2 hit rate, and the per-kernel L2 table."""
from __future__ import annotations

import html

import plotly.graph_objects as go

from reports.figures import figure_html, table_html

TABLE_COLUMNS = ["kernel", "launches", "gpu_time_ns", "share", "l2_hit_pct", "l2_read_hit_pct", "l2_write_hit_pct",
                 "dram_throughput_pct", "dram_bound", "miss_cost_ns"]


def render(result) -> str:
    parts = []
    cells = result.tables.get("heatmap")
    if cells is not None and len(cells):
        kernels = list(dict.fromkeys(cells["kernel"]))
        bins = sorted(cells["bin"].unique())
        col = {b: i for i, b in enumerate(bins)}
        row = {k: i for i, k in enumerate(kernels)}
        z = [[None] * len(bins) for _ in kernels]
        text = [[""] * len(bins) for _ in kernels]
        for c in cells.itertuples(index=False):
            i, j = row[c.kernel], col[c.bin]
            z[i][j] = c.l2_hit_pct
            text[i][j] = (f"{html.escape(c.kernel)}<br>launches {c.first_launch}–{c.last_launch} ({c.launches})"
                          f"<br>L2 hit {c.l2_hit_pct:.1f} %<br>duration {c.dur_ns / 1000:,.1f} µs"
                          f"<br>DRAM {c.dram_throughput_pct:.1f} % of peak<br>grid {c.grid_size:,.0f} blocks")
        bin_size = cells.attrs.get("bin_size", 1)
        fig = go.Figure(go.Heatmap(z=z, x=[b * bin_size for b in bins], y=kernels, text=text,
                                   hoverinfo="text", colorscale="RdYlGn", zmin=0, zmax=100,
                                   colorbar=dict(title="L2 hit %")))
        fig.update_layout(title="L2 hit rate by kernel and launch order",
                          xaxis_title=f"launch order (bins of {bin_size})" if bin_size > 1 else "launch order",
                          height=max(300, 28 * len(kernels) + 120), yaxis=dict(autorange="reversed"))
        parts.append(figure_html(fig, div_id="fig-l2-heatmap"))
    table = result.tables.get("kernels")
    if table is not None:
        cols = [c for c in TABLE_COLUMNS if c in table.columns]
        parts.append("<h3>Kernels by GPU time</h3><div class='scroll'>" + table_html(table[cols], "l2-kernels") + "</div>")
    return "\n".join(parts) or '<p class="muted">No ncu kernels in this input.</p>'
