"""Which part of light mode's step boundary costs the step what (a diagnostic, not a benchmark).

benchmarks/light_overhead_interleaved.py on the H200 (2026-12-03) found every light step about 55 µs
slower than a plain one, at every quantile, while the boundary's own timer read 19 µs (median). This
runs the same interleaving (hook on / off every ``--run-steps`` steps, one process) for variants of
the boundary, each for ``--seconds``: no-op and fixed-spin hooks (what any hook costs), light mode
with the defaults, and light mode without NVTX, without CUDA events, without memory_stats, and
without all three. Per variant: the median and mean step shift in µs (pooled, with a 95 % interval
resampling rounds), the boundary's own µs, and the shift by position in a run (the first step after
switching on against the rest). Run on the H200 on 2026-12-03 (17:45, before the NVTX gate, the cheaper
step log and the benchmark's tripled intervals): docs/measurements/h200-2026-12-03-interleaved.md.

    PYTHONPATH=$PWD python3 tools/overhead_sources.py [--seconds 30] [--variants light,no-nvtx]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from light_overhead_interleaved import ARMS, StepHook, light_share_intervals, own_time, round_bootstrap, run_rounds  # noqa: E402
from light_overhead_paired import device_info, make_step, time_steps  # noqa: E402

NO_EVENTS = 1_000_000_000  # gpu_time_every: only step 0 would be timed
RUNTIME_VARIANTS = {
    "light": {},
    "always-nvtx": dict(nvtx="always"),  # the ranges pushed with no tool listening (before 2026-12-03's gate)
    "no-nvtx": dict(nvtx=False),
    "no-events": dict(gpu_time_every=NO_EVENTS),
    "no-stats": dict(memory_stats_interval_ms=1e12),
    "bare": dict(nvtx=False, gpu_time_every=NO_EVENTS, memory_stats_interval_ms=1e12),
    "every-step-events": dict(gpu_time_every=1),
}
HOOK_VARIANTS = ("noop-hook", "spin-20us")
VARIANTS = HOOK_VARIANTS + tuple(RUNTIME_VARIANTS)


class FunctionHook:
    """A plain function as the global optimizer step post hook, switched on and off like StepHook."""

    def __init__(self, fn):
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._register, self._fn, self._handle = register_optimizer_step_post_hook, fn, None

    def set(self, on: bool) -> None:
        if on and self._handle is None:
            self._handle = self._register(self._fn)
        elif not on and self._handle is not None:
            self._handle.remove()
            self._handle = None


def spin_hook(spin_ns: int):
    def hook(optimizer, args, kwargs):
        end = time.perf_counter_ns() + spin_ns
        while time.perf_counter_ns() < end:
            pass

    return hook


def measure(variant: str, step, args, work: Path) -> dict:
    import diagnose
    from diagnose.launch.runtime import lifecycle

    if variant in HOOK_VARIANTS:
        hook = FunctionHook(spin_hook(20_000) if variant == "spin-20us" else (lambda o, a, k: None))
        times = run_rounds(step, hook, args.run_steps, args.seconds, 10**9, 0)
        hook.set(False)
        return {"times": times, "own": None}
    # as in the benchmark: light is on a third of the time, so its clock-kept intervals are tripled
    with (
        light_share_intervals() as options,
        diagnose.profile(out=work / variant, quiet=True, nvml=False, **{**options, **RUNTIME_VARIANTS[variant]}) as run,
    ):
        time_steps(step, 40)
        times = run_rounds(step, StepHook(lifecycle.active()), args.run_steps, args.seconds, 10**9, 0)
    return {"times": times, "own": own_time(run.path, 40)}


def shift_us(times: np.ndarray, stat) -> tuple[float, float, float]:
    light, plain = ARMS.index("light"), ARMS.index("plain")
    value = 1000 * (stat(times[:, light, :]) - stat(times[:, plain, :]))
    low, high = round_bootstrap(times, light, stat, resamples=500)
    base = stat(times[:, plain, :]) * 1000
    return value, (low - 1) * base, (high - 1) * base


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--run-steps", type=int, default=8)
    p.add_argument("--variants", default=",".join(VARIANTS))
    args = p.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    if any(v not in VARIANTS for v in variants):
        raise SystemExit(f"--variants: choose from {', '.join(VARIANTS)}")
    import torch

    step = make_step(args.device, 1024, 4, 64)
    time_steps(step, 500)
    print(
        f"torch {torch.__version__} on {device_info(torch, args.device)[1]}; "
        f"runs of {args.run_steps} steps, {args.seconds:g} s a variant; shifts are light arm - plain arm, µs"
    )
    print(
        f"{'variant':<18} {'rounds':>6} {'plain ms':>8} {'median shift':>13} {'95% interval':>17} "
        f"{'mean shift':>10} {'own med':>7} {'own mean':>8} {'GPU-timed':>9}  shift by position (median)"
    )
    with tempfile.TemporaryDirectory(prefix="gpudiag-sources-") as work:
        for variant in variants:
            result = measure(variant, step, args, Path(work))
            times, own = result["times"], result["own"]
            med, low, high = shift_us(times, np.median)
            mean = 1000 * (np.mean(times[:, 0, :]) - np.mean(times[:, 1, :]))
            positions = [1000 * (np.median(times[:, 0, i]) - np.median(times[:, 1, i])) for i in range(times.shape[2])]
            own_text = (
                f"{own['own_median_us']:>7.1f} {own['own_us']:>8.1f} {own['gpu_timed_pct']:>8.1f}%"
                if own and own.get("own_us") is not None
                else f"{'-':>7} {'-':>8} {'-':>9}"
            )
            print(
                f"{variant:<18} {len(times):>6} {np.median(times[:, 1, :]):>8.4f} {med:>+13.1f} "
                f"{low:>+8.1f} .. {high:+.1f} {mean:>+10.1f} {own_text}  " + " ".join(f"{v:+.0f}" for v in positions),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
