"""Tables + findings → HTML / JSON / terminal. Renders only: no computation here, apart from thinning a table
the analysis handed over whole to a chart's mark budget (``reports/chart_budget.py``, docs/chart-budget.md).

Renderers take a :class:`diagnose.analysis.Analysis` (results, ranked findings,
summary, source) and return text. Per-analyzer report sections live in
``reports/sections/<analyzer>.py`` with ``render(result) -> str``; an analyzer
without one gets the generic section (its findings and tables).
"""
