"""Step-time chart: host and GPU time per step, warm-up, profiler trace-window and outlier steps marked.

Draws ``result.tables["steps"]`` (every step) thinned here to about ``max_chart_steps`` of ``result.meta``
(every k-th step, plus every warm-up, trace-window and outlier step) and the median from ``result.meta``;
tables of per-rank figures and timed regions follow. Still over the mark budget (many ranks), each line keeps
a min/max envelope per bucket of steps, said in the title.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports import chart_budget
from reports.chart_budget import binning_note, thin_line
from reports.figures import figure_html, titled_tables
from reports.format import n_things


def render(result) -> str:
    steps = result.tables.get("steps")
    if steps is None or not len(steps):
        return '<p class="muted">No per-step timings in this input.</p>'
    meta = result.meta
    drawn, stride = chart_rows(steps, meta["max_chart_steps"])
    parts = [_chart(drawn, meta)]
    window = meta.get("trace_window_excluded", 0)
    note = (
        f"The first {meta.get('warmup_steps_per_rank')} steps of each rank (at most half of them) are warm-up "
        f"and left out of the medians: {n_things(meta.get('warmup_excluded', 0) - window, 'step')} here."
    )
    if window:
        note += (
            f" The {n_things(window, 'step')} inside gpudiag's profiler trace window run slower by design and are left out "
            "too."
        )
    own_us, own_pct = result.summary.get("gpudiag_overhead_mean_us"), result.summary.get("gpudiag_overhead_pct")
    if own_us is not None:
        share = f", {own_pct:.2f} % of the median host step time" if own_pct is not None else ""
        note += (
            f" gpudiag's own work at each step boundary took {own_us:,.1f} µs per step on average{share}; "
            "it is part of the host times."
        )
    every, timed = meta.get("gpu_time_every"), result.summary.get("step_gpu_timed_count")
    if every is not None and every > 1:
        budget = meta.get("gpu_time_budget_pct")  # None: the run records name no budget (a fixed k, or not gpudiag's)
        cost = f"more than {budget:g} % of a step" if budget is not None else "too much of a step"
        note += (
            f" GPU time was measured on one step in {every} ({timed:,} of {result.summary.get('step_count', 0):,} "
            f"measured steps): light mode times a sample when a CUDA event costs {cost} "
            "(or when --gpu-time-every asks); `gpudiag profile --gpu-time-every 1` times every step."
        )
    if meta.get("step_source_sentence"):
        note += " " + meta["step_source_sentence"]
    if stride > 1:
        note += f" Every {stride}th step is drawn, plus all warm-up, trace-window and outlier steps."
    parts.append(f'<p class="muted">{note}</p>')
    parts += titled_tables(result.tables, (("per_rank", "Per rank"), ("regions", "Timed regions")), "steps")
    return "\n".join(parts)


def chart_rows(steps: pd.DataFrame, max_rows: int) -> tuple[pd.DataFrame, int]:
    """At most about ``max_rows`` steps for the chart, and the stride k: every k-th step of each rank, plus every
    warm-up step and outlier; when only some steps have a GPU time (sampled), every k-th of those too, so the GPU
    line is drawn."""
    stride = max(1, int(np.ceil(len(steps) / max_rows)))
    position = steps.groupby("rank").cumcount()
    keep = (position % stride == 0) | steps["warmup"] | steps["outlier"]
    timed = steps["gpu_ms"].notna()
    if timed.any() and not timed.all():
        gpu_stride = max(1, int(np.ceil(timed.sum() / max_rows)))
        gpu_position = timed.astype(int).groupby(steps["rank"]).cumsum() - 1
        keep |= timed & (gpu_position % gpu_stride == 0)
    return steps.loc[keep].reset_index(drop=True), stride


def _chart(steps: pd.DataFrame, meta: dict) -> str:
    import plotly.graph_objects as go

    series = []  # (name, rows, y column, marker)
    many_ranks = steps["rank"].nunique() > 1
    for rank, rows in steps.groupby("rank"):
        suffix = f" rank {rank}" if many_ranks else ""
        if rows["host_ms"].notna().any():
            series.append((f"host ms{suffix}", rows, "host_ms", None))
        if rows["gpu_ms"].notna().any():
            timed = rows.dropna(subset=["gpu_ms"])  # only a sample of the steps when light mode sampled GPU time
            series.append((f"GPU ms{suffix}", timed, "gpu_ms", None))
        window = rows["instrumented"].astype(bool) if "instrumented" in rows else rows["warmup"] & False
        marks = (
            ("warm-up", rows["warmup"] & ~window, "circle-open"),
            ("profiler trace window", window, "square-open"),
            ("outlier", rows["outlier"], "x"),
        )
        for label, flag, symbol in marks:
            marked = rows[flag]
            if len(marked):
                series.append((f"{label}{suffix}", marked, "step_ms", symbol))
    over = sum(len(rows) for _, rows, _, _ in series) > chart_budget.MAX_MARKS - 2
    per_series = (chart_budget.MAX_MARKS - 2) // max(1, len(series))
    widths = []
    fig = go.Figure()
    for name, rows, column, symbol in series:
        if over:
            idx, width = thin_line(rows["step"], rows[column], per_series)
            rows = rows.iloc[idx]
            if width is not None:
                widths.append(width)
        if symbol is None:
            fig.add_scatter(x=rows["step"], y=rows[column], mode="lines+markers", name=name, marker=dict(size=4))
        else:
            fig.add_scatter(
                x=rows["step"], y=rows[column], mode="markers", name=name, marker=dict(symbol=symbol, size=10)
            )
    median = meta.get("median_step_ms")
    if median is not None:
        fig.add_hline(
            y=median,
            line_dash="dash",
            line_color="#888",
            annotation_text=f"median {median:,.2f} ms",
            annotation_position="top left",
        )
    title = "Time per step"
    if widths:
        step_width = max(widths)
        span = float(steps["step"].max() - steps["step"].min())
        title += (
            f"<br><sub>{binning_note(f'{step_width:g} steps', int(span // step_width) + 1, 'min/max envelope')}"
            " per series</sub>"
        )
    fig.update_layout(title=title, xaxis_title="step", yaxis_title="ms", height=420)
    return figure_html(fig, div_id="steps-chart")
