"""Collectives across ranks: one step's timeline per rank, the wait table, the overlap bars.

Draws what ``diagnose.analyzers.comm`` put in ``result.tables`` (times already in ms from
the step's first event, waits already split from the rest of each collective). A step with more
bars than the mark budget is drawn binned: per rank and lane, the time inside each bucket.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from reports import chart_budget
from reports.chart_budget import bin_intervals, binning_note, duration_text_ms, nice_width
from reports.figures import CAUSE_COLORS, figure_html, table_html

# compute and collectives in the causes' colours (reports/figures.py), a rank's wait for the others in red
COLORS = {"compute": CAUSE_COLORS["compute"], "wait": "#d62828", "collective": CAUSE_COLORS["collective"]}
LANE_NAMES = {
    "compute": "compute kernels",
    "wait": "waiting for the last rank",
    "collective": "collective after the last arrival",
}


def render(result) -> str:
    parts = [_caption(result)]
    timeline = result.tables.get("timeline")
    if timeline is not None and len(timeline):
        parts.append(_timeline_figure(timeline, result.meta.get("timeline_step")))
    waits = result.tables.get("waits")
    if waits is not None and len(waits):
        parts.append(
            "<h3>Collectives, worst wait first</h3><div class='scroll'>"
            + table_html(waits, "comm-waits", max_rows=300)
            + "</div>"
        )
    ranks = result.tables.get("ranks")
    if ranks is not None and len(ranks):
        parts.append("<h3>Per rank</h3><div class='scroll'>" + table_html(ranks, "comm-ranks") + "</div>")
    overlap = result.tables.get("overlap")
    if overlap is not None and len(overlap):
        parts.append(_overlap_figure(overlap))
    return "\n".join(parts)


def _caption(result) -> str:
    meta = result.meta
    if not meta:
        return '<p class="muted">No collectives in this input.</p>'
    bits = [
        f"Collectives from {html.escape(str(meta.get('source', '')))} on ranks "
        f"{html.escape(', '.join(map(str, meta.get('ranks', []))))}"
    ]
    if meta.get("world_size") and meta["world_size"] > len(meta.get("ranks", [])):
        bits.append(f"{len(meta['ranks'])} of {meta['world_size']} ranks traced: waits are among these only")
    bits.append(f"clock: {html.escape(str(meta.get('clock', '')))}")
    if meta.get("end_spread_us_median") is not None:
        bits.append(
            f"median spread of the ranks' end times {meta['end_spread_us_median']:,.1f} µs "
            "(milliseconds would mean skewed clocks)"
        )
    return f'<p class="muted">{"; ".join(bits)}.</p>'


def _timeline_figure(timeline, step) -> str:
    import plotly.graph_objects as go

    fig = go.Figure()
    title = "One step per rank" + (f" (step {step}, the one with the most wait)" if step is not None else "")
    lanes = timeline.groupby(["lane", "rank"], sort=False).ngroups
    if len(timeline) <= chart_budget.MAX_MARKS:
        for lane, rows in timeline.groupby("lane", sort=False):
            fig.add_bar(
                y=[f"rank {r}" for r in rows["rank"]],
                x=rows["end_ms"] - rows["start_ms"],
                base=rows["start_ms"],
                orientation="h",
                name=LANE_NAMES.get(lane, lane),
                marker_color=COLORS.get(lane),
                text=[html.escape(str(t)) for t in rows["label"]],
                hovertemplate="%{text}<br>%{base:.3f} ms + %{x:.3f} ms<extra></extra>",
            )
    else:
        lo, hi = float(timeline["start_ms"].min()), float(timeline["end_ms"].max())
        width = nice_width(hi - lo, max(1, min(chart_budget.MAX_TIME_BINS, chart_budget.MAX_MARKS // lanes - 1)))
        drawn = 0
        for lane, rows in timeline.groupby("lane", sort=False):
            per_rank = []
            for rank, r in rows.groupby("rank", sort=True):
                b = bin_intervals(r["start_ms"].to_numpy(), r["end_ms"].to_numpy(), width, origin=lo)
                per_rank.append(b.assign(rank=rank))
            bins = per_rank[0].iloc[:0] if not per_rank else pd.concat(per_rank)
            drawn += len(bins)
            fig.add_bar(
                y=[f"rank {r}" for r in bins["rank"]],
                x=[width] * len(bins),
                base=bins["bin_start"],
                orientation="h",
                name=LANE_NAMES.get(lane, lane),
                marker=dict(color=COLORS.get(lane), opacity=np.clip(bins["busy"] / width, 0.15, 1.0).round(3).tolist()),
                customdata=np.column_stack([bins["busy"], bins["count"]]),
                hovertemplate=html.escape(LANE_NAMES.get(lane, lane))
                + "<br>%{base:.3f} ms + "
                + duration_text_ms(width)
                + ": %{customdata[0]:.3f} ms in it, %{customdata[1]} bars start<extra></extra>",
            )
        title += (
            f"<br><sub>{binning_note(duration_text_ms(width), drawn)} per rank and lane, shade = share of the "
            f"bucket (from {len(timeline):,} bars)</sub>"
        )
    fig.update_layout(
        barmode="overlay",
        title=title,
        height=160 + 60 * timeline["rank"].nunique(),
        xaxis_title="ms from the step's first event",
        yaxis=dict(autorange="reversed"),
    )
    return figure_html(fig, div_id="comm-timeline")


def _overlap_figure(overlap) -> str:
    import plotly.graph_objects as go

    fig = go.Figure(
        go.Bar(
            x=[f"rank {r}" for r in overlap["rank"]],
            y=overlap["overlap_pct"],
            text=[f"{v:.1f} %" for v in overlap["overlap_pct"]],
            marker_color="#2a9d8f",
        )
    )
    fig.update_layout(
        title="Communication overlapped by compute (HTA's comp_comm_overlap)",
        yaxis=dict(title="% of communication time", range=[0, 100]),
        height=320,
    )
    return figure_html(fig, div_id="comm-overlap")
