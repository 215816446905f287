"""The bootstrap never changes a seeded training's results: losses are bit-identical with and without it."""

from __future__ import annotations

import subprocess
import sys

from tests.launch.launch_helpers import EXAMPLES, SCRIPTS, base_env, gpudiag, records

ARGS = ["--steps", "16", "--width", "64", "--device", "cpu"]


def _losses(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("step ")]


def test_losses_bit_identical_with_and_without_gpudiag(tmp_path):
    train = str(EXAMPLES / "train_mlp.py")
    plain = subprocess.run(
        [sys.executable, train, *ARGS], env=base_env(), capture_output=True, text=True, timeout=120, check=True
    )
    run = tmp_path / "r"
    profiled = gpudiag(
        "profile",
        "--no-nvml",
        "--trace-start",
        "4",
        "--trace-steps",
        "4",
        "--memory-stats-interval-ms",
        "0",
        "-o",
        run,
        "--",
        sys.executable,
        train,
        *ARGS,
    )
    assert profiled.returncode == 0, profiled.stderr
    assert len(_losses(plain.stdout)) == 16
    assert _losses(profiled.stdout) == _losses(plain.stdout)  # repr() of every float: bit-identical
    steps = [r for r in records(run) if r["kind"] == "step"]
    assert len(steps) == 15 and sum(s["instrumented"] for s in steps) == 5  # 4 window steps + the export step
    assert (run / "trace" / "rank0.json.gz").exists()


def test_the_scripts_own_output_files_are_byte_identical(tmp_path):
    """A seeded CPU training writes losses.txt and checkpoint.pt into its cwd: the same bytes under gpudiag
    (trace window, memory stats every step) as without it, and gpudiag writes nothing into that folder."""
    script = str(SCRIPTS / "train_with_outputs.py")
    plain_cwd, cwd = tmp_path / "plain", tmp_path / "profiled"
    plain_cwd.mkdir()
    cwd.mkdir()
    plain = subprocess.Popen([sys.executable, script, "12"], cwd=plain_cwd, env=base_env(), stdout=subprocess.DEVNULL)
    r = gpudiag(
        "profile",
        "--no-nvml",
        "--trace-start",
        "2",
        "--trace-steps",
        "3",
        "--memory-stats-interval-ms",
        "0",
        "-o",
        tmp_path / "run",
        "--",
        sys.executable,
        script,
        "12",
        cwd=cwd,
    )
    assert r.returncode == 0 and plain.wait(timeout=120) == 0, r.stderr
    assert sorted(p.name for p in cwd.iterdir()) == ["checkpoint.pt", "losses.txt"]
    for name in ("checkpoint.pt", "losses.txt"):
        assert (cwd / name).read_bytes() == (plain_cwd / name).read_bytes(), name
    assert (tmp_path / "run" / "trace" / "rank0.json.gz").exists()  # the window did run
