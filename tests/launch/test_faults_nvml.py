"""Fault: NVML fails mid-run (the GPU falls off the bus; issue 8, faults in `gpudiag profile`).

A FAKE pynvml (tests/launch/fake_nvml/pynvml.py, first on the parent's PYTHONPATH) answers until
the training reaches step 40 (or for FAKE_NVML_OK_READS ticks), then raises NVMLError "GPU is
lost" on every call. The sampler stops, nvml.csv keeps its whole rows, the manifest says when
NVML stopped and why, the training runs to its end, and the report shows the NVML section over
the samples it has, with a note.
"""

from __future__ import annotations

import csv
import os
import sys

from diagnose.launch.nvml_sampler import DEAD_TICKS, HEADER, NvmlSampler
from tests.launch.fault_helpers import FAKE_NVML, assert_valid_run_folder, report_no_html, use_fake_pynvml, wait_until
from tests.launch.launch_helpers import REPO, SCRIPTS, base_env, gpudiag


def test_gpu_lost_mid_run(tmp_path):
    run = tmp_path / "r"
    env = base_env(
        PYTHONPATH=f"{REPO}{os.pathsep}{FAKE_NVML}",
        FAKE_NVML_LOSE_AT_STEP="40",
        FAKE_NVML_EVENTS=str(run / "events" / "rank0.jsonl"),
    )
    r = gpudiag(
        "profile", "--nvml-hz", "20", "-o", run, "--", sys.executable, SCRIPTS / "marker_loop.py", "80", "0.02", env=env
    )
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader((run / "nvml.csv").read_text().splitlines()))
    n = len(rows) - 1
    said = [line for line in r.stderr.splitlines() if "NVML" in line]
    assert said == [
        f"gpudiag: NVML stopped answering (NVMLError_GPUIsLost: GPU is lost); nvml.csv keeps the {n} rows "
        "sampled before, the run goes on without NVML"
    ]
    m = assert_valid_run_folder(run)
    assert m["status"] == "ok" and m["gpus"][0]["name"] == "Fake NVML GPU (tests/launch/fake_nvml)"
    assert ",".join(rows[0]) == HEADER and n >= 10  # 20 Hz from the start until step 40 of 80 (20 ms each)
    assert all(
        row[1:] == ["0", "87", "41", "1073741824", "8589934592", "1980", "2619", "312.5", "102400", "204800", "55"]
        for row in rows[1:]
    )
    (fault,) = m["faults"]
    assert fault["kind"] == "nvml-stopped" and fault["error"] == "NVMLError_GPUIsLost: GPU is lost"
    assert fault["rows"] == n and fault["last_sample_ns"] == int(rows[-1][0]) < fault["t_ns"] < m["end_ns"]
    why = m["incomplete"]["nvml.csv"]
    assert (
        why.startswith("NVML stopped answering ")
        and f"s into the run (NVMLError_GPUIsLost: GPU is lost); it holds the {n} whole rows sampled before (up to "
        in why
    )
    assert m["missing"] == []
    steps = [line for line in (run / "events" / "rank0.jsonl").read_text().splitlines() if '"kind":"step"' in line]
    assert len(steps) == 79  # the training went on to its end

    report = tmp_path / "report.html"
    rep, notes = report_no_html(run, "--json", tmp_path / "f.json")
    assert rep.returncode == 0, rep.stderr
    assert notes == [f"nvml.csv is incomplete: {why}"]
    r = gpudiag("report", run, "-o", report)
    assert r.returncode == 0, r.stderr
    page = report.read_text()
    section = page[page.index('id="section-utilization"') :]
    assert section.index("nvml.csv is incomplete: NVML stopped answering") < section.index("utilization-timeline")


def test_sampler_stops_at_a_fatal_error_keeping_whole_rows(tmp_path, monkeypatch):
    use_fake_pynvml(monkeypatch)
    monkeypatch.setenv("FAKE_NVML_OK_READS", "3")
    told = []
    sampler = NvmlSampler(tmp_path / "nvml.csv", hz=100, on_stop=told.append)
    assert sampler.start()
    wait_until(lambda: sampler.stopped)
    sampler.stop()
    assert told == [sampler.stopped] and sampler.stopped["kind"] == "nvml-stopped" and sampler.rows == 3
    lines = (tmp_path / "nvml.csv").read_text().split("\n")
    assert lines[0] == HEADER and len(lines) == 5 and lines[-1] == ""


def test_sampler_gives_up_when_no_reading_answers(tmp_path, monkeypatch):
    fake = use_fake_pynvml(monkeypatch)

    def not_supported(*args):
        raise fake.NVMLError(fake.NVML_ERROR_NOT_SUPPORTED)

    for name in (
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetPcieThroughput",
        "nvmlDeviceGetTemperature",
    ):
        monkeypatch.setattr(fake, name, not_supported)
    sampler = NvmlSampler(tmp_path / "nvml.csv", hz=100)
    assert sampler.start()
    wait_until(lambda: sampler.stopped)
    sampler.stop()
    assert sampler.stopped["error"] == "NVMLError: Not Supported" and sampler.rows == 0
    assert (tmp_path / "nvml.csv").read_text() == HEADER + "\n"  # no row of empty cells
    assert DEAD_TICKS == 3
