"""Plotly figures as HTML fragments, and the one inlined copy of plotly.js.

Every figure is ``to_html(full_html=False, include_plotlyjs=False)``; the page
inlines plotly.js once (``reports/templating.py`` and ``templates/_base.html``), so the report works offline.
"""

from __future__ import annotations

import html
import itertools
import warnings

import pandas as pd

from reports import chart_budget
from reports.chart_budget import MAX_TABLE_ROWS, capped_rows, figure_marks

_ids = itertools.count()

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}


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
    df: pd.DataFrame, table_id: str, max_rows: int = MAX_TABLE_ROWS, float_fmt: str = "{:,.2f}", sortable: bool = True
) -> str:
    """A sortable HTML table (click a header); every cell escaped; at most ``max_rows`` rows rendered."""
    if df is None or not len(df):
        return '<p class="muted">No rows.</p>'
    shown = df.head(max_rows)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in shown.columns)
    rows = []
    for rec in shown.itertuples(index=False):
        cells = []
        for v in rec:
            if isinstance(v, float):
                text = "" if pd.isna(v) else float_fmt.format(v)
                cells.append(f'<td class="num" data-v="{"" if pd.isna(v) else repr(v)}">{text}</td>')
            elif isinstance(v, (int,)) and not isinstance(v, bool):
                cells.append(f'<td class="num" data-v="{v}">{v:,}</td>')
            else:
                cells.append(f"<td>{html.escape('' if v is None else str(v))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = f'<p class="muted">{capped_rows(len(df), max_rows)}</p>' if len(df) > max_rows else ""
    cls = "data sortable" if sortable else "data"
    return (
        f'<table id="{html.escape(table_id)}" class="{cls}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>{more}"
    )


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
