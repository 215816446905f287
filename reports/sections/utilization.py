"""NVML timeline: GPU/memory utilisation, memory used, SM clock and power on one time axis.

Draws what ``diagnose.analyzers.utilization`` put in ``result.tables`` (already
decimated, times in seconds from the run's first sample or step); step starts are
dashed lines across every row, the judged training window is shaded. Still over the mark budget
(many GPUs), each series keeps a min/max envelope per time bucket and the step lines are
strided, both said on the chart.
"""

from __future__ import annotations

import html

from reports import chart_budget
from reports.chart_budget import binning_note, duration_text_ms, thin_line
from reports.figures import draw_not_recorded, figure_html, table_html

ROWS = (  # (columns drawn, y-axis title)
    (("gpu_util_pct", "mem_util_pct"), "util %"),
    (("mem_used_gib",), "memory used GiB"),
    (("sm_clock_mhz",), "SM clock MHz"),
    (("power_w",), "power W"),
)
LABELS = {
    "gpu_util_pct": "GPU util",
    "mem_util_pct": "memory util",
    "mem_used_gib": "memory used",
    "sm_clock_mhz": "SM clock",
    "power_w": "power",
}


def render(result) -> str:
    # what the run's manifest says about nvml.csv (e.g. NVML stopped mid-run), put in meta by the analyzer
    note = result.meta.get("input_note")
    note_html = f'<p class="warnings">{html.escape(str(note))}</p>' if note else ""
    timeline = result.tables.get("timeline")
    if timeline is None or not len(timeline):
        return note_html + '<p class="muted">No NVML samples in this input.</p>'
    parts = [note_html, _timeline_figure(result), _caption(result)]
    per_gpu = result.tables.get("per_gpu")
    if per_gpu is not None and len(per_gpu):
        parts.append(
            "<h3>Per GPU (judged window)</h3><div class='scroll'>"
            + table_html(per_gpu, "utilization-per-gpu")
            + "</div>"
        )
    per_step = result.tables.get("per_step")
    if per_step is not None and len(per_step):
        parts.append(
            "<h3>Per step</h3><div class='scroll'>"
            + table_html(per_step, "utilization-per-step", max_rows=200)
            + "</div>"
        )
    return "\n".join(parts)


def _timeline_figure(result) -> str:
    from plotly.subplots import make_subplots

    timeline = result.tables["timeline"]
    marks = result.tables.get("step_marks")
    n_marks = 0 if marks is None else len(marks)
    mark_stride = max(1, -(-n_marks // (chart_budget.MAX_MARKS // 5)))  # step lines: at most a fifth
    n_series = timeline["gpu"].nunique() * sum(len(c) for c, _ in ROWS)
    budget = chart_budget.MAX_MARKS - len(ROWS) - 1 - -(-n_marks // mark_stride)  # titles, window, lines
    over = n_series * len(timeline) / max(1, timeline["gpu"].nunique()) > budget
    per_series = budget // max(1, n_series)
    widths = []
    fig = make_subplots(
        rows=len(ROWS), cols=1, shared_xaxes=True, vertical_spacing=0.03, subplot_titles=[title for _, title in ROWS]
    )
    for row, (columns, title) in enumerate(ROWS, start=1):
        for gpu, samples in timeline.groupby("gpu"):
            for column in columns:
                drawn = samples
                if over:
                    idx, width = thin_line(samples["t_s"], samples[column], per_series)
                    drawn = samples.iloc[idx]
                    widths += [width] if width is not None else []
                fig.add_scatter(
                    x=drawn["t_s"],
                    y=drawn[column],
                    mode="lines",
                    row=row,
                    col=1,
                    name=f"GPU {gpu} {LABELS[column]}",
                    legendgroup=f"{gpu}-{column}",
                )
        fig.update_yaxes(title_text=title, row=row, col=1)
    if result.meta.get("window_start_s") is not None:
        fig.add_vrect(
            x0=result.meta["window_start_s"],
            x1=result.meta["window_end_s"],
            fillcolor="#2a9d8f",
            opacity=0.07,
            line_width=0,
            layer="below",
        )
    if n_marks:
        for mark in marks.iloc[::mark_stride].itertuples():
            fig.add_shape(
                type="line",
                x0=mark.t_s,
                x1=mark.t_s,
                y0=0,
                y1=1,
                xref="x",
                yref="paper",
                line=dict(color="#999" if mark.warmup else "#555", width=1, dash="dot"),
            )
    for x0, x1, side in result.meta.get("not_recorded", []):
        draw_not_recorded(fig, x0, x1, f"NVML not recorded ({side})")
    fig.update_xaxes(title_text="seconds since the first sample", row=len(ROWS), col=1)
    title = "NVML samples"
    notes = []
    if widths:
        span = float(timeline["t_s"].max() - timeline["t_s"].min())
        notes.append(
            binning_note(duration_text_ms(1000 * max(widths)), int(span // max(widths)) + 1, "min/max envelope")
            + " per series"
        )
    if mark_stride > 1:
        notes.append(f"every {mark_stride:,}th step line of {n_marks:,} drawn")
    if notes:
        title += f"<br><sub>{'; '.join(notes)}</sub>"
    fig.update_layout(height=220 * len(ROWS), title=title, hovermode="x unified")
    return figure_html(fig, div_id="utilization-timeline")


def _caption(result) -> str:
    meta = result.meta
    bits = [f"Judged over {html.escape(str(meta.get('window', 'all samples')))}"]
    if meta.get("timeline_stride", 1) > 1:
        bits.append(f"every {meta['timeline_stride']}th sample drawn")
    if meta.get("step_mark_stride", 0) > 1:
        bits.append(f"every {meta['step_mark_stride']}th step start marked")
    elif meta.get("step_mark_stride", 0) == 1:
        bits.append("dotted lines are step starts (grey: warm-up)")
    sampled, judged = meta.get("gpus_sampled", []), meta.get("gpus_judged", [])
    if len(sampled) != len(judged):
        bits.append(f"GPUs {', '.join(map(str, judged))} of {len(sampled)} sampled ran kernels")
    return f'<p class="muted">{"; ".join(bits)}.</p>'
