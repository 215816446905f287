"""Every hostile input (and a 10 MB valid-ish input of each format), as cases the tests and
benchmarks/input_bounds.py both run through the CLI.

A case writes its input into a folder (``make(folder, sizes)`` returns the path to pass) and says
what must happen: refused with exit 2 and an error naming the file and ``refuse`` (the cap), or
accepted (exit 0 or 1). Every run must stay within ``max_rss_bytes`` (the tests) and ``max_wall_s``
(benchmarks/input_bounds.py: a wall time is measured, not asserted in a test). Inputs
are made at run time, by streaming, and named fake_*; nothing here is a real capture (the
valid-ish inputs repeat real fixtures).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.bounds import inputs

GiB = 2**30
BUDGET_RSS_BYTES = 2 * GiB  # issue 8: no input of 10 MB may take more than 2 GB ...
BUDGET_WALL_S = 60.0  # ... or more than a minute
NESTED = 100_000  # how deep the nested-JSON cases nest


@dataclass(frozen=True)
class Sizes:
    bomb_inflated_bytes: int = 1 * GiB  # what a gzip bomb would inflate to (~1/1000 of it on disk)
    long_line_bytes: int = 300 * 2**20  # the one field of a long-line case
    valid_bytes: int = 10 * 10**6  # the valid-ish inputs


@dataclass(frozen=True)
class Case:
    name: str
    group: str
    make: Callable[[Path, Sizes], Path]
    refuse: str | None  # text the error must hold (the cap's name); None: the input must be accepted
    command: str = "report"
    max_rss_bytes: int = BUDGET_RSS_BYTES
    max_wall_s: float = BUDGET_WALL_S

    @property
    def limit(self) -> str:
        return self.refuse or "accepted"


NCU_HEADER = (
    b'"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
    b'"Grid Size","Device","CC","gpu__time_duration.sum"\n'
)
NCU_ROW = b'"0","1","python3","h","void k<float>(int)","1","7","(128, 1, 1)","(1, 1, 1)","0","9.0","1,024"\n'
NVML_HEADER = (
    b"t_ns,gpu,gpu_util_pct,mem_util_pct,mem_used_bytes,mem_total_bytes,sm_clock_mhz,mem_clock_mhz,"
    b"power_w,pcie_tx_bytes_per_s,pcie_rx_bytes_per_s,temperature_c\n"
)
NVML_ROW = b"1796241915893017919,0,100,35,70000000000,150754820096,1980,3201,650.1,,,45\n"
STATS_LINE = (
    b'{"kind":"memory_stats","rank":0,"step":1,"t_ns":1796241923288418238,"framework":"torch",'
    b'"stats":{"allocated_bytes.all.current":1024,"reserved_bytes.all.current":2048}}\n'
)
TINY_EVENT = b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1},'
DEEP = b"[" * NESTED + b"]" * NESTED


def _bomb(name: str, prefix: bytes, unit: bytes, suffix: bytes = b"") -> Callable[[Path, Sizes], Path]:
    return lambda folder, sizes: inputs.gzip_bomb(folder / name, sizes.bomb_inflated_bytes, prefix, unit, suffix)


def _text(name: str, data: bytes) -> Callable[[Path, Sizes], Path]:
    def make(folder: Path, sizes: Sizes) -> Path:
        (folder / name).write_bytes(data)
        return folder / name

    return make


def _long(name: str, prefix: bytes) -> Callable[[Path, Sizes], Path]:
    return lambda folder, sizes: inputs.long_line(folder / name, sizes.long_line_bytes, prefix)


def _valid(name: str, grow) -> Callable[[Path, Sizes], Path]:
    def make(folder: Path, sizes: Sizes) -> Path:
        grow(folder / name, sizes.valid_bytes)
        return folder / name

    return make


def _deep_manifest(folder: Path, sizes: Sizes) -> Path:
    run = folder / "fake_deep_run"
    run.mkdir()
    (run / "manifest.json").write_bytes(b'{"schema": "gpudiag.run/1", "notes": ' + DEEP + b"}")
    return run


def _deep_pickle(folder: Path, sizes: Sizes) -> Path:
    """A snapshot dict whose 'segments' holds lists nested NESTED deep (EMPTY_LIST ×n, APPEND ×n)."""
    p = folder / "fake_deep.pickle"
    p.write_bytes(b"\x80\x04}X\x08\x00\x00\x00segments" + b"]" * (NESTED + 1) + b"a" * NESTED + b"s.")
    return p


def _laughs_pickle(folder: Path, sizes: Sizes) -> Path:
    """4 KB that claims a million blocks: one segment referenced 1,000 times, one block 1,000 times in it."""
    block = {"address": 0, "size": 512, "requested_size": 512, "state": "active_allocated", "frames": []}
    segment = {
        "device": 0,
        "address": 0,
        "total_size": 512_000,
        "allocated_size": 0,
        "active_size": 0,
        "stream": 0,
        "segment_type": "large",
        "blocks": [block] * 1000,
        "frames": [],
    }
    p = folder / "fake_laughs.pickle"
    p.write_bytes(pickle.dumps({"segments": [segment] * 1000, "device_traces": [[]]}, protocol=4))
    return p


def _open_quote(folder: Path, sizes: Sizes) -> Path:
    """An ncu CSV whose second row opens a quote and never closes it, then 20 MB of short lines."""
    p = folder / "fake_ncu_open_quote.csv"
    inputs.repeated(p, 20 * 10**6, b"short program output line\n", prefix=NCU_HEADER + b'"0","1","never closed\n')
    return p


def _fifo(folder: Path, sizes: Sizes) -> Path:
    p = folder / "fake_fifo"
    os.mkfifo(p)
    return p


def _symlink_loop(folder: Path, sizes: Sizes) -> Path:
    (folder / "fake_loop_a").symlink_to(folder / "fake_loop_b")
    (folder / "fake_loop_b").symlink_to(folder / "fake_loop_a")
    return folder / "fake_loop_a"


def _run_folder_with_fifo(folder: Path, sizes: Sizes) -> Path:
    """A real run folder whose trace is a FIFO: read without it (a warning), not blocked on it."""
    import shutil

    from tests.paths import FIXTURES

    run = folder / "fake_run_fifo"
    shutil.copytree(FIXTURES / "runs" / "sync_planted", run)
    (run / "trace" / "rank0.json.gz").unlink()
    os.mkfifo(run / "trace" / "rank0.json.gz")
    return run


def _device(path: str) -> Callable[[Path, Sizes], Path]:
    return lambda folder, sizes: Path(path)


# (what, file name, writer) of the valid-ish 10 MB inputs
VALID = [
    ("trace (tiny events)", "fake_tiny_events.json", inputs.tiny_events_trace),
    ("trace (Kineto, grown)", "fake_trace.json", inputs.grown_trace),
    ("snapshot JSON", "fake_snapshot.json", inputs.grown_snapshot_json),
    ("snapshot pickle", "fake_snapshot.pickle", inputs.grown_snapshot_pickle),
    ("events JSONL", "fake_rank0.jsonl", inputs.grown_events_jsonl),
    ("events CSV", "fake_steps.csv", inputs.grown_events_csv),
    ("events JSON list", "fake_steps.json", inputs.grown_events_json),
    ("memory stats JSONL", "fake_rank0.stats.jsonl", inputs.grown_memory_stats),
    ("NVML CSV", "fake_nvml.csv", inputs.grown_nvml),
    ("ncu raw CSV", "fake_ncu_raw.csv", inputs.grown_ncu_raw),
    ("ncu details CSV", "fake_ncu_details.csv", inputs.grown_ncu_details),
    ("ncu CSV, 20,000 columns", "fake_ncu_wide.csv", inputs.wide_ncu_raw),
    ("run folder manifest", "fake_run", inputs.run_folder_with_manifest),
]

BOMB_RSS_BYTES = GiB  # a bomb is refused after ~GZIP_ALLOWANCE_BYTES: far below the 2 GB budget

CASES: list[Case] = [
    # 1. gzip bombs: ~1 MB on disk, GBs inflated
    Case(
        "bomb: trace .json.gz (whitespace)",
        "gzip bomb",
        _bomb("fake_bomb.json.gz", b'{"traceEvents": [', b" ", b"]}"),
        "MAX_GZIP_RATIO",
        max_rss_bytes=BOMB_RSS_BYTES,
    ),
    Case(
        "bomb: trace .pt.trace.json.gz (valid events)",
        "gzip bomb",
        _bomb(
            "fake_bomb.pt.trace.json.gz", b'{"schemaVersion": 1, "traceEvents": [', TINY_EVENT, TINY_EVENT[:-1] + b"]}"
        ),
        "MAX_GZIP_RATIO",
        max_rss_bytes=BOMB_RSS_BYTES,
    ),
    Case(
        "bomb: snapshot .json.gz ('[')",
        "gzip bomb",
        _bomb("fake_bomb.snapshot.json.gz", b'{"schema": "gpudiag.snapshot/1", "segments": ', b"["),
        "MAX_GZIP_RATIO",
        max_rss_bytes=BOMB_RSS_BYTES,
    ),
    Case(
        "bomb: snapshot .pickle.gz (zeros)",
        "gzip bomb",
        _bomb("fake_bomb.pickle.gz", b"\x80\x04", b"\0"),
        "MAX_GZIP_RATIO",
        max_rss_bytes=BOMB_RSS_BYTES,
    ),
    Case(
        "bomb: ncu .csv.gz (valid rows)",
        "gzip bomb",
        _bomb("fake_bomb_ncu.csv.gz", NCU_HEADER, NCU_ROW),
        "MAX_GZIP_RATIO",
        max_rss_bytes=BOMB_RSS_BYTES,
    ),
    Case(
        "bomb: ncu .ncu-rep.gz (zeros)",
        "gzip bomb",
        _bomb("fake_bomb.ncu-rep.gz", b"NVR\0", b"\0"),
        "MAX_GZIP_RATIO",
        max_rss_bytes=BOMB_RSS_BYTES,
    ),
    Case(
        "bomb: memory stats .jsonl.gz (valid lines)",
        "gzip bomb",
        _bomb("fake_bomb.stats.jsonl.gz", b"", STATS_LINE),
        "MAX_GZIP_RATIO",
        max_rss_bytes=BOMB_RSS_BYTES,
    ),
    Case(
        "bomb: NVML .csv.gz (NVML takes no gzip)",
        "gzip bomb",
        _bomb("fake_bomb_nvml.csv.gz", NVML_HEADER, NVML_ROW),
        "gzip-compressed",
        max_rss_bytes=BOMB_RSS_BYTES,
    ),
    Case(
        "bomb: events .jsonl.gz (events take no gzip)",
        "gzip bomb",
        _bomb("fake_bomb_rank0.jsonl.gz", b"", b'{"kind":"step","rank":0,"step":1,"host_ms":1.5}\n'),
        "gzip-compressed",
        max_rss_bytes=BOMB_RSS_BYTES,
    ),
    # 2. JSON nested 100,000 deep
    Case(
        "nested: trace JSON",
        "nested JSON",
        _text("fake_deep_trace.json", b'{"traceEvents": ' + DEEP + b"}"),
        "MAX_NESTING_DEPTH",
    ),
    Case(
        "nested: trace event args",
        "nested JSON",
        _text(
            "fake_deep_args.json",
            (
                b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1, '
                b'"args": ' + DEEP + b"}]}"
            ),
        ),
        "MAX_NESTING_DEPTH",
    ),
    Case(
        "nested: snapshot JSON",
        "nested JSON",
        _text("fake_deep_snapshot.json", b'{"schema": "gpudiag.snapshot/1", "segments": ' + DEEP + b"}"),
        "MAX_NESTING_DEPTH",
    ),
    Case("nested: snapshot pickle", "nested JSON", _deep_pickle, "MAX_NESTING_DEPTH"),
    Case(
        "nested: events JSONL",
        "nested JSON",
        _text("fake_deep_rank0.jsonl", b'{"kind": "step", "step": 1, "host_ms": ' + DEEP + b"}\n"),
        "MAX_NESTING_DEPTH",
    ),
    Case(
        "nested: events JSON list",
        "nested JSON",
        _text("fake_deep_steps.json", b'[{"name": "step", "step": 1, "elapsed_ms": ' + DEEP + b"}]"),
        "MAX_NESTING_DEPTH",
    ),
    Case(
        "nested: memory stats JSONL",
        "nested JSON",
        _text("fake_deep.stats.jsonl", b'{"kind": "memory_stats", "step": 1, "stats": ' + DEEP + b"}\n"),
        "MAX_NESTING_DEPTH",
    ),
    Case("nested: run folder manifest", "nested JSON", _deep_manifest, "MAX_NESTING_DEPTH"),
    Case(
        "nested: findings JSON (check)",
        "nested JSON",
        _text("fake_deep_findings.json", b'{"schema": "gpudiag.findings/1", "findings": ' + DEEP + b"}"),
        "MAX_NESTING_DEPTH",
        command="check",
    ),
    Case("pickle 'billion laughs' (4 KB, 10^6 rows)", "nested JSON", _laughs_pickle, "MIN_INPUT_BYTES_PER_ROW"),
    # 3. one line of hundreds of MB
    Case("long line: ncu CSV", "long line", _long("fake_long_ncu.csv", NCU_HEADER + b'"0","1","'), "MAX_LINE_BYTES"),
    Case("long line: NVML CSV", "long line", _long("fake_long_nvml.csv", NVML_HEADER + b"1,"), "MAX_LINE_BYTES"),
    Case(
        "long line: events CSV", "long line", _long("fake_long_steps.csv", b"name,step,elapsed_ms\n"), "MAX_LINE_BYTES"
    ),
    Case(
        "long line: events JSONL",
        "long line",
        _long("fake_long_rank0.jsonl", b'{"kind": "step", "step": 1, "host_ms": 1, "name": "'),
        "MAX_LINE_BYTES",
    ),
    Case(
        "long line: memory stats JSONL",
        "long line",
        _long("fake_long.stats.jsonl", b'{"kind": "memory_stats", "step": 1, "stats": {"'),
        "MAX_LINE_BYTES",
    ),
    Case("ncu CSV quote never closed (20 MB)", "long line", _open_quote, "MAX_LINE_BYTES"),
    # 4. 10 MB of each format (valid-ish: real fixtures repeated), see VALID below
    *(Case(f"10 MB {what}", "10 MB", _valid(name, grow), None) for what, name, grow in VALID),
    Case(
        "ncu CSV, 400,000 columns", "10 MB", _valid("fake_ncu_too_wide.csv", inputs.too_wide_ncu_raw), "MAX_CSV_COLUMNS"
    ),
    # 5. not a regular file
    Case("FIFO (report)", "not a file", _fifo, "regular file"),
    Case("FIFO (check)", "not a file", _fifo, "regular file", command="check"),
    Case("/dev/zero", "not a file", _device("/dev/zero"), "regular file"),
    Case("/dev/urandom (check)", "not a file", _device("/dev/urandom"), "regular file", command="check"),
    Case("symlink loop", "not a file", _symlink_loop, "symbolic link that cannot be followed"),
    Case("run folder whose trace is a FIFO", "not a file", _run_folder_with_fifo, None),
]
