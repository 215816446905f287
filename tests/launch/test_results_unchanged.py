"""The bootstrap never changes a seeded training's results: losses are bit-identical with and without it."""
from __future__ import annotations

import subprocess
import sys

from tests.launch.launch_helpers import EXAMPLES, base_env, gpudiag, records

ARGS = ["--steps", "16", "--width", "64", "--device", "cpu"]


def _losses(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("step ")]


def test_losses_bit_identical_with_and_without_gpudiag(tmp_path):
    train = str(EXAMPLES / "train_mlp.py")
    plain = subprocess.run([sys.executable, train, *ARGS], env=base_env(), capture_output=True, text=True,
                           timeout=120, check=True)
    run = tmp_path / "r"
    profiled = gpudiag("profile", "--no-nvml", "--trace-start", "4", "--trace-steps", "4",
                       "--memory-stats-interval-ms", "0", "-o", run, "--", sys.executable, train, *ARGS)
    assert profiled.returncode == 0, profiled.stderr
    assert len(_losses(plain.stdout)) == 16
    assert _losses(profiled.stdout) == _losses(plain.stdout)  # repr() of every float: bit-identical
    steps = [r for r in records(run) if r["kind"] == "step"]
    assert len(steps) == 15 and sum(s["instrumented"] for s in steps) == 5  # 4 window steps + the export step
    assert (run / "trace" / "rank0.json.gz").exists()
