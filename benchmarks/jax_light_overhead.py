"""Light mode's cost on an unchanged JAX loop, side by side with the plain run, interleaved.

Runs examples/jax_unchanged.py (a jitted update per batch, no gpudiag marker; it prints each epoch's
wall time) ``--repeats`` times each way, alternating:

    plain      python examples/jax_unchanged.py
    light      gpudiag profile -- python examples/jax_unchanged.py   (steps found from the jitted update)

and compares the median epoch time over the epochs after the first (compilation) and after light mode's
trace window. ``--kinds`` adds light variants (no trace window, no NVML, minimal). Between processes the
same plain command's median epoch varied by -21 % .. +9 % on the H200 (2026-12-04): for a few per cent use
benchmarks/jax_light_overhead_interleaved.py, which switches light mode on and off inside one process. Issue 17 saw 0.23 s per epoch under light mode against 0.18 s plain (one run each), when
light mode saw no step.

    PYTHONPATH=$PWD python3 benchmarks/jax_light_overhead.py           # on the GPU machine
    python benchmarks/jax_light_overhead.py --epochs 4 --batches 20    # a CPU smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "jax_unchanged.py"


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDIAG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def epoch_times(stdout: str) -> list[float]:
    return [float(line.split()[3]) for line in stdout.splitlines() if line.startswith("epoch ") and " took " in line]


# light-mode variants (profile flags), to find which part costs what when light is slower than plain
LIGHT_VARIANTS = {
    "light": [],
    "light-notrace": ["--trace-steps", "0"],  # no trace window: no JAX profiler session at all
    "light-nonvml": ["--no-nvml"],  # no NVML sampling thread in gpudiag's own process
    "light-minimal": ["--trace-steps", "0", "--history-entries", "0", "--memory-stats-interval-ms", "1e9", "--no-nvml"],
}


def run_once(kind: str, script_args: list[str], work: Path) -> list[float]:
    base = [sys.executable, str(SCRIPT), *script_args]
    if kind == "plain":
        command = base
    else:
        out = tempfile.mkdtemp(prefix=f"{kind}-", dir=work)
        flags = LIGHT_VARIANTS[kind]
        command = [sys.executable, "-m", "diagnose", "profile", "-q", "-o", str(Path(out) / "run"), *flags, "--", *base]
    r = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        raise SystemExit(f"{kind} run failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return epoch_times(r.stdout)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batches", type=int, default=100)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-epochs", type=int, default=2, help="epochs left out: compilation and the trace window")
    p.add_argument("--kinds", default="plain,light", help=f"comma-separated, of plain, {', '.join(LIGHT_VARIANTS)}")
    args = p.parse_args(argv)
    script_args = ["--epochs", str(args.epochs), "--batches", str(args.batches), "--width", str(args.width)]
    kinds = args.kinds.split(",")
    unknown = [k for k in kinds if k != "plain" and k not in LIGHT_VARIANTS]
    if unknown or "plain" not in kinds:
        raise SystemExit(f"--kinds must include plain and name only plain, {', '.join(LIGHT_VARIANTS)}: {unknown}")
    medians: dict[str, list[float]] = {k: [] for k in kinds}
    pooled: dict[str, list[float]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as work:
        for repeat in range(args.repeats):
            order = kinds if repeat % 2 == 0 else kinds[::-1]  # interleaved, alternating order
            for kind in order:
                times = run_once(kind, script_args, Path(work))[args.skip_epochs :]
                medians[kind].append(statistics.median(times))
                pooled[kind].extend(times)
                print(f"repeat {repeat} {kind:14s} median epoch {medians[kind][-1] * 1e3:8.2f} ms", flush=True)
    plain = statistics.median(pooled["plain"])
    print(
        f"\njax_unchanged.py, {args.batches} batches/epoch, epochs {args.skip_epochs}..{args.epochs - 1}, "
        f"{args.repeats} interleaved repeats; median over every kept epoch of every repeat"
    )
    print(f"{'config':<15} {'ms/epoch':>9} {'per-repeat medians':<40} {'vs plain':>9}")
    for kind in kinds:
        median = statistics.median(pooled[kind])
        per = ", ".join(f"{m * 1e3:.1f}" for m in medians[kind])
        print(f"{kind:<15} {median * 1e3:>9.2f} {per:<40} {100 * (median / plain - 1):>+8.1f}%")
    spread = [100 * (m / plain - 1) for m in medians["plain"]]
    print(f"run-to-run spread of plain's per-repeat medians: {min(spread):+.1f}% to {max(spread):+.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
