"""L2 section: the kernel × launch-order heatmap of L2 hit rate, and the per-kernel L2 table.

The heatmap's cells (one per kernel and bin of consecutive launches) are binned here from the l2 analyzer's
``launches`` table, one row per profiled launch (reports/l2_heatmap.py); the bands come from its ``meta``.
Over the mark budget neighbouring bins are merged (hit rates weighted by duration, as the analyzer weights
them); the launch timeline keeps a min/max envelope per time bucket. Kernel names are short on the axis and
full in the hover.
"""

from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go

from reports import chart_budget
from reports.chart_budget import binning_note, duration_text_ms, kernel_axis, thin_line
from reports.figures import draw_not_recorded, figure_html, table_html
from reports.format import agree, count_human, n_things, ns_human
from reports.l2_heatmap import heatmap_cells, merge_bins

TABLE_COLUMNS = [
    "kernel",
    "launches",
    "gpu_time_ns",
    "share",
    "l2_hit_pct",
    "band",
    "cause",
    "reuse_l1",
    "reuse_l2",
    "limiter_unit",
    "limiter_pct",
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
    every_launch, kernels = result.tables.get("launches"), result.tables.get("kernels")
    if every_launch is not None and len(every_launch) and kernels is not None:
        cells, bin_size = heatmap_cells(every_launch, kernels)
        if len(cells):
            parts.append(_heatmap(cells, bin_size, result.meta, kernels))
    launches = result.tables.get("timeline_launches")
    if launches is not None and len(launches):
        parts.append(_timeline(launches, result.tables.get("timeline_segments"), result.meta))
    table = result.tables.get("kernels")
    if table is not None and len(table):
        cols = [c for c in TABLE_COLUMNS if c in table.columns]
        parts.append(
            "<h3>Kernels by GPU time × miss rate</h3><p class='muted'>Miss cost = GPU time × "
            "(1 − hit rate); reuse at L1 / L2 = global-load sectors requested at L1 / L2 per DRAM sector "
            f"read: at or under {result.meta['streaming_max']:g} each byte is read about once (compulsory "
            f"misses), at {result.meta['reuse_min']:g} or more the data is re-read (reuse missed); click a "
            "column to sort.</p><div class='scroll'>" + table_html(table[cols], "l2-kernels") + "</div>"
        )
    return "\n".join(parts) or EMPTY


def _heatmap(cells, bin_size: int, meta, kernel_table=None) -> str:
    kernels = list(dict.fromkeys(cells["kernel"]))
    merge = max(1, math.ceil(cells["bin"].nunique() / max(1, chart_budget.MAX_MARKS // len(kernels))))
    if merge > 1:
        cells, bin_size = merge_bins(cells, merge), bin_size * merge
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
            f"{launches}<br>L2 hit {c.l2_hit_pct:.1f} %"
            f"<br>duration {ns_human(c.dur_ns)}<br>DRAM {_pct(c.dram_throughput_pct)} of peak"
            f"<br>grid {html.escape(str(c.grid))}"
        )
    full = None
    if kernel_table is not None and {"kernel", "kernel_name"} <= set(kernel_table.columns):
        full = kernel_table.drop_duplicates("kernel").set_index("kernel")["kernel_name"].reindex(kernels).tolist()
    categories, ticks = kernel_axis(kernels, full)
    warning, critical = meta["warning_pct"], meta["critical_pct"]  # the bands the analysis used (its thresholds)
    # red under the critical band, amber in the warning band, green above it
    scale = [[0.0, "#a50026"], [critical / 100, "#f46d43"], [warning / 100, "#fee08b"], [1.0, "#1a9850"]]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[b * bin_size for b in bins],
            y=categories,
            text=text,
            hovertemplate="%{y}<br>%{text}<extra></extra>",
            colorscale=scale,
            zmin=0,
            zmax=100,
            xgap=1,
            ygap=1,
            colorbar=dict(title="L2 hit %"),
        )
    )
    title = "L2 hit rate by kernel (costliest first) and launch order"
    if merge > 1:
        title += f"<br><sub>{binning_note(f'{bin_size:,} launches', len(bins), 'column')}</sub>"
    fig.update_layout(
        title=title,
        xaxis_title=f"launch order (bins of {bin_size} launches)" if bin_size > 1 else "launch order",
        height=max(320, 26 * len(kernels) + 140),
        yaxis=dict(autorange="reversed", automargin=True, tickmode="array", tickvals=categories, ticktext=ticks),
    )
    shown, total = len(kernels), meta.get("kernels", len(kernels))
    note = (
        f"<p class='muted'>Showing the {shown} kernels costliest in GPU time × miss rate of {total}.</p>"
        if total > shown
        else ""
    )
    return figure_html(fig, div_id="fig-l2-heatmap") + note


def _pct(v) -> str:
    return "–" if v != v else f"{v:.1f} %"


def _timeline(launches, segments, meta) -> str:
    """Each profiled launch's L2 hit rate and the allocator's segment events on one clock (seconds since the
    first profiled launch); the bytes reserved after each segment event on the right axis."""
    from plotly.subplots import make_subplots

    fig = make_subplots(specs=[[{"secondary_y": True}]])
    n_segments = 0 if segments is None else len(segments)
    over = len(launches) + 2 * n_segments > chart_budget.MAX_MARKS
    per_trace = chart_budget.MAX_MARKS // 5  # two launch kinds, the reserved line, allocs and frees
    widths = []

    def thinned(rows, y_column):
        if not over:
            return rows
        idx, width = thin_line(rows["t_s"], rows[y_column], per_trace)
        if width is not None:
            t = rows["t_s"].to_numpy(dtype=float)
            widths.append((width, int(np.unique(np.floor((t - np.nanmin(t)) / width)).size)))
        return rows.iloc[idx]

    for new, name, symbol in ((False, "launch", "circle"), (True, "launch right after a new segment", "diamond")):
        rows = thinned(launches[launches["after_new_segment"] == new], "l2_hit_pct")
        if not len(rows):
            continue
        fig.add_trace(
            go.Scatter(
                x=rows["t_s"],
                y=rows["l2_hit_pct"],
                mode="markers",
                name=name,
                marker=dict(symbol=symbol, size=9, color=rows["l2_hit_pct"], colorscale="RdYlGn", cmin=0, cmax=100),
                text=[html.escape(str(k)) for k in rows["kernel"]],
                customdata=rows[["launch_id", "dur_ns"]].to_numpy(),
                hovertemplate="%{text}<br>launch %{customdata[0]}, %{x:.3f} s<br>L2 hit %{y:.1f} %"
                "<br>duration %{customdata[1]:,.0f} ns<extra></extra>",
            ),
            secondary_y=False,
        )
    if segments is not None and len(segments):
        # held to the last launch the history saw: past its last entry the reserved bytes are not known
        seen = launches[launches["in_history"]] if "in_history" in launches else launches
        end = max(float(seen["t_s"].max()) if len(seen) else float("-inf"), float(segments["t_s"].max()))
        if "in_history" in launches and (~launches["in_history"]).any():
            outside = launches.loc[~launches["in_history"], "t_s"]
            for x0, x1 in (
                (float(outside.min()), min(end, float(seen["t_s"].min())) if len(seen) else end),
                (end, float(outside.max())),
            ):
                if x1 > x0:
                    draw_not_recorded(fig, x0, x1, "allocator history not recorded")
        line = thinned(segments, "reserved_bytes")
        fig.add_trace(
            go.Scatter(
                x=[*line["t_s"], end],
                y=[*line["reserved_bytes"], segments["reserved_bytes"].iloc[-1]],
                mode="lines",
                line=dict(shape="hv", color="#555", width=1),
                name="reserved bytes",
                hovertemplate="%{x:.3f} s: %{y:,.0f} bytes reserved<extra></extra>",
            ),
            secondary_y=True,
        )
        for actions, name, symbol, color in (
            (("segment_alloc", "segment_map"), "cudaMalloc (new segment)", "triangle-up", "#c0392b"),
            (("segment_free", "segment_unmap"), "cudaFree (segment released)", "triangle-down", "#2471a3"),
        ):
            rows = thinned(segments[segments["action"].isin(actions)], "size_bytes")
            if len(rows):
                fig.add_trace(
                    go.Scatter(
                        x=rows["t_s"],
                        y=rows["reserved_bytes"],
                        mode="markers",
                        name=name,
                        marker=dict(symbol=symbol, size=10, color=color),
                        text=[html.escape(str(loc or "")) for loc in rows["location"]],
                        customdata=rows[["size_bytes"]].to_numpy(),
                        hovertemplate="%{x:.3f} s: "
                        + name
                        + " of %{customdata[0]:,.0f} bytes<br>%{text}<extra></extra>",
                    ),
                    secondary_y=True,
                )
    title = "L2 hit rate per profiled launch, with the allocator's segments (seconds since the first profiled launch)"
    if widths:
        title += (
            f"<br><sub>{binning_note(duration_text_ms(1000 * max(widths)[0]), max(widths)[1], 'min/max envelope')}"
            f" per series (of {len(launches):,} launches and {n_segments:,} segment events)</sub>"
        )
    fig.update_layout(
        title=title,
        height=420,
        legend=dict(orientation="h"),
    )
    fig.update_xaxes(title_text="seconds since the first profiled launch (under ncu's kernel replay)")
    fig.update_yaxes(title_text="L2 hit rate %", range=[0, 105], secondary_y=False)
    fig.update_yaxes(title_text="bytes reserved by the allocator", secondary_y=True)
    after, other = meta.get("l2_hit_after_new_segment_pct"), meta.get("l2_hit_other_pct")
    note = (
        f"{n_things(meta.get('launches_after_new_segment', 0), 'launch')} "
        f"{agree(meta.get('launches_after_new_segment', 0), 'follows', 'follow')} a new segment"
        + (f" (L2 hit {after:.1f} %, duration-weighted)" if after is not None else "")
        + f", {count_human(meta.get('launches_other', 0))} {agree(meta.get('launches_other', 0), 'does', 'do')} not"
        + (f" ({other:.1f} %)" if other is not None else "")
        + ". Launch times are when ncu began profiling each launch, read from its log every 20 ms; "
        "under kernel replay the application waits while ncu profiles, so the clock gives the order of "
        "launches and allocations, not their unprofiled durations."
    )
    return (
        "<h3>Launches and allocator segments</h3>"
        + figure_html(fig, div_id="fig-l2-timeline")
        + f"<p class='muted'>{html.escape(note)}</p>"
    )
