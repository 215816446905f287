"""Memory and fragmentation: reserved/allocated/requested timeline, occupancy heatmap, fragmentation curve.

Draws what ``diagnose.analyzers.fragmentation`` put in ``result.tables``, each chart within
``chart_budget.MAX_MARKS`` marks and naming its binning: the timeline (one row per history entry there) is
thinned here to the highest bytes of each run of entries, the runs ending where the replay read the free-block
set (``max_timeline_bins`` of its ``meta``), and the fragmentation curve to a min/max envelope; the heatmap's
cells are the analyzer's (the replay reads the segments' occupancy per cell, so its binning is computed there).
The charts span what the allocator history recorded: a run that went on after it (a light-mode run records it
only up to the trace window) gets a grey, labelled "not recorded" band where the rest of the run would be, never
its last known state.
The band is not to scale (the rest of the run can be 20 times the recorded part): its label and the
axis' last tick give the real span.
"""

from __future__ import annotations

import html

import numpy as np

from reports import chart_budget
from reports.chart_budget import binning_note, duration_text_ms, run_maxima, thin_line
from reports.figures import draw_not_recorded, figure_html, titled_tables
from reports.format import bytes_human

GIB = 2**30
BAND_SHARE = 0.12  # a not-recorded band's width, as a share of the recorded span drawn
CURVE_POINTS = 2000  # per fragmentation curve (two curves, within the mark budget)
TABLES = (
    ("history_coverage", "What the allocator history recorded of the run"),
    ("segment_growth", "Segment growth (cudaMalloc / map) with what was free just before"),
    ("ooms", "Out-of-memory entries"),
    ("per_step", "Per step the history covers"),
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
        x_title = _x_title(meta)
        parts.append(_timeline_figure(timeline, meta, x_title))
        parts.append(_heatmap_figure(result))
        parts.append(_fragmentation_figure(result.tables.get("fragmentation_curve"), meta, x_title))
    jax = result.tables.get("jax_per_step")
    if jax is not None and len(jax):
        parts.append(_jax_figure(jax))
    origin_us = meta.get("time_origin_us")
    parts += titled_tables(
        result.tables,
        TABLES,
        "fragmentation",
        max_rows=200,
        time_origin_ns=None if origin_us is None else 1000.0 * origin_us,
        time_origin_name=meta.get("time_origin", "first entry"),
    )
    if not parts:
        parts.append('<p class="muted">No allocator data in this input.</p>')
    return "\n".join(parts)


# --- what the history covers, in words ----------------------------------------------------------------------


def _steps_text(first, last) -> str:
    return f"step {first}" if first == last else f"steps {first}–{last}"


def coverage_text(cov: dict) -> str:
    """``allocator history covers steps 0–6 (7 of the run's 59 steps, 11.9 %; 4.93–11.43 s of the run's 12.88 s)``."""
    if not cov.get("run_span_known"):
        return (
            f"allocator history: {cov['recorded_s']:.2f} s recorded (nothing else bounds the run: its span is unknown)"
        )
    seconds = (
        f"{cov['recorded_start_s']:.2f}–{cov['recorded_end_s']:.2f} s of the run's {cov['run_s']:.2f} s "
        f"({cov['time_pct']:.1f} %)"
    )
    if cov.get("run_steps"):
        if not cov.get("covered_steps"):
            return f"allocator history covers none of the run's {cov['run_steps']:,} steps ({seconds})"
        return (
            f"allocator history covers {_steps_text(cov['first_covered_step'], cov['last_covered_step'])} "
            f"({cov['covered_steps']:,} of the run's {cov['run_steps']:,} steps, {cov['steps_pct']:.1f} %; {seconds})"
        )
    return f"allocator history covers {seconds}"


def not_recorded_text(cov: dict, side: str) -> str:
    """The part of the run before or after the history, as its band's label says it."""
    if side == "after":
        a, b, n = cov["recorded_end_s"], cov["run_end_s"], cov["steps_not_recorded_after"]
        steps = _steps_text(cov["first_step_after"], cov["last_step_after"]) if n else "no step"
    else:
        a, b, n = cov["run_start_s"], cov["recorded_start_s"], cov["steps_not_recorded_before"]
        steps = _steps_text(cov["first_step_before"], cov["last_step_before"]) if n else "no step"
    return f"not recorded: {steps}, {a:.2f}–{b:.2f} s ({b - a:.2f} s)"


def _caption(result) -> str:
    m = result.meta
    bits = [f"rank {m.get('rank')} GPU {m.get('device')}: {m.get('entries', 0):,} history entries"]
    cov = m.get("coverage")
    if cov:
        bits.append(coverage_text(cov))
        if cov.get("starts_empty"):
            bits.append("the allocator held nothing before its first entry")
        for side in ("before", "after"):
            if cov.get(f"not_recorded_{side}"):
                bits.append(not_recorded_text(cov, side) + " (the grey band: no state is drawn there)")
    elif m.get("history_coverage_pct") == 100.0:
        bits.append("entries have no times: the history starts from an empty allocator, its span in the run is unknown")
    else:
        bits.append(
            "entries have no times and allocator state predates them: how much of the run they cover is unknown"
        )
    if m.get("estimated_blocks"):
        bits.append(f"{m['estimated_blocks']} blocks from before the history have estimated sizes")
    if m.get("replay_mismatches"):
        bits.append(f"{m['replay_mismatches']} entries did not fit the replayed state")
    if m.get("expandable_segments"):
        bits.append("expandable segments on")
    return f'<p class="muted" id="fragmentation-coverage">{html.escape("; ".join(bits))}.</p>'


def _x_title(meta: dict) -> str:
    if not meta.get("times_known", True):
        return "history entry"
    if meta.get("time_origin") == "run start":
        return "seconds since the run started"
    return "seconds since the first history entry"


# --- the not-recorded bands ---------------------------------------------------------------------------------


def _bands(meta: dict, lo: float, hi: float) -> list[tuple[float, float, str]]:
    """(x0, x1, label) of each not-recorded band beside the drawn span [lo, hi] of a linear axis."""
    cov = meta.get("coverage") or {}
    width = BAND_SHARE * (hi - lo) if hi > lo else 1.0
    out = []
    if cov.get("not_recorded_before"):
        out.append((lo - width, lo, not_recorded_text(cov, "before")))
    if cov.get("not_recorded_after"):
        out.append((hi, hi + width, not_recorded_text(cov, "after")))
    return out


def _draw_bands(fig, bands) -> None:
    for x0, x1, label in bands:
        draw_not_recorded(fig, x0, x1, label)


def _time_axis(fig, meta: dict, lo: float, hi: float, bands) -> None:
    """A linear time axis over the recorded span plus its bands: ticks inside the recorded span only, and one at
    each band's outer edge giving the run's real start or end (the band is not to scale)."""
    if not bands:
        return
    cov = meta.get("coverage") or {}
    width = chart_budget.nice_width(hi - lo, 6) if hi > lo else 1.0
    ticks = list(np.arange(np.ceil(lo / width) * width, hi + 1e-9, width))
    text = [f"{t:g}" for t in ticks]
    left, right = lo, hi
    for x0, x1, _ in bands:
        if x1 <= lo:
            left = x0
            ticks.insert(0, x0)
            text.insert(0, f"{cov.get('run_start_s', 0):.2f} (run start)")
        else:
            right = x1
            ticks.append(x1)
            text.append(f"{cov.get('run_end_s', hi):.2f} (run end)")
    fig.update_xaxes(range=[left, right], tickmode="array", tickvals=ticks, ticktext=text)


def _data_span(x) -> tuple[float, float]:
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return (float(x.min()), float(x.max())) if len(x) else (0.0, 1.0)


def _recorded_span(meta: dict, x) -> tuple[float, float]:
    cov = meta.get("coverage")
    if cov:
        return cov["recorded_start_s"], cov["recorded_end_s"]
    return _data_span(x)


# --- figures ------------------------------------------------------------------------------------------------


def _timeline_figure(entries, meta: dict, x_title: str) -> str:
    import plotly.graph_objects as go

    curves = (("reserved_bytes", "reserved"), ("allocated_bytes", "allocated"), ("requested_bytes", "requested"))
    timeline, per = run_maxima(entries, "t_s", [col for col, _ in curves], meta["max_timeline_bins"])
    fig = go.Figure()
    for col, name in curves:
        fig.add_scatter(x=timeline["t_s"], y=timeline[col] / GIB, mode="lines", name=name, line_shape="hv")
    title = "Reserved vs allocated vs requested (highest in each bin)"
    if per > 1:
        title += f"<br><sub>{binning_note(f'{per:,} entries', len(timeline), 'point')}</sub>"
    else:
        title += "<br><sub>one point per history entry</sub>"
    lo, hi = _recorded_span(meta, timeline["t_s"])
    bands = _bands(meta, lo, hi) if meta.get("times_known", True) else []
    _draw_bands(fig, bands)
    fig.update_layout(title=title, yaxis_title="GiB", xaxis_title=x_title, height=380, hovermode="x unified")
    _time_axis(fig, meta, lo, hi, bands)
    return figure_html(fig, div_id="fragmentation-timeline")


def _heatmap_figure(result) -> str:
    import plotly.graph_objects as go

    cells, rows, bins = (result.tables.get(k) for k in ("heatmap", "heatmap_rows", "heatmap_bins"))
    if cells is None or not len(cells) or rows is None or not len(rows):
        return ""
    meta = result.meta
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
    axis = meta.get("heatmap_axis", "time")
    per = meta.get("heatmap_steps_per_column")
    if axis == "step":
        how = "one column per step" if per in (None, 1) else binning_note(f"{per:,} steps", nbins, "column")
    elif axis == "time" and meta.get("heatmap_bin_s"):
        how = binning_note(duration_text_ms(1000 * meta["heatmap_bin_s"]), nbins, "column")
    else:
        how = f"{nbins:,} columns"
    # bands on the category axis: columns' positions are 0 .. nbins-1
    band_cols = max(1.0, round(BAND_SHARE * nbins))
    bands = [
        (x0, x0 + band_cols, label) if x0 >= nbins - 0.5 else (x1 - band_cols, x1, label)
        for x0, x1, label in _bands(meta, -0.5, nbins - 0.5)
    ]
    _draw_bands(fig, bands)
    x_range = [min([-0.5] + [b[0] for b in bands]), max([nbins - 0.5] + [b[1] for b in bands])]
    fig.update_layout(
        title=f"Segments (address order) × {axis}: fraction allocated (highest in each cell)<br><sub>{html.escape(how)}"
        f"; {nrows:,} rows, {nbins * nrows:,} cells</sub>",
        height=max(340, 14 * nrows + 180),
        yaxis=dict(autorange="reversed", title="segment"),
        xaxis=dict(title=axis, range=x_range),
    )
    return figure_html(fig, div_id="fragmentation-heatmap")


def _fragmentation_figure(curve, meta: dict, x_title: str) -> str:
    import plotly.graph_objects as go

    if curve is None or not len(curve):
        return ""
    idx, width = thin_line(curve["t_s"], curve["external_fragmentation_pct"], CURVE_POINTS)
    shown = curve.iloc[idx]
    fig = go.Figure()
    fig.add_scatter(x=shown["t_s"], y=shown["external_fragmentation_pct"], mode="lines+markers", name="large pool")
    fig.add_scatter(x=shown["t_s"], y=shown["external_fragmentation_small_pct"], mode="lines", name="small pool")
    title = "External fragmentation = 1 − largest free block / free bytes"
    if width is not None:
        span = shown["t_s"].to_numpy(dtype=float)
        buckets = int(np.unique(np.floor((span - np.nanmin(span)) / width)).size)
        title += (
            f"<br><sub>{binning_note(duration_text_ms(1000 * width), buckets, 'min/max envelope')}"
            f" of {len(curve):,} samples</sub>"
        )
    lo, hi = _recorded_span(meta, curve["t_s"])
    bands = _bands(meta, lo, hi) if meta.get("times_known", True) else []
    _draw_bands(fig, bands)
    fig.update_layout(title=title, yaxis_title="%", yaxis_range=[0, 100], xaxis_title=x_title, height=340)
    _time_axis(fig, meta, lo, hi, bands)
    return figure_html(fig, div_id="fragmentation-external")


def _jax_figure(jax) -> str:
    import plotly.graph_objects as go

    keep, width = thin_line(jax["step"], jax["in_use_peak_bytes"], CURVE_POINTS // 2)
    jax = jax.iloc[keep]
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
        title="JAX memory_stats per step"
        + (f"<br><sub>{binning_note(f'{width:g} steps', len(jax), 'min/max envelope')}</sub>" if width else ""),
        yaxis_title="GiB",
        xaxis_title="step",
        height=320,
        yaxis_type="log" if np.nanmax(jax["pool_bytes"].fillna(0)) > 0 else "linear",
    )
    return figure_html(fig, div_id="fragmentation-jax")
