"""Read a run's artifacts (one file per rank and kind) in worker processes, each within one file's memory.

Parsing a trace costs several times its tables in memory (JSON objects before they become
columns: an 81 MiB trace peaks near 300 MiB of RSS for 20 MiB of tables), and that peak is
paid per file. Read serially, N ranks cost one file's peak plus N sets of tables; read in
one process's threads they would cost N peaks at once. Here each file is one job,
:func:`read_artifact` (a plain function: path → tables), run in a pool of
``min(files, cores, memory cap)`` worker processes: a worker's peak RSS is that of the
largest file it read, whatever the number of ranks, and the parent holds only tables.
Tables come back pickled through the pool's pipe: for an 81 MiB trace's frames that is 0.03 s
against 0.04-0.18 s written to and read back from Arrow IPC files (benchmarks/multi_rank_load.py),
and pickling gives back identical frames.

A file a worker cannot read comes back as the same :class:`parsers.errors.InputError` text a
serial read gives; a worker that dies (killed for memory) is said as an error of that file.
The same :func:`read_artifact` is the per-rank job of the design past one machine
(docs/scaling.md).
"""

from __future__ import annotations

import os
import resource
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parsers import registry
from parsers.errors import InputError
from parsers.reader import FINDINGS

# A worker's peak RSS is about this many bytes per byte of its largest (uncompressed) input, plus its
# imports: measured 300-500 MiB for an 81 MiB Kineto trace with ~160 MiB of imports (2-4 per byte, as the
# trace parser changed); 6 leaves room for traces denser in small events.
PEAK_RSS_PER_INPUT_BYTE = 6
WORKER_BASE_RSS_BYTES = 200 * 2**20
MEMORY_SHARE = 0.7  # of what is available, for the workers together (the parent's tables need the rest)
# Below this much input a pool costs more than it saves: starting the workers takes about a second
# (importing pandas), serial reading runs at about 11 MB/s of JSON.
PARALLEL_MIN_INPUT_BYTES = 32 * 2**20


@dataclass
class ArtifactRead:
    """What one job returns: the table the file fills and its value, or the error that stopped it."""

    path: str
    table: str | None = None  # parsers.reader's table name
    value: Any = None  # what the reader returned (a Trace, frames, a MemorySnapshot)
    warnings: list[str] = field(default_factory=list)  # the reader's UserWarnings (a cut last line)
    error: str | None = None  # InputError's problem, said of ``path``
    read_s: float = 0.0
    peak_rss_bytes: int = 0  # of the process that read it (a worker: its peak so far)
    pid: int = 0  # the process that read it


def read_artifact(path: str | os.PathLike, kind: str | None = None) -> ArtifactRead:
    """Read one artifact (format detected from its content unless ``kind`` names its reader).

    Never raises for bad input: an InputError comes back as ``error``, so it crosses a process
    boundary as plain text (InputError itself does not unpickle)."""
    t0 = time.perf_counter()
    path = os.fspath(path)
    out = ArtifactRead(path)
    try:
        reader = registry.reader(kind) if kind else registry.detect(path)
        if reader is None:
            raise InputError(path, "is a run folder, not one artifact: load it with diagnose.load")
        if reader.table == FINDINGS:
            raise InputError(
                path,
                "is a gpudiag findings JSON: it holds findings, not measurements to analyse; "
                "gate on it with `gpudiag check`, or report the run it came from",
            )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            out.value = reader.read(path)
        out.table = reader.table
        out.warnings = list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, UserWarning)))
    except InputError as e:
        out.error = e.problem
    out.read_s = time.perf_counter() - t0
    out.peak_rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out.pid = os.getpid()
    return out


def read_all(
    paths: Sequence[str | os.PathLike],
    workers: int,
    kinds: Sequence[str | None] | None = None,
    on_done: Callable[[ArtifactRead], None] | None = None,
    on_started: Callable[[], None] | None = None,
) -> list[ArtifactRead]:
    """:func:`read_artifact` of every path in ``workers`` processes; the reads in the order of ``paths``.

    ``on_done`` is called in this process as each read finishes (for progress); ``on_started`` once the
    workers exist (start threads there, not before: the workers are forked)."""
    kinds = list(kinds) if kinds is not None else [None] * len(paths)
    reads: list[ArtifactRead | None] = [None] * len(paths)
    if workers <= 1 or len(paths) <= 1:
        if on_started:
            on_started()
        for i, (p, k) in enumerate(zip(paths, kinds)):
            reads[i] = read_artifact(p, k)
            if on_done:
                on_done(reads[i])
        return reads
    pending = _in_pool(paths, kinds, range(len(paths)), workers, reads, on_done, on_started)
    for i in pending:  # the pool broke (a worker was killed): find which file kills its reader, one per pool
        if not _in_pool(paths, kinds, [i], 1, reads, on_done):
            continue
        reads[i] = ArtifactRead(
            os.fspath(paths[i]),
            error="the worker process reading it died (killed by the system, most likely out of memory); "
            "read it with fewer workers (diagnose.load(..., workers=1)) or on a machine with more memory",
        )
        if on_done:
            on_done(reads[i])
    return reads


def _in_pool(paths, kinds, indices, workers: int, reads: list, on_done, on_started=None) -> list[int]:
    """Read ``paths[i]`` for each of ``indices`` into ``reads[i]``; the indices whose worker died."""
    import multiprocessing

    # fork: the workers start with the readers imported, and nothing of the caller's __main__ is run again
    # (spawn and forkserver re-import it: a script or notebook cell without a __main__ guard would recurse).
    # A fork pool starts all its workers at the first submit, before its own thread and before ``on_started``.
    ctx = multiprocessing.get_context("fork")
    broken = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        indices = list(indices)
        futures = {pool.submit(read_artifact, os.fspath(paths[indices[0]]), kinds[indices[0]]): indices[0]}
        if on_started:
            on_started()
        futures.update({pool.submit(read_artifact, os.fspath(paths[i]), kinds[i]): i for i in indices[1:]})
        try:
            for future in as_completed(futures):
                i = futures[future]
                try:
                    reads[i] = future.result()
                except BrokenProcessPool:
                    broken.append(i)
                    continue
                if on_done:
                    on_done(reads[i])
        except BaseException:  # a reader's bug or Ctrl-C: raised as a serial read raises it, without the rest
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return sorted(broken)


# ---- how many workers ------------------------------------------------------------------------------


def input_bytes(path: str | os.PathLike) -> int:
    """The bytes a reader will parse: a gzip file's uncompressed size (from its trailer), else its size."""
    path = Path(path)
    size = path.stat().st_size
    if size < 18:
        return size
    try:
        with open(path, "rb") as f:
            if f.read(2) != b"\x1f\x8b":
                return size
            f.seek(-4, os.SEEK_END)
            unpacked = int.from_bytes(f.read(4), "little")  # ISIZE: the size modulo 2**32
    except OSError:
        return size
    return unpacked if unpacked >= size else size * 10  # wrapped past 4 GiB: a typical trace ratio


def worker_count(sizes_bytes: Sequence[int], cores: int | None = None, available_bytes: int | None = None) -> int:
    """``min(files, cores, what memory allows)``: each worker may peak at its largest file's parse."""
    if not sizes_bytes:
        return 1
    cores = cores if cores is not None else len(os.sched_getaffinity(0))
    available = available_bytes if available_bytes is not None else available_memory_bytes()
    peak = WORKER_BASE_RSS_BYTES + PEAK_RSS_PER_INPUT_BYTE * max(sizes_bytes)
    by_memory = int(available * MEMORY_SHARE // peak)
    return max(1, min(len(sizes_bytes), cores, by_memory))


def available_memory_bytes() -> int:
    """Memory this process may still use: the system's MemAvailable, within a cgroup (container) limit."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if available is None:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit != "max":
            available = min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return max(0, available)
