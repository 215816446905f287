"""Kernels section: the sortable per-kernel table (click a header to sort)."""

from __future__ import annotations

from reports.figures import table_html


def render(result) -> str:
    table = result.tables.get("kernels")
    if table is None or not len(table):
        return '<p class="muted">No ncu kernels in this input.</p>'
    return (
        "<p class='muted'>One row per kernel (one demangled function instance; launches summed, metrics "
        "weighted by duration, grid and block the shape that carries most time). Same short names are "
        "told apart by #2, #3; hover a kernel for its full name. Click a column to sort.</p>"
        "<div class='scroll'>" + table_html(table, "kernels-table") + "</div>"
    )
