"""Memory and fragmentation: reserved/allocated/requested timeline, occupancy heatmap, fragmentation curve.

Draws what ``diagnose.analyzers.fragmentation`` put in ``result.tables`` (already binned:
at most ``Memory.max_timeline_bins`` points per curve and ``max_heatmap_time_bins`` x
``max_heatmap_segment_rows`` heatmap cells), so a million-entry history stays a small page.
"""

from __future__ import annotations

import html

import numpy as np

from reports.figures import figure_html, table_html
from reports.format import bytes_human

GIB = 2**30
TABLES = (
    ("segment_growth", "Segment growth (cudaMalloc / map) with what was free just before"),
    ("ooms", "Out-of-memory entries"),
    ("per_step", "Per step"),
    ("locations", "Source lines of the largest allocations"),
    ("largest_allocations", "Largest allocations"),
    ("snapshot_agreement", "Replay vs the snapshot, per segment"),
    ("memory_stats_agreement", "Replay vs torch.cuda.memory_stats() per step"),
    ("stats_per_step", "memory_stats per step"),
    ("jax_per_step", "JAX memory_stats per step"),
)


def render(result) -> str:
    parts = []
    meta = result.meta
    for warning in meta.get("warnings", []):
        parts.append(f'<p class="warning">{html.escape(warning)}</p>')
    if meta.get("jax_statement"):
        parts.append(f"<p>{html.escape(meta['jax_statement'])}</p>")
    timeline = result.tables.get("timeline")
    if timeline is not None and len(timeline):
        parts.append(_caption(result))
        x_title = _x_title(meta.get("times_known", True))
        parts.append(_timeline_figure(timeline, x_title))
        parts.append(_heatmap_figure(result))
        parts.append(_fragmentation_figure(result.tables.get("fragmentation_curve"), x_title))
    jax = result.tables.get("jax_per_step")
    if jax is not None and len(jax):
        parts.append(_jax_figure(jax))
    for key, title in TABLES:
        df = result.tables.get(key)
        if df is not None and len(df):
            parts.append(
                f"<h3>{html.escape(title)}</h3><div class='scroll'>"
                f"{table_html(df, f'fragmentation-{key}', max_rows=200, float_fmt='{:,.0f}')}</div>"
            )
    if not parts:
        parts.append('<p class="muted">No allocator data in this input.</p>')
    return "\n".join(parts)


def _caption(result) -> str:
    m = result.meta
    bits = [f"rank {m.get('rank')} GPU {m.get('device')}: {m.get('entries', 0):,} history entries"]
    cov = m.get("history_coverage_pct")
    if cov is not None and cov == cov:
        bits.append(f"the history covers {cov:.0f} % of the run")
    elif cov is not None:
        bits.append("the history starts after the run began (how much earlier is unknown)")
    if m.get("estimated_blocks"):
        bits.append(f"{m['estimated_blocks']} blocks from before the history have estimated sizes")
    if m.get("replay_mismatches"):
        bits.append(f"{m['replay_mismatches']} entries did not fit the replayed state")
    if m.get("expandable_segments"):
        bits.append("expandable segments on")
    bits.append(
        f"curves binned to ≤ {m.get('max_timeline_bins')} points, heatmap to ≤ {m.get('max_heatmap_cells')} cells"
    )
    return f'<p class="muted">{html.escape("; ".join(bits))}.</p>'


def _x_title(times_known: bool) -> str:
    return "seconds since the first history entry" if times_known else "history entry"


def _timeline_figure(timeline, x_title: str) -> str:
    import plotly.graph_objects as go

    fig = go.Figure()
    for col, name in (
        ("reserved_bytes", "reserved"),
        ("allocated_bytes", "allocated"),
        ("requested_bytes", "requested"),
    ):
        fig.add_scatter(x=timeline["t_s"], y=timeline[col] / GIB, mode="lines", name=name, line_shape="hv")
    fig.update_layout(
        title="Reserved vs allocated vs requested (highest in each bin)",
        yaxis_title="GiB",
        xaxis_title=x_title,
        height=360,
        hovermode="x unified",
    )
    return figure_html(fig, div_id="fragmentation-timeline")


def _heatmap_figure(result) -> str:
    import plotly.graph_objects as go

    cells, rows, bins = (result.tables.get(k) for k in ("heatmap", "heatmap_rows", "heatmap_bins"))
    if cells is None or not len(cells) or rows is None or not len(rows):
        return ""
    nbins, nrows = len(bins), len(rows)
    z = cells["fraction_allocated"].to_numpy().reshape(nbins, nrows).T
    labels = rows["label"].tolist()
    text = []
    largest = cells["largest_live_bytes"].to_numpy().reshape(nbins, nrows).T
    loc = cells["largest_live_location"].to_numpy().reshape(nbins, nrows).T
    alloc = cells["allocated_peak_bytes"].to_numpy().reshape(nbins, nrows).T
    res = cells["reserved_bytes"].to_numpy().reshape(nbins, nrows).T
    for r in range(nrows):
        line = []
        for b in range(nbins):
            if not res[r, b]:
                line.append("")
                continue
            tip = f"{bytes_human(alloc[r, b])} of {bytes_human(res[r, b])}"
            if largest[r, b]:
                tip += (
                    f"<br>largest: {bytes_human(largest[r, b])} from {html.escape(str(loc[r, b] or 'no Python frame'))}"
                )
            line.append(tip)
        text.append(line)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=bins["label"].tolist(),
            y=labels,
            text=text,
            zmin=0,
            zmax=1,
            colorscale="Viridis",
            colorbar=dict(title="allocated"),
            hovertemplate="%{y} · %{x}<br>%{z:.0%} allocated: %{text}<extra></extra>",
        )
    )
    axis = result.meta.get("heatmap_axis", "time")
    fig.update_layout(
        title="Segments (address order) × " + axis + ": fraction allocated (highest in each cell)",
        height=max(320, 14 * nrows + 160),
        yaxis=dict(autorange="reversed", title="segment"),
        xaxis=dict(title=axis),
    )
    return figure_html(fig, div_id="fragmentation-heatmap")


def _fragmentation_figure(curve, x_title: str) -> str:
    import plotly.graph_objects as go

    if curve is None or not len(curve):
        return ""
    fig = go.Figure()
    fig.add_scatter(x=curve["t_s"], y=curve["external_fragmentation_pct"], mode="lines+markers", name="large pool")
    fig.add_scatter(x=curve["t_s"], y=curve["external_fragmentation_small_pct"], mode="lines", name="small pool")
    fig.update_layout(
        title="External fragmentation = 1 − largest free block / free bytes",
        yaxis_title="%",
        yaxis_range=[0, 100],
        xaxis_title=x_title,
        height=320,
    )
    return figure_html(fig, div_id="fragmentation-external")


def _jax_figure(jax) -> str:
    import plotly.graph_objects as go

    fig = go.Figure()
    for col, name in (
        ("in_use_bytes", "bytes in use"),
        ("in_use_peak_bytes", "peak in use"),
        ("largest_free_block_bytes", "largest free block"),
        ("pool_bytes", "pool"),
    ):
        if jax[col].notna().any():
            fig.add_scatter(x=jax["step"], y=jax[col] / GIB, mode="lines+markers", name=name)
    fig.update_layout(
        title="JAX memory_stats per step",
        yaxis_title="GiB",
        xaxis_title="step",
        height=320,
        yaxis_type="log" if np.nanmax(jax["pool_bytes"].fillna(0)) > 0 else "linear",
    )
    return figure_html(fig, div_id="fragmentation-jax")
