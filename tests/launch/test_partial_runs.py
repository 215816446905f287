"""Crashes, OOM-like failures and kills of a CPU torch training leave a valid, honest run folder."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.launch.launch_helpers import EXAMPLES, SCRIPTS, base_env, gpudiag, manifest, records

TRAIN = EXAMPLES / "train_mlp.py"


@pytest.mark.parametrize(
    "failure, message",
    [
        ("--crash-at", "RuntimeError: planted crash at step 12"),
        ("--oom-at", "OutOfMemoryError: CUDA out of memory (planted at step 12)"),
        ("--memory-error-at", "MemoryError: planted MemoryError at step 12"),
    ],
)
def test_failure_inside_the_trace_window_keeps_everything_finished(tmp_path, failure, message):
    run = tmp_path / "r"
    r = gpudiag(
        "profile",
        "--no-nvml",
        "--trace-start",
        "10",
        "--trace-steps",
        "5",
        "-o",
        run,
        "--",
        sys.executable,
        TRAIN,
        "--steps",
        "30",
        "--width",
        "32",
        "--device",
        "cpu",
        failure,
        "12",
    )
    assert r.returncode == 1, r.stderr
    assert message in r.stderr
    m = manifest(run)
    assert m["exit_code"] == 1 and m["status"] == "failed"
    assert m["missing"] == []  # the open window was flushed at exit
    steps = [rec for rec in records(run) if rec["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(11))  # 12 boundaries; step 11 was cut by the failure
    assert [s["instrumented"] for s in steps] == [False] * 10 + [True]
    assert all(s["gpu_ms"] is None and s["host_ms"] > 0 for s in steps)
    end = records(run)[-1]
    assert end["event"] == "end" and "trace/rank0.json.gz" in end["written"]
    trace = json.loads(gzip.decompress((run / "trace" / "rank0.json.gz").read_bytes()))
    assert any("train_mlp.py" in e.get("name", "") for e in trace["traceEvents"])  # Python stacks are in
    assert sorted(m["artifacts"]) == ["events/rank0.jsonl", "trace/rank0.json.gz"]
    assert not list(run.rglob("*.tmp"))


def test_sigkill_of_the_child_is_reported_as_missing(tmp_path):
    run = tmp_path / "r"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "diagnose",
            "profile",
            "-q",
            "--no-nvml",
            "--trace-start",
            "3",
            "--trace-steps",
            "1000",
            "-o",
            str(run),
            "--",
            sys.executable,
            str(TRAIN),
            "--steps",
            "100000",
            "--width",
            "32",
            "--device",
            "cpu",
            "--sleep-ms",
            "20",
        ],
        env=base_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    # kill once the trace is announced and steps 0-2 are on disk: the runtime writes step records in batches up
    # to 100 ms apart, so the kill waits for the records it is checked against (a generous deadline, no fixed sleep)
    deadline = time.monotonic() + 120
    child_pid = None
    while time.monotonic() < deadline and child_pid is None and proc.poll() is None:
        try:
            recs = records(run)
            announced = any(r.get("artifact") == "trace/rank0.json.gz" for r in recs)
            if announced and sum(r.get("kind") == "step" for r in recs) >= 3:
                child_pid = recs[0]["pid"]
        except (FileNotFoundError, json.JSONDecodeError, IndexError):
            pass
        time.sleep(0.05)
    assert child_pid, proc.stderr.read() if proc.poll() is not None else "no trace window and 3 steps within 120 s"
    os.kill(child_pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == 137
    m = manifest(run)
    assert m["exit_code"] == 137 and m["signal"] == "SIGKILL"
    assert m["missing"] == ["trace/rank0.json.gz"]
    assert any("rank 0 did not reach its end" in n for n in m["notes"])
    assert "events/rank0.jsonl" in m["artifacts"]
    steps = [rec for rec in records(run) if rec["kind"] == "step"]
    assert len(steps) >= 3


def test_sync_warnings_in_the_window_become_sync_records_with_the_user_line(tmp_path):
    run = tmp_path / "r"
    script = SCRIPTS / "sync_warning_train.py"
    r = gpudiag(
        "profile", "--no-nvml", "--trace-start", "2", "--trace-steps", "2", "-o", run, "--", sys.executable, script, "8"
    )
    assert r.returncode == 0, r.stderr
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if "SYNC-LINE" in text)
    syncs = [rec for rec in records(run) if rec["kind"] == "sync"]
    # one warning per iteration; the iterations inside steps 2 and 3 are the 4th and 5th warnings
    assert [s["step"] for s in syncs] == [2, 3]
    assert {(s["file"], s["line"], s["function"]) for s in syncs} == {(str(script), line, "<module>")}
    assert syncs[0]["stack"][0] == f"{script}:{line} <module>"
    assert syncs[0]["op"] == "cuda_sync" and syncs[0]["dur_ns"] is None  # no CUDA profiler events on a CPU
    # the two window warnings were taken out of stderr; outside the window the warning still shows. Python's
    # default filter shows it once per line, but changing warnings.filters (gpudiag's window, torch.profiler)
    # resets that memory, so it may show again after the window: at most the 6 outside-window ones.
    assert 1 <= r.stderr.count("called a synchronizing CUDA operation") <= 6
    # and `gpudiag report` on the folder names that line (profile → report, end to end)
    rep = gpudiag("report", run, "--no-html", "--json", tmp_path / "f.json")
    assert rep.returncode == 0, rep.stderr
    findings = json.loads((tmp_path / "f.json").read_text())["findings"]
    sync = [f for f in findings if f["id"] == "sync.host_sync"]
    assert sync and sync[0]["subjects"][0]["name"] == f"{script}:{line}"
