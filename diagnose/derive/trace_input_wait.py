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

from diagnose.derive.trace_timeline import clip_sums, merge, name_mask, names_at
from diagnose.derive.trace_view import once_per_trace

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


def _loader_ranges(trace) -> tuple[np.ndarray, np.ndarray]:
    """(ts_ns, end_ns) of :func:`dataloader_fetches`' rows, as plain arrays; worked out once per trace (sync, idle,
    launch and the step budget all ask, and a concat, drop_duplicates and sort of frames was ~6 ms each)."""
    return once_per_trace(trace, "dataloader_ranges", None, lambda: _read_only_ranges(dataloader_fetches(trace)))


def _read_only_ranges(fetches: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    ts_ns, end_ns = fetches["ts_ns"].to_numpy(np.int64).copy(), fetches["end_ns"].to_numpy(np.int64).copy()
    ts_ns.flags.writeable = end_ns.flags.writeable = False  # shared by every caller
    return ts_ns, end_ns


# Kineto's Python frames and its ops are stamped by different clocks' readings: a fetch that returns as the step
# begins was seen ending 25 µs after the step's start. A boundary this far inside a call is held by it.
BOUNDARY_SLACK_NS = 200_000
MAX_SOURCE_BYTES = 2_000_000  # a bigger "source file" is not parsed to look for generators


@functools.lru_cache(maxsize=1)
def _empty_fetches_template() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "ts_ns": pd.Series([], dtype="int64"),
            "end_ns": pd.Series([], dtype="int64"),
            "name": pd.Series([], dtype=object),
            "file": pd.Series([], dtype=object),
            "line": pd.Series([], dtype="int64"),
        }
    )


def _empty_fetches() -> pd.DataFrame:
    return _empty_fetches_template().copy()  # built once (~1 ms), copied out


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
    resumes (ts_ns, end_ns, name, file, line), by start; empty without Python frames or a loop frame.

    Worked out once per trace, steps and folders (the sync, idle, launch and step budget analyzers all ask);
    callers must not change the frame they get."""
    dirs = tuple(str(d) for d in source_dirs if d)
    starts = steps["cpu_start_ns"].to_numpy(np.int64) if len(steps) else np.zeros(0, dtype=np.int64)
    span = (int(starts.min()), int(starts.max())) if len(starts) else ()
    name = f"iterator_fetches {dirs} {len(starts)} {span}"
    return once_per_trace(trace, name, None, lambda: _iterator_fetches(trace, steps, dirs), shared=True)


def _iterator_fetches(trace, steps: pd.DataFrame, dirs: tuple[str, ...]) -> pd.DataFrame:
    loop = loop_frame(trace, steps)
    if loop is None:
        return _empty_fetches()
    py = trace.python
    rows = np.flatnonzero(py["parent_index"].to_numpy(np.int64) == loop)
    if not len(rows):
        return _empty_fetches()
    # (file, line, function) of each call the loop makes, names through the categories (NaN where missing, as
    # astype(object) gives them); a frame of the children is cut only when some are fetches
    keys = list(zip(names_at(py["file"], rows), py["line"].to_numpy()[rows].tolist(), names_at(py["function"], rows)))
    fetch_keys = set()
    for file, line, function in dict.fromkeys(keys):
        if function == "__next__" or (file and is_generator(str(file), int(line), str(function), dirs)):
            fetch_keys.add((file, int(line), function))
    if not fetch_keys:
        return _empty_fetches()
    children = py.iloc[rows]
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
    """The source file a frame names, here: as named, else under one of ``source_dirs``. A run folder copied from
    the GPU machine names files by that machine's paths (``/tmp/t/examples/train.py``); its tail is looked for
    under the folders given, the longest tail first (``examples/train.py`` in a checkout of the same code)."""
    if not file.endswith(".py"):
        return None
    if os.path.isabs(file):
        if os.path.isfile(file):
            return os.path.realpath(file)
        parts = Path(file).parts[1:]
        tails = [os.path.join(*parts[i:]) for i in range(len(parts))]
    else:
        tails = [file]
    for tail in tails:
        for folder in source_dirs:
            candidate = os.path.join(folder, tail)
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


def script_args(manifest: dict) -> list[str]:
    """The ``.py`` arguments among the first four of the run's command (``python3 train.py …``, ``torchrun … train.py``):
    the script, as the manifest wrote it."""
    command = (manifest or {}).get("command") or []
    return [a for a in command[:4] if isinstance(a, str) and a.endswith(".py")] if isinstance(command, list) else []


def source_dirs_of(profile) -> list[str]:
    """Folders a trace's relative frame file names may be under: the run's working folder, its script's folder
    (there, and under this process's working folder), the folders of the files read, and this working folder."""
    dirs = []
    manifest = getattr(profile, "manifest", None) or {}
    cwd = manifest.get("cwd")
    if isinstance(cwd, str):
        dirs.append(cwd)
        for arg in script_args(manifest):
            dirs.append(os.path.dirname(os.path.join(cwd, arg)))
            if not os.path.isabs(arg):  # the run folder read in a checkout of the same code elsewhere
                dirs.append(os.path.dirname(os.path.abspath(arg)))
    dirs += [os.path.dirname(os.path.abspath(s)) for s in getattr(profile, "sources", []) or []]
    dirs.append(os.getcwd())
    return list(dict.fromkeys(dirs))


def input_wait_per_step(trace, steps: pd.DataFrame, source_dirs=(), fetches: pd.DataFrame | None = None) -> pd.Series:
    """Input wait in ms of each step of ``steps`` (``step``, ``cpu_start_ns``, ``cpu_end_ns``, as
    trace_timeline.steps gives), indexed by step: the time inside DataLoader fetch ranges and other iterators'
    fetches (a frame that overlaps a DataLoader range is that DataLoader's, already counted); every step 0 when
    the trace shows no fetch at all."""
    loader_ts, loader_end = _loader_ranges(trace)
    if fetches is None:  # ``fetches``: iterator_fetches(trace, steps, ...) when the caller has it already
        fetches = iterator_fetches(trace, steps, source_dirs)
    frame_ts, frame_end = fetches["ts_ns"].to_numpy(np.int64), fetches["end_ns"].to_numpy(np.int64)
    if len(loader_ts) and len(frame_ts):  # a DataLoader's own __next__ frame: its record_function range is the measure
        lo, hi = merge(loader_ts, loader_end)
        alone = np.asarray(clip_sums(lo, hi, frame_ts, frame_end)) <= 0
        frame_ts, frame_end = frame_ts[alone], frame_end[alone]
    # the union of both (merge sorts): plain arrays, not a concat of frames
    starts, ends = merge(np.concatenate([loader_ts, frame_ts]), np.concatenate([loader_end, frame_end]))
    wait_ns = clip_sums(
        starts,
        ends,
        steps["cpu_start_ns"].to_numpy(dtype=np.int64),
        steps["cpu_end_ns"].to_numpy(dtype=np.int64),
    )
    index = pd.Index(steps["step"].to_numpy(dtype=np.int64), name="step")
    return pd.Series(np.asarray(wait_ns, dtype=np.float64) / 1e6, index=index, name="input_ms")


def input_fetches(trace, steps: pd.DataFrame, source_dirs=(), fetches: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every fetch of a batch the trace shows (ts_ns, end_ns), by start: DataLoader ranges and the loop's
    iterator calls (``fetches``: iterator_fetches(trace, steps, ...) when the caller has it already)."""
    loader_ts, loader_end = _loader_ranges(trace)
    ts, end = [loader_ts], [loader_end]
    if fetches is None and len(steps):
        fetches = iterator_fetches(trace, steps, source_dirs)
    if fetches is not None and len(fetches):
        ts.append(fetches["ts_ns"].to_numpy().astype(np.int64))
        end.append(fetches["end_ns"].to_numpy().astype(np.int64))
    # plain arrays, not a concat of frames and a sort_values (~5 ms a call on a small trace); the same rows
    ts, end = np.concatenate(ts), np.concatenate(end)
    order = np.argsort(ts, kind="stable")
    return pd.DataFrame({"ts_ns": ts[order], "end_ns": end[order]})


def input_idle_by_cause(gaps: pd.DataFrame, fetches: pd.DataFrame) -> dict[str, float]:
    """ns of GPU idle during which the host was fetching input, by the cause trace_timeline.gaps gave each gap
    (a gap after a sync or waiting for a launch): what the idle and launch analyzers take out of those causes."""
    inside, start, end = input_inside_gaps(gaps["start_ns"].to_numpy(), gaps["end_ns"].to_numpy(), fetches)
    if not len(inside):
        return {}
    causes = gaps["cause"].to_numpy()[inside]
    return {str(c): float((end - start)[causes == c].sum()) for c in np.unique(causes)}


def input_inside_gaps(
    gap_start_ns: np.ndarray, gap_end_ns: np.ndarray, fetches: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The parts of GPU idle gaps (sorted, disjoint) during which the host was fetching input: (gap index,
    start ns, end ns) of each part, in time order. A sync followed by a 30 ms fetch from a generator leaves the
    GPU idle for both; the fetch's part is the input's, not the sync's."""
    gap_start_ns = np.asarray(gap_start_ns, dtype=np.int64)
    gap_end_ns = np.asarray(gap_end_ns, dtype=np.int64)
    empty = np.array([], dtype=np.int64)
    if not len(gap_start_ns) or not len(fetches):
        return empty, empty, empty
    fetch_start, fetch_end = merge(fetches["ts_ns"].to_numpy(np.int64), fetches["end_ns"].to_numpy(np.int64))
    first = np.searchsorted(gap_end_ns, fetch_start, side="right")  # the first gap that ends after the fetch starts
    stop = np.searchsorted(gap_start_ns, fetch_end, side="left")  # gaps before it start before the fetch ends
    index, starts, ends = [], [], []
    for fs, fe, a, b in zip(fetch_start, fetch_end, first, stop):
        if a >= b:
            continue
        gaps = np.arange(a, b)
        index.append(gaps)
        starts.append(np.maximum(gap_start_ns[gaps], fs))
        ends.append(np.minimum(gap_end_ns[gaps], fe))
    if not index:
        return empty, empty, empty
    index, starts, ends = np.concatenate(index), np.concatenate(starts), np.concatenate(ends)
    keep = ends > starts
    return index[keep], starts[keep], ends[keep]
