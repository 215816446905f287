"""Replay the caching allocator's history to rebuild its state at every trace entry.

torch records each allocator action (``alloc``, ``free_requested``, ``free_completed``,
``segment_alloc``/``segment_free``, ``segment_map``/``segment_unmap`` for expandable
segments, ``oom``) with the address and the size *asked for*. The block an allocation
really got is larger (rounded to 512 bytes, and a free block is not split when the rest
would be too small), so the replay re-runs the allocator's own split/merge rules
(``CUDACachingAllocator.cpp``: ``round_size``, ``should_split``, ``try_merge_blocks``) on
the address it chose. That gives exact allocated bytes and the free-block layout, hence
the largest free block per pool.

The history is a ring buffer: it may start after the run did. The state before its first
entry is the snapshot's state with the trace's effects taken back (segments created or
blocks allocated in the trace removed; segments and blocks it frees without having
created them added). Blocks that predate the trace and are freed in it have only their
requested size recorded; their block size is estimated with the same rounding rules and
counted in ``ReplayResult.meta["estimated_blocks"]``.

The per-entry loop is plain Python over lists (dict lookups, no per-entry numpy); every
running total (reserved, allocated, active, requested, free bytes per pool, per-segment
occupancy) is a numpy cumulative sum over per-entry deltas afterwards. The largest free
block needs the free-block set, so it is taken only at sample points: bin ends (bounded
in number), segment growth and OOM entries.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from parsers.snapshot import SMALL_POOL_MAX_BLOCK_BYTES, MemorySnapshot

MIN_BLOCK_BYTES = 512  # kMinBlockSize
SMALL_SEGMENT_BYTES = 2 << 20  # kSmallBuffer
NO_MAX_SPLIT = 1 << 62  # max_split_size when none is set

ALLOC, FREE_REQUESTED, FREE_COMPLETED, SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP, SEGMENT_UNMAP, OOM, OTHER = range(9)
ACTION_CODES = {
    "alloc": ALLOC,
    "free_requested": FREE_REQUESTED,
    "free_completed": FREE_COMPLETED,
    "segment_alloc": SEGMENT_ALLOC,
    "segment_free": SEGMENT_FREE,
    "segment_map": SEGMENT_MAP,
    "segment_unmap": SEGMENT_UNMAP,
    "oom": OOM,
}
POOLS = ("small", "large")


@dataclass
class ReplayResult:
    """The allocator state over one device's history. Byte columns are exact unless ``meta`` says estimated.

    ``timeline``: one row per trace entry, the state *after* it (reserved, allocated, active,
    requested bytes, and free bytes per pool). ``samples``: the state at each sample index
    (bin ends given to :func:`replay`), with the largest free block per pool and external
    fragmentation. ``segments_final``: each segment's bytes after the last entry, to compare
    with the snapshot. ``growth``: every segment_alloc/segment_map, with what was free just
    before and the request that caused it. ``ooms``: every oom entry with the state then.
    ``allocations``: every block that lived during the history (pre-existing ones too) with
    the entries it was allocated and freed at. ``segment_rows``: every segment (or expandable
    range) that existed, in address order, and ``entry_segment``: which of them each entry touched.
    """

    device: int
    timeline: pd.DataFrame
    samples: pd.DataFrame
    segments_final: pd.DataFrame
    growth: pd.DataFrame
    ooms: pd.DataFrame
    allocations: pd.DataFrame
    segment_rows: pd.DataFrame
    entry_segment: np.ndarray
    initial: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def round_size(size: int, settings: dict | None = None) -> int:
    """torch's ``round_size``: the block size an allocation of ``size`` bytes asks the pool for."""
    if size < MIN_BLOCK_BYTES:
        return MIN_BLOCK_BYTES
    divisions = _power2_divisions(size, settings)
    if divisions > 1 and size > MIN_BLOCK_BYTES * divisions:
        floor = 1 << (size.bit_length() - 1)
        if floor == size:
            return size
        step = floor // divisions
        if step == 0:
            return floor << 1
        return step * ((size + step - 1) // step)
    return MIN_BLOCK_BYTES * ((size + MIN_BLOCK_BYTES - 1) // MIN_BLOCK_BYTES)


def _power2_divisions(size: int, settings: dict | None) -> int:
    table = (settings or {}).get("roundup_power2_divisions")
    if not table or not isinstance(table, dict) or not any(table.values()):
        return 0
    mib = max(1, (size + (1 << 20) - 1) >> 20)
    key = 1 << max(0, (mib - 1).bit_length())
    return int(table.get(str(min(key, 32768)), table.get(min(key, 32768), 0)) or 0)


def _rounded_sizes(sizes: np.ndarray, settings: dict | None) -> np.ndarray:
    table = (settings or {}).get("roundup_power2_divisions")
    if isinstance(table, dict) and any(table.values()):
        return np.fromiter((round_size(int(s), settings) for s in sizes), dtype=np.int64, count=len(sizes))
    return np.where(
        sizes < MIN_BLOCK_BYTES, MIN_BLOCK_BYTES, (sizes + MIN_BLOCK_BYTES - 1) // MIN_BLOCK_BYTES * MIN_BLOCK_BYTES
    )


def _should_split(remaining: int, rounded: int, small: bool, expandable: bool, max_split: int) -> bool:
    if small or expandable:
        return remaining >= MIN_BLOCK_BYTES
    return remaining > SMALL_POOL_MAX_BLOCK_BYTES and rounded < max_split


class _Segments:
    """Mapped address ranges (a cudaMalloc segment, or a contiguous mapped range of an expandable one)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.info: dict[int, list] = {}  # start → [end, pool(0 small/1 large), expandable, ident]
        self.rows: list[dict] = []  # ident → description

    def new_ident(self, start: int, size: int, pool: int, expandable: bool, created: int) -> int:
        self.rows.append(
            {
                "ident": len(self.rows),
                "address": start,
                "size_bytes": size,
                "pool": POOLS[pool],
                "is_expandable": expandable,
                "created_entry": created,
            }
        )
        return len(self.rows) - 1

    def add(self, start: int, end: int, pool: int, expandable: bool, ident: int) -> None:
        bisect.insort(self.starts, start)
        self.info[start] = [end, pool, expandable, ident]

    def remove(self, start: int) -> list:
        i = bisect.bisect_left(self.starts, start)
        del self.starts[i]
        return self.info.pop(start)

    def containing(self, addr: int) -> int | None:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0:
            return None
        start = self.starts[i]
        return start if addr < self.info[start][0] else None

    def touching_end(self, addr: int) -> int | None:
        """Start of the range that ends exactly at ``addr``."""
        i = bisect.bisect_left(self.starts, addr) - 1
        if i < 0:
            return None
        start = self.starts[i]
        return start if self.info[start][0] == addr else None

    def map_pages(self, addr: int, size: int, entry: int) -> tuple[int, int]:
        """Add the expandable pages [addr, addr + size) as one range with the ranges they touch; (ident, pool).

        The snapshot calls a contiguous mapped range a segment, so new pages extend the range
        they adjoin (and keep its ident and pool) instead of starting one of their own.
        """
        below = self.touching_end(addr)
        above = addr + size if (addr + size) in self.info else None
        if below is not None:
            pool = self.info[below][1]
        elif above is not None:
            pool = self.info[above][1]
        else:
            pool = 0 if size <= SMALL_SEGMENT_BYTES else 1
        start, end = addr, addr + size
        ident = None
        if below is not None:
            start, ident = below, self.remove(below)[3]
        if above is not None:
            info = self.remove(above)
            end = info[0]
            ident = info[3] if ident is None else ident
        if ident is None:
            ident = self.new_ident(addr, size, pool, True, entry)
        self.add(start, end, pool, True, ident)
        row = self.rows[ident]
        row["size_bytes"] = max(row["size_bytes"], end - start)
        return ident, pool

    def cut(self, start: int, lo: int, hi: int) -> None:
        """Unmap [lo, hi) from the range at ``start``, keeping what is left on either side (same ident)."""
        end, pool, expandable, ident = self.remove(start)
        if start < lo:
            self.add(start, lo, pool, expandable, ident)
        if hi < end:
            self.add(hi, end, pool, expandable, ident)


class _FreeBlocks:
    """The free blocks, by start and by end (to merge a freed block with its neighbours), and by size per pool.

    The largest free block is read from a max-heap per pool rather than a scan of every free
    block; blocks taken or merged away stay in the heap and are dropped when they reach its top.
    The two maps agree on every real history; a corrupt one (a block freed twice, overlapping
    frees) can leave them apart, so removals tolerate a missing side rather than raise.
    """

    def __init__(self) -> None:
        self.end_of: dict[int, int] = {}  # free block start → end
        self.start_of: dict[int, int] = {}  # free block end → start
        self.pool_of: dict[int, int] = {}  # free block start → pool it was made in (0 small, 1 large)
        self.heaps: tuple[list, list] = ([], [])  # per pool, (-size, start, end); stale entries skipped lazily

    def put(self, s: int, e: int, pool: int) -> None:
        """Record [s, e) as one free block of ``pool``, as it is (no merging)."""
        self.end_of[s] = e
        self.start_of[e] = s
        self.pool_of[s] = pool
        heapq.heappush(self.heaps[pool], (s - e, s, e))

    def merge_in(self, s: int, e: int, pool: int, segment_starts: dict) -> None:
        """Free [s, e) and merge it with free neighbours of the same segment (a segment start is a wall)."""
        if s not in segment_starts:
            prev = self.start_of.pop(s, None)
            if prev is not None:
                self.end_of.pop(prev, None)
                s = prev
        if e not in segment_starts:
            nxt = self.end_of.pop(e, None)
            if nxt is not None:
                self.start_of.pop(nxt, None)
                e = nxt
        self.put(s, e, pool)

    def join(self, s: int, e: int, pool: int) -> None:
        """Free newly mapped pages [s, e) as one block with the free blocks right before and after them.

        No wall here: the pages and their neighbours are one expandable range (``_Segments.map_pages``).
        """
        prev = self.start_of.pop(s, None)
        if prev is not None:
            self.end_of.pop(prev, None)
            s = prev
        nxt = self.end_of.pop(e, None)
        if nxt is not None:
            self.start_of.pop(nxt, None)
            e = nxt
        self.put(s, e, pool)

    def take_block_at(self, s: int) -> int | None:
        """Take the free block starting at ``s`` out of the set; its end, or None when none starts there."""
        e = self.end_of.pop(s, None)
        if e is not None:
            self.start_of.pop(e, None)
        return e

    def take_range(self, s: int, e: int, pool: int) -> bool:
        """Take [s, e) out of the free set (it must lie inside one free block)."""
        for fs, fe in self.end_of.items():
            if fs <= s and e <= fe:
                self.end_of.pop(fs, None)
                self.start_of.pop(fe, None)
                if fs < s:
                    self.put(fs, s, pool)
                if e < fe:
                    self.put(e, fe, pool)
                return True
        return False

    def largest(self, pool: int) -> int:
        """Size of the largest free block of ``pool`` (0 if none): stale heap tops are dropped on the way."""
        heap = self.heaps[pool]
        if len(heap) > 4 * len(self.end_of) + 1024:  # too many stale entries: rebuild from the live set
            heap[:] = [(s - e, s, e) for s, e in self.end_of.items() if self.pool_of.get(s) == pool]
            heapq.heapify(heap)
        while heap:
            _, s, e = heap[0]
            if self.end_of.get(s) == e and self.pool_of.get(s) == pool:
                return e - s
            heapq.heappop(heap)
        return 0

    def largest_per_pool(self) -> tuple[int, int]:
        """(small, large): what a sample point, an OOM or a segment growth records."""
        return self.largest(0), self.largest(1)


@dataclass(frozen=True)
class _History:
    """One device's history in ``seq`` order, decoded once into the per-entry arrays the replay reads."""

    trace: pd.DataFrame
    codes: np.ndarray  # action code (OTHER for a name the replay does not know)
    addr: np.ndarray
    size: np.ndarray  # bytes asked for
    rounded: np.ndarray  # block size the pool is asked for (round_size)


def _decode_history(snapshot: MemorySnapshot, device: int, settings: dict) -> _History:
    """Action names to codes and every block's rounded size, vectorised, so the loop does no per-entry decoding."""
    trace = snapshot.trace_for(device).sort_values("seq", kind="stable").reset_index(drop=True)
    size = trace["size_bytes"].to_numpy(dtype=np.int64)
    return _History(
        trace=trace,
        codes=trace["action"].map(ACTION_CODES).fillna(OTHER).to_numpy(dtype=np.int64),
        addr=trace["addr"].to_numpy(dtype=np.int64),
        size=size,
        rounded=_rounded_sizes(size, settings),
    )


def _max_split_bytes(settings: dict) -> int:
    """``max_split_size`` in bytes; unset (≤ 0) means no limit, kept as a size no block reaches."""
    max_split = int(settings.get("max_split_size", -1) or -1)
    return max_split if max_split > 0 else NO_MAX_SPLIT


def _sample_points(sample_at: np.ndarray | None, n: int) -> list[int]:
    """The entries after which the free-block set is read: those asked for that exist, and always the last."""
    asked = {int(i) for i in (sample_at if sample_at is not None else ())} | {n - 1}
    return sorted(i for i in asked if 0 <= i < n)


class _AllocatorState:
    """The allocator's segments, free blocks and live blocks, moved forward one history entry at a time.

    Besides the state it keeps what the frames are built from afterwards: the block size each
    entry allocated or freed, the segment each touched, one row per block that lived, how many
    entries the model could not apply (``mismatches``), and the largest free block per pool at
    the sample points (``largest_at``) and just before each segment growth (``growth_before``).
    """

    def __init__(self, initial: dict, max_split: int, n: int) -> None:
        self.max_split = max_split
        self.segments = _Segments()
        self.free = _FreeBlocks()
        # block start → [block size, requested, allocation row, pending(bool), pool, segment ident]
        self.live: dict[int, list] = {}
        # [addr, block size, requested, alloc entry, free_requested entry, free_completed entry, stack_id,
        #  estimated, segment ident]
        self.alloc_rows: list[list] = []
        self.block_bytes = [0] * n  # block size the entry allocated / freed
        self.entry_ident = [-1] * n
        self.mismatches = 0
        self.largest_at: dict[int, tuple[int, int]] = {}  # entry → largest free block (small, large) after it
        self.growth_before: dict[int, tuple[int, int]] = {}  # segment growth entry → largest free block before it
        self._restore_segments(initial["segments"])
        self._restore_live_blocks(initial["blocks"])
        self._free_what_is_not_live()

    def _restore_segments(self, segments: list[tuple]) -> None:
        """Segments mapped before the history; their size is what they held reserved then."""
        for start, end, pool, expandable in segments:
            ident = self.segments.new_ident(start, end - start, pool, expandable, -1)
            self.segments.rows[ident]["initial_reserved_bytes"] = end - start
            self.segments.add(start, end, pool, expandable, ident)

    def _restore_live_blocks(self, blocks: list[tuple]) -> None:
        """Blocks live before the history: allocation rows with no alloc entry (-2 for a free already requested)."""
        segs = self.segments
        for b_addr, b_size, b_req, stack_id, pending, estimated in blocks:
            seg_start = segs.containing(b_addr)
            ident = segs.info[seg_start][3] if seg_start is not None else -1
            pool = segs.info[seg_start][1] if seg_start is not None else 1
            self.live[b_addr] = [b_size, b_req, len(self.alloc_rows), pending, pool, ident]
            free_requested_entry = -2 if pending else -1
            self.alloc_rows.append([b_addr, b_size, b_req, -1, free_requested_entry, -1, stack_id, estimated, ident])
            if ident >= 0:
                row = segs.rows[ident]
                row["initial_active_bytes"] = row.get("initial_active_bytes", 0) + b_size
                if not pending:
                    row["initial_allocated_bytes"] = row.get("initial_allocated_bytes", 0) + b_size

    def _free_what_is_not_live(self) -> None:
        """Every gap between live blocks of a segment is one free block of that segment's pool."""
        for start in self.segments.starts:
            end, pool = self.segments.info[start][:2]
            cursor = start
            for b_addr in sorted(a for a in self.live if start <= a < end):
                if b_addr > cursor:
                    self.free.put(cursor, b_addr, pool)
                cursor = max(cursor, b_addr + self.live[b_addr][0])
            if cursor < end:
                self.free.put(cursor, end, pool)

    def apply(self, history: _History, sample_points: list[int]) -> None:
        """Apply every entry in order, reading the largest free block per pool after each sample point and OOM.

        Plain Python over lists, one branch per action: this loop is the replay's cost. A sample
        point whose own entry was skipped (its handler returned False) is not read.
        """
        codes, addr, size, rounded = (
            history.codes.tolist(),
            history.addr.tolist(),
            history.size.tolist(),
            history.rounded.tolist(),
        )
        stack = history.trace["stack_id"].to_numpy(dtype=np.int64).tolist()
        alloc, free_requested, free_completed = self.alloc, self.free_requested, self.free_completed
        segment_alloc, segment_map, segment_release = self.segment_alloc, self.segment_map, self.segment_release
        largest_at, largest_per_pool = self.largest_at, self.free.largest_per_pool
        first = 0
        for last in sample_points:
            for i in range(first, last + 1):
                code = codes[i]
                applied = True
                if code == ALLOC:
                    applied = alloc(i, addr[i], rounded[i], size[i], stack[i])
                elif code == FREE_REQUESTED:
                    applied = free_requested(i, addr[i])
                elif code == FREE_COMPLETED:
                    applied = free_completed(i, addr[i])
                elif code == SEGMENT_ALLOC:
                    segment_alloc(i, addr[i], size[i])
                elif code == SEGMENT_MAP:
                    segment_map(i, addr[i], size[i])
                elif code == SEGMENT_FREE or code == SEGMENT_UNMAP:
                    applied = segment_release(i, addr[i], size[i], code == SEGMENT_FREE)
                elif code == OOM:
                    largest_at[i] = largest_per_pool()
            if applied and last not in largest_at:
                largest_at[last] = largest_per_pool()
            first = last + 1

    def alloc(self, i: int, a: int, want: int, requested: int, stack_id: int) -> bool:
        """Hand out the block at ``a``; False (skipped) when no segment holds ``a``."""
        seg_start = self.segments.containing(a)
        if seg_start is None:
            self.mismatches += 1
            return False
        _, pool, expandable, ident = self.segments.info[seg_start]
        self.entry_ident[i] = ident
        block = self._take_block(a, want, pool, expandable)
        self.block_bytes[i] = block
        old = self.live.get(a)
        if old is not None:  # the model missed this block's free: close it here
            self.mismatches += 1
            self.alloc_rows[old[2]][5] = i
        self.live[a] = [block, requested, len(self.alloc_rows), False, pool, ident]
        self.alloc_rows.append([a, block, requested, i, -1, -1, stack_id, False, ident])
        return True

    def _take_block(self, a: int, want: int, pool: int, expandable: bool) -> int:
        """The block handed out at ``a`` for ``want`` bytes: the free block there, split if ``should_split`` says so."""
        end = self.free.take_block_at(a)
        if end is None:
            if not self.free.take_range(a, a + want, pool):
                self.mismatches += 1
            return want
        rest = end - a - want
        if rest >= 0 and _should_split(rest, want, pool == 0, expandable, self.max_split):
            self.free.put(a + want, end, pool)
            return want
        if rest < 0:
            self.mismatches += 1
        return end - a

    def free_requested(self, i: int, a: int) -> bool:
        """Mark the block at ``a`` pending (allocated drops); False (skipped) when no block there awaits it."""
        blk = self.live.get(a)
        if blk is None or blk[3]:
            self.mismatches += 1
            return False
        blk[3] = True
        self.block_bytes[i] = blk[0]
        self.alloc_rows[blk[2]][4] = i
        self.entry_ident[i] = blk[5]
        return True

    def free_completed(self, i: int, a: int) -> bool:
        """Return the block at ``a`` to the free set (active drops); False (skipped) when no block lives there."""
        blk = self.live.pop(a, None)
        if blk is None:
            self.mismatches += 1
            return False
        self.block_bytes[i] = blk[0]
        row = self.alloc_rows[blk[2]]
        if not blk[3]:
            row[4] = i  # its free_requested came before the history: allocated drops here
        row[5] = i
        self.entry_ident[i] = blk[5]
        self.free.merge_in(a, a + blk[0], blk[4], self.segments.info)
        return True

    def segment_alloc(self, i: int, a: int, s: int) -> None:
        """A new cudaMalloc segment, free as a whole; small pool when it is a small-buffer size."""
        self.growth_before[i] = self.free.largest_per_pool()
        pool = 0 if s <= SMALL_SEGMENT_BYTES else 1
        ident = self.segments.new_ident(a, s, pool, False, i)
        self.segments.add(a, a + s, pool, False, ident)
        self.entry_ident[i] = ident
        self.free.put(a, a + s, pool)
        self.block_bytes[i] = s

    def segment_map(self, i: int, a: int, s: int) -> None:
        """New pages of an expandable segment: they extend the range they touch and its free block."""
        self.growth_before[i] = self.free.largest_per_pool()
        ident, pool = self.segments.map_pages(a, s, i)
        self.entry_ident[i] = ident
        self.free.join(a, a + s, pool)
        self.block_bytes[i] = s

    def segment_release(self, i: int, a: int, s: int, whole_segment: bool) -> bool:
        """``segment_free`` (``whole_segment``) or ``segment_unmap`` of [a, a + s); False (skipped) if unmapped."""
        seg_start = self.segments.containing(a)
        if seg_start is None:
            self.mismatches += 1
            return False
        end, pool, _, ident = self.segments.info[seg_start]
        self.entry_ident[i] = ident
        self.block_bytes[i] = s
        if not self.free.take_range(a, a + s, pool):
            self.mismatches += 1
        if whole_segment or (seg_start == a and end == a + s):
            self.segments.remove(seg_start)
        else:
            self.segments.cut(seg_start, a, a + s)
        return True


def replay(snapshot: MemorySnapshot, device: int = 0, sample_at: np.ndarray | None = None) -> ReplayResult:
    """Rebuild the allocator state of ``device`` over its history; sample the free-block set at ``sample_at``.

    ``sample_at`` holds entry indices (0-based, ascending) after which the largest free block is
    taken; the last entry is always sampled.
    """
    settings = snapshot.metadata.get("allocator_settings") or {}
    max_split = _max_split_bytes(settings)
    history = _decode_history(snapshot, device, settings)
    initial = _initial_state(snapshot.segments_for(device), snapshot.blocks_for(device), history, max_split)
    n = len(history.trace)
    state = _AllocatorState(initial, max_split, n)
    state.apply(history, _sample_points(sample_at, n))

    block_bytes = np.asarray(state.block_bytes, dtype=np.int64)
    entry_ident = np.asarray(state.entry_ident, dtype=np.int64)
    seg_rows = _segment_rows(state.segments.rows)
    timeline, initial_totals = _timeline(
        history.trace, history.codes, history.size, block_bytes, entry_ident, seg_rows, initial, state.alloc_rows
    )
    return ReplayResult(
        device=device,
        timeline=timeline,
        samples=_samples(timeline, state.largest_at),
        segments_final=_final_segments(state.segments, state.live),
        growth=_growth(timeline, history.codes, history.size, history.rounded, state.growth_before),
        ooms=_ooms(history.trace, timeline, history.codes, history.size, history.rounded, state.largest_at),
        allocations=_allocations(state.alloc_rows, snapshot.stacks),
        segment_rows=seg_rows,
        entry_segment=entry_ident,
        initial=initial_totals,
        meta={
            "entries": n,
            "mismatches": state.mismatches,
            "estimated_blocks": int(sum(1 for r in state.alloc_rows if r[7])),
            "pre_existing_blocks": len(initial["blocks"]),
            "pre_existing_segments": len(initial["segments"]),
            "max_split_size_bytes": None if max_split >= NO_MAX_SPLIT else max_split,
        },
    )


def _segment_rows(rows: list[dict]) -> pd.DataFrame:
    """Every segment (or expandable range) that existed, with what it held before the history (0 if created in it)."""
    seg_rows = pd.DataFrame(
        rows,
        columns=[
            "ident",
            "address",
            "size_bytes",
            "pool",
            "is_expandable",
            "created_entry",
            "initial_reserved_bytes",
            "initial_allocated_bytes",
            "initial_active_bytes",
        ],
    )
    seg_rows["initial_reserved_bytes"] = np.where(
        seg_rows["created_entry"] < 0, seg_rows["initial_reserved_bytes"].fillna(seg_rows["size_bytes"]), 0
    )
    seg_rows[["initial_allocated_bytes", "initial_active_bytes"]] = seg_rows[
        ["initial_allocated_bytes", "initial_active_bytes"]
    ].fillna(0)
    return seg_rows.astype(
        {
            c: np.int64
            for c in (
                "ident",
                "address",
                "size_bytes",
                "created_entry",
                "initial_reserved_bytes",
                "initial_allocated_bytes",
                "initial_active_bytes",
            )
        }
    )


def _allocations(alloc_rows: list[list], stacks: pd.DataFrame) -> pd.DataFrame:
    """Every block that lived during the history, with the Python line that allocated it (None if unknown)."""
    allocations = pd.DataFrame(
        alloc_rows,
        columns=[
            "addr",
            "block_bytes",
            "requested_bytes",
            "alloc_entry",
            "free_requested_entry",
            "free_completed_entry",
            "stack_id",
            "estimated",
            "segment_ident",
        ],
    )
    allocations["location"] = (
        stacks["location"].to_numpy(dtype=object)[allocations["stack_id"].clip(lower=0)] if len(stacks) else None
    )
    allocations.loc[allocations["stack_id"] < 0, "location"] = None
    return allocations


def _initial_state(final_segments: pd.DataFrame, final_blocks: pd.DataFrame, history: _History, max_split: int) -> dict:
    """Segments and live blocks before the first trace entry: the snapshot minus the trace's effects."""
    segments = _segments_before_history(final_segments, history)
    return {"segments": segments, "blocks": _blocks_before_history(final_blocks, segments, history, max_split)}


def _segments_before_history(final_segments: pd.DataFrame, history: _History) -> list[tuple]:
    """(start, end, pool, expandable) of each range at the dump with the trace's segment actions undone, newest first."""
    codes, addr, size = history.codes, history.addr, history.size
    ranges: dict[int, list] = {}
    for seg in final_segments.itertuples():
        ranges[int(seg.address)] = [
            int(seg.address) + int(seg.total_size_bytes),
            0 if seg.pool == "small" else 1,
            bool(seg.is_expandable),
        ]
    seg_idx = np.flatnonzero(np.isin(codes, (SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP, SEGMENT_UNMAP)))
    for i in seg_idx[::-1]:
        a, s, code = int(addr[i]), int(size[i]), int(codes[i])
        if code == SEGMENT_ALLOC:
            ranges.pop(a, None)
        elif code == SEGMENT_FREE:
            ranges[a] = [a + s, 0 if s <= SMALL_SEGMENT_BYTES else 1, False]
        elif code == SEGMENT_MAP:
            _cut_range(ranges, a, a + s)
        else:  # SEGMENT_UNMAP: put the pages back
            _join_range(ranges, a, a + s, s)
    return sorted((start, v[0], v[1], v[2]) for start, v in ranges.items())


def _blocks_before_history(
    final_blocks: pd.DataFrame, segments: list[tuple], history: _History, max_split: int
) -> list[tuple]:
    """(addr, block size, requested, stack_id, pending, estimated) of each block live before the first entry.

    Those live at the dump and never allocated in the trace (exact), and those the trace frees
    before any alloc there (only the requested size is known: the block size is estimated).
    """
    codes, addr, size, rounded = history.codes, history.addr, history.size, history.rounded
    block_events = np.isin(codes, (ALLOC, FREE_REQUESTED, FREE_COMPLETED))
    ev_idx = np.flatnonzero(block_events)
    first_addr, first_pos = np.unique(addr[ev_idx], return_index=True)
    first_code = codes[ev_idx[first_pos]]
    allocated_in_trace = set(addr[codes == ALLOC].tolist())
    blocks: list[tuple] = []
    live_final = final_blocks[final_blocks["state"].isin(["active_allocated", "active_pending_free"])]
    for b in live_final.itertuples():
        if int(b.address) not in allocated_in_trace:
            blocks.append(
                (
                    int(b.address),
                    int(b.size_bytes),
                    int(b.requested_bytes),
                    int(b.stack_id),
                    b.state == "active_pending_free",
                    False,
                )
            )
    known = {b[0] for b in blocks}
    starts = np.asarray([s[0] for s in segments], dtype=np.int64)
    freed_first = first_code != ALLOC
    pending_first = first_code == FREE_COMPLETED
    for a, pos, pending in zip(
        first_addr[freed_first].tolist(), first_pos[freed_first].tolist(), pending_first[freed_first].tolist()
    ):
        if a in known:
            continue
        i = ev_idx[pos]
        k = int(np.searchsorted(starts, a, side="right")) - 1
        if k < 0 or a >= segments[k][1]:
            continue  # not inside any segment the snapshot implies; the replay will count it as a mismatch
        blocks.append((a, int(rounded[i]), int(size[i]), -1, bool(pending), True))
    blocks.sort()
    # estimated sizes must not overlap the next block; a rest too small to split belongs to the block
    out = []
    for j, (a, b_size, req, stack_id, pending, estimated) in enumerate(blocks):
        k = int(np.searchsorted(starts, a, side="right")) - 1
        if k < 0 or a >= segments[k][1]:
            continue  # a live block outside every segment: a corrupt snapshot (real ones never have one)
        seg_end, pool, expandable = segments[k][1], segments[k][2], segments[k][3]
        limit = seg_end
        if j + 1 < len(blocks) and blocks[j + 1][0] < seg_end:
            limit = min(limit, blocks[j + 1][0])
        if estimated:
            rest = limit - a - b_size
            if rest < 0 or not _should_split(rest, b_size, pool == 0, expandable, max_split):
                b_size = limit - a
        out.append((a, b_size, req, stack_id, pending, estimated))
    return out


def _cut_range(ranges: dict, lo: int, hi: int) -> None:
    for start in list(ranges):
        end, pool, expandable = ranges[start]
        if start < hi and lo < end:
            del ranges[start]
            if start < lo:
                ranges[start] = [lo, pool, expandable]
            if hi < end:
                ranges[hi] = [end, pool, expandable]


def _join_range(ranges: dict, lo: int, hi: int, size: int) -> None:
    below = next((s for s, v in ranges.items() if v[0] == lo), None)
    pool = ranges[below][1] if below is not None else (0 if size <= SMALL_SEGMENT_BYTES else 1)
    start = below if below is not None else lo
    end = hi
    if hi in ranges:
        end = ranges.pop(hi)[0]
    ranges[start] = [end, pool, True]


def _final_segments(segs: _Segments, live: dict) -> pd.DataFrame:
    rows = []
    live_sorted = sorted(live.items())
    keys = [a for a, _ in live_sorted]
    for start in segs.starts:
        end, pool, expandable, ident = segs.info[start]
        lo, hi = bisect.bisect_left(keys, start), bisect.bisect_left(keys, end)
        allocated = active = requested = 0
        for _, (b_size, req, _, pending, _, _) in live_sorted[lo:hi]:
            active += b_size
            requested += req
            if not pending:
                allocated += b_size
        rows.append(
            {
                "address": start,
                "total_size_bytes": end - start,
                "allocated_bytes": allocated,
                "active_bytes": active,
                "requested_bytes": requested,
                "pool": POOLS[pool],
                "is_expandable": expandable,
                "ident": ident,
                "blocks": hi - lo,
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "address",
            "total_size_bytes",
            "allocated_bytes",
            "active_bytes",
            "requested_bytes",
            "pool",
            "is_expandable",
            "ident",
            "blocks",
        ],
    )


def _timeline(trace, codes, size, block_bytes, ident, seg_rows, initial, alloc_rows):
    """Running totals after each entry, from per-entry deltas (vectorised)."""
    pool_of_ident = (seg_rows["pool"] == "large").to_numpy(dtype=np.int64) if len(seg_rows) else np.zeros(0, np.int64)
    entry_pool = np.where(ident >= 0, pool_of_ident[np.clip(ident, 0, None)] if len(pool_of_ident) else 0, -1)
    is_alloc = codes == ALLOC
    freed_req = codes == FREE_REQUESTED
    freed_done = codes == FREE_COMPLETED
    seg_up = np.isin(codes, (SEGMENT_ALLOC, SEGMENT_MAP))
    seg_down = np.isin(codes, (SEGMENT_FREE, SEGMENT_UNMAP))
    # a free_completed with no free_requested in the history drops allocated and requested too
    alloc_drop_at_completed = np.zeros(len(codes), dtype=bool)
    req_of_entry = size.copy()
    for row in alloc_rows:
        if row[5] >= 0 and row[4] == row[5]:
            alloc_drop_at_completed[row[5]] = True
        if row[4] >= 0:
            req_of_entry[row[4]] = row[2]
    counted = block_bytes > 0
    d_alloc = np.where(is_alloc & counted, block_bytes, 0) - np.where(
        (freed_req | alloc_drop_at_completed) & counted, block_bytes, 0
    )
    d_req = np.where(is_alloc & counted, size, 0) - np.where(
        (freed_req | alloc_drop_at_completed) & counted, req_of_entry, 0
    )
    d_active = np.where(is_alloc & counted, block_bytes, 0) - np.where(freed_done & counted, block_bytes, 0)
    d_res = np.where(seg_up, block_bytes, 0) - np.where(seg_down & counted, block_bytes, 0)

    init_res = [0, 0]
    for start, end, pool, _ in initial["segments"]:
        init_res[pool] += end - start
    pool_of = _pool_lookup(initial["segments"])
    init_alloc = init_active = init_req = 0
    init_active_pool = [0, 0]
    for a, b_size, req, _, pending, _ in initial["blocks"]:
        init_active += b_size
        init_active_pool[pool_of(a)] += b_size
        if not pending:
            init_alloc += b_size
            init_req += req
    out = pd.DataFrame(
        {
            "seq": trace["seq"].to_numpy(),
            "t_us": trace["t_us"].to_numpy(),
            "action": trace["action"].to_numpy(),
            "size_bytes": size,
            "block_bytes": block_bytes,
            "pool": np.asarray(["", "small", "large"], dtype=object)[entry_pool + 1],
            "reserved_bytes": sum(init_res) + np.cumsum(d_res),
            "allocated_bytes": init_alloc + np.cumsum(d_alloc),
            "active_bytes": init_active + np.cumsum(d_active),
            "requested_bytes": init_req + np.cumsum(d_req),
        }
    )
    for p, name in enumerate(POOLS):
        mask = entry_pool == p
        reserved = init_res[p] + np.cumsum(np.where(mask, d_res, 0))
        active = init_active_pool[p] + np.cumsum(np.where(mask, d_active, 0))
        out[f"reserved_{name}_bytes"] = reserved
        out[f"free_{name}_bytes"] = reserved - active
    totals = {
        "reserved_bytes": float(sum(init_res)),
        "allocated_bytes": float(init_alloc),
        "active_bytes": float(init_active),
        "requested_bytes": float(init_req),
    }
    return out, totals


def _pool_lookup(segments: list[tuple]):
    starts = [s[0] for s in segments]

    def pool_of(a: int) -> int:
        k = bisect.bisect_right(starts, a) - 1
        return segments[k][2] if k >= 0 else 1

    return pool_of


def _samples(timeline: pd.DataFrame, largest_at: dict) -> pd.DataFrame:
    if not len(timeline):
        return pd.DataFrame(
            columns=[
                "entry",
                "t_us",
                "reserved_bytes",
                "allocated_bytes",
                "requested_bytes",
                "largest_free_small_bytes",
                "largest_free_large_bytes",
                "free_small_bytes",
                "free_large_bytes",
                "external_fragmentation_pct",
            ]
        )
    idx = np.asarray(sorted(largest_at), dtype=np.int64)
    rows = timeline.iloc[idx]
    small = np.asarray([largest_at[i][0] for i in idx], dtype=np.int64)
    large = np.asarray([largest_at[i][1] for i in idx], dtype=np.int64)
    out = pd.DataFrame(
        {
            "entry": idx,
            "t_us": rows["t_us"].to_numpy(),
            "reserved_bytes": rows["reserved_bytes"].to_numpy(),
            "allocated_bytes": rows["allocated_bytes"].to_numpy(),
            "requested_bytes": rows["requested_bytes"].to_numpy(),
            "largest_free_small_bytes": small,
            "largest_free_large_bytes": large,
            "free_small_bytes": rows["free_small_bytes"].to_numpy(),
            "free_large_bytes": rows["free_large_bytes"].to_numpy(),
        }
    )
    out["external_fragmentation_pct"] = external_fragmentation_pct(
        out["largest_free_large_bytes"], out["free_large_bytes"]
    )
    out["external_fragmentation_small_pct"] = external_fragmentation_pct(
        out["largest_free_small_bytes"], out["free_small_bytes"]
    )
    return out


def external_fragmentation_pct(largest_free, total_free) -> np.ndarray:
    """100 × (1 − largest free block / total free bytes); NaN where nothing is free."""
    largest = np.asarray(largest_free, dtype=float)
    total = np.asarray(total_free, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, 100.0 * (1.0 - largest / total), np.nan)


def _next_alloc_sizes(codes, values, idx) -> np.ndarray:
    alloc_idx = np.flatnonzero(codes == ALLOC)
    pos = np.searchsorted(alloc_idx, idx, side="right")
    ok = pos < len(alloc_idx)
    out = np.full(len(idx), -1, dtype=np.int64)
    out[ok] = values[alloc_idx[pos[ok]]]
    return out


def _growth(timeline, codes, size, rounded, largest_at) -> pd.DataFrame:
    idx = np.flatnonzero(np.isin(codes, (SEGMENT_ALLOC, SEGMENT_MAP)))
    cols = [
        "entry",
        "t_us",
        "action",
        "segment_bytes",
        "pool",
        "reserved_before_bytes",
        "allocated_before_bytes",
        "free_pool_before_bytes",
        "largest_free_pool_before_bytes",
        "next_request_bytes",
        "next_block_bytes",
    ]
    if not len(idx):
        return pd.DataFrame(columns=cols)
    rows = timeline.iloc[idx]
    prev = timeline.iloc[np.clip(idx - 1, 0, None)]
    pool = rows["pool"].to_numpy()
    first = idx == 0
    res_before = np.where(first, rows["reserved_bytes"].to_numpy() - size[idx], prev["reserved_bytes"].to_numpy())
    alloc_before = np.where(first, rows["allocated_bytes"].to_numpy(), prev["allocated_bytes"].to_numpy())
    free_before = (
        np.where(pool == "small", rows["free_small_bytes"].to_numpy(), rows["free_large_bytes"].to_numpy()) - size[idx]
    )
    largest = np.asarray([largest_at[i][0 if p == "small" else 1] for i, p in zip(idx, pool)], dtype=np.int64)
    return pd.DataFrame(
        {
            "entry": idx,
            "t_us": rows["t_us"].to_numpy(),
            "action": rows["action"].to_numpy(),
            "segment_bytes": size[idx],
            "pool": pool,
            "reserved_before_bytes": res_before,
            "allocated_before_bytes": alloc_before,
            "free_pool_before_bytes": free_before,
            "largest_free_pool_before_bytes": largest,
            "next_request_bytes": _next_alloc_sizes(codes, size, idx),
            "next_block_bytes": _next_alloc_sizes(codes, rounded, idx),
        }
    )


def _ooms(trace, timeline, codes, size, rounded, largest_at) -> pd.DataFrame:
    idx = np.flatnonzero(codes == OOM)
    cols = [
        "entry",
        "t_us",
        "request_bytes",
        "device_free_bytes",
        "reserved_bytes",
        "allocated_bytes",
        "cached_free_bytes",
        "largest_free_pool_bytes",
        "pool",
        "location",
    ]
    if not len(idx):
        return pd.DataFrame(columns=cols)
    rows = timeline.iloc[idx]
    small = rounded[idx] <= SMALL_POOL_MAX_BLOCK_BYTES
    largest = np.asarray([largest_at[i][0 if s else 1] for i, s in zip(idx, small)], dtype=np.int64)
    return pd.DataFrame(
        {
            "entry": idx,
            "t_us": rows["t_us"].to_numpy(),
            "request_bytes": size[idx],
            "device_free_bytes": trace["device_free_bytes"].to_numpy()[idx],
            "reserved_bytes": rows["reserved_bytes"].to_numpy(),
            "allocated_bytes": rows["allocated_bytes"].to_numpy(),
            "cached_free_bytes": rows["reserved_bytes"].to_numpy() - rows["allocated_bytes"].to_numpy(),
            "largest_free_pool_bytes": largest,
            "pool": np.where(small, "small", "large"),
            "location": trace["location"].to_numpy()[idx],
        }
    )


def agreement(result: ReplayResult, snapshot: MemorySnapshot) -> pd.DataFrame:
    """Replayed vs the snapshot's own bytes per segment at the dump; one row per segment of either side."""
    cols = ["total_size_bytes", "allocated_bytes", "active_bytes", "requested_bytes"]
    # a hostile or corrupt snapshot can list one address twice: compare the bytes per address
    ours = result.segments_final.groupby("address")[cols].sum()
    theirs = snapshot.segments_for(result.device).groupby("address")[cols].sum()
    addresses = sorted(set(ours.index) | set(theirs.index))
    rows = []
    for a in addresses:
        o = ours.loc[a] if a in ours.index else None
        t = theirs.loc[a] if a in theirs.index else None
        row = {"address": int(a)}
        for col in cols:
            row[f"replayed_{col}"] = int(o[col]) if o is not None else -1
            row[f"snapshot_{col}"] = int(t[col]) if t is not None else -1
        rows.append(row)
    out = pd.DataFrame(rows)
    if len(out):
        out["agrees"] = (out["replayed_total_size_bytes"] == out["snapshot_total_size_bytes"]) & (
            out["replayed_allocated_bytes"] == out["snapshot_allocated_bytes"]
        )
    return out


def occupancy_grid(result: ReplayResult, entry_bin: np.ndarray, bins: int, max_rows: int) -> dict[str, pd.DataFrame]:
    """Per (time bin, segment row): highest allocated bytes, reserved bytes, and the largest live allocation.

    ``entry_bin`` gives each entry's bin (0 .. bins-1, non-decreasing). Segments are ordered by
    address; beyond ``max_rows`` neighbouring segments share a row. A cell's allocated bytes are
    the most its row held at any moment of the bin (so a peak inside a bin is not lost), its
    reserved bytes the most it had mapped then.
    """
    rows_all = result.segment_rows.sort_values(["address", "ident"], kind="stable").reset_index(drop=True)
    nseg = len(rows_all)
    if not nseg or not len(result.timeline):
        return {"cells": pd.DataFrame(), "rows": pd.DataFrame()}
    nrows = min(nseg, max_rows)
    row_of_rank = (np.arange(nseg) * nrows) // nseg
    row_of_ident = np.empty(nseg, dtype=np.int64)
    row_of_ident[rows_all["ident"].to_numpy()] = row_of_rank
    entries = result.entry_segment
    tl = result.timeline
    n = len(tl)
    has_row = entries >= 0
    row = np.where(has_row, row_of_ident[np.clip(entries, 0, None)], -1)
    init_alloc = np.bincount(
        row_of_ident[result.segment_rows["ident"].to_numpy()],
        weights=result.segment_rows["initial_allocated_bytes"].to_numpy(),
        minlength=nrows,
    )
    init_res = np.bincount(
        row_of_ident[result.segment_rows["ident"].to_numpy()],
        weights=result.segment_rows["initial_reserved_bytes"].to_numpy(),
        minlength=nrows,
    )
    d_alloc = np.diff(tl["allocated_bytes"].to_numpy(), prepend=result.initial["allocated_bytes"])
    d_res = np.diff(tl["reserved_bytes"].to_numpy(), prepend=result.initial["reserved_bytes"])

    def per_row_running(delta: np.ndarray, start: np.ndarray):
        idx = np.flatnonzero(has_row & (delta != 0))
        order = idx[np.argsort(row[idx], kind="stable")]
        r = row[order]
        run = np.cumsum(delta[order]).astype(float)
        first = np.r_[True, r[1:] != r[:-1]] if len(r) else np.zeros(0, bool)
        group_start = np.maximum.accumulate(np.where(first, np.arange(len(r)), 0)) if len(r) else np.zeros(0, np.int64)
        offset = np.where(group_start > 0, run[group_start - 1], 0.0) if len(r) else run
        run = run - offset + start[r]
        step = np.zeros((bins, nrows))
        np.add.at(step, (entry_bin[order], r), delta[order])
        end = start[None, :] + np.cumsum(step, axis=0)
        peak = np.maximum(end, np.vstack([start[None, :], end[:-1]]))
        if len(order):
            np.maximum.at(peak, (entry_bin[order], r), run)
        return end, peak

    alloc_end, alloc_peak = per_row_running(d_alloc, init_alloc)
    res_end, res_peak = per_row_running(d_res, init_res)

    # largest allocation live in each cell (painted smallest first so the largest wins)
    allocs = result.allocations
    valid = allocs["segment_ident"].to_numpy() >= 0
    a = allocs[valid]
    start_entry = a["alloc_entry"].to_numpy()
    end_entry = a["free_requested_entry"].to_numpy()
    end_entry = np.where(end_entry < 0, n - 1, end_entry)
    b0 = np.where(start_entry < 0, 0, entry_bin[np.clip(start_entry, 0, n - 1)])
    b1 = entry_bin[np.clip(end_entry, 0, n - 1)]
    arow = row_of_ident[a["segment_ident"].to_numpy()]
    size = a["block_bytes"].to_numpy()
    best_size = np.zeros((bins, nrows), dtype=np.int64)
    best_id = np.full((bins, nrows), -1, dtype=np.int64)
    ids = np.arange(len(a))
    single = b0 == b1
    if single.any():
        s_idx = ids[single]
        order = np.lexsort((size[s_idx], arow[s_idx], b0[s_idx]))  # by cell, then size ascending
        s_idx = s_idx[order]
        cell = b0[s_idx] * nrows + arow[s_idx]
        last = np.r_[cell[1:] != cell[:-1], True]
        win = s_idx[last]
        best_size[b0[win], arow[win]] = size[win]
        best_id[b0[win], arow[win]] = win
    for k in ids[~single][np.argsort(size[~single], kind="stable")]:
        seg = best_size[b0[k] : b1[k] + 1, arow[k]]
        bigger = size[k] > seg
        seg[bigger] = size[k]
        best_id[b0[k] : b1[k] + 1, arow[k]][bigger] = k

    locations = a["location"].to_numpy(dtype=object)
    bin_idx, row_idx = np.meshgrid(np.arange(bins), np.arange(nrows), indexing="ij")
    flat_id = best_id.ravel()
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(res_peak > 0, np.minimum(alloc_peak / res_peak, 1.0), np.nan)
    cells = pd.DataFrame(
        {
            "bin": bin_idx.ravel(),
            "row": row_idx.ravel(),
            "fraction_allocated": fraction.ravel(),
            "allocated_peak_bytes": alloc_peak.ravel(),
            "reserved_bytes": res_peak.ravel(),
            "allocated_end_bytes": alloc_end.ravel(),
            "largest_live_bytes": np.where(flat_id >= 0, best_size.ravel(), 0),
            "largest_live_location": np.where(flat_id >= 0, locations[np.clip(flat_id, 0, None)], None),
        }
    )
    groups = pd.DataFrame(
        {
            "row": row_of_rank,
            "address": rows_all["address"].to_numpy(),
            "size_bytes": rows_all["size_bytes"].to_numpy(),
            "pool": rows_all["pool"].to_numpy(),
            "is_expandable": rows_all["is_expandable"].to_numpy(),
        }
    )
    rows = (
        groups.groupby("row")
        .agg(
            address=("address", "min"),
            segments=("address", "size"),
            largest_segment_bytes=("size_bytes", "max"),
            pool=("pool", "first"),
            is_expandable=("is_expandable", "any"),
        )
        .reset_index()
    )
    rows["label"] = [f"{a:#x}" + (f" +{k - 1}" if k > 1 else "") for a, k in zip(rows["address"], rows["segments"])]
    return {"cells": cells, "rows": rows}
