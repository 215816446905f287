"""What a summary metric means: its label, unit, which way is better, and its resolution.

Each analyzer declares the metrics it writes into ``Result.summary`` next to the code that
writes them, as ``SUMMARY_METRICS = (Metric(...), ...)`` in its module. Reports label the summary
with them (the appendix), and ``diff`` judges changes with them: the direction is declared,
not guessed from the key's name, and a change smaller than ``resolution`` is "unchanged".

A key may hold fields in braces (``gpu_idle_stream{stream}_{category}_pct``); a per-rank copy
of a key (``rank3.comm_overlap_pct``) is the same metric for that rank.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

HIGHER = "higher"  # higher is better
LOWER = "lower"  # lower is better
NEUTRAL = "neutral"  # a count or a setting: it changed, neither better nor worse

UNITS = ("%", "share", "ms", "µs", "ns", "s", "bytes", "count", "/s", "MHz", "W", "ratio", "")

_RANK_PREFIX = re.compile(r"^rank(?P<rank>\d+)\.(?P<key>.+)$")
_FIELD = re.compile(r"\{(\w+)\}")


def rank_key(rank: int, lowest: int, name: str) -> str:
    """The summary key of ``name`` for ``rank``: the plain key for the lowest rank, ``rank<N>.<name>`` for the
    others (the per-rank copy that :func:`describe` reads back as the same metric)."""
    return name if rank == lowest else f"rank{rank}.{name}"


@dataclass(frozen=True)
class Metric:
    """One summary metric as its analyzer declares it.

    ``key``: the summary key, with ``{field}`` placeholders for parts that vary (a stream, a rank);
    ``label``: what a person reads, the same placeholders allowed; ``unit``: one of ``UNITS``;
    ``direction``: ``HIGHER``, ``LOWER`` or ``NEUTRAL``; ``resolution``: the smallest change, in
    ``unit``, that means something (measurement granularity, rounding of the source); a change
    below it is "unchanged" in a diff.
    """

    key: str
    label: str
    unit: str
    direction: str
    resolution: float = 0.0
    analyzer: str = ""

    def __post_init__(self):
        if self.direction not in (HIGHER, LOWER, NEUTRAL):
            raise ValueError(f"metric {self.key}: direction {self.direction!r} is not higher/lower/neutral")
        if self.unit not in UNITS:
            raise ValueError(f"metric {self.key}: unit {self.unit!r} is not one of {UNITS}")

    def pattern(self) -> re.Pattern:
        return _key_pattern(self.key)


@functools.lru_cache(maxsize=4096)
def _key_pattern(key: str) -> re.Pattern:
    """The regex a summary key template matches (built once per key: ``describe`` asks ~2,500 times a report)."""
    parts = _FIELD.split(key)
    regex = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
    return re.compile(f"^{regex}$")


def describe(key: str, metrics: Iterable[Metric]) -> Metric | None:
    """The metric among ``metrics`` behind a summary key, its label filled in (and the rank named); None if undeclared.

    ``metrics`` in the order to try: exact keys before templated ones (``in_match_order``).
    """
    rank = None
    match = _RANK_PREFIX.match(key)
    base = key
    if match:
        rank, base = match["rank"], match["key"]
    for m in metrics:
        if "{" not in m.key:  # a literal key: what its pattern ^key$ matches, without compiling it (~90 a report)
            if base != m.key and base != m.key + "\n":
                continue
            label = m.label
        else:
            found = m.pattern().match(base)
            if found is None:
                continue
            fields = {k: v.replace("_", " ") for k, v in found.groupdict().items()}  # a label reads words
            label = m.label.format(**fields) if fields else m.label
        if rank is not None:
            label = f"{label} (rank {rank})"
        return replace(m, key=key, label=label)
    return None


def in_match_order(metrics: Iterable[Metric]) -> tuple[Metric, ...]:
    """Exact keys first, then templated ones, longest first: the most specific declaration wins."""
    return tuple(sorted(metrics, key=lambda m: ("{" in m.key, -len(m.key))))
