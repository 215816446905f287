"""L2 section: the kernel × launch-order heatmap of L2 hit rate, and the per-kernel L2 table.

Draws only: the cells (one per kernel and bin of consecutive launches) come from the
l2 analyzer's ``heatmap`` table, the bands and bin size from its ``meta``.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from reports.figures import figure_html, table_html
from reports.format import ns_human

TABLE_COLUMNS = [
    "kernel",
    "launches",
    "gpu_time_ns",
    "share",
    "l2_hit_pct",
    "band",
    "l2_read_hit_pct",
    "l2_write_hit_pct",
    "dram_throughput_pct",
    "dram_bound",
    "miss_cost_ns",
    "grid_size",
    "kernel_name",
]
EMPTY = '<p class="muted">No ncu kernels in this input.</p>'


def render(result) -> str:
    parts = []
    if result.findings and result.findings[0].id == "l2.not_measured":
        parts.append(f'<p class="muted">{html.escape(result.findings[0].recommendation)}</p>')
    cells = result.tables.get("heatmap")
    if cells is not None and len(cells):
        parts.append(_heatmap(cells, result.meta))
    table = result.tables.get("kernels")
    if table is not None and len(table):
        cols = [c for c in TABLE_COLUMNS if c in table.columns]
        parts.append(
            "<h3>Kernels by GPU time × miss rate</h3><p class='muted'>miss_cost_ns = GPU time × "
            "(1 − hit rate); click a column to sort.</p><div class='scroll'>"
            + table_html(table[cols], "l2-kernels")
            + "</div>"
        )
    return "\n".join(parts) or EMPTY


def _heatmap(cells, meta) -> str:
    kernels = list(dict.fromkeys(cells["kernel"]))
    bins = sorted(cells["bin"].unique())
    col = {b: i for i, b in enumerate(bins)}
    row = {k: i for i, k in enumerate(kernels)}
    z = [[None] * len(bins) for _ in kernels]
    text = [[""] * len(bins) for _ in kernels]
    for c in cells.itertuples(index=False):
        i, j = row[c.kernel], col[c.bin]
        z[i][j] = c.l2_hit_pct
        launches = (
            f"launch {c.first_launch}"
            if c.launches == 1
            else f"launches {c.first_launch}–{c.last_launch} ({c.launches} of this kernel)"
        )
        text[i][j] = (
            f"{html.escape(c.kernel)}<br>{launches}<br>L2 hit {c.l2_hit_pct:.1f} %"
            f"<br>duration {ns_human(c.dur_ns)}<br>DRAM {_pct(c.dram_throughput_pct)} of peak"
            f"<br>grid {html.escape(str(c.grid))}"
        )
    bin_size = int(meta.get("heatmap_bin_size", 1))
    warning, critical = meta.get("warning_pct", 85.0), meta.get("critical_pct", 62.0)
    # red under the critical band, amber in the warning band, green above it
    scale = [[0.0, "#a50026"], [critical / 100, "#f46d43"], [warning / 100, "#fee08b"], [1.0, "#1a9850"]]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[b * bin_size for b in bins],
            y=[html.escape(k) for k in kernels],
            text=text,
            hoverinfo="text",
            colorscale=scale,
            zmin=0,
            zmax=100,
            xgap=1,
            ygap=1,
            colorbar=dict(title="L2 hit %"),
        )
    )
    fig.update_layout(
        title="L2 hit rate by kernel (costliest first) and launch order",
        xaxis_title=f"launch order (bins of {bin_size} launches)" if bin_size > 1 else "launch order",
        height=max(320, 26 * len(kernels) + 140),
        yaxis=dict(autorange="reversed", automargin=True),
    )
    shown, total = meta.get("heatmap_kernels_shown", len(kernels)), meta.get("kernels", len(kernels))
    note = (
        f"<p class='muted'>Showing the {shown} kernels costliest in GPU time × miss rate of {total}.</p>"
        if total > shown
        else ""
    )
    return figure_html(fig, div_id="fig-l2-heatmap") + note


def _pct(v) -> str:
    return "–" if v != v else f"{v:.1f} %"
