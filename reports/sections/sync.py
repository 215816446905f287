"""Host syncs: the table of sync locations and a timeline of one step with its sync points.

The step drawn is "the whole trace" when the trace marks no steps: hundreds of thousands of busy
intervals then, so over the mark budget the timeline is binned (busy time per time bucket, and the
syncs of each bucket as one marker) and says its bucket width in the title.
"""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from reports import chart_budget
from reports.chart_budget import bin_intervals, binning_note, duration_text_ms, nice_width
from reports.figures import CAUSE_COLORS, figure_html, table_html
from reports.format import ms_human, n_things

TABLE_COLUMNS = {
    "location": "location",
    "function": "function",
    "op": "op",
    "calls": "calls",
    "count_per_step": "count / step",
    "blocked_ms_per_step": "host blocked ms / step",
    "gpu_idle_ms_per_step": "GPU idle ms / step",
    "share_of_step": "share of step",
}
# a trace where nothing repeats: the same columns hold totals over the traced span
SPAN_COLUMNS = {
    **TABLE_COLUMNS,
    "count_per_step": "count in the traced span",
    "blocked_ms_per_step": "host blocked ms (total)",
    "gpu_idle_ms_per_step": "GPU idle ms (total)",
    "share_of_step": "share of the span",
}


def render(result) -> str:
    parts = []
    locations = result.tables.get("locations")
    if locations is None or not len(locations):
        return '<p class="muted">No host synchronisation found.</p>'
    if not locations["line_exact"].all():
        parts.append(
            '<p class="muted">Locations from a bare profiler trace name the user function (and the line it '
            "starts at); the exact line that synced is not in the trace. Run under "
            "<code>gpudiag profile</code> to get exact lines.</p>"
        )
    steps = (result.meta.get("steps") or {}).values()
    span_only = bool(steps) and all(m.get("steps") == 0 for m in steps)
    if span_only:
        parts.append(
            '<p class="muted">No iterations were found in this trace (no ProfilerStep range, optimizer step, backward '
            "pass or repeated call at the top), so the figures are totals over the traced span, not per step.</p>"
        )
    labels = SPAN_COLUMNS if span_only else TABLE_COLUMNS
    cols = [c for c in labels if c in locations]
    view = locations[(["rank"] if "rank" in locations else []) + cols].rename(columns=labels)
    parts.append(f"<div class='scroll'>{table_html(view, 'sync-locations', float_fmt='{:,.3f}')}</div>")
    busy, points = result.tables.get("timeline_busy"), result.tables.get("timeline_syncs")
    if busy is not None and len(busy):
        parts.append(_timeline(busy, points if points is not None else busy.iloc[:0]))
    return "\n".join(parts)


def _timeline(busy, points) -> str:
    step = int(busy["step"].iloc[0])
    label = f"step {step}" if step >= 0 else "the whole trace"
    title = f"GPU busy time and host syncs in {html.escape(label)} (median-length step)"
    fig = go.Figure()
    if len(busy) + len(points) <= chart_budget.MAX_MARKS:
        fig.add_trace(
            go.Bar(
                base=busy["start_ms"],
                x=busy["end_ms"] - busy["start_ms"],
                y=["GPU"] * len(busy),
                orientation="h",
                name="GPU busy",
                marker_color=CAUSE_COLORS["compute"],
                customdata=busy[["end_ms"]].to_numpy(),
                hovertemplate="busy %{base:.3f}–%{customdata[0]:.3f} ms<extra></extra>",
            )
        )
        if len(points):
            fig.add_trace(_sync_markers(points))
    else:
        lo = float(min(busy["start_ms"].min(), points["t_ms"].min() if len(points) else np.inf))
        hi = float(max(busy["end_ms"].max(), points["t_ms"].max() if len(points) else -np.inf))
        width = nice_width(hi - lo, min(chart_budget.MAX_TIME_BINS, chart_budget.MAX_MARKS // 2 - 1))
        bins = bin_intervals(busy["start_ms"].to_numpy(), busy["end_ms"].to_numpy(), width, origin=lo)
        fig.add_trace(
            go.Bar(
                base=bins["bin_start"],
                x=[width] * len(bins),
                y=["GPU"] * len(bins),
                orientation="h",
                name="GPU busy (shade: busy share of the bucket)",
                marker=dict(
                    color=CAUSE_COLORS["compute"], opacity=np.clip(bins["busy"] / width, 0.15, 1.0).round(3).tolist()
                ),
                customdata=np.column_stack([bins["busy"], 100 * bins["busy"] / width, bins["count"]]),
                hovertemplate="%{base:.3f} ms + "
                + duration_text_ms(width)
                + ": busy %{customdata[0]:.3f} ms (%{customdata[1]:.1f} %), %{customdata[2]} busy runs start"
                "<extra></extra>",
            )
        )
        if len(points):
            fig.add_trace(_sync_buckets(points, width, lo))
        sync_marks = points["t_ms"].sub(lo).floordiv(width).nunique() if len(points) else 0
        title += (
            f"<br><sub>{binning_note(duration_text_ms(width), len(bins))} of {len(busy):,} busy intervals; "
            f"{len(points):,} syncs as {sync_marks:,} markers, one per bucket</sub>"
        )
    fig.update_layout(title=title, xaxis_title="ms from the step's start", barmode="overlay", height=280)
    return figure_html(fig, div_id="fig-sync-timeline")


def _host_markers(t_ms, texts: list[str], name: str):
    """Sync points on the host lane, each with its hover text (escaped)."""
    return go.Scatter(
        x=t_ms,
        y=["host"] * len(texts),
        mode="markers",
        name=name,
        marker=dict(symbol="x", size=12, color=CAUSE_COLORS["sync"]),
        text=[html.escape(t) for t in texts],
        hovertemplate="%{text}<extra></extra>",
    )


def _sync_markers(points):
    return _host_markers(
        points["t_ms"],
        [
            f"{o} at {loc}: blocked {b:.3f} ms, GPU idle {g:.3f} ms"
            for o, loc, b, g in zip(points["op"], points["location"], points["blocked_ms"], points["gpu_idle_ms"])
        ],
        "sync",
    )


def _sync_buckets(points, width: float, origin: float):
    """One marker per bucket that holds syncs: at its first sync, with their count and summed costs."""
    frame = points.assign(bucket=((points["t_ms"] - origin) // width).astype("int64"))
    frame = frame.sort_values("t_ms", kind="stable")
    g = frame.groupby("bucket", sort=True)
    first = g.head(1).set_index("bucket")
    agg = g.agg(
        syncs=("t_ms", "size"),
        blocked_ms=("blocked_ms", "sum"),
        blocked_max_ms=("blocked_ms", "max"),
        gpu_idle_ms=("gpu_idle_ms", "sum"),
    ).join(first[["t_ms", "op", "location"]])
    return _host_markers(
        agg["t_ms"],
        [
            f"{n_things(n, 'sync')} from {ms_human(t)}: blocked {ms_human(b)} in all (longest {ms_human(m)}), GPU idle "
            f"{ms_human(i)}; first: {o} at {loc}"
            for n, t, b, m, i, o, loc in zip(
                agg["syncs"],
                agg["t_ms"],
                agg["blocked_ms"],
                agg["blocked_max_ms"],
                agg["gpu_idle_ms"],
                agg["op"],
                agg["location"],
            )
        ],
        "syncs (one marker per bucket)",
    )
