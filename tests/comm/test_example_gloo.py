"""examples/ddp_straggler.py on CPU (gloo, 2 ranks): it writes per-rank traces whose straggler the analyzer finds."""

import os
import shutil
import subprocess
import sys

import pytest

from diagnose.analysis import run_analyzer
from diagnose.analyzers import comm
from tests.comm.conftest import ROOT, profile_of


def test_gloo_run_reports_rank1_as_straggler(tmp_path):
    pytest.importorskip("torch.distributed")
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun not on PATH")
    out = tmp_path / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(ROOT / "examples" / "ddp_straggler.py"),
            "--backend",
            "gloo",
            "--out",
            str(out),
            "--width",
            "256",
            "--steps",
            "9",
            "--delay-ms",
            "100",
        ],
        capture_output=True,
        text=True,
        timeout=280,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    traces = sorted((out / "trace").glob("rank*.json.gz"))
    assert [t.name for t in traces] == ["rank0.json.gz", "rank1.json.gz"]
    result = run_analyzer(comm, profile_of(*traces))
    s = {f.id: f for f in result.findings}["comm.straggler"].subjects[0]
    assert s.name == "rank 1" and s.figures["last_share"] >= 0.9
    # the planted 100 ms sleep; at least half of it survives scheduling noise on a loaded 2-core machine
    assert s.figures["arrival_lag_ms"] >= 50.0
