"""parsers.nsys_sqlite on a real Nsight Systems export: exact tables and links, detection, the CLI, bad input.

The real export is fixtures/trace/nsys/nsight-2025.5.2.sqlite (see its PROVENANCE.md). Inputs made here are
hand-made: copies of it with rows added (named *_fake_*), or broken files, for what the capture does not hold.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys

import pytest

from diagnose.derive import trace_timeline
from parsers import nsys_sqlite, registry
from parsers.errors import InputError
from parsers.nsys_sqlite import is_sqlite, read_nsys_sqlite
from parsers.schema import missing_columns
from parsers.trace import ANNOTATION_SCHEMA, CUDA_SYNC_SCHEMA, GPU_SCHEMA, RUNTIME_SCHEMA
from tests.trace.helpers import BAD, TRACE

NSYS = TRACE / "nsys" / "nsight-2025.5.2.sqlite"
KERNEL = "add_one(const float *, float *, int)"


def gpudiag(*args):
    return subprocess.run(
        [sys.executable, "-m", "diagnose", *map(str, args)], capture_output=True, text=True, timeout=120
    )


def test_real_export_tables_and_links():
    t = read_nsys_sqlite(NSYS)
    assert t.format == "nsys-sqlite" and t.rank is None and t.path == str(NSYS)
    for df, schema in (
        (t.gpu, GPU_SCHEMA),
        (t.runtime, RUNTIME_SCHEMA),
        (t.cuda_sync, CUDA_SYNC_SCHEMA),
        (t.annotations, ANNOTATION_SCHEMA),
    ):
        assert not missing_columns(df, schema)
    assert len(t.cpu_ops) == 0 and len(t.python) == 0 and len(t.annotations) == 0  # nsys has neither; no NVTX used
    # 3 kernel launches, 1 HtoD copy, 2 launches of a 1-kernel CUDA graph (--cuda-graph-trace=graph)
    assert len(t.gpu) == 6 and t.gpu["ts_ns"].is_monotonic_increasing
    assert t.gpu["cat"].astype(str).value_counts().to_dict() == {"kernel": 3, "cuda_graph": 2, "gpu_memcpy": 1}
    assert t.gpu["kind"].astype(str).value_counts().to_dict() == {"compute": 5, "memcpy": 1}
    kernels = t.gpu[t.gpu["cat"] == "kernel"]
    assert (kernels["name"] == KERNEL).all() and (kernels["short_name"] == "add_one").all()
    assert kernels["dur_ns"].tolist() == [1440, 1344, 1056]
    assert kernels["ts_ns"].tolist() == [339316740, 339324324, 339328676]  # ns since the session start, as in the file
    assert kernels["correlation"].tolist() == [129, 131, 133]
    assert (t.gpu["end_ns"] == t.gpu["ts_ns"] + t.gpu["dur_ns"]).all()
    assert set(t.gpu["device"]) == {0} and set(t.gpu["stream"]) == {13} and set(t.gpu["process_pid"]) == {945961}
    graphs = t.gpu[t.gpu["cat"] == "cuda_graph"]
    assert graphs["name"].astype(str).tolist() == ["CUDA graph 1"] * 2 and graphs["dur_ns"].tolist() == [1728, 1376]
    copy = t.gpu[t.gpu["kind"] == "memcpy"].iloc[0]
    assert copy["name"] == "Memcpy HtoD (Pageable -> Device)" and copy["bytes"] == 4096 and copy["dur_ns"] == 864
    assert copy["memcpy_kind"] == "HtoD" and copy["host_memory"] == "pageable"

    # every GPU row is linked to the call that launched it, through the correlation id
    assert len(t.runtime) == 33 and (t.gpu["runtime_index"] >= 0).mean() == 1.0
    launchers = t.runtime["name"].astype(str).to_numpy()[t.gpu["runtime_index"].to_numpy()]
    assert launchers.tolist() == ["cudaMemcpyAsync"] + ["cudaLaunchKernel"] * 3 + ["cudaGraphLaunch"] * 2
    assert (t.runtime["correlation"].to_numpy()[t.gpu["runtime_index"]] == t.gpu["correlation"].to_numpy()).all()
    assert int((t.runtime["gpu_index"] >= 0).sum()) == 6
    # the launch captured into the graph (correlation 138) ran nothing itself
    assert t.runtime.loc[t.runtime["correlation"] == 138, "gpu_index"].tolist() == [-1]
    # nsys's version suffix is dropped, so the syncs are recognised as for Kineto
    names = t.runtime["name"].astype(str)
    assert not names.str.contains(r"_v\d{4}").any()
    assert names.value_counts()[["cudaLaunchKernel", "cuKernelGetName", "cudaStreamSynchronize"]].tolist() == [4, 4, 2]
    assert t.runtime["cat"].astype(str).value_counts().to_dict() == {"cuda_runtime": 26, "cuda_driver": 7}
    syncs = t.runtime[t.runtime["sync_kind"].notna()]
    assert syncs["name"].astype(str).tolist() == ["cudaStreamSynchronize"] * 2
    assert syncs["sync_kind"].astype(str).tolist() == ["stream", "stream"] and syncs["dur_ns"].tolist() == [2563, 4683]
    assert set(t.runtime["pid"]) == {945961} and set(t.runtime["tid"]) == {945961}
    assert t.runtime.loc[t.runtime["name"] == "cudaMemcpyAsync", "memcpy_kind"].tolist() == ["HtoD"]
    # CUPTI's sync records of those two calls (the file's own enum labels them)
    assert t.cuda_sync["correlation"].tolist() == [135, 143] and t.cuda_sync["dur_ns"].tolist() == [1885, 4319]
    assert set(t.runtime.loc[t.runtime["correlation"].isin([135, 143]), "name"].astype(str)) == {
        "cudaStreamSynchronize"
    }

    props = t.device_properties.iloc[0]
    assert props["name"] == "NVIDIA GeForce RTX 3060" and props["id"] == 0 and props["numSms"] == 28
    assert props["totalGlobalMem"] == 12488343552 and (props["computeMajor"], props["computeMinor"]) == (8, 6)
    assert t.metadata["nsys_version"] == "2025.5.2.266" and t.metadata["driver_version"] == "595.84"
    assert t.metadata["header"]["baseTimeNanoseconds"] == 1785620044423518993
    assert t.metadata["process_names"] == {945961: "/tmp/flameox-nsight-smoke"}
    assert len(t.warnings) == 3 and t.warnings[0].startswith(
        "Nsight Systems warning: Installed CUDA driver version (13.2)"
    )


def test_registry_detects_the_export_and_its_gzip(tmp_path):
    assert registry.detect(NSYS).kind == "nsys-sqlite"
    gz = tmp_path / "report.sqlite.gz"
    gz.write_bytes(gzip.compress(NSYS.read_bytes()))
    assert registry.detect(gz).kind == "nsys-sqlite"
    t = registry.detect(gz).read(gz)
    assert len(t.gpu) == 6 and (t.gpu["runtime_index"] >= 0).all() and t.path == str(gz)
    assert not list(tmp_path.glob("gpudiag-nsys-*"))  # the inflated copy lives in the temp folder, and is removed


def test_sniff_is_cheap_and_never_raises():
    assert is_sqlite(NSYS.read_bytes()[:4096])
    for head in (b"", b"SQLite", b"SQLite format 2\x00", b"\x00" * 64, b'{"traceEvents": []}'):
        assert not is_sqlite(head)


def test_report_on_the_export_names_its_findings(tmp_path):
    out = tmp_path / "findings.json"
    r = gpudiag("report", NSYS, "--json", out, "--no-html")
    assert r.returncode == 0, r.stderr
    assert "NVIDIA GeForce RTX 3060" in r.stdout
    data = json.loads(out.read_text())
    severity = {f["id"]: f["severity"] for f in data["findings"]}
    assert severity["idle.gpu_idle"] == "critical"
    assert severity["sync.host_sync"] == "critical"
    assert severity["launch.launch_bound"] == "warning"
    assert sum(f["id"] == "idle.trace_warning" for f in data["findings"]) == 3  # nsys's own warnings of the capture
    summary = data["summary"]
    assert summary["gpu_idle_pct"] == pytest.approx(95.820, abs=0.001)
    assert summary["gpu_span_ns"] == 186815  # first copy's start to the second graph launch's end
    # no iterations in this export: its 2 syncs are counted over the span, not "per step" (issue 17)
    assert summary["sync_count_in_span"] == 2 and "sync_count_per_step" not in summary
    assert summary["launch_shorter_than_launch_pct"] == 100


def _fake_copy(tmp_path, name: str) -> str:
    """A writable copy of the real export, for adding hand-made rows to it."""
    path = tmp_path / name
    shutil.copyfile(NSYS, path)
    os.chmod(path, 0o644)
    return str(path)


def test_nvtx_ranges_are_annotations_and_profiler_steps(tmp_path):
    path = _fake_copy(tmp_path, "nsys_fake_nvtx.sqlite")
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
        "rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, "
        "endGlobalTid INTEGER, textId INTEGER, domainId INTEGER)"
    )
    tid = 297345569681193  # the main thread of the profiled process
    con.execute("INSERT INTO StringIds VALUES (90001, 'ProfilerStep#2')")
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (339100000, None, 75, "train", tid, None, 1),  # the domain's create event
            (339200000, 339330000, 59, "ProfilerStep#1", tid, None, 1),  # copy + 3 kernels
            (339330500, 339420000, 59, None, tid, 90001, 1),  # the 2 graph launches
            (339340000, 339350000, 60, "capture", tid, None, 0),  # a start/end range
            (339360000, None, 59, "never ended", tid, None, 0),
            (339370000, None, 34, "a mark", tid, None, 0),
        ],
    )
    con.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', 'RANK=\"3\"')")
    con.commit()
    con.close()
    t = read_nsys_sqlite(path)
    assert t.rank == 3
    ann = t.annotations
    assert ann["name"].astype(str).tolist() == ["ProfilerStep#1", "ProfilerStep#2", "capture"]
    assert ann["step"].tolist()[:2] == [1.0, 2.0] and ann["step"].isna().tolist()[2]
    assert set(ann["cat"].astype(str)) == {"user_annotation"} and ann["domain"].tolist()[:2] == ["train", "train"]
    assert ann["dur_ns"].tolist() == [130000, 89500, 10000] and set(ann["tid"]) == {945961}
    assert "1 NVTX ranges never ended (no end time) and were skipped" in t.warnings
    # the steps drive the analyses as Kineto's do: the last step is left out, as HTA leaves it out
    analysed = trace_timeline.analysed(t)
    assert len(analysed.gpu) == 4 and set(analysed.gpu["cat"].astype(str)) == {"kernel", "gpu_memcpy"}


def test_two_processes_keep_their_correlation_ids_apart(tmp_path):
    """One export of two processes (nsys profile torchrun …): CUPTI numbers correlations per process."""
    path = _fake_copy(tmp_path, "nsys_fake_two_processes.sqlite")
    other_pid = 945962
    con = sqlite3.connect(path)
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId = 129"
    )
    con.execute(
        f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = {other_pid << 24}, start = start + 100, "
        f"end = end + 100 WHERE rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)"
    )
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = 129"
    )
    con.execute(
        f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = {(other_pid << 24) | other_pid}, "
        f"start = start + 50 WHERE rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_RUNTIME)"
    )
    con.commit()
    con.close()
    t = read_nsys_sqlite(path)
    assert (t.gpu["runtime_index"] >= 0).all() and len(t.gpu) == 7
    launch_pid = t.runtime["pid"].to_numpy()[t.gpu["runtime_index"].to_numpy()]
    assert (launch_pid == t.gpu["process_pid"].to_numpy()).all()  # each kernel to its own process's launch
    assert any("2 processes with CUDA activity (pids 945961, 945962)" in w for w in t.warnings)


def _broken_inputs(tmp_path) -> dict[str, bytes | None]:
    real = NSYS.read_bytes()
    corrupt = bytearray(real)
    con = sqlite3.connect(f"file:{NSYS}?mode=ro", uri=True)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()[0]
    con.close()
    corrupt[(root - 1) * 4096 : root * 4096] = b"\xff" * 4096  # the kernel table's page
    view = tmp_path / "nsys_fake_view.sqlite"
    con = sqlite3.connect(view)  # a view that would never end if it were queried
    con.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    con.execute(
        "CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL "
        "SELECT x + 1 FROM r) SELECT x AS start FROM r"
    )
    con.commit()
    con.close()
    return {
        "nsys_fake_empty.sqlite": b"",
        "nsys_fake_text.sqlite": b"not a database\n",
        "nsys_fake_corrupt_page.sqlite": bytes(corrupt),
        "nsys_fake_truncated.sqlite.gz": gzip.compress(real)[:30000],
        "nsys_fake_header_cut.sqlite": real[:60],
        "nsys_fake_view.sqlite": None,
    }


@pytest.mark.parametrize(
    "name, says",
    [
        ("nsys_fake_empty.sqlite", "is empty"),
        ("nsys_fake_text.sqlite", "is not an SQLite database"),
        ("nsys_fake_corrupt_page.sqlite", "is a damaged or truncated SQLite database"),
        ("nsys_fake_truncated.sqlite.gz", "the gzip stream ends early"),
        ("nsys_fake_header_cut.sqlite", "is cut off inside its SQLite header (60 of 100 bytes)"),
        ("nsys_fake_view.sqlite", "not an Nsight Systems export"),
    ],
)
def test_reader_refuses_broken_input_naming_the_file(tmp_path, name, says):
    data = _broken_inputs(tmp_path)[name]
    path = tmp_path / name
    if data is not None:
        path.write_bytes(data)
    with pytest.raises(InputError) as e:
        read_nsys_sqlite(path)
    assert says in str(e.value) and str(e.value).startswith(str(path))


@pytest.mark.parametrize(
    "name, says",
    [
        ("nsys_fake_not_nsys.sqlite", "found tables: samples"),
        ("nsys_fake_missing_columns.sqlite", "lacks the column(s) streamId, demangledName"),
        ("nsys_truncated.sqlite", "is truncated: 65,536 bytes of the 528,384 its SQLite header declares"),
        ("nsys_header_only.sqlite", "is truncated: 100 bytes of the 528,384"),
    ],
)
def test_bad_fixtures_are_refused(name, says):
    with pytest.raises(InputError) as e:
        read_nsys_sqlite(BAD / name)
    assert says in str(e.value)


def test_cli_exits_2_on_broken_input_without_traceback(tmp_path):
    for name, data in _broken_inputs(tmp_path).items():
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        r = gpudiag("report", path, "-o", tmp_path / "x.html")
        assert r.returncode == 2, (name, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr + r.stdout and r.stderr.startswith("gpudiag: error:")
        assert name in r.stderr


def test_reading_is_stopped_when_it_takes_too_long(monkeypatch):
    monkeypatch.setattr(nsys_sqlite, "QUERY_SECONDS", -1)
    monkeypatch.setattr(nsys_sqlite, "_PROGRESS_OPS", 1)
    with pytest.raises(InputError, match="took longer than -1 s"):
        read_nsys_sqlite(NSYS)


def test_mutated_exports_read_or_raise_input_error(tmp_path):
    """Bytes flipped, pages overwritten, files cut: a Trace or an InputError, never another exception."""
    real = NSYS.read_bytes()
    rng = random.Random(20261203)
    path = tmp_path / "nsys_fake_mutated.sqlite"
    outcomes = {"read": 0, "refused": 0}
    for _ in range(60):
        b = bytearray(real)
        how = rng.choice(("flip", "page", "cut"))
        if how == "flip":
            for _ in range(rng.randint(1, 40)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif how == "page":
            p = rng.randrange(len(b) // 4096)
            b[p * 4096 : (p + 1) * 4096] = rng.randbytes(4096)
        else:
            del b[rng.randrange(len(b)) :]
        path.write_bytes(bytes(b))
        try:
            read_nsys_sqlite(path)
            outcomes["read"] += 1
        except InputError as e:
            assert str(e).startswith(str(path))
            outcomes["refused"] += 1
    assert outcomes["read"] and outcomes["refused"]
