"""Human units for display only (values stay in base units everywhere else)."""

from __future__ import annotations

import math


def bytes_human(n: float | None) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "–"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


def ns_human(ns: float | None) -> str:
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "–"
    ns = float(ns)
    if abs(ns) < 1e3:
        return f"{ns:,.0f} ns"
    if abs(ns) < 1e6:
        return f"{ns / 1e3:,.2f} µs"
    if abs(ns) < 1e9:
        return f"{ns / 1e6:,.2f} ms"
    return f"{ns / 1e9:,.2f} s"


def value_human(value, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if unit in ("bytes", "byte", "B"):
        return bytes_human(value)
    if unit == "ns":
        return ns_human(value)
    if unit in ("%", "pct"):
        return f"{value:,.1f} %"
    if isinstance(value, float):
        return f"{value:,.3g} {unit}".strip()
    return f"{value:,} {unit}".strip()


def share_human(share: float | None) -> str:
    if share is None or (isinstance(share, float) and math.isnan(share)):
        return "–"
    return f"{100 * share:.1f} %"


def input_name(paths: list[str]) -> str:
    """The input as one short name: the first path (the run folder or the file), and how many more were read."""
    if not paths:
        return "(no input named)"
    more = len(paths) - 1
    return paths[0] + (f" (+ {more} file{'s' if more > 1 else ''} read)" if more else "")
