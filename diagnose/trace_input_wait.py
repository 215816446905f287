"""Input wait per step from a Kineto trace: the time the loop spent fetching batches from a torch DataLoader.

Every torch DataLoader iterator wraps its ``__next__`` in a ``record_function`` named
``enumerate(DataLoader)#<IteratorClass>.__next__`` (``_SingleProcessDataLoaderIter``,
``_MultiProcessingDataLoaderIter``, or a subclass), so a trace captured anywhere, not only by
gpudiag, says how long each fetch blocked the host. Per step, the union of those ranges (a loader
that reads from another loader is counted once) clipped to the step's host window is its input
wait: the same measure as light mode's ``input_ms`` (diagnose.launch.runtime.input_wait).

A loop over any other iterable (a generator that builds batches, a class with ``__next__``) has no such
range. Where the trace has Python frames (``with_stack=True``, as gpudiag's window records), each fetch
is a frame that the loop's own frame calls: a ``__next__`` method, or a generator function resumed
for the next batch. The loop's frame is the innermost one that holds every step's start. A generator is known
by its source: the file the frame names, looked up in the run's folders, is parsed with ``ast`` (never
run), and the function of that name around that line must contain ``yield``. Without the source, only ``__next__``
methods are counted. A function any of whose calls holds a step's start is the loop body itself (a loop
written as a generator that yields once a step), not a fetch. Time spent inside the fetch calls is input wait, with
the same clipping as above.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from diagnose.trace_timeline import clip_sums, merge, name_mask

DATALOADER_NEXT = re.compile(r"^enumerate\(DataLoader\)#.+\.__next__$")


def dataloader_fetches(trace) -> pd.DataFrame:
    """The ``enumerate(DataLoader)#...__next__`` ranges of the trace (annotations and CPU ops), by start."""
    found = []
    for table in (trace.annotations, trace.cpu_ops):
        if len(table):
            is_fetch = name_mask(table["name"], lambda names: names.str.match(DATALOADER_NEXT))
            found.append(table.loc[is_fetch, ["ts_ns", "end_ns", "tid", "name"]])
    if not found:
        return pd.DataFrame({"ts_ns": pd.Series([], dtype="int64"), "end_ns": pd.Series([], dtype="int64")})
    fetches = pd.concat(found, ignore_index=True)
    # a range Kineto keeps both as an annotation and as a CPU op is one fetch
    fetches = fetches.drop_duplicates(subset=["ts_ns", "end_ns", "tid"])
    return fetches.sort_values("ts_ns", kind="stable").reset_index(drop=True)


# Kineto's Python frames and its ops are stamped by different clocks' readings: a fetch that returns as the step
# begins was seen ending 25 µs after the step's start. A boundary this far inside a call is held by it.
BOUNDARY_SLACK_NS = 200_000
MAX_SOURCE_BYTES = 2_000_000  # a bigger "source file" is not parsed to look for generators


def _empty_fetches() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "ts_ns": pd.Series([], dtype="int64"),
            "end_ns": pd.Series([], dtype="int64"),
            "name": pd.Series([], dtype=object),
            "file": pd.Series([], dtype=object),
            "line": pd.Series([], dtype="int64"),
        }
    )


def loop_frame(trace, steps: pd.DataFrame) -> int | None:
    """Row of ``trace.python`` of the training loop's frame: the innermost frame that holds every step's start (the
    frames end when the profiler stops, which may be inside the last step)."""
    py = trace.python
    if not len(py) or not len(steps):
        return None
    first = int(steps["cpu_start_ns"].min())
    last = int(steps["cpu_start_ns"].max())
    ts, end = py["ts_ns"].to_numpy(np.int64), py["end_ns"].to_numpy(np.int64)
    holds = np.flatnonzero((ts <= first) & (end >= last))
    if not len(holds):
        return None
    # nested frames that all hold the steps: the innermost started last (and ends first on a tie)
    return int(holds[np.lexsort((end[holds], -ts[holds]))[0]])


def iterator_fetches(trace, steps: pd.DataFrame, source_dirs=()) -> pd.DataFrame:
    """Fetches of the next batch from any iterator the loop's frame calls: ``__next__`` methods and generator
    resumes (ts_ns, end_ns, name, file, line), by start; empty without Python frames or a loop frame."""
    loop = loop_frame(trace, steps)
    if loop is None:
        return _empty_fetches()
    py = trace.python
    children = py[py["parent_index"].to_numpy(np.int64) == loop]
    if not len(children):
        return _empty_fetches()
    dirs = tuple(str(d) for d in source_dirs if d)
    kinds = children[["file", "line", "function"]].astype({"file": object, "function": object}).drop_duplicates()
    fetch_keys = set()
    for file, line, function in kinds.itertuples(index=False):
        if function == "__next__" or (file and is_generator(str(file), int(line), str(function), dirs)):
            fetch_keys.add((file, int(line), function))
    if not fetch_keys:
        return _empty_fetches()
    keys = list(zip(children["file"].astype(object), children["line"].astype(int), children["function"].astype(object)))
    # a function any of whose calls holds a step boundary is the loop body itself (a training loop written as a
    # generator that yields once a step, driven by an outer loop), not a fetch
    starts = np.sort(steps["cpu_start_ns"].to_numpy(np.int64))
    ts, end = children["ts_ns"].to_numpy(np.int64), children["end_ns"].to_numpy(np.int64)
    inner_ts, inner_end = ts + BOUNDARY_SLACK_NS, end - BOUNDARY_SLACK_NS
    holds_boundary = np.searchsorted(starts, inner_end, side="left") > np.searchsorted(starts, inner_ts, side="right")
    fetch_keys -= {k for k, holds in zip(keys, holds_boundary) if holds}
    keep = np.fromiter((k in fetch_keys for k in keys), dtype=bool, count=len(children))
    found = children.loc[keep, ["ts_ns", "end_ns", "name", "file", "line"]]
    found = found.astype({"name": object, "file": object})
    return found.sort_values("ts_ns", kind="stable").reset_index(drop=True)


def is_generator(file: str, line: int, function: str, source_dirs: tuple[str, ...]) -> bool:
    """True when the frame (as Kineto names it: file, line, function) is of a function that yields, read from its
    source. Kineto gives a called function its ``def`` line and a resumed generator the line it resumes at
    (its ``yield``), so any line from the first decorator to the function's end matches."""
    path = _find_source(file, source_dirs)
    if path is None:
        return False
    return any(first <= line <= last for first, last in _generators_of(path).get(function, ()))


def _find_source(file: str, source_dirs: tuple[str, ...]) -> str | None:
    if not file.endswith(".py"):
        return None
    candidates = [file] if os.path.isabs(file) else [os.path.join(d, file) for d in source_dirs]
    for candidate in candidates:
        if os.path.isfile(candidate):
            return os.path.realpath(candidate)
    return None


@functools.lru_cache(maxsize=64)
def _generators_of(path: str) -> dict[str, tuple[tuple[int, int], ...]]:
    """Per function name, the line spans (first decorator or ``def`` to the last line) of its definitions that yield."""
    try:
        if os.path.getsize(path) > MAX_SOURCE_BYTES:
            return {}
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    found: dict[str, list] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _yields(node):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            found.setdefault(node.name, []).append((first, node.end_lineno or node.lineno))
    return {name: tuple(spans) for name, spans in found.items()}


def _yields(function: ast.AST) -> bool:
    """A yield in the function's own body (not in a function, lambda or class nested in it)."""
    todo = list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return False


def source_dirs_of(profile) -> list[str]:
    """Folders a trace's relative frame file names may be under: the run's working folder, its script's folder,
    the folders of the files read, and this process's working folder."""
    dirs = []
    manifest = getattr(profile, "manifest", None) or {}
    cwd = manifest.get("cwd")
    if isinstance(cwd, str):
        dirs.append(cwd)
        command = manifest.get("command") or []
        for arg in command[:4] if isinstance(command, list) else []:
            if isinstance(arg, str) and arg.endswith(".py"):
                dirs.append(os.path.dirname(os.path.join(cwd, arg)))
    dirs += [os.path.dirname(os.path.abspath(s)) for s in getattr(profile, "sources", []) or []]
    dirs.append(os.getcwd())
    return list(dict.fromkeys(dirs))


def input_wait_per_step(trace, steps: pd.DataFrame, source_dirs=(), fetches: pd.DataFrame | None = None) -> pd.Series:
    """Input wait in ms of each step of ``steps`` (``step``, ``cpu_start_ns``, ``cpu_end_ns``, as
    trace_timeline.steps gives), indexed by step: the time inside DataLoader fetch ranges and other iterators'
    fetches (a frame that overlaps a DataLoader range is that DataLoader's, already counted); every step 0 when
    the trace shows no fetch at all."""
    loader = dataloader_fetches(trace)[["ts_ns", "end_ns"]]
    if fetches is None:  # ``fetches``: iterator_fetches(trace, steps, ...) when the caller has it already
        fetches = iterator_fetches(trace, steps, source_dirs)
    frames = fetches[["ts_ns", "end_ns"]]
    if len(loader) and len(frames):  # a DataLoader's own __next__ frame: its record_function range is the measure
        lo, hi = merge(loader["ts_ns"].to_numpy(np.int64), loader["end_ns"].to_numpy(np.int64))
        overlap = clip_sums(lo, hi, frames["ts_ns"].to_numpy(np.int64), frames["end_ns"].to_numpy(np.int64))
        frames = frames[np.asarray(overlap) <= 0]
    fetches = pd.concat([loader, frames], ignore_index=True).sort_values("ts_ns", kind="stable")
    starts, ends = merge(fetches["ts_ns"].to_numpy(dtype=np.int64), fetches["end_ns"].to_numpy(dtype=np.int64))
    wait_ns = clip_sums(
        starts,
        ends,
        steps["cpu_start_ns"].to_numpy(dtype=np.int64),
        steps["cpu_end_ns"].to_numpy(dtype=np.int64),
    )
    index = pd.Index(steps["step"].to_numpy(dtype=np.int64), name="step")
    return pd.Series(np.asarray(wait_ns, dtype=np.float64) / 1e6, index=index, name="input_ms")
