"""Light mode's steady-state cost per step of an unchanged JAX loop: its jit step hook on and off in alternating runs.

Why: benchmarks/jax_light_overhead.py compares whole processes. On the H200 (2026-12-04) the per-process
median epoch of the same plain command varied from -21 % to +9 % between three runs, so its +8.7 % for light
(and -6.1 % for light without the trace window) said nothing. Here one process does both, switching every
few steps, as benchmarks/light_overhead_interleaved.py does for torch, so the wander cancels.

How: the step is jax_unchanged.py's (a jitted MLP update on a numpy batch, then ``float(loss)``), jitted
inside ``diagnose.profile(nvml=False)``, so light mode's jit finder wraps it and finds the steps from it
(``source: "jit"``) as it does in a script. ``--first-steps`` steps run first with light on: the trace
window (steps 10-12, a JAX profiler session) and the allocator snapshot are behind before measuring. Then
rounds of four runs of ``--run-steps`` steps, in a seeded random order per round:

    light       the step calls light mode's proxy: every call is a step boundary (the step log, memory stats)
    no-sampler  light with the long-step sampler's thread paused (it runs in light only)
    plain       the step calls jax's own jitted function under the proxy: no gpudiag code runs in the step
    plain-b     plain again: the A/A control, whose interval should hold 0

While the two boundary arms run half of the time, light mode's clock-kept intervals (the step log's writes,
memory_stats) are divided by that share, as in light_overhead_interleaved.py, so each boundary step carries the
share of them it has when light is always on. The first step of each run follows a switch (code and data of the
other arm's path cold): "past the first step" is the median shift at the run's later positions, what a run that
never switches pays.

A boundary split around jax's call (the clock read and the step number before it, the record and the drains after
it, while the device runs the step) was measured against the same boundary all before the call, in one process
(H100, 2026-12-05, 2,746 rounds): +3.19 % against +2.63 %. Work after the dispatch is not hidden behind the
device's; the boundary stays before the call.

It also times ``--dispatch-calls`` dispatches of a tiny jitted op before light mode starts and after its
trace window: a profiler session that left CUPTI's callbacks on would make every later dispatch slower,
which the step hook's arms cannot see (both arms would carry it).

    PYTHONPATH=$PWD python3 benchmarks/jax_light_overhead_interleaved.py          # on the GPU machine
    python benchmarks/jax_light_overhead_interleaved.py --seconds 5                # a CPU smoke run
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
JAX_ARMS = ("light", "no-sampler", "plain", "plain-b")
BOUNDARY_SHARE = 2 / len(JAX_ARMS)  # of the time: the arms with a step boundary
sys.path[:0] = [p for p in (str(REPO), str(REPO / "benchmarks"), str(REPO / "examples")) if p not in sys.path]
from light_overhead_interleaved import (  # noqa: E402
    light_share_intervals,
    own_time,
    position_shifts,
    run_rounds,
    set_light_extras,
    summarize,
)


class JitHook:
    """Switches the step between the arms (JAX_ARMS): light mode's proxy (light, no-sampler) and jax's own jitted
    function (plain, plain-b); the long-step sampler's thread runs in light only."""

    def __init__(self, proxy, steps=None):
        if not hasattr(proxy, "_jitted"):
            raise SystemExit("light mode did not wrap jax.jit: nothing to switch")
        self.proxy, self.call, self.steps = proxy, proxy, steps

    def set_arm(self, arm: str) -> None:
        self.call = self.proxy if arm in ("light", "no-sampler") else self.proxy._jitted
        set_light_extras(self.steps, arm == "light")


def dispatch_us(add, jnp, calls: int) -> float:
    """Median µs of one dispatch of a tiny jitted op (jitted before light mode: jax's own function), each waited for."""
    a = jnp.zeros(16)
    add(a).block_until_ready()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        add(a).block_until_ready()
        times.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--run-steps", type=int, default=20)
    p.add_argument("--max-rounds", type=int, default=100000)
    p.add_argument("--first-steps", type=int, default=60)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--dispatch-calls", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-gc", action="store_true", help="Python's cyclic GC off while measuring (a diagnostic)")
    args = p.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import jax_unchanged as script  # the example's model and update, jitted again below under light mode

    import diagnose

    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 64)).astype(np.float32)
    y = x[:, :1] * 0.5
    add = jax.jit(lambda a: a + 1.0)
    dispatch_us(add, jnp, args.dispatch_calls)  # warm-up: the first batch of dispatches runs slower
    before_us = dispatch_us(add, jnp, args.dispatch_calls)
    with tempfile.TemporaryDirectory(prefix="gpudiag-jax-bench-") as work:
        with (
            light_share_intervals(BOUNDARY_SHARE) as options,
            diagnose.profile(out=Path(work) / "run", nvml=False, quiet=True, **options),
        ):
            # jitted after light mode started, as a script's @jax.jit runs after gpudiag's bootstrap
            update = jax.jit(script.update.__wrapped__)
            params = script.init(jax.random.PRNGKey(0), [64, args.width, args.width, 1])
            from diagnose.launch.runtime import lifecycle

            hook = JitHook(update, lifecycle.active().steps)
            state = {"params": params}

            def step():
                state["params"], loss = hook.call(state["params"], x, y, 0.01)
                float(loss)

            for _ in range(args.first_steps):
                step()
            if args.no_gc:
                gc.disable()
            dispatch_us(add, jnp, args.dispatch_calls)
            after_us = dispatch_us(add, jnp, args.dispatch_calls)
            set_light_extras(hook.steps, False)  # the long-step sampler paused: is the slower dispatch its doing?
            paused_us = dispatch_us(add, jnp, args.dispatch_calls)
            set_light_extras(hook.steps, True)
            times = run_rounds(step, hook, args.run_steps, args.seconds, args.max_rounds, args.seed, JAX_ARMS)
            gc.enable()
            run_path = Path(work) / "run"
        own = own_time(run_path, args.first_steps)
    rows = summarize(times, arms=JAX_ARMS)
    print(
        f"jax {jax.__version__} on {jax.devices()[0].device_kind}; {times.shape[0]} rounds of {args.run_steps} steps; "
        f"{'GC off' if args.no_gc else 'GC on'}"
    )
    print(f"{'arm':<10} {'steps':>6} {'median ms':>10} {'vs plain (95 % interval)':>36}")
    for arm in JAX_ARMS:
        row = rows[arm]
        vs = (
            ""
            if arm == "plain"
            else (f"{row['median_pct']:+.2f}% ({row['median_ci_low_pct']:+.2f}% .. {row['median_ci_high_pct']:+.2f}%)")
        )
        print(f"{arm:<10} {row['steps']:>6} {row['median_ms']:>10.4f} {vs:>36}")
    if own["own_median_us"] is not None:
        print(
            f"gpudiag's own time per light step (overhead_us of {own['records']} step records): median "
            f"{own['own_median_us']:.1f} µs, mean {own['own_us']:.1f} µs"
        )
    print(position_shifts(rows, JAX_ARMS))
    print(
        f"tiny jitted dispatch: {before_us:.1f} µs before light mode, {after_us:.1f} µs after its trace window "
        f"({100 * (after_us / before_us - 1):+.1f} %); {paused_us:.1f} µs so with the long-step sampler paused"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
