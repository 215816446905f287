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

from parsers.snapshot import MemorySnapshot, SMALL_POOL_MAX_BLOCK_BYTES

MIN_BLOCK_BYTES = 512  # kMinBlockSize
SMALL_SEGMENT_BYTES = 2 << 20  # kSmallBuffer

ALLOC, FREE_REQUESTED, FREE_COMPLETED, SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP, SEGMENT_UNMAP, OOM, OTHER = range(9)
ACTION_CODES = {"alloc": ALLOC, "free_requested": FREE_REQUESTED, "free_completed": FREE_COMPLETED,
                "segment_alloc": SEGMENT_ALLOC, "segment_free": SEGMENT_FREE, "segment_map": SEGMENT_MAP,
                "segment_unmap": SEGMENT_UNMAP, "oom": OOM}
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
    return np.where(sizes < MIN_BLOCK_BYTES, MIN_BLOCK_BYTES, (sizes + MIN_BLOCK_BYTES - 1) // MIN_BLOCK_BYTES * MIN_BLOCK_BYTES)


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
        self.rows.append({"ident": len(self.rows), "address": start, "size_bytes": size, "pool": POOLS[pool],
                          "is_expandable": expandable, "created_entry": created})
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


def replay(snapshot: MemorySnapshot, device: int = 0, sample_at: np.ndarray | None = None) -> ReplayResult:
    """Rebuild the allocator state of ``device`` over its history; sample the free-block set at ``sample_at``.

    ``sample_at`` holds entry indices (0-based, ascending) after which the largest free block is
    taken; the last entry is always sampled.
    """
    trace = snapshot.trace_for(device).sort_values("seq", kind="stable").reset_index(drop=True)
    settings = snapshot.metadata.get("allocator_settings") or {}
    max_split = int(settings.get("max_split_size", -1) or -1)
    max_split = max_split if max_split > 0 else 1 << 62
    n = len(trace)
    codes = trace["action"].map(ACTION_CODES).fillna(OTHER).to_numpy(dtype=np.int64)
    addr = trace["addr"].to_numpy(dtype=np.int64)
    size = trace["size_bytes"].to_numpy(dtype=np.int64)
    rounded = _rounded_sizes(size, settings)
    final_segments = snapshot.segments_for(device)
    final_blocks = snapshot.blocks_for(device)

    segs = _Segments()
    free_end: dict[int, int] = {}  # free block start → end
    free_start: dict[int, int] = {}  # free block end → start
    free_pool: dict[int, int] = {}  # free block start → pool it was made in (0 small, 1 large)
    heaps: tuple[list, list] = ([], [])  # per pool, (-size, start, end) of free blocks; stale entries skipped lazily
    push = heapq.heappush
    live: dict[int, list] = {}  # block start → [block size, requested, allocation row, pending(bool), pool, segment ident]
    alloc_rows: list[list] = []  # [addr, block size, requested, alloc entry, free_requested entry, free_completed entry, stack_id, estimated]

    initial = _initial_state(final_segments, final_blocks, codes, addr, size, rounded, settings, max_split)
    for start, end, pool, expandable in initial["segments"]:
        ident = segs.new_ident(start, end - start, pool, expandable, -1)
        segs.rows[ident]["initial_reserved_bytes"] = end - start
        segs.add(start, end, pool, expandable, ident)
    for b_addr, b_size, b_req, stack_id, pending, estimated in initial["blocks"]:
        seg_start = segs.containing(b_addr)
        ident = segs.info[seg_start][3] if seg_start is not None else -1
        live[b_addr] = [b_size, b_req, len(alloc_rows), pending, segs.info[seg_start][1] if seg_start is not None else 1, ident]
        alloc_rows.append([b_addr, b_size, b_req, -1, -1 if not pending else -2, -1, stack_id, estimated, ident])
        if ident >= 0:
            segs.rows[ident]["initial_active_bytes"] = segs.rows[ident].get("initial_active_bytes", 0) + b_size
            if not pending:
                segs.rows[ident]["initial_allocated_bytes"] = segs.rows[ident].get("initial_allocated_bytes", 0) + b_size
    for start in segs.starts:
        end = segs.info[start][0]
        cursor = start
        for b_addr in sorted(a for a in live if start <= a < end):
            if b_addr > cursor:
                free_end[cursor] = b_addr
                free_start[b_addr] = cursor
                free_pool[cursor] = segs.info[start][1]
                push(heaps[segs.info[start][1]], (cursor - b_addr, cursor, b_addr))
            cursor = max(cursor, b_addr + live[b_addr][0])
        if cursor < end:
            free_end[cursor] = end
            free_start[end] = cursor
            free_pool[cursor] = segs.info[start][1]
            push(heaps[segs.info[start][1]], (cursor - end, cursor, end))

    block_bytes = [0] * n  # block size the entry allocated / freed
    entry_ident = [-1] * n
    mismatches = 0
    samples = set(int(i) for i in (sample_at if sample_at is not None else ())) | {n - 1}
    largest_at: dict[int, tuple[int, int]] = {}  # entry → largest free block (small, large) after it
    growth_before: dict[int, tuple[int, int]] = {}  # segment growth entry → largest free block just before it

    def largest_in(pool: int) -> int:
        heap = heaps[pool]
        if len(heap) > 4 * len(free_end) + 1024:  # too many stale entries: rebuild from the live set
            heap[:] = [(s - e, s, e) for s, e in free_end.items() if free_pool.get(s) == pool]
            heapq.heapify(heap)
        while heap:
            _, s, e = heap[0]
            if free_end.get(s) == e and free_pool.get(s) == pool:
                return e - s
            heapq.heappop(heap)
        return 0

    def largest_free() -> tuple[int, int]:
        return largest_in(0), largest_in(1)

    def put_free(s: int, e: int, pool: int) -> None:
        free_end[s] = e
        free_start[e] = s
        free_pool[s] = pool
        push(heaps[pool], (s - e, s, e))

    def add_free(s: int, e: int, pool: int) -> None:
        """Free [s, e) and merge it with free neighbours of the same segment (a segment start is a wall)."""
        if s not in seg_info:
            prev = free_start.pop(s, None)
            if prev is not None:
                del free_end[prev]
                s = prev
        if e not in seg_info:
            nxt = free_end.pop(e, None)
            if nxt is not None:
                del free_start[nxt]
                e = nxt
        free_end[s] = e
        free_start[e] = s
        free_pool[s] = pool
        push(heaps[pool], (s - e, s, e))

    def remove_free_range(s: int, e: int, pool: int) -> bool:
        """Take [s, e) out of the free set (it must lie inside one free block)."""
        for fs, fe in free_end.items():
            if fs <= s and e <= fe:
                del free_end[fs]
                del free_start[fe]
                if fs < s:
                    put_free(fs, s, pool)
                if e < fe:
                    put_free(e, fe, pool)
                return True
        return False

    codes_l, addr_l, size_l, rounded_l = codes.tolist(), addr.tolist(), size.tolist(), rounded.tolist()
    stack_l = trace["stack_id"].to_numpy(dtype=np.int64).tolist()
    seg_info = segs.info
    for i in range(n):
        code = codes_l[i]
        a = addr_l[i]
        if code == ALLOC:
            seg_start = segs.containing(a)
            if seg_start is None:
                mismatches += 1
                continue
            info = seg_info[seg_start]
            entry_ident[i] = info[3]
            want = rounded_l[i]
            end = free_end.pop(a, None)
            if end is None:
                if not remove_free_range(a, a + want, info[1]):
                    mismatches += 1
                block = want
            else:
                del free_start[end]
                rest = end - a - want
                if rest >= 0 and _should_split(rest, want, info[1] == 0, info[2], max_split):
                    free_end[a + want] = end
                    free_start[end] = a + want
                    free_pool[a + want] = info[1]
                    push(heaps[info[1]], (a + want - end, a + want, end))
                    block = want
                elif rest < 0:
                    mismatches += 1
                    block = end - a
                else:
                    block = end - a
            block_bytes[i] = block
            old = live.get(a)
            if old is not None:  # the model missed this block's free: close it here
                mismatches += 1
                alloc_rows[old[2]][5] = i
            live[a] = [block, size_l[i], len(alloc_rows), False, info[1], info[3]]
            alloc_rows.append([a, block, size_l[i], i, -1, -1, stack_l[i], False, info[3]])
        elif code == FREE_REQUESTED:
            blk = live.get(a)
            if blk is None or blk[3]:
                mismatches += 1
                continue
            blk[3] = True
            block_bytes[i] = blk[0]
            alloc_rows[blk[2]][4] = i
            entry_ident[i] = blk[5]
        elif code == FREE_COMPLETED:
            blk = live.pop(a, None)
            if blk is None:
                mismatches += 1
                continue
            block_bytes[i] = blk[0]
            row = alloc_rows[blk[2]]
            if not blk[3]:
                row[4] = i  # its free_requested came before the history: allocated drops here
            row[5] = i
            entry_ident[i] = blk[5]
            add_free(a, a + blk[0], blk[4])
        elif code == SEGMENT_ALLOC or code == SEGMENT_MAP:
            growth_before[i] = largest_free()
            s = size_l[i]
            pool = 0 if s <= SMALL_SEGMENT_BYTES and code == SEGMENT_ALLOC else 1
            if code == SEGMENT_MAP:
                below = segs.touching_end(a)
                above = a + s if (a + s) in seg_info else None
                if below is not None:
                    pool = seg_info[below][1]
                elif above is not None:
                    pool = seg_info[above][1]
                elif s <= SMALL_SEGMENT_BYTES:
                    pool = 0
                start, end = a, a + s
                ident = None
                if below is not None:
                    info = segs.remove(below)
                    start, ident = below, info[3]
                if above is not None:
                    info = segs.remove(above)
                    end = info[0]
                    ident = info[3] if ident is None else ident
                if ident is None:
                    ident = segs.new_ident(a, s, pool, True, i)
                segs.add(start, end, pool, True, ident)
                entry_ident[i] = ident
                # the new pages join the free block before and after them (same expandable range)
                prev = free_start.pop(a, None)
                lo = a
                if prev is not None:
                    del free_end[prev]
                    lo = prev
                hi = a + s
                nxt = free_end.pop(a + s, None)
                if nxt is not None:
                    del free_start[nxt]
                    hi = nxt
                put_free(lo, hi, pool)
                rows = segs.rows[ident]
                rows["size_bytes"] = max(rows["size_bytes"], end - start)
            else:
                ident = segs.new_ident(a, s, pool, False, i)
                segs.add(a, a + s, pool, False, ident)
                entry_ident[i] = ident
                put_free(a, a + s, pool)
            block_bytes[i] = s
        elif code == SEGMENT_FREE or code == SEGMENT_UNMAP:
            s = size_l[i]
            seg_start = segs.containing(a)
            if seg_start is None:
                mismatches += 1
                continue
            info = seg_info[seg_start]
            entry_ident[i] = info[3]
            block_bytes[i] = s
            if not remove_free_range(a, a + s, info[1]):
                mismatches += 1
            if code == SEGMENT_FREE or (seg_start == a and info[0] == a + s):
                segs.remove(seg_start)
            else:  # unmap part of an expandable range: keep what is left on either side
                end, pool, expandable, ident = segs.remove(seg_start)
                if seg_start < a:
                    segs.add(seg_start, a, pool, expandable, ident)
                if a + s < end:
                    segs.add(a + s, end, pool, expandable, ident)
        elif code == OOM:
            largest_at[i] = largest_free()
        if i in samples and i not in largest_at:
            largest_at[i] = largest_free()

    final_state = _final_segments(segs, live, free_end)
    block_arr = np.asarray(block_bytes, dtype=np.int64)
    ident_arr = np.asarray(entry_ident, dtype=np.int64)
    seg_rows = pd.DataFrame(segs.rows, columns=["ident", "address", "size_bytes", "pool", "is_expandable", "created_entry",
                                                "initial_reserved_bytes", "initial_allocated_bytes", "initial_active_bytes"])
    seg_rows["initial_reserved_bytes"] = np.where(seg_rows["created_entry"] < 0, seg_rows["initial_reserved_bytes"].fillna(seg_rows["size_bytes"]), 0)
    seg_rows[["initial_allocated_bytes", "initial_active_bytes"]] = seg_rows[["initial_allocated_bytes", "initial_active_bytes"]].fillna(0)
    seg_rows = seg_rows.astype({c: np.int64 for c in ("ident", "address", "size_bytes", "created_entry", "initial_reserved_bytes",
                                                      "initial_allocated_bytes", "initial_active_bytes")})
    allocations = pd.DataFrame(alloc_rows, columns=["addr", "block_bytes", "requested_bytes", "alloc_entry",
                                                    "free_requested_entry", "free_completed_entry", "stack_id", "estimated",
                                                    "segment_ident"])
    allocations["location"] = snapshot.stacks["location"].to_numpy(dtype=object)[allocations["stack_id"].clip(lower=0)] \
        if len(snapshot.stacks) else None
    allocations.loc[allocations["stack_id"] < 0, "location"] = None
    timeline, initial_totals = _timeline(trace, codes, size, block_arr, ident_arr, seg_rows, initial, alloc_rows)
    result = ReplayResult(
        device=device, timeline=timeline, samples=_samples(timeline, largest_at),
        segments_final=final_state, growth=_growth(timeline, codes, size, rounded, growth_before),
        ooms=_ooms(trace, timeline, codes, size, rounded, largest_at), allocations=allocations,
        segment_rows=seg_rows, entry_segment=ident_arr, initial=initial_totals,
        meta={"entries": n, "mismatches": mismatches, "estimated_blocks": int(sum(1 for r in alloc_rows if r[7])),
              "pre_existing_blocks": len(initial["blocks"]), "pre_existing_segments": len(initial["segments"]),
              "max_split_size_bytes": None if max_split >= 1 << 62 else max_split},
    )
    return result


def _initial_state(final_segments: pd.DataFrame, final_blocks: pd.DataFrame, codes, addr, size, rounded,
                   settings, max_split) -> dict:
    """Segments and live blocks before the first trace entry: the snapshot minus the trace's effects."""
    # segments: undo the trace's segment actions, newest first
    ranges: dict[int, list] = {}
    for seg in final_segments.itertuples():
        ranges[int(seg.address)] = [int(seg.address) + int(seg.total_size_bytes), 0 if seg.pool == "small" else 1,
                                    bool(seg.is_expandable)]
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
    segments = sorted((start, v[0], v[1], v[2]) for start, v in ranges.items())

    # blocks: live at the snapshot and never allocated in the trace, or freed in it before any alloc there
    block_events = np.isin(codes, (ALLOC, FREE_REQUESTED, FREE_COMPLETED))
    ev_idx = np.flatnonzero(block_events)
    first_addr, first_pos = np.unique(addr[ev_idx], return_index=True)
    first_code = codes[ev_idx[first_pos]]
    allocated_in_trace = set(addr[codes == ALLOC].tolist())
    blocks: list[tuple] = []
    live_final = final_blocks[final_blocks["state"].isin(["active_allocated", "active_pending_free"])]
    for b in live_final.itertuples():
        if int(b.address) not in allocated_in_trace:
            blocks.append((int(b.address), int(b.size_bytes), int(b.requested_bytes), int(b.stack_id),
                           b.state == "active_pending_free", False))
    known = {b[0] for b in blocks}
    starts = np.asarray([s[0] for s in segments], dtype=np.int64)
    freed_first = first_code != ALLOC
    pending_first = first_code == FREE_COMPLETED
    for a, pos, pending in zip(first_addr[freed_first].tolist(), first_pos[freed_first].tolist(), pending_first[freed_first].tolist()):
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
        seg_end, pool, expandable = segments[k][1], segments[k][2], segments[k][3]
        limit = seg_end
        if j + 1 < len(blocks) and blocks[j + 1][0] < seg_end:
            limit = min(limit, blocks[j + 1][0])
        if estimated:
            rest = limit - a - b_size
            if rest < 0 or not _should_split(rest, b_size, pool == 0, expandable, max_split):
                b_size = limit - a
        out.append((a, b_size, req, stack_id, pending, estimated))
    return {"segments": segments, "blocks": out}


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


def _final_segments(segs: _Segments, live: dict, free_end: dict) -> pd.DataFrame:
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
        rows.append({"address": start, "total_size_bytes": end - start, "allocated_bytes": allocated,
                     "active_bytes": active, "requested_bytes": requested, "pool": POOLS[pool],
                     "is_expandable": expandable, "ident": ident, "blocks": hi - lo})
    return pd.DataFrame(rows, columns=["address", "total_size_bytes", "allocated_bytes", "active_bytes",
                                       "requested_bytes", "pool", "is_expandable", "ident", "blocks"])


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
    d_alloc = np.where(is_alloc & counted, block_bytes, 0) - np.where((freed_req | alloc_drop_at_completed) & counted, block_bytes, 0)
    d_req = np.where(is_alloc & counted, size, 0) - np.where((freed_req | alloc_drop_at_completed) & counted, req_of_entry, 0)
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
    out = pd.DataFrame({
        "seq": trace["seq"].to_numpy(), "t_us": trace["t_us"].to_numpy(), "action": trace["action"].to_numpy(),
        "size_bytes": size, "block_bytes": block_bytes, "pool": np.asarray(["", "small", "large"], dtype=object)[entry_pool + 1],
        "reserved_bytes": sum(init_res) + np.cumsum(d_res), "allocated_bytes": init_alloc + np.cumsum(d_alloc),
        "active_bytes": init_active + np.cumsum(d_active), "requested_bytes": init_req + np.cumsum(d_req),
    })
    for p, name in enumerate(POOLS):
        mask = entry_pool == p
        reserved = init_res[p] + np.cumsum(np.where(mask, d_res, 0))
        active = init_active_pool[p] + np.cumsum(np.where(mask, d_active, 0))
        out[f"reserved_{name}_bytes"] = reserved
        out[f"free_{name}_bytes"] = reserved - active
    totals = {"reserved_bytes": float(sum(init_res)), "allocated_bytes": float(init_alloc),
              "active_bytes": float(init_active), "requested_bytes": float(init_req)}
    return out, totals


def _pool_lookup(segments: list[tuple]):
    starts = [s[0] for s in segments]

    def pool_of(a: int) -> int:
        k = bisect.bisect_right(starts, a) - 1
        return segments[k][2] if k >= 0 else 1
    return pool_of


def _samples(timeline: pd.DataFrame, largest_at: dict) -> pd.DataFrame:
    if not len(timeline):
        return pd.DataFrame(columns=["entry", "t_us", "reserved_bytes", "allocated_bytes", "requested_bytes",
                                     "largest_free_small_bytes", "largest_free_large_bytes", "free_small_bytes",
                                     "free_large_bytes", "external_fragmentation_pct"])
    idx = np.asarray(sorted(largest_at), dtype=np.int64)
    rows = timeline.iloc[idx]
    small = np.asarray([largest_at[i][0] for i in idx], dtype=np.int64)
    large = np.asarray([largest_at[i][1] for i in idx], dtype=np.int64)
    out = pd.DataFrame({"entry": idx, "t_us": rows["t_us"].to_numpy(), "reserved_bytes": rows["reserved_bytes"].to_numpy(),
                        "allocated_bytes": rows["allocated_bytes"].to_numpy(),
                        "requested_bytes": rows["requested_bytes"].to_numpy(),
                        "largest_free_small_bytes": small, "largest_free_large_bytes": large,
                        "free_small_bytes": rows["free_small_bytes"].to_numpy(),
                        "free_large_bytes": rows["free_large_bytes"].to_numpy()})
    out["external_fragmentation_pct"] = external_fragmentation_pct(out["largest_free_large_bytes"], out["free_large_bytes"])
    out["external_fragmentation_small_pct"] = external_fragmentation_pct(out["largest_free_small_bytes"], out["free_small_bytes"])
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
    cols = ["entry", "t_us", "action", "segment_bytes", "pool", "reserved_before_bytes", "allocated_before_bytes",
            "free_pool_before_bytes", "largest_free_pool_before_bytes", "next_request_bytes", "next_block_bytes"]
    if not len(idx):
        return pd.DataFrame(columns=cols)
    rows = timeline.iloc[idx]
    prev = timeline.iloc[np.clip(idx - 1, 0, None)]
    pool = rows["pool"].to_numpy()
    first = idx == 0
    res_before = np.where(first, rows["reserved_bytes"].to_numpy() - size[idx], prev["reserved_bytes"].to_numpy())
    alloc_before = np.where(first, rows["allocated_bytes"].to_numpy(), prev["allocated_bytes"].to_numpy())
    free_before = np.where(pool == "small", rows["free_small_bytes"].to_numpy(), rows["free_large_bytes"].to_numpy()) - size[idx]
    largest = np.asarray([largest_at[i][0 if p == "small" else 1] for i, p in zip(idx, pool)], dtype=np.int64)
    return pd.DataFrame({"entry": idx, "t_us": rows["t_us"].to_numpy(), "action": rows["action"].to_numpy(),
                         "segment_bytes": size[idx], "pool": pool, "reserved_before_bytes": res_before,
                         "allocated_before_bytes": alloc_before, "free_pool_before_bytes": free_before,
                         "largest_free_pool_before_bytes": largest,
                         "next_request_bytes": _next_alloc_sizes(codes, size, idx),
                         "next_block_bytes": _next_alloc_sizes(codes, rounded, idx)})


def _ooms(trace, timeline, codes, size, rounded, largest_at) -> pd.DataFrame:
    idx = np.flatnonzero(codes == OOM)
    cols = ["entry", "t_us", "request_bytes", "device_free_bytes", "reserved_bytes", "allocated_bytes",
            "cached_free_bytes", "largest_free_pool_bytes", "pool", "location"]
    if not len(idx):
        return pd.DataFrame(columns=cols)
    rows = timeline.iloc[idx]
    small = rounded[idx] <= SMALL_POOL_MAX_BLOCK_BYTES
    largest = np.asarray([largest_at[i][0 if s else 1] for i, s in zip(idx, small)], dtype=np.int64)
    return pd.DataFrame({"entry": idx, "t_us": rows["t_us"].to_numpy(), "request_bytes": size[idx],
                         "device_free_bytes": trace["device_free_bytes"].to_numpy()[idx],
                         "reserved_bytes": rows["reserved_bytes"].to_numpy(), "allocated_bytes": rows["allocated_bytes"].to_numpy(),
                         "cached_free_bytes": rows["reserved_bytes"].to_numpy() - rows["allocated_bytes"].to_numpy(),
                         "largest_free_pool_bytes": largest, "pool": np.where(small, "small", "large"),
                         "location": trace["location"].to_numpy()[idx]})


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
        out["agrees"] = ((out["replayed_total_size_bytes"] == out["snapshot_total_size_bytes"])
                         & (out["replayed_allocated_bytes"] == out["snapshot_allocated_bytes"]))
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
    init_alloc = np.bincount(row_of_ident[result.segment_rows["ident"].to_numpy()],
                             weights=result.segment_rows["initial_allocated_bytes"].to_numpy(), minlength=nrows)
    init_res = np.bincount(row_of_ident[result.segment_rows["ident"].to_numpy()],
                           weights=result.segment_rows["initial_reserved_bytes"].to_numpy(), minlength=nrows)
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
        seg = best_size[b0[k]:b1[k] + 1, arow[k]]
        bigger = size[k] > seg
        seg[bigger] = size[k]
        best_id[b0[k]:b1[k] + 1, arow[k]][bigger] = k

    locations = a["location"].to_numpy(dtype=object)
    bin_idx, row_idx = np.meshgrid(np.arange(bins), np.arange(nrows), indexing="ij")
    flat_id = best_id.ravel()
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(res_peak > 0, np.minimum(alloc_peak / res_peak, 1.0), np.nan)
    cells = pd.DataFrame({
        "bin": bin_idx.ravel(), "row": row_idx.ravel(), "fraction_allocated": fraction.ravel(),
        "allocated_peak_bytes": alloc_peak.ravel(), "reserved_bytes": res_peak.ravel(),
        "allocated_end_bytes": alloc_end.ravel(),
        "largest_live_bytes": np.where(flat_id >= 0, best_size.ravel(), 0),
        "largest_live_location": np.where(flat_id >= 0, locations[np.clip(flat_id, 0, None)], None),
    })
    groups = pd.DataFrame({"row": row_of_rank, "address": rows_all["address"].to_numpy(),
                           "size_bytes": rows_all["size_bytes"].to_numpy(), "pool": rows_all["pool"].to_numpy(),
                           "is_expandable": rows_all["is_expandable"].to_numpy()})
    rows = groups.groupby("row").agg(address=("address", "min"), segments=("address", "size"),
                                     largest_segment_bytes=("size_bytes", "max"), pool=("pool", "first"),
                                     is_expandable=("is_expandable", "any")).reset_index()
    rows["label"] = [f"{a:#x}" + (f" +{k - 1}" if k > 1 else "") for a, k in zip(rows["address"], rows["segments"])]
    return {"cells": cells, "rows": rows}
