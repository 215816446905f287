"""Step-time chart: host and GPU time per step, warm-up and outlier steps marked.

Draws ``result.tables["steps"]`` (already thinned by the analyzer) and the median
from ``result.meta``; tables of per-rank figures and timed regions follow.
"""

from __future__ import annotations

from reports.figures import figure_html, table_html


def render(result) -> str:
    steps = result.tables.get("steps")
    if steps is None or not len(steps):
        return '<p class="muted">No per-step timings in this input.</p>'
    parts = [_chart(result)]
    meta = result.meta
    note = (
        f"The first {meta.get('warmup_steps_per_rank')} steps of each rank (at most half of them) are warm-up "
        f"and left out of the medians: {meta.get('warmup_excluded', 0)} step(s) here."
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
    if meta.get("chart_stride", 1) > 1:
        note += f" Every {meta['chart_stride']}th step is drawn, plus all warm-up and outlier steps."
    parts.append(f'<p class="muted">{note}</p>')
    for key, title in (("per_rank", "Per rank"), ("regions", "Timed regions")):
        table = result.tables.get(key)
        if table is not None and len(table):
            parts.append(f"<h3>{title}</h3><div class='scroll'>{table_html(table, f'steps-{key}')}</div>")
    return "\n".join(parts)


def _chart(result) -> str:
    import plotly.graph_objects as go

    steps = result.tables["steps"]
    fig = go.Figure()
    many_ranks = steps["rank"].nunique() > 1
    for rank, rows in steps.groupby("rank"):
        suffix = f" rank {rank}" if many_ranks else ""
        if rows["host_ms"].notna().any():
            fig.add_scatter(
                x=rows["step"], y=rows["host_ms"], mode="lines+markers", name=f"host ms{suffix}", marker=dict(size=4)
            )
        if rows["gpu_ms"].notna().any():
            timed = rows.dropna(subset=["gpu_ms"])  # only a sample of the steps when light mode sampled GPU time
            fig.add_scatter(
                x=timed["step"], y=timed["gpu_ms"], mode="lines+markers", name=f"GPU ms{suffix}", marker=dict(size=4)
            )
        for flag, label, symbol in (("warmup", "warm-up", "circle-open"), ("outlier", "outlier", "x")):
            marked = rows[rows[flag]]
            if len(marked):
                fig.add_scatter(
                    x=marked["step"],
                    y=marked["step_ms"],
                    mode="markers",
                    name=f"{label}{suffix}",
                    marker=dict(symbol=symbol, size=10),
                )
    median = result.meta.get("median_step_ms")
    if median is not None:
        fig.add_hline(
            y=median,
            line_dash="dash",
            line_color="#888",
            annotation_text=f"median {median:,.2f} ms",
            annotation_position="top left",
        )
    fig.update_layout(title="Time per step", xaxis_title="step", yaxis_title="ms", height=420)
    return figure_html(fig, div_id="steps-chart")
