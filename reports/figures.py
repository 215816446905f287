"""Plotly figures as HTML fragments, and the one inlined copy of plotly.js.

Every figure is ``to_html(full_html=False, include_plotlyjs=False)``; the page
inlines plotly.js once (``reports/templating.py`` and ``templates/_base.html``), so the report works offline.
"""

from __future__ import annotations

import html
import itertools
import numbers
import warnings

import numpy as np
import pandas as pd

from diagnose.findings import cause_of
from reports import chart_budget
from reports.chart_budget import MAX_TABLE_ROWS, capped_rows, figure_marks
from reports.format import (
    DURATION_SCALE_NS,
    MISSING,
    cell_text,
    is_missing,
    label_of_key,
    offset_human,
    unit_of_column,
)

_ids = itertools.count()

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}

# One colour per cause (diagnose.findings.CAUSES; tests/test_analyzer_registry.py keeps the keys equal) wherever a
# chart draws it: the verdict's budget bar, the idle section's per-step bars, the step-time budget's bars, and the
# busy and sync marks of the sync and comm timelines
CAUSE_COLORS = {
    "compute": "#4c78a8",
    "non_compute": "#9ecae9",
    "collective": "#54a24b",
    "input": "#b279a2",
    "sync": "#e45756",
    "host": "#f58518",
    "short": "#bab0ac",
    "other": "#72b7b2",
    "unlinked": "#d4d4d4",
    "allocator": "#9d755d",
    "trace_window": "#eeca3b",
    "unexplained": "#e8e8e8",
}
UNKNOWN_CAUSE_COLOR = "#999"


def cause_color(name: str) -> str:
    """The colour of the cause ``name`` stands for (its id or an alias: the step budget's ``launch_bound``)."""
    cause = cause_of(name)
    return CAUSE_COLORS[cause.id] if cause is not None else UNKNOWN_CAUSE_COLOR


# One colour per part of the run budget (diagnose.derive.run_budget_table.RUN_PARTS; tests/reports/
# test_run_budget_html.py keeps the keys equal) in the verdict's run bar and the run budget's chart. A part that means
# what a cause means takes the cause's colour; the others are distinct from each other and from the causes'
RUN_PART_COLORS = {
    "interpreter": "#79706e",
    "imports": "#b6992d",
    "setup": "#499894",
    "compilation": "#ff9da7",
    "warmup": "#8cd17d",
    "steady": "#2f5d8a",
    "input": CAUSE_COLORS["input"],
    "slow_new_shape": "#d95f02",
    "slow_unexplained": CAUSE_COLORS["unexplained"],
    "evaluation": "#1b9e77",
    "checkpoint": "#e7298a",
    "host_code": "#a6761d",
    "gpudiag": CAUSE_COLORS["trace_window"],
    "teardown": "#5e3c99",
}


def run_part_color(part: str) -> str:
    """The colour of the run budget's part ``part`` (``evaluation``, ``gpudiag``, ...)."""
    return RUN_PART_COLORS.get(part, UNKNOWN_CAUSE_COLOR)


def ink_on(color: str) -> str:
    """Text colour readable on the fill ``color`` (``#rrggbb``): dark on light fills, white on dark ones."""
    digits = color.lstrip("#")
    if len(digits) == 3:
        digits = "".join(d * 2 for d in digits)
    r, g, b = (int(digits[i : i + 2], 16) for i in (0, 2, 4))
    return "#222" if 0.299 * r + 0.587 * g + 0.114 * b > 160 else "#fff"


def figure_html(fig, div_id: str | None = None) -> str:
    """A plotly figure as a div + script that use the page's inlined plotly.js. A figure over the mark
    budget (``reports/chart_budget.py``) is a bug in its section: it warns, so tests can catch it."""
    marks = figure_marks(fig.to_plotly_json())
    if marks > chart_budget.MAX_MARKS:
        warnings.warn(
            f"figure {div_id or ''} draws {marks:,} marks, over the budget of {chart_budget.MAX_MARKS:,}", stacklevel=2
        )
    two_line_title = "<br>" in str(fig.layout.title.text or "")  # a binning note under the title
    fig.update_layout(template="plotly_white", margin=dict(l=60, r=20, t=80 if two_line_title else 50, b=50))
    return fig.to_html(
        full_html=False, include_plotlyjs=False, config=PLOTLY_CONFIG, div_id=div_id or f"fig-{next(_ids)}"
    )


def plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def table_html(
    df: pd.DataFrame,
    table_id: str,
    max_rows: int = MAX_TABLE_ROWS,
    float_fmt: str | None = None,
    sortable: bool = True,
    time_origin_ns: float | None = None,
    time_origin_name: str = "run start",
) -> str:
    """A sortable HTML table (click a header); every cell escaped; at most ``max_rows`` rows rendered.

        Headers are labels (``GPU time``), the column's key in their ``title``; each value is written for the unit
        its column's name carries (``diagnose.formatting.cell_text``: ``17.8 ms``, ``79.6 %``, ``1.5 GiB``,
        ``16,384``), its raw number kept in ``data-v`` for sorting. Kernels show their short name, the full
        demangled name on hover (``title``) with, for a ``#2`` label, what tells it from the first kernel of that name
    (``kernel_note``), and the ``kernel_name`` and ``kernel_note`` columns are not repeated. Timestamps read as the
        time since ``time_origin_ns`` (the run's start, when the section knows it), else since the table's first.
        ``float_fmt``: a format for the unitless, non-whole numbers of this table (e.g. ``"{:,.3f}"``).
    """
    if df is None or not len(df):
        return '<p class="muted">No rows.</p>'
    shown = df.head(max_rows)
    columns = [str(c) for c in shown.columns]
    kernel_col, full_col = kernel_columns(columns)
    hidden = {c for c in ("kernel_name", "kernel_short", "kernel_note") if c in columns and c != kernel_col}
    stamps = {c: unit_of_column(c).split(" ", 1)[1] for c in columns if unit_of_column(c).startswith("timestamp")}
    firsts = {
        c: pd.to_numeric(shown[c], errors="coerce").min() * DURATION_SCALE_NS.get(u, 1.0) for c, u in stamps.items()
    }
    clock = {c for c, first in firsts.items() if not pd.isna(first) and abs(first) >= CLOCK_READING_NS}
    origin_ns = time_origin_ns
    if clock and origin_ns is None:
        origin_ns = min(firsts[c] for c in clock)
    since = time_origin_name if time_origin_ns is not None else "first row"
    head = "".join(
        f'<th title="{html.escape(c)}">{html.escape(_header(c, c in clock, since))}</th>'
        for c in columns
        if c not in hidden
    )
    shorts = {}
    if kernel_col is not None:
        names = ["" if is_missing(v) else str(v) for v in shown[kernel_col]]
        shorts = dict(zip(range(len(names)), chart_budget.short_kernel_names(names)))
    rows = []
    for i, rec in enumerate(shown.itertuples(index=False)):
        cells = []
        for c, v in zip(columns, rec):
            if c in hidden:
                continue
            if c == kernel_col:
                full = rec[columns.index(full_col)] if full_col is not None else v
                note = rec[columns.index("kernel_note")] if "kernel_note" in columns else None
                cells.append(_kernel_cell(shorts.get(i, ""), v, full, note))
            elif c in stamps:  # a clock reading from the origin; a time the analyzer made relative, as it is
                cells.append(_stamp_cell(v, stamps[c], origin_ns if c in clock else 0.0))
            else:
                cells.append(_cell(v, c, float_fmt))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = f'<p class="muted">{capped_rows(len(df), max_rows)}</p>' if len(df) > max_rows else ""
    cls = "data sortable" if sortable else "data"
    return (
        f'<table id="{html.escape(table_id)}" class="{cls}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>{more}"
    )


# a timestamp column whose first value is over this (11.6 days in ns) holds clock readings (epoch, a trace's
# monotonic clock), not times since the run's start: it is shown from an origin
CLOCK_READING_NS = 1e15


def kernel_columns(columns: list[str]) -> tuple[str | None, str | None]:
    """(the column shown as the kernel, the column with its full name): ``kernel`` (a unique label) before
    ``kernel_short`` before ``kernel_name``; None where the table names no kernel."""
    shown = next((c for c in ("kernel", "kernel_short", "kernel_name") if c in columns), None)
    full = "kernel_name" if "kernel_name" in columns else shown
    return shown, full


def _header(column: str, timestamp: bool, since: str) -> str:
    label = label_of_key(column)
    return f"{label} (since {since})" if timestamp else label


def _kernel_cell(short: str, label, full, note=None) -> str:
    """The kernel's short name; on hover its label, full demangled name and, for a ``#2`` label, what tells it
    from the first kernel of that name (``kernel_note``)."""
    if is_missing(label):
        return f"<td>{MISSING}</td>"
    label, full = str(label), ("" if is_missing(full) else str(full))
    hover = label if not full or full == label else f"{label}\n{full}"
    if isinstance(note, str) and note:
        hover += f"\n{note}"
    return f'<td class="kernel" title="{html.escape(hover)}" data-v="{html.escape(label)}">{html.escape(short)}</td>'


def _stamp_cell(v, unit: str, origin_ns: float | None) -> str:
    x = pd.to_numeric(pd.Series([v]), errors="coerce").iloc[0]
    if pd.isna(x) or origin_ns is None or unit not in DURATION_SCALE_NS:
        return f'<td class="num">{html.escape(cell_text(v))}</td>'
    offset = float(x) * DURATION_SCALE_NS[unit] - origin_ns
    return f'<td class="num" data-v="{offset!r}" title="{float(x):.0f} {unit}">{html.escape(offset_human(offset))}</td>'


def _cell(v, column: str, float_fmt: str | None) -> str:
    if isinstance(v, (bool, np.bool_)):
        return f"<td>{cell_text(v)}</td>"
    if is_missing(v):
        return f'<td class="num">{MISSING}</td>' if isinstance(v, (float, np.floating)) else f"<td>{MISSING}</td>"
    if isinstance(v, (numbers.Real, np.number)):
        x = float(v)
        text = cell_text(x, column)
        if float_fmt is not None and not x.is_integer() and unit_of_column(column) == "":
            text = float_fmt.format(x)
        return f'<td class="num" data-v="{x!r}">{html.escape(text)}</td>'
    return f"<td>{html.escape(cell_text(v, column))}</td>"


def titled_tables(tables: dict, titles, id_prefix: str, **table_args) -> list[str]:
    """An ``<h3>`` title and a scrolling table for each (key, title) whose table has rows (ids ``<prefix>-<key>``)."""
    parts = []
    for key, title in titles:
        df = tables.get(key)
        if df is not None and len(df):
            parts.append(
                f"<h3>{html.escape(title)}</h3><div class='scroll'>{table_html(df, f'{id_prefix}-{key}', **table_args)}</div>"
            )
    return parts


NOT_RECORDED_FILL = "rgba(120,120,120,0.22)"


def draw_not_recorded(fig, x0: float, x1: float, label: str) -> None:
    """A grey, dotted band over [x0, x1] of the x axis with its label written across it: the part of a chart's
    span its data did not cover, drawn as such rather than as the last value seen (memory, NVML, L2 timelines)."""
    fig.add_shape(
        type="rect",
        xref="x",
        yref="paper",
        x0=x0,
        x1=x1,
        y0=0,
        y1=1,
        fillcolor=NOT_RECORDED_FILL,
        line=dict(color="rgba(90,90,90,0.8)", width=1, dash="dot"),
        layer="above",
    )
    fig.add_annotation(
        x=(x0 + x1) / 2,
        y=0.5,
        xref="x",
        yref="paper",
        text=html.escape(label).replace(", ", "<br>", 1),
        showarrow=False,
        textangle=-90,
        font=dict(size=11, color="#333"),
    )
