"""One rank's trace as the analyzers read it, with the tables worked out from it held beside it.

The parser's ``Trace`` stays as it was read: nothing is attached to it. A ``TraceView`` wraps it (every
attribute the analyzers read, ``gpu``, ``runtime``, ``python``…, is the trace's own), and holds what is worked
out from it once (gaps, host syncs, steps, their GPU windows, input fetches), keyed by name and parameters.
One view per rank lives in the Profile's :class:`~diagnose.derive.derived.Derived`, so a table that sync, idle,
launch and the step budget all ask for is computed once per report (the gaps of a 1 GB trace cost 0.4 s each).

Its analysed form (HTA's cut of the last profiler step, :func:`diagnose.derive.trace_timeline.analysed`) is a
second view, made once and held by the first; what depends only on the tables both share (the Python frames)
is held by the first view, ``root``, for both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class TraceView:
    """A parser ``Trace`` and the values worked out from it; reads fall through to the trace."""

    __slots__ = ("trace", "is_analysed", "root", "_values")

    def __init__(self, trace, *, is_analysed: bool = False, root: TraceView | None = None):
        self.trace = trace
        self.is_analysed = is_analysed
        self.root = root if root is not None else self
        self._values: dict[tuple[str, Any], Any] = {}

    def __getattr__(self, name: str):
        if name in TraceView.__slots__:  # not set yet (copy, pickle): no fall-through loop
            raise AttributeError(name)
        return getattr(self.trace, name)

    def once(self, name: str, key: Any, compute: Callable[[], T]) -> T:
        """``compute()`` the first time ``name`` and ``key`` are asked for, what it returned after that.
        Callers must not change what they get back (copy it first)."""
        full_key = (name, key)
        if full_key not in self._values:
            self._values[full_key] = compute()
        return self._values[full_key]

    def __repr__(self) -> str:
        kind = "analysed" if self.is_analysed else "as read"
        return f"TraceView({self.trace.path!r}, {kind}, {len(self._values)} values)"


def once_per_trace(trace, name: str, key: Any, compute: Callable[[], T], *, shared: bool = False) -> T:
    """``compute()`` once per view (``shared``: once for a view and its analysed form, for values that read
    only the tables both hold); a bare parser ``Trace`` (a test, a notebook) is computed each time."""
    if isinstance(trace, TraceView):
        return (trace.root if shared else trace).once(name, key, compute)
    return compute()


class TraceViews(Mapping):
    """rank → TraceView over a mapping of traces that reads ranks on demand and drops them (the cluster read's
    :class:`~diagnose.cluster.parquet_traces.ParquetTraces`): a view lives while its rank's trace is held, so
    the parent never keeps every rank's tables, nor what was worked out from them, at once. A rank asked for
    again after it was dropped is read again and its values worked out again."""

    def __init__(self, traces: Mapping):
        self.traces = traces
        self._views: dict[int, TraceView] = {}
        on_drop = getattr(traces, "on_drop", None)
        if on_drop is not None:
            on_drop.append(self._drop)  # told before the mapping frees a rank, so the view goes with its tables

    def __getitem__(self, rank: int) -> TraceView:
        trace = self.traces[rank]
        view = self._views.get(rank)
        if view is None or view.trace is not trace:
            view = self._views[rank] = TraceView(trace)
        return view

    def _drop(self, rank: int) -> None:
        dropped = self._views.pop(rank, None)
        if dropped is not None:
            # a view and its analysed form refer to each other (root, values): cleared, both are freed now rather
            # than at the next garbage collection, before the next rank's tables are read
            dropped._values.clear()

    def __iter__(self) -> Iterator[int]:
        return iter(self.traces)

    def __len__(self) -> int:
        return len(self.traces)

    def __contains__(self, rank: object) -> bool:
        return rank in self.traces
