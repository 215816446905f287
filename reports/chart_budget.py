"""The mark budget every report chart keeps, and the binning that keeps it.

A browser draws each bar, point and heatmap cell as an SVG node: the report of a 1 GB trace once
held a chart of 254,995 bars and never finished loading. So each chart draws at most
``MAX_MARKS`` marks, and a timeline lane at most ``MAX_TIME_BINS`` buckets (about one per pixel).
Timelines are binned into time buckets (sums stay sums; maxima survive as
min/max envelopes), categorical charts keep their top N plus one "other", and a binned chart says
its bucket width on the chart (``binning_note``). Tables render at most ``MAX_TABLE_ROWS`` rows.
Long kernel names are shortened on axes (``short_kernel_name``); the full name goes in the hover.
docs/chart-budget.md has the rules per chart.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re

import numpy as np
import pandas as pd

MAX_MARKS = 5000
MAX_TIME_BINS = 1000  # buckets per timeline lane: about one per pixel of a report-wide chart
MAX_TABLE_ROWS = 500
SHORT_NAME_CHARS = 40
NICE_STEPS = (1.0, 2.0, 2.5, 5.0)
ARRAY_KEYS = ("x", "y", "z", "base", "values", "labels", "lat", "lon", "r", "theta", "a", "b")
ITEM_BYTES = {"f8": 8, "f4": 4, "i4": 4, "u4": 4, "i2": 2, "u2": 2, "i1": 1, "u1": 1, "i8": 8, "u8": 8}


# -- counting ---------------------------------------------------------------------------------------


def _array_len(value) -> int:
    """Length of a plotly data array: a list, or a typed array {"dtype", "bdata", "shape"}."""
    if isinstance(value, dict) and "bdata" in value:
        if value.get("shape"):
            return math.prod(int(s) for s in str(value["shape"]).split(","))
        return len(base64.b64decode(value["bdata"])) // ITEM_BYTES.get(value.get("dtype", "f8"), 8)
    if isinstance(value, (list, tuple, np.ndarray, pd.Series, pd.Index)):
        if len(value) and isinstance(value[0], (list, tuple, np.ndarray)):  # a 2-D z: rows × widest row
            return len(value) * max(len(row) for row in value)
        return len(value)
    return 0


def trace_marks(trace: dict) -> int:
    """Marks one plotly trace (as JSON) draws: cells of a heatmap's z, else its longest data array."""
    if trace.get("type") in ("heatmap", "contour") and "z" in trace:
        return _array_len(trace["z"])
    return max((_array_len(trace.get(k)) for k in ARRAY_KEYS), default=0)


def figure_marks(figure: dict) -> int:
    """Marks a figure (``fig.to_plotly_json()`` or the JSON in a page) draws: its traces' marks plus its
    layout shapes and annotations, which are SVG nodes too (a step line per step adds up)."""
    layout = figure.get("layout") or {}
    return (
        sum(trace_marks(t) for t in figure.get("data") or [])
        + len(layout.get("shapes") or [])
        + len(layout.get("annotations") or [])
    )


_NEW_PLOT = re.compile(r'Plotly\.newPlot\(\s*"([^"]+)",\s*')


def figures_in_page(page: str) -> list[dict]:
    """Every plotly figure of a rendered page as {"id", "data", "layout"}: the JSON the page hands
    to ``Plotly.newPlot``, for tests and benchmarks that count what a browser is asked to draw."""
    decoder = json.JSONDecoder()
    out = []
    for m in _NEW_PLOT.finditer(page):
        data, end = decoder.raw_decode(page, m.end())
        end = page.index(",", end) + 1
        while page[end].isspace():
            end += 1
        layout, _ = decoder.raw_decode(page, end)
        out.append({"id": m.group(1), "data": data, "layout": layout})
    return out


# -- bucket widths and the note that names them -----------------------------------------------------


def nice_width(span: float, max_bins: int) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^k that cuts ``span`` into at most ``max_bins`` buckets."""
    if not span > 0 or max_bins < 1:
        return 1.0
    raw = span / max_bins
    exp = math.floor(math.log10(raw))
    for step in (*NICE_STEPS, 10.0):
        width = step * 10.0**exp
        if width >= raw * (1 - 1e-12) and math.ceil(span / width - 1e-9) <= max_bins:
            return width
    return 10.0 ** (exp + 1)


def duration_text_ms(width_ms: float) -> str:
    """A bucket width given in ms, in the unit that reads best: 12.5 ms, 250 µs, 2 s."""
    if width_ms >= 1000:
        return f"{width_ms / 1000:g} s"
    if width_ms >= 1:
        return f"{width_ms:g} ms"
    if width_ms >= 1e-3:
        return f"{width_ms * 1000:g} µs"
    return f"{width_ms * 1e6:g} ns"


def binning_note(width_text: str, bins: int, mark: str = "bar") -> str:
    """What a binned chart says in its title: ``binned: 1 bar per 12.5 ms, 4,000 bins``."""
    return f"binned: 1 {mark} per {width_text}, {bins:,} bins"


# -- binning ----------------------------------------------------------------------------------------


def _time_before(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Σ_i of the part of interval i that lies before each t (interval time, overlaps counted twice)."""
    s, e = np.sort(starts), np.sort(ends)
    cs, ce = np.concatenate([[0.0], np.cumsum(s)]), np.concatenate([[0.0], np.cumsum(e)])
    ns, ne = np.searchsorted(s, t, side="left"), np.searchsorted(e, t, side="left")
    return (ns * t - cs[ns]) - (ne * t - ce[ne])


def bin_intervals(start: np.ndarray, end: np.ndarray, width: float, origin: float = 0.0) -> pd.DataFrame:
    """Intervals summed into buckets of ``width``: per non-empty bucket its start and end, the interval
    time inside it (``busy``, split exactly across bucket edges, so the buckets sum to the total) and
    how many intervals start in it. Vectorised: a million intervals take well under a second."""
    start, end = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
    if not len(start):
        return pd.DataFrame(columns=["bin_start", "bin_end", "busy", "count"])
    first, last = math.floor((start.min() - origin) / width), math.ceil((end.max() - origin) / width)
    edges = origin + width * np.arange(first, max(last, first + 1) + 1, dtype=float)
    busy = np.diff(_time_before(start, end, edges))
    counts = np.bincount(
        np.clip(((start - edges[0]) // width).astype(np.int64), 0, len(edges) - 2), minlength=len(edges) - 1
    )
    keep = busy > 0
    keep |= counts > 0
    return pd.DataFrame(
        {"bin_start": edges[:-1][keep], "bin_end": edges[1:][keep], "busy": busy[keep], "count": counts[keep]}
    )


def envelope(x: np.ndarray, y: np.ndarray, width: float, origin: float = 0.0) -> np.ndarray:
    """Indices of the points that keep a line's shape in buckets of ``width`` of x: in each bucket the
    first, the lowest, the highest and the last point (at most 4 a bucket), in x order, so peaks and
    dips stay drawn. NaN y values are kept where they fall first or last (they break the line)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if not len(x):
        return np.arange(0)
    b = np.floor((x - origin) / width).astype(np.int64)
    frame = pd.DataFrame({"b": b, "y": np.where(np.isnan(y), np.inf, y), "y2": np.where(np.isnan(y), -np.inf, y)})
    groups = frame.groupby("b", sort=False)
    picks = np.concatenate(
        [
            groups.head(1).index.to_numpy(),
            groups.tail(1).index.to_numpy(),
            groups["y"].idxmin().to_numpy(),
            groups["y2"].idxmax().to_numpy(),
        ]
    )
    picks = np.unique(picks)
    return picks[np.argsort(x[picks], kind="stable")]


def thin_line(x, y, max_points: int) -> tuple[np.ndarray, str | None]:
    """Indices of a line's points to draw within ``max_points``, and the note to show (None: all drawn).
    A min/max envelope per bucket of x, so maxima stay visible."""
    x = np.asarray(x, dtype=float)
    if len(x) <= max_points:
        return np.arange(len(x)), None
    finite = x[np.isfinite(x)]
    span = float(finite.max() - finite.min()) if len(finite) else 0.0
    width = nice_width(span, max(1, max_points // 4 - 1))
    origin = float(finite.min()) if len(finite) else 0.0
    idx = envelope(x, y, width, origin)
    return idx, width


def log_histogram(values, bins_per_decade: int) -> pd.DataFrame:
    """Counts and sums of the positive ``values`` per log-spaced bin (``bins_per_decade`` a decade, from the
    decade under the smallest to the one over the largest): one bar per non-empty bin, so a histogram of a
    million launches is a few dozen marks."""
    d = np.asarray(values, dtype=float)
    d = d[d > 0]
    if not len(d):
        return pd.DataFrame({"bin_lo": [], "bin_hi": [], "count": [], "total": []})
    lo, hi = np.floor(np.log10(d.min())), np.ceil(np.log10(d.max()) + 1e-9)
    edges = 10 ** np.linspace(lo, hi, int(round((hi - lo) * bins_per_decade)) + 1)
    idx = np.clip(np.searchsorted(edges, d, side="right") - 1, 0, len(edges) - 2)
    counts = np.bincount(idx, minlength=len(edges) - 1)
    totals = np.bincount(idx, weights=d, minlength=len(edges) - 1)
    keep = counts > 0
    return pd.DataFrame(
        {
            "bin_lo": edges[:-1][keep],
            "bin_hi": edges[1:][keep],
            "count": counts[keep].astype(int),
            "total": totals[keep],
        }
    )


def group_consecutive(n: int, max_groups: int) -> tuple[np.ndarray, int]:
    """Group ``n`` consecutive items (steps, bins) into at most ``max_groups`` groups: the group of each
    item and the group size (1: no grouping)."""
    size = max(1, math.ceil(n / max(1, max_groups)))
    return np.arange(n) // size, size


def run_maxima(frame: pd.DataFrame, x: str, columns, max_points: int) -> tuple[pd.DataFrame, int]:
    """A line's points thinned to runs of equal numbers of consecutive rows (the last run shorter), at most
    ``max_points`` runs: per run ``x`` of its last row and the highest value of each of ``columns`` in it, so
    peaks stay drawn. Returns (one row per run, rows per run)."""
    _, per = group_consecutive(len(frame), max_points)
    starts = np.arange(0, len(frame), per)
    ends = np.r_[starts[1:] - 1, len(frame) - 1] if len(frame) else starts
    out = pd.DataFrame({x: frame[x].to_numpy()[ends]})
    for col in columns:
        values = frame[col].to_numpy()
        out[col] = np.maximum.reduceat(values, starts) if len(frame) else values[:0]
    return out, per


def top_n_other(frame: pd.DataFrame, weight: str, n: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``n - 1`` heaviest rows by ``weight`` and the rest (to be summed into one "other" mark by the
    caller, who knows how each column aggregates). Returns (top, rest); rest is empty when all fit."""
    if len(frame) <= n:
        return frame, frame.iloc[:0]
    order = frame.sort_values(weight, ascending=False, kind="stable")
    return order.iloc[: n - 1], order.iloc[n - 1 :]


def capped_rows(n_rows: int, max_rows: int = MAX_TABLE_ROWS) -> str:
    """The note under a table cut to ``max_rows`` rows."""
    return (
        f"Showing {max_rows:,} of {n_rows:,} rows; the full table is in the analysis' result "
        "(Python API: <code>analysis.results[name].tables</code>)."
    )


# -- kernel names -----------------------------------------------------------------------------------

_SUFFIX = re.compile(r"( #\d+)$")


def _strip_brackets(name: str, open_: str, close: str) -> str:
    out, depth = [], 0
    for ch in name:
        if ch == open_:
            depth += 1
        elif ch == close and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out)


def _base_and_suffix(name: str) -> tuple[str, str]:
    """The kernel's own name (no return type, template or argument list) and its `` #2`` suffix."""
    name = str(name)
    m = _SUFFIX.search(name)
    suffix = m.group(1) if m else ""
    base = name[: m.start()] if m else name
    if "(" in base:
        base = _strip_brackets(base, "(", ")")
    if "<" in base:
        base = _strip_brackets(base, "<", ">")
    base = base.strip()
    if " " in base:  # "void ns::kernel" → "ns::kernel"
        base = base.rsplit(" ", 1)[-1]
    return base or name, suffix


def short_kernel_name(name: str, limit: int = SHORT_NAME_CHARS) -> str:
    """A kernel name short enough for an axis: no return type, template or argument list, leading
    namespaces dropped while too long, then the middle elided (``sm90_xmma_wgrad_indexed_…ernel__5x_cudnn``:
    the head says the family, the tail the variant). A trailing `` #2`` (instance label) is kept."""
    base, suffix = _base_and_suffix(name)
    room = max(8, limit - len(suffix))
    while len(base) > room and "::" in base:
        base = base.split("::", 1)[1]
    if len(base) > room:
        tail = (room - 1) * 2 // 5
        base = base[: room - 1 - tail] + "…" + base[len(base) - tail :]
    return base + suffix


def _where_they_differ(base: str, differ_at: int, room: int) -> str:
    """``base`` as its head, an ellipsis, and the part from where it differs from its look-alikes."""
    head = room * 2 // 5
    start = base.rfind("_", head, differ_at) if differ_at > head else -1
    start = start if start >= 0 else max(head, differ_at - 4)
    window = base[start:]
    keep = room - head - 1
    if len(window) > keep:
        window = window[: keep - 1] + "…"
    return base[:head] + "…" + window


def short_kernel_names(names, limit: int = SHORT_NAME_CHARS) -> list[str]:
    """``short_kernel_name`` of each, kept unique (an axis merges equal labels): names whose short
    forms collide are shown from where they differ (``sm90_xmma_wgrad…_split_k_kernel__5x_cudnn``);
    a repeat left after that gets ``~2``…"""
    names = [str(n) for n in names]
    out = [short_kernel_name(n, limit) for n in names]
    groups: dict[str, list[int]] = {}
    for i, short in enumerate(out):
        groups.setdefault(short, []).append(i)
    for members in groups.values():
        if len(members) < 2:
            continue
        parts = [_base_and_suffix(names[i]) for i in members]
        bases = [b for b, _ in parts]
        differ_at = len(os.path.commonprefix(bases))
        for i, (base, suffix) in zip(members, parts):
            room = max(8, limit - len(suffix))
            out[i] = (_where_they_differ(base, differ_at, room) if len(base) > room else base) + suffix
    seen: dict[str, int] = {}
    for i, short in enumerate(out):
        seen[short] = seen.get(short, 0) + 1
        if seen[short] > 1:
            out[i] = f"{short[: limit - 3]}~{seen[short]}"
    return out


def _wrap_escaped(text: str, every: int) -> str:
    """``text`` escaped for plotly's HTML-ish labels, a line break every ``every`` characters."""
    return "<br>".join(html.escape(text[i : i + every]) for i in range(0, len(text), every))


def kernel_axis(labels, full_names=None, wrap_chars: int = 100, max_full_chars: int = 400):
    """Categories and tick texts for a kernel axis: the categories are the full labels (so the hover's
    ``%{y}`` names the kernel in full, with its demangled name when it says more), the tick texts
    their short forms, so the plot keeps the width. Use as
    ``yaxis=dict(tickmode="array", tickvals=categories, ticktext=ticks, automargin=True)``."""
    labels = [str(k) for k in labels]
    full_names = list(full_names) if full_names is not None else [None] * len(labels)
    categories = []
    for label, full in zip(labels, full_names):
        text = _wrap_escaped(label, wrap_chars)
        if isinstance(full, str) and full and full != label:
            cut = full if len(full) <= max_full_chars else full[: max_full_chars - 1] + "…"
            text += "<br>" + _wrap_escaped(cut, wrap_chars)
        categories.append(text)
    return categories, [html.escape(t) for t in short_kernel_names(labels)]
