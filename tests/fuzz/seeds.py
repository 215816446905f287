"""Seeds for the fuzzers: real captured fixtures, cut down so that one example reads in milliseconds.

Every seed comes from a file under fixtures/ (real H200 captures, see each folder's PROVENANCE.md).
Text forms (CSV, JSON lines) are cut at line boundaries of the real bytes, so what remains is
byte for byte what the tool wrote. JSON documents (traces, snapshot JSON) and pickles are loaded,
a window of their events / segments kept, and written back in the same layout (Kineto's one key a
line, torch's pickle protocol): their content is real, their whitespace may differ. The two seeds
marked ``derived`` are the real step timings of a run rewritten in the user CSV / JSON form that
``parsers.events`` also reads (nothing of that form was captured).

``seeds(reader)`` lists the small seeds the tests use; ``seeds(reader, full=True)`` adds the whole
real files for the longer campaign (tools/fuzz_campaign.py).
"""

from __future__ import annotations

import gzip
import json
import pickle
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from parsers.restricted_pickle import loads_plain

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

READERS = (
    "ncu_csv",
    "ncu_rep",
    "trace",
    "snapshot_pickle",
    "snapshot_json",
    "memory_stats",
    "events",
    "nvml",
    "manifest",
    "run_folder",
)


@dataclass(frozen=True)
class Seed:
    """One real input: ``data`` as it lies on disk (gzip-compressed when ``gz``), ``fmt`` its inner form."""

    name: str
    data: bytes
    fmt: str  # csv | json | jsonl | pickle | binary
    suffix: str  # file name ending to write it under (readers must not need it: they sniff content)
    gz: bool = False

    @property
    def payload(self) -> bytes:
        """The uncompressed bytes."""
        return gzip.decompress(self.data) if self.gz else self.data


def _bytes(*parts: str) -> bytes:
    return FIXTURES.joinpath(*parts).read_bytes()


def _plain(*parts: str) -> bytes:
    raw = _bytes(*parts)
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0)


def _lines(data: bytes, keep) -> bytes:
    """The real lines whose 0-based numbers ``keep`` accepts, with their own line ends."""
    lines = data.splitlines(keepends=True)
    return b"".join(line for i, line in enumerate(lines) if keep(i, line))


def _details_first_launches(data: bytes, launches: int) -> bytes:
    ids = {f'"{i}"'.encode() for i in range(launches)}
    return _lines(data, lambda i, line: i == 0 or line.split(b",", 1)[0] in ids)


# --- traces ---------------------------------------------------------------------------------------


def _trace_window(raw: bytes, max_events: int = 220) -> bytes:
    """The trace's header, its metadata events and the complete/flow events of one window of time."""
    doc = json.loads(raw)
    events = doc["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"][:40]
    timed = sorted(
        (e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))), key=lambda e: e["ts"]
    )
    # start at the first GPU kernel's launch so the window holds cpu ops, runtime calls and kernels together
    first = next((e["ts"] for e in timed if e.get("cat") in ("cuda_runtime", "kernel") or e.get("pid") == 1), None)
    start = 0 if first is None else max(0, next(i for i, e in enumerate(timed) if e["ts"] >= first) - 20)
    window, per_cat = [], {}
    for e in timed[start:]:  # at most a quarter of the window from one category, so kernels are in it too
        key = e.get("cat")
        if per_cat.get(key, 0) < max_events // 4:
            per_cat[key] = per_cat.get(key, 0) + 1
            window.append(e)
        if len(window) >= max_events:
            break
    top = {k: v for k, v in doc.items() if k != "traceEvents"}
    tail = {k: top.pop(k) for k in list(top) if k == "traceName"}
    out = dict(top)
    out["traceEvents"] = meta + window
    out.update(tail)
    return json.dumps(out, indent=2).encode()


# --- snapshots --------------------------------------------------------------------------------------


def _snapshot_window(data: dict, segments: int = 5, blocks: int = 4, entries: int = 60, frames: int = 6) -> dict:
    def cut_frames(x):
        if isinstance(x, dict) and isinstance(x.get("frames"), list):
            x = dict(x)
            x["frames"] = x["frames"][:frames]
        return x

    out = dict(data)
    segs = []
    for seg in data.get("segments", [])[:segments]:
        seg = dict(seg)
        seg["blocks"] = [cut_frames(b) for b in seg.get("blocks", [])[:blocks]]
        segs.append(seg)
    out["segments"] = segs
    if isinstance(data.get("device_traces"), list):
        out["device_traces"] = [[cut_frames(e) for e in dev[:entries]] for dev in data["device_traces"]]
    return out


def _pickle_protocol(raw: bytes) -> int:
    return raw[1] if raw[:1] == b"\x80" else 0


# --- the seeds ----------------------------------------------------------------------------------------


@cache
def _small() -> dict[str, tuple[Seed, ...]]:
    s: dict[str, list[Seed]] = {r: [] for r in READERS}
    sg = ("ncu", "small_grid")
    s["ncu_csv"] += [
        Seed("small_grid/raw.csv", _bytes(*sg, "raw.csv"), "csv", ".csv"),
        Seed("small_grid/raw_base.csv", _bytes(*sg, "raw_base.csv"), "csv", ".csv"),
        Seed("small_grid/details.csv[launch 0]", _details_first_launches(_bytes(*sg, "details.csv"), 1), "csv", ".csv"),
        Seed(
            "tiny_kernels/details.csv.gz[launches 0-1]",
            _gz(_details_first_launches(_plain("ncu", "tiny_kernels", "details.csv.gz"), 2)),
            "csv",
            ".csv.gz",
            gz=True,
        ),
        Seed(
            "two_process_stdout/stdout.csv[3 rows]",
            _lines(_bytes("ncu", "two_process_stdout", "stdout.csv"), lambda i, line: i < 12 or line.startswith(b"==")),
            "csv",
            ".csv",
        ),
        Seed(
            "runs/ncu_mlp/ncu/raw.csv[3 rows]",
            _lines(_bytes("runs", "ncu_mlp", "ncu", "raw.csv"), lambda i, _: i < 5),
            "csv",
            ".csv",
        ),
    ]
    rep = _ncu_rep_head()
    s["ncu_rep"] += [
        Seed("small_grid/report.ncu-rep[first 16 KiB]", rep, "binary", ".ncu-rep"),
        Seed("small_grid/report.ncu-rep.gz[first 16 KiB]", _gz(rep), "binary", ".ncu-rep.gz", gz=True),
    ]
    s["trace"] += [
        Seed(
            "trace/sync_planted[window]",
            _gz(_trace_window(_plain("trace", "sync_planted", "trace.json.gz"))),
            "json",
            ".json.gz",
            gz=True,
        ),
        Seed(
            "trace/jax/perfetto_trace[window]",
            _trace_window(_plain("trace", "jax", "perfetto_trace.json.gz")),
            "json",
            ".json",
        ),
        Seed(
            "comm/gloo_straggler/rank0[window]",
            _gz(_trace_window(_plain("comm", "gloo_straggler", "trace", "rank0.json.gz"))),
            "json",
            ".json.gz",
            gz=True,
        ),
        Seed(
            "trace/hta/critical_path_cuda_event_sync",
            _bytes("trace", "hta", "critical_path_cuda_event_sync_event_sync_trace.json.gz"),
            "json",
            ".json.gz",
            gz=True,
        ),
    ]
    oom_raw = _plain("memory", "oom", "snapshot.pickle.gz")
    oom = _snapshot_window(loads_plain(oom_raw, "oom"))
    s["snapshot_pickle"] += [
        Seed(
            "memory/oom/snapshot.pickle[window]",
            pickle.dumps(oom, protocol=_pickle_protocol(oom_raw)),
            "pickle",
            ".pickle",
        ),
        Seed(
            "memory/ring/snapshot.pickle.gz[window]",
            _gz(
                pickle.dumps(
                    _snapshot_window(loads_plain(_plain("memory", "ring", "snapshot.pickle.gz"), "ring")), protocol=4
                )
            ),
            "pickle",
            ".pickle.gz",
            gz=True,
        ),
    ]
    snap_json = json.loads(_plain("runs", "sync_planted", "memory", "rank0.snapshot.json.gz"))
    s["snapshot_json"] += [
        Seed(
            "runs/sync_planted/memory/rank0.snapshot.json.gz[window]",
            _gz(json.dumps(_snapshot_window(snap_json)).encode()),
            "json",
            ".snapshot.json.gz",
            gz=True,
        ),
    ]
    s["memory_stats"] += [
        Seed(
            "runs/sync_planted/memory/rank0.stats.jsonl[6 lines]",
            _lines(_bytes("runs", "sync_planted", "memory", "rank0.stats.jsonl"), lambda i, _: i < 6),
            "jsonl",
            ".stats.jsonl",
        ),
        Seed(
            "memory/jax/stats.jsonl.gz", _bytes("memory", "jax", "stats.jsonl.gz"), "jsonl", ".stats.jsonl.gz", gz=True
        ),
        Seed(
            "memory/oom/stats.jsonl.gz", _bytes("memory", "oom", "stats.jsonl.gz"), "jsonl", ".stats.jsonl.gz", gz=True
        ),
    ]
    planted = _bytes("runs", "sync_planted", "events", "rank0.jsonl")
    s["events"] += [
        Seed("runs/sync_planted/events/rank0.jsonl[20 lines]", _lines(planted, lambda i, _: i < 20), "jsonl", ".jsonl"),
        Seed(
            "runs/jax_train/events/rank0.jsonl[12 lines]",
            _lines(_bytes("runs", "jax_train", "events", "rank0.jsonl"), lambda i, _: i < 12),
            "jsonl",
            ".jsonl",
        ),
        Seed(
            "events/rank0_capture1_run_only.jsonl", _bytes("events", "rank0_capture1_run_only.jsonl"), "jsonl", ".jsonl"
        ),
        Seed("derived: runs/sync_planted steps as user CSV", _user_steps_csv(planted), "csv", ".csv"),
        Seed("derived: runs/sync_planted steps as user JSON", _user_steps_json(planted), "json", ".json"),
    ]
    s["nvml"] += [
        Seed(
            "events/nvml_capture1.csv[12 lines]",
            _lines(_bytes("events", "nvml_capture1.csv"), lambda i, _: i < 12),
            "csv",
            ".csv",
        ),
        Seed(
            "runs/jax_train/nvml.csv[12 lines]",
            _lines(_bytes("runs", "jax_train", "nvml.csv"), lambda i, _: i < 12),
            "csv",
            ".csv",
        ),
    ]
    s["manifest"] += [
        Seed(f"runs/{run}/manifest.json", _bytes("runs", run, "manifest.json"), "json", ".json")
        for run in ("sync_planted", "ncu_mlp", "jax_train")
    ]
    return {k: tuple(v) for k, v in s.items()}


@cache
def _full() -> dict[str, tuple[Seed, ...]]:
    """The whole real files (bigger, slower): for the campaign only."""
    s: dict[str, list[Seed]] = {r: [] for r in READERS}
    s["ncu_csv"] += [
        Seed("tiny_kernels/raw.csv", _bytes("ncu", "tiny_kernels", "raw.csv"), "csv", ".csv"),
        Seed("small_grid/details.csv", _bytes("ncu", "small_grid", "details.csv"), "csv", ".csv"),
        Seed("two_process_stdout/stdout.csv", _bytes("ncu", "two_process_stdout", "stdout.csv"), "csv", ".csv"),
    ]
    s["trace"] += [
        Seed(
            "trace/sync_free/trace.json.gz", _bytes("trace", "sync_free", "trace.json.gz"), "json", ".json.gz", gz=True
        ),
        Seed(
            "trace/jax/perfetto_trace.json.gz",
            _bytes("trace", "jax", "perfetto_trace.json.gz"),
            "json",
            ".json.gz",
            gz=True,
        ),
    ]
    s["snapshot_pickle"] += [
        Seed(
            "memory/oom/snapshot.pickle.gz",
            _bytes("memory", "oom", "snapshot.pickle.gz"),
            "pickle",
            ".pickle.gz",
            gz=True,
        )
    ]
    s["snapshot_json"] += [
        Seed(
            "runs/sync_free/memory/rank0.snapshot.json.gz",
            _bytes("runs", "sync_free", "memory", "rank0.snapshot.json.gz"),
            "json",
            ".json.gz",
            gz=True,
        )
    ]
    s["memory_stats"] += [
        Seed(
            "memory/churn/stats.jsonl.gz",
            _bytes("memory", "churn", "stats.jsonl.gz"),
            "jsonl",
            ".stats.jsonl.gz",
            gz=True,
        )
    ]
    s["events"] += [
        Seed(
            "runs/torchrun_mlp/events/rank0.jsonl",
            _bytes("runs", "torchrun_mlp", "events", "rank0.jsonl"),
            "jsonl",
            ".jsonl",
        )
    ]
    s["nvml"] += [Seed("events/nvml_capture1.csv", _bytes("events", "nvml_capture1.csv"), "csv", ".csv")]
    return {k: tuple(v) for k, v in s.items()}


def seeds(reader: str, full: bool = False) -> tuple[Seed, ...]:
    """The seeds of one reader (``READERS``); ``run_folder`` seeds are the other readers' files, see RUN_FILES."""
    out = _small()[reader]
    return out + _full()[reader] if full else out


def _ncu_rep_head(n: int = 16 * 1024) -> bytes:
    with gzip.open(FIXTURES / "ncu" / "small_grid" / "report.ncu-rep.gz", "rb") as f:
        return f.read(n)


def _step_records(jsonl: bytes) -> list[dict]:
    out = []
    for line in jsonl.splitlines():
        r = json.loads(line)
        if r.get("kind") == "step" and r.get("gpu_ms") is not None:
            out.append(r)
    return out[:12]


def _user_steps_csv(jsonl: bytes) -> bytes:
    rows = ["name,step,elapsed_ms,host_ms"] + [
        f"step,{r['step']},{r['gpu_ms']},{r['host_ms']}" for r in _step_records(jsonl)
    ]
    return ("\n".join(rows) + "\n").encode()


def _user_steps_json(jsonl: bytes) -> bytes:
    return json.dumps(
        [{"name": "step", "step": r["step"], "elapsed_ms": r["gpu_ms"]} for r in _step_records(jsonl)], indent=1
    ).encode()


# --- a small run folder -------------------------------------------------------------------------------


@cache
def run_files(run: str) -> dict[str, bytes]:
    """relative path → bytes of a real run folder, its big artifacts cut to a window like the seeds above."""
    root = FIXTURES / "runs" / run
    out: dict[str, bytes] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not p.is_file() or rel.startswith("trace/jax-rank"):  # the JAX plugin folder is not read by gpudiag
            continue
        data = p.read_bytes()
        if rel.startswith("trace/") and rel.endswith(".json.gz"):
            data = _gz(_trace_window(gzip.decompress(data)))
        elif rel.endswith(".snapshot.json.gz"):
            data = _gz(json.dumps(_snapshot_window(json.loads(gzip.decompress(data)))).encode())
        elif rel == "ncu/raw.csv" or rel.endswith(".jsonl") or rel == "nvml.csv":
            data = _lines(data, lambda i, _: i < 16)
        out[rel] = data
    return out


RUNS = ("sync_planted", "ncu_mlp", "jax_train")


def fmt_of(rel: str) -> tuple[str, bool]:
    """(inner form, gzip) of a run-folder file from its name (only used to choose mutations)."""
    gz = rel.endswith(".gz")
    name = rel[:-3] if gz else rel
    if name.endswith(".jsonl"):
        return "jsonl", gz
    if name.endswith(".json"):
        return "json", gz
    if name.endswith(".csv"):
        return "csv", gz
    if name.endswith(".pickle"):
        return "pickle", gz
    return "binary", gz
