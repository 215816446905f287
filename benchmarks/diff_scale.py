"""How long `gpudiag diff` takes on runs of 100,000 steps a side (issue 28: it crashed past ~1,030).

    python benchmarks/diff_scale.py                    # 100,000 steps and launches a side
    python benchmarks/diff_scale.py --steps 1000000    # more

Every part of the diff is timed on its own, then the whole command:
- the Mann-Whitney U test on the step times (ranks, ties, the smallest p in log space), from the
  real step times of fixtures/runs/repeat_a and repeat_b tiled to N a side (tiling gives ties, the
  normal approximation's tie correction), and once more with the ties broken (every value distinct);
- the per-kernel diff on N ncu launches a side: the 45 real launches of fixtures/runs/ncu_mlp (14 kernel
  names) tiled, B's durations 1 % longer, so each kernel is tested on thousands of launches;
- ``gpudiag diff A B`` end to end (load, analyze both, compare, terminal summary, JSON, HTML) on two run
  folders grown from repeat_a and repeat_b: their step records repeated and renumbered to N steps,
  with the start of each step moved on by the previous steps' time. They are written to
  ``scratch/diff_scale/`` (git-ignored) and kept for the next run.

The grown folders are for timing only; the diff tests use real step records (tests/compare/).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from diagnose.comparison.runs import DiffOptions, kernel_diff, mann_whitney_u, step_samples  # noqa: E402
from diagnose.ingest.loading import load  # noqa: E402
from diagnose.thresholds import Thresholds  # noqa: E402

RUNS = ROOT / "fixtures" / "runs"
NCU_CSV = ROOT / "fixtures" / "runs" / "ncu_mlp" / "ncu" / "raw.csv"
SCRATCH = ROOT / "scratch" / "diff_scale"


def real_step_ms(name: str) -> np.ndarray:
    return step_samples(load(RUNS / name, workers=1, quiet=True), Thresholds())["step_ms"].to_numpy()


def tiled(x: np.ndarray, n: int) -> np.ndarray:
    return np.resize(x, n)


def timed(f):
    t0 = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t0


def grow_run(source: Path, target: Path, steps: int) -> Path:
    """``source`` with its step records repeated and renumbered to ``steps`` steps (other records once)."""
    if (target / "manifest.json").exists() and (target / ".steps").read_text() == str(steps):
        return target
    shutil.rmtree(target, ignore_errors=True)
    (target / "events").mkdir(parents=True)
    manifest = json.loads((source / "manifest.json").read_text())
    manifest["artifacts"] = {"events/rank0.jsonl": 0}
    (target / "manifest.json").write_text(json.dumps(manifest))
    records = [json.loads(line) for line in (source / "events" / "rank0.jsonl").read_text().splitlines() if line]
    step_records = [r for r in records if r.get("kind") == "step" and not r.get("instrumented")][1:]  # no warm-up
    others = [r for r in records if r.get("kind") == "run" and r.get("event") != "expect"]
    t_ns = step_records[0]["t_start_ns"]
    with open(target / "events" / "rank0.jsonl", "w") as f:
        for r in others[:1]:
            f.write(json.dumps(r) + "\n")
        for i in range(steps):
            r = dict(step_records[i % len(step_records)], step=i, t_start_ns=t_ns)
            t_ns += int(max(r["host_ms"], r["gpu_ms"]) * 1e6)
            f.write(json.dumps(r) + "\n")
        for r in others[1:]:
            f.write(json.dumps(r) + "\n")
    (target / ".steps").write_text(str(steps))
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100_000, help="steps (and ncu launches) a side")
    n = parser.parse_args().steps

    a_ms, b_ms = real_step_ms("repeat_a"), real_step_ms("repeat_b")
    xa, xb = tiled(a_ms, n), tiled(b_ms, n)
    test, s = timed(lambda: mann_whitney_u(xa, xb))
    print(f"Mann-Whitney U, {n:,} vs {n:,} step times with ties: {s:.3f} s  (p = {test.p_value:.3g})")
    rng = np.random.default_rng(0)
    xa_distinct, xb_distinct = xa + rng.uniform(0, 1e-6, n), xb + rng.uniform(0, 1e-6, n)
    test, s = timed(lambda: mann_whitney_u(xa_distinct, xb_distinct))
    print(f"Mann-Whitney U, {n:,} vs {n:,} distinct step times:   {s:.3f} s  (p = {test.p_value:.3g})")

    kernels = load(NCU_CSV, workers=1, quiet=True).kernels
    ka = kernels.iloc[np.resize(np.arange(len(kernels)), n)].reset_index(drop=True)
    kb = ka.assign(dur_ns=ka["dur_ns"] * 1.01)
    out, s = timed(lambda: kernel_diff(ka, kb, DiffOptions()))
    print(f"kernel diff, {n:,} vs {n:,} ncu launches of {len(out)} kernels:  {s:.3f} s")

    run_a = grow_run(RUNS / "repeat_a", SCRATCH / f"a_{n}", n)
    run_b = grow_run(RUNS / "repeat_b", SCRATCH / f"b_{n}", n)
    cmd = [sys.executable, "-m", "diagnose", "diff", str(run_a), str(run_b), "--json", str(SCRATCH / "diff.json")]
    cmd_html = [*cmd, "-o", str(SCRATCH / "diff.html")]
    r, s = timed(lambda: subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True))
    if r.returncode != 0:
        raise SystemExit(f"gpudiag diff failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    row = next(
        m for m in json.loads((SCRATCH / "diff.json").read_text())["metrics"] if m["key"] == "step_time_median_ms"
    )
    print(
        f"gpudiag diff, two run folders of {n:,} steps: {s:.2f} s  "
        f"(step_time_median_ms {row['a']:.3f} -> {row['b']:.3f}, n = {row['n_a']:,} vs {row['n_b']:,}, "
        f"p = {row['p_value']:.3g})"
    )
    r, s = timed(lambda: subprocess.run(cmd_html, cwd=ROOT, capture_output=True, text=True))
    if r.returncode != 0:
        raise SystemExit(f"gpudiag diff -o failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    size_mb = (SCRATCH / "diff.html").stat().st_size / 1e6
    print(f"gpudiag diff -o diff.html, the same folders: {s:.2f} s  (page {size_mb:.1f} MB)")


if __name__ == "__main__":
    main()
