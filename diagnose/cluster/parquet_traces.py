"""Every rank's trace as the analyzers ask for it, read back from Parquet one rank at a time.

A local read holds every rank's tables in the parent (~30 MiB per 81 MiB rank: 30 GiB for 1,000 ranks).
Here ``Profile.traces`` is this mapping: its keys are the ranks, known from the workers' summaries, and
``traces[rank]`` reads that rank's tables from its cache folder, keeping the last ``keep`` ranks read.
The analyzers run unchanged, and run over each rank in turn, so the parent holds one rank's tables and what
the analyzers keep of each (their findings and small tables), not every rank's trace: its memory grows with
the reductions (docs/scaling.md measures it).

:class:`~diagnose.derive.derived.Derived` wraps each rank in a TraceView that holds what is worked out from
it; for a mapping like this one it keeps views for the ranks in memory only (``evicts``), so a rank read again
works its values out again.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from diagnose.cluster.rank_cache import TRACE_DIR


@dataclass(frozen=True)
class TraceHeader:
    """What a rank's trace says of where it ran, without its tables (``Profile.trace_header``)."""

    path: str
    rank: int | None
    metadata: dict
    device_properties: object  # its device_properties frame, None when the trace has none
    format: str | None = None  # parsers.trace's KINETO / PERFETTO …: whose trace it is (JAX's advice differs)


# a rank this large (rows of its gpu, runtime, cpu_ops and python tables) is collected for when dropped
COLLECT_ABOVE_ROWS = 200_000


class ParquetTraces(Mapping):
    """rank → :class:`parsers.trace.Trace`, read on first use from ``folders[rank]``; the last ``keep`` kept."""

    evicts = True  # Derived keeps no view of a rank this mapping has dropped (on_drop)

    def __init__(self, folders: Mapping[int, str | os.PathLike], keep: int = 1):
        self.folders = {rank: Path(folders[rank]) for rank in sorted(folders)}
        self.keep = max(1, keep)
        self._held: OrderedDict[int, object] = OrderedDict()
        self.reads = 0  # how many times a rank's tables were read (tests, benchmarks)
        self._light: dict[int, TraceHeader] = {}
        self.on_drop: list = []  # called with a rank before its tables are let go (Derived's views go with them)

    def __getitem__(self, rank: int):
        if rank in self._held:
            self._held.move_to_end(rank)
            return self._held[rank]
        folder = self.folders[rank]  # KeyError for a rank not here, as a dict
        from parsers.trace_parquet import read_trace

        big = False
        while len(self._held) >= self.keep:
            dropped, old = self._held.popitem(last=False)
            big |= _rows(old) >= COLLECT_ABOVE_ROWS
            for tell in self.on_drop:
                tell(dropped)
            del old
        _give_back_freed_memory(collect=big)
        trace = read_trace(folder / TRACE_DIR)
        _release_arrow_memory()
        self.reads += 1
        self._held[rank] = trace
        return trace

    def light(self, rank: int) -> TraceHeader:
        """What rank ``rank``'s trace says it ran on (its metadata and device properties), kept once read: the
        report's environment lines ask every rank, which must not read every rank's tables."""
        if rank not in self._light:
            from parsers.trace_parquet import metadata_of, read_header, read_table

            folder = self.folders[rank] / TRACE_DIR
            header = read_header(folder)
            has_props = (header["tables"].get("device_properties") or {}).get("rows")
            props = read_table(folder, "device_properties", header) if has_props else None
            self._light[rank] = TraceHeader(
                header["path"], header["rank"], metadata_of(header), props, header.get("trace_format")
            )
        return self._light[rank]

    def __iter__(self) -> Iterator[int]:
        return iter(self.folders)

    def __len__(self) -> int:
        return len(self.folders)

    def __contains__(self, rank: object) -> bool:
        return rank in self.folders

    def __repr__(self) -> str:
        return f"ParquetTraces({len(self)} ranks, holding {list(self._held)})"


def _release_arrow_memory() -> None:
    """Give back what Arrow's allocator kept of the read (its pool holds freed pages for reuse, and the parent
    reads one rank after another: the kept pages grew the parent by ~30 MiB a rank)."""
    import pyarrow

    pyarrow.default_memory_pool().release_unused()


def _rows(trace) -> int:
    return sum(len(getattr(trace, name)) for name in ("gpu", "runtime", "cpu_ops", "python"))


def _give_back_freed_memory(collect: bool) -> None:
    """Return the heap's free pages to the system before the next rank is read (glibc's malloc_trim): without it
    the freed tables of the ranks before stay mapped, and the parent grew by ~30 MiB with each 81 MiB rank read.
    ``collect``: a large rank was dropped; what was worked out from it holds reference cycles, freed only by a
    collection (34 ms: not paid for small ranks, whose garbage is small)."""
    import ctypes
    import gc

    if collect:
        gc.collect()

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (macOS, musl): its allocator does what it does
        pass
