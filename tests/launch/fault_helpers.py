"""Checks shared by the fault tests (tests/launch/test_faults_*.py): is a run folder still valid, what does
`gpudiag report` say about it."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
import time
from pathlib import Path

from tests.launch.launch_helpers import gpudiag, manifest

FAKE_NVML = Path(__file__).resolve().parent / "fake_nvml"


def assert_valid_run_folder(run: Path) -> dict:
    """No temporary file is left, every whole-file artifact is whole, every JSONL line but a cut last one
    parses, and the manifest lists exactly the artifacts on disk. Returns the manifest."""
    run = Path(run)
    assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")], sorted(run.rglob("*"))
    m = manifest(run)
    for rel, size in m["artifacts"].items():
        path = run / rel
        assert path.stat().st_size == size, rel
        if rel.endswith(".json.gz"):
            json.loads(gzip.decompress(path.read_bytes()))
        elif rel.endswith(".jsonl"):
            lines = path.read_text().split("\n")
            for line in lines[:-1]:
                json.loads(line)
    for pattern in (
        "trace/*.json.gz",
        "memory/*.json.gz",
        "events/*.jsonl",
        "nvml.csv",
        "ncu/report.ncu-rep",
        "ncu/raw.csv",
    ):
        for path in run.glob(pattern):
            assert path.relative_to(run).as_posix() in m["artifacts"], path
    return m


def report_no_html(run: Path, *args):
    """`gpudiag report RUN --no-html`: (the completed process, its `note:` lines)."""
    r = gpudiag("report", run, "--no-html", *args)
    notes = [line.removeprefix("  note: ") for line in r.stdout.splitlines() if line.startswith("  note: ")]
    return r, notes


def use_fake_pynvml(monkeypatch):
    """Make ``import pynvml`` in this process give the FAKE one (tests/launch/fake_nvml/pynvml.py)."""
    spec = importlib.util.spec_from_file_location("pynvml", FAKE_NVML / "pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return module


def wait_until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
