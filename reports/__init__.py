"""Tables + findings → HTML / JSON / terminal. Renders only: no computation here.

Renderers take a :class:`diagnose.analysis.Analysis` (results, ranked findings,
summary, source) and return text. Per-analyzer report sections live in
``reports/sections/<analyzer>.py`` with ``render(result) -> str``; an analyzer
without one gets the generic section (its findings and tables).
"""
