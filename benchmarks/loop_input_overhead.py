"""Light mode's loop watcher (Python 3.12+): its cost per iteration of a loop over a generator, on and off in one process.

Why: diagnose/launch/runtime/loop_input.py watches the training loop's ``for`` with ``sys.monitoring`` local
events, two callbacks per iteration (the jump back to ``FOR_ITER`` and the branch into the body). Their cost
does not depend on the GPU, only on the host's Python; it is measured alone here, against a loop short
enough to show a microsecond, and read as a share of a real step elsewhere (docs/measurements).

How: a generator spins ``--fetch-us`` before each item, the loop body spins ``--body-us``; the loop below is
the watched one. After one armed warm-up run come rounds of three runs of ``--run-steps`` iterations, in a
seeded random order per round (benchmarks/light_overhead_interleaved.py's design and statistics):

    light     the watcher's events set on the loop's code (re-set at the run's start, as after a trace window)
    plain     the loop's events off: the loop runs as without gpudiag
    plain-b   plain again: the A/A control, whose interval should hold 0

It prints each arm's median iteration against plain (95 % intervals resampling whole rounds), the added µs
per iteration, and checks the watcher's measure: the fetch time it summed per light iteration.

    python3.12 benchmarks/loop_input_overhead.py --seconds 20
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [p for p in (str(REPO), str(REPO / "benchmarks")) if p not in sys.path]
from light_overhead_interleaved import ARMS, summarize  # noqa: E402

from diagnose.launch.runtime.loop_input import LoopInputWait, available  # noqa: E402


def spin(us: float) -> None:
    end = time.perf_counter_ns() + int(us * 1000)
    while time.perf_counter_ns() < end:
        pass


def batches(fetch_us: float):
    """An input pipeline written as a generator: no DataLoader, nothing gpudiag can wrap."""
    i = 0
    while True:
        spin(fetch_us)
        yield i
        i += 1


class Watch:
    """The watcher armed once on ``run``'s loop, then its events switched on and off per run."""

    def __init__(self):
        self.watcher = LoopInputWait(threading.get_ident())
        self.on = True

    def arm_here(self, frame) -> None:
        if not self.watcher.armed and not self.watcher.arm(frame):
            raise SystemExit("the loop watcher found no loop to watch")

    def set(self, on: bool) -> None:
        self.on = on
        if on:
            self.watcher.rearm()
        else:
            sys.monitoring.set_local_events(self.watcher._tool, self.watcher._code, 0)


def run(items, n: int, body_us: float, watch: Watch) -> list[float]:
    """The watched training loop: ``n`` iterations' wall times (ms)."""
    times = []
    last = time.perf_counter_ns()
    for _ in items:
        if not watch.watcher.armed:
            watch.arm_here(sys._getframe())
        spin(body_us)
        now = time.perf_counter_ns()
        times.append((now - last) / 1e6)
        last = now
        if len(times) == n:
            break
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fetch-us", type=float, default=5.0)
    p.add_argument("--body-us", type=float, default=20.0)
    p.add_argument("--run-steps", type=int, default=20)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if not available():
        raise SystemExit(f"Python {sys.version.split()[0]} has no sys.monitoring: the watcher needs 3.12+")
    items = batches(args.fetch_us)
    watch = Watch()
    run(items, args.run_steps, args.body_us, watch)  # arms the watcher on run's loop
    rng = random.Random(args.seed)
    rounds, light_calls, light_ns = [], 0, 0
    t0 = time.monotonic()
    while not rounds or time.monotonic() - t0 < args.seconds:
        order = list(ARMS)
        rng.shuffle(order)
        times = {}
        for arm in order:
            watch.set(arm == "light")
            calls, total_ns = watch.watcher.calls, watch.watcher.total_ns
            times[arm] = run(items, args.run_steps, args.body_us, watch)
            if arm == "light":
                light_calls += watch.watcher.calls - calls
                light_ns += watch.watcher.total_ns - total_ns
        rounds.append([times[arm] for arm in ARMS])
    watch.watcher.disarm()
    rows = summarize(np.array(rounds))
    plain_ms = rows["plain"]["median_ms"]
    print(
        f"Python {sys.version.split()[0]}; {len(rounds)} rounds of {args.run_steps} iterations; "
        f"generator {args.fetch_us:g} µs an item, body {args.body_us:g} µs"
    )
    print(f"{'arm':<8} {'steps':>6} {'median µs':>10} {'vs plain (95 % interval)':>36} {'added µs':>9}")
    for arm in ARMS:
        row = rows[arm]
        vs = added = ""
        if arm != "plain":
            vs = f"{row['median_pct']:+.2f}% ({row['median_ci_low_pct']:+.2f}% .. {row['median_ci_high_pct']:+.2f}%)"
            added = f"{(row['median_ms'] - plain_ms) * 1e3:+.2f}"
        print(f"{arm:<8} {row['steps']:>6} {row['median_ms'] * 1e3:>10.2f} {vs:>36} {added:>9}")
    fetched = light_ns / light_calls / 1e3 if light_calls else float("nan")
    print(f"the watcher's fetch time: {light_calls} fetches in the light runs, {fetched:.2f} µs mean each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
