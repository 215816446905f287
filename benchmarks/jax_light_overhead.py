"""Light mode's cost on an unchanged JAX loop, side by side with the plain run, interleaved.

Runs examples/jax_unchanged.py (a jitted update per batch, no gpudiag marker; it prints each epoch's
wall time) ``--repeats`` times each way, alternating:

    plain      python examples/jax_unchanged.py
    light      gpudiag profile -- python examples/jax_unchanged.py   (steps found from the jitted update)

and compares the median epoch time over the epochs after the first (compilation) and after light mode's
trace window. Issue 17 saw 0.23 s per epoch under light mode against 0.18 s plain (one run each), when
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


def run_once(kind: str, script_args: list[str], work: Path) -> list[float]:
    base = [sys.executable, str(SCRIPT), *script_args]
    if kind == "plain":
        command = base
    else:
        out = tempfile.mkdtemp(prefix="light-", dir=work)
        command = [sys.executable, "-m", "diagnose", "profile", "-q", "-o", str(Path(out) / "run"), "--", *base]
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
    args = p.parse_args(argv)
    script_args = ["--epochs", str(args.epochs), "--batches", str(args.batches), "--width", str(args.width)]
    per_kind: dict[str, list[float]] = {"plain": [], "light": []}
    with tempfile.TemporaryDirectory() as work:
        for repeat in range(args.repeats):
            order = ("plain", "light") if repeat % 2 == 0 else ("light", "plain")
            for kind in order:
                times = run_once(kind, script_args, Path(work))[args.skip_epochs :]
                per_kind[kind].append(statistics.median(times))
                print(f"repeat {repeat} {kind:6s} median epoch {per_kind[kind][-1] * 1e3:8.2f} ms", flush=True)
    plain, light = statistics.median(per_kind["plain"]), statistics.median(per_kind["light"])
    print(
        f"jax_unchanged.py, {args.batches} batches/epoch, epochs {args.skip_epochs}..{args.epochs - 1}, "
        f"{args.repeats} interleaved repeats: plain {plain * 1e3:.2f} ms/epoch, light {light * 1e3:.2f} ms/epoch, "
        f"light/plain {light / plain:.3f} ({(light / plain - 1) * 100:+.1f} %)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
