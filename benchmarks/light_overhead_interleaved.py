"""Light mode's steady-state cost per step: its step hook on and off in alternating runs of a few steps.

Why this design: benchmarks/light_overhead_paired.py compares 50-step blocks, each between two plain
blocks. On the H200 host (2026-12-03, three calls) the medians of plain blocks 0.3 s apart varied by
8-9 % (sd of each against its neighbours), so after 90 groups its 95 % interval on light was still
about ±1.9 points wide. The step time wanders on a scale of blocks, not of steps: switching light mode
on and off every few steps puts both arms into the same moments, and the wander cancels.

How: one process trains the model of examples/train_mlp.py (same step: forward, backward, SGD with
momentum, ``loss.item()``). ``diagnose.profile(nvml=False)`` with the defaults (trace window at steps
5-7, the allocator snapshot after it) first runs ``--first-steps`` steps, so the window and the
snapshot are behind: what is measured is the issue's "outside the trace window". Then come rounds of
three runs of ``--run-steps`` steps each, in a seeded random order per round:

    light     the runtime's optimizer step hook attached: each step boundary does all its work
              (CUDA events on one step in k, NVTX ranges, the step log, memory_stats now and then)
    plain     the hooks detached (the optimizer step hooks, the autograd.backward wrapper, the forward
              timer's module hooks; the long-step sampler paused): torch's hook tables are as empty as
              without gpudiag, so the step runs as in an uninstrumented process
    plain-b   plain under another name: the A/A control, whose interval should hold 0

and, with ``--arms light,no-sampler,no-forward,no-phases,no-events,plain,plain-b``, light with one part paused: the
long-step sampler, the forward timer, the backward and optimizer phase timers, or the boundary's CUDA event: what
those parts cost, measured as light's is (their runs count among light's for the clock-kept intervals and the step
records).

Result per arm against plain: median of all its steps / median of all plain steps - 1 (the issue's
"median step"), and the same with means; bootstrap 95 % intervals that resample whole rounds. Verdict:
PASS when light's median interval tops out at or below the 3 % target, FAIL when its bottom is above.

Light is on a third of the time, so the two intervals light mode keeps by the clock (the step log is
written every 100 ms, memory_stats read every 500 ms) are tripled here: each light step then carries the
share of those writes and reads it has when light is on all the time. Without that, the first H200 run
(2026-12-03 17:32) put a log write on most first steps after switching on (+100 µs at that position
against +57 µs at the others). The shift by position in a run is printed to show such effects, and the median
shift past the first position ("past the first step"): a run's first step follows a switch, whose hooks going back
in and cold code a run that never switches does not pay. Runs are 16 steps long (4 until 2026-12-05): on two H100
hosts that evening the shift fell over a run's first steps (+82 +59 +42 +29 µs on a 1.76 ms step; +111 +104 +55 +46
on a 2.75 ms one), so runs of 4 charged the switch to every light step's quarter; 16 steps of 2-3 ms still switch
ten times faster than the step time wanders (0.3 s blocks), and the JAX benchmark's runs are 20. One bias
is left, toward a higher cost: the step that spans a plain run enters the choice of k as one long step.
The window's after-effects are not in this measure: light_overhead_paired.py's ``after`` and
``light-late`` kinds measure those (plain blocks right after light read -0.7 .. -1.2 %, H200).

    PYTHONPATH=$PWD python3 benchmarks/light_overhead_interleaved.py            # on the GPU machine
    python benchmarks/light_overhead_interleaved.py --device cpu --seconds 5 --run-steps 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [p for p in (str(REPO), str(REPO / "benchmarks")) if p not in sys.path]
from light_overhead_paired import (  # noqa: E402
    TARGET_PCT,
    device_info,
    make_step,
    mlp_parts,
    step_records,
    time_steps,
)

ARMS = ("light", "plain", "plain-b")
LIGHT_SHARE = 1 / len(ARMS)  # of the wall time: the clock-kept intervals are divided by it
# --arms may add these: light mode with one of its parts paused, to say what that part costs (the JAX benchmark's
# no-sampler arm read 0.3-0.6 points of its cost on an H100, 2026-12-06; torch's forward timer's one step in eight
# showed as peaks at positions 6 and 14 of its runs). The runtime attribute each pauses:
EXTRA_ARMS = {
    "no-sampler": "long_step_code",
    "no-forward": "forward",
    "no-phases": None,
    "no-events": None,
    "phases-every-step": None,
}
# no-phases: the optimizer pre hook and the autograd.backward wrapper off (the backward and optimizer phases untimed),
# the boundary on; no-events: the boundary records no CUDA event (its GPU time), the rest on; phases-every-step: the
# pre hook and the wrapper on in every step, as light mode ran them until 2026-12-06 (now in the forward's timed steps
# only: what the sampling saves). no-forward pauses the forward's schedule, and with it the phases' sampled steps.


def set_light_extras(steps, on: bool) -> None:
    """The long-step sampler (long_step_code), the forward timer's hooks (forward_time), the optimizer step pre hook
    and the autograd.backward wrapper (the optimizer and backward phases) run in the light arm only: their cost is
    light mode's. (Until 2026-12-05 the pre hook and the wrapper stayed on in the plain arms too, so their cost, 2.5
    µs a step on the 2-core CPU host, was in neither arm's difference.)"""
    for part in (getattr(steps, "long_step_code", None), getattr(steps, "forward", None)):
        if part is not None:
            part.resume() if on else part.pause()
    steps._sampling_step = 0  # the forward timer's schedule is read again at the next boundary
    set_phase_timers(steps, on)
    set_gpu_events(steps, on)
    if on:
        set_phase_sampling(steps, True)


def set_phase_sampling(steps, on: bool) -> None:
    """The phase timers in the forward's timed steps only (the runtime's way) or, off, in every step."""
    if hasattr(steps, "set_phase_sampling"):
        steps.set_phase_sampling(on)


# id(steps) -> the gpu time's (every, next_check) while the no-events arm runs
_GPU_EVERY_OFF: dict[int, tuple[int, float]] = {}


def set_gpu_events(steps, on: bool) -> None:
    """The boundary's CUDA event (one in gpu.every steps) and the choice of k on or off: off, no step is due one."""
    gpu = getattr(steps, "gpu", None)
    if gpu is None:
        return
    if not on and id(steps) not in _GPU_EVERY_OFF:
        _GPU_EVERY_OFF[id(steps)] = (gpu.every, gpu.next_check)
        gpu.every, gpu.next_check = 1 << 62, math.inf
    elif on and id(steps) in _GPU_EVERY_OFF:
        gpu.every, gpu.next_check = _GPU_EVERY_OFF.pop(id(steps))


def set_phase_timers(steps, on: bool) -> None:
    """The optimizer step pre hook and the autograd.backward wrapper (the optimizer and backward phases) on or off:
    the runtime's own pause (steps.pause_phase_timers), which its sampling of the phases (one step in 16, with the
    forward's) respects; on again, they are as the sampling left them."""
    if not hasattr(steps, "pause_phase_timers"):
        return
    steps.resume_phase_timers() if on else steps.pause_phase_timers()


class StepHook:
    """Attaches and detaches the active runtime's global optimizer step hook, and light mode's other per-step parts
    with it (set_light_extras): with it off no boundary runs, no hook of gpudiag's is in torch and the sampler's
    thread sleeps."""

    def __init__(self, runtime):
        from torch.optim.optimizer import register_optimizer_step_post_hook

        if runtime is None or runtime.steps.optimizer_hook_handle is None:
            raise SystemExit("light mode did not hook the optimizer: nothing to switch")
        self._register = register_optimizer_step_post_hook
        self._steps = runtime.steps

    def set_arm(self, arm: str) -> None:
        """light and the EXTRA_ARMS: the hook on (an extra arm with its part paused); the plain arms: off."""
        self.set(arm == "light" or arm in EXTRA_ARMS)
        if arm == "no-phases":
            set_phase_timers(self._steps, False)
        elif arm == "no-events":
            set_gpu_events(self._steps, False)
        elif arm == "phases-every-step":
            set_phase_sampling(self._steps, False)
        part = getattr(self._steps, EXTRA_ARMS.get(arm) or "", None)
        if part is not None:
            part.pause()
            self._steps._sampling_step = 0

    def set(self, on: bool) -> None:
        steps = self._steps
        set_light_extras(steps, on)
        if on and steps.optimizer_hook_handle is None:
            steps.optimizer_hook_handle = self._register(steps.on_optimizer_step)
        elif not on and steps.optimizer_hook_handle is not None:
            steps.optimizer_hook_handle.remove()
            steps.optimizer_hook_handle = None


SEGMENTS = ("batch", "forward", "backward", "optimizer", "item")  # --split: where a step's time goes


def make_split_step(device: str, width: int, depth: int, batch: int):
    """make_step's step with a perf_counter_ns read after each of its SEGMENTS (the batch and its copy, the model's
    call with the loss, zero_grad with backward(), optimizer.step() with light mode's hooks and boundary, loss.item()
    waiting for the GPU): (step, log), log a list that gets one tuple of segment ns per call. Which segment light
    mode lengthens says where its cost lands: on the host's own calls, or as a later GPU (item)."""
    make_batch, generator, model, loss_fn, optimizer = mlp_parts(device, width, depth, batch)
    log: list[tuple[int, ...]] = []
    clock = time.perf_counter_ns

    def step() -> float:
        t0 = clock()
        x, y = make_batch(generator, batch, width, device)
        t1 = clock()
        loss = loss_fn(model(x), y)
        t2 = clock()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        t3 = clock()
        optimizer.step()
        t4 = clock()
        value = loss.item()
        t5 = clock()
        log.append((t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4))
        return value

    return step, log


def split_table(split: dict[str, list], arms: tuple[str, ...]) -> str:
    """Per arm, the median µs of each segment and its shift from plain's, as printed lines."""
    medians = {arm: np.median(np.asarray(split[arm], dtype=float), axis=0) / 1000 for arm in arms if split.get(arm)}
    plain = medians.get("plain")
    lines = [f"{'segment µs':<10} " + " ".join(f"{seg:>16}" for seg in SEGMENTS)]
    for arm, row in medians.items():
        cells = [
            f"{v:9.1f}" + ("" if plain is None or arm == "plain" else f" {v - plain[i]:+6.1f}")
            for i, v in enumerate(row)
        ]
        lines.append(f"{arm:<10} " + " ".join(f"{c:>16}" for c in cells))
    return "\n".join(lines)


def run_rounds(
    step,
    hook,
    run_steps: int,
    seconds: float,
    max_rounds: int,
    seed: int,
    arms: tuple[str, ...] = ARMS,
    log: list | None = None,
    split: dict | None = None,
) -> np.ndarray:
    """Step times (ms), shaped (rounds, arms in ``arms`` order, run_steps). A hook with ``set_arm`` is given each arm's
    name; else ``set(arm == "light")``. With a split step's ``log``, each arm's segment tuples go to ``split[arm]``."""
    rng = random.Random(seed)
    rounds = []
    t0 = time.monotonic()
    set_arm = getattr(hook, "set_arm", None) or (lambda arm: hook.set(arm == "light"))
    while len(rounds) < max_rounds and (not rounds or not seconds or time.monotonic() - t0 < seconds):
        order = list(arms)
        rng.shuffle(order)
        times = {}
        for arm in order:
            set_arm(arm)
            start = len(log) if log is not None else 0
            times[arm] = time_steps(step, run_steps)
            if log is not None and split is not None:
                split.setdefault(arm, []).extend(log[start:])
        rounds.append([times[arm] for arm in arms])
    set_arm("light")
    return np.asarray(rounds, dtype=float)


def pooled_ratio(times: np.ndarray, arm: int, stat, plain: int = ARMS.index("plain")) -> float:
    return float(stat(times[:, arm, :]) / stat(times[:, plain, :]))


def round_bootstrap(
    times: np.ndarray, arm: int, stat, resamples: int = 2000, seed: int = 0, plain: int = ARMS.index("plain")
) -> tuple[float, float]:
    """95 % interval of the pooled ratio, resampling whole rounds (seeded: the same rounds give the same interval)."""
    rng = np.random.default_rng(seed)
    n = len(times)
    ratios = np.sort([pooled_ratio(times[rng.integers(0, n, n)], arm, stat, plain) for _ in range(resamples)])
    return float(ratios[int(0.025 * resamples)]), float(ratios[int(0.975 * resamples) - 1])


def summarize(times: np.ndarray, resamples: int = 2000, arms: tuple[str, ...] = ARMS) -> dict[str, dict]:
    """Per arm: steps, median and mean step (ms); against plain, the median and mean ratios in % with intervals."""
    rows = {}
    plain = arms.index("plain")
    for i, arm in enumerate(arms):
        row = {
            "steps": int(times[:, i, :].size),
            "median_ms": float(np.median(times[:, i, :])),
            "mean_ms": float(np.mean(times[:, i, :])),
        }
        if arm != "plain":
            for name, stat in (("median", np.median), ("mean", np.mean)):
                low, high = round_bootstrap(times, i, stat, resamples, plain=plain)
                row[f"{name}_pct"] = 100 * (pooled_ratio(times, i, stat, plain) - 1)
                row[f"{name}_ci_low_pct"], row[f"{name}_ci_high_pct"] = 100 * (low - 1), 100 * (high - 1)
        if arm != "plain":
            row["shift_by_position_us"] = [
                1000 * float(np.median(times[:, i, p]) - np.median(times[:, plain, p])) for p in range(times.shape[2])
            ]
            if times.shape[2] > 1:  # past the first step of a run: what light costs where no switch came just before
                shifts = row["shift_by_position_us"][1:]
                row["after_first_pct"] = 100 * statistics.median(shifts) / 1000 / float(np.median(times[:, plain, :]))
        rows[arm] = row
    return rows


def position_shifts(rows: dict[str, dict], arms: tuple[str, ...]) -> str:
    """The median shift of each arm by position in a run, and each arm's median shift past the first step (% of the
    plain median), as printed lines."""
    shifts = "; ".join(
        f"{arm} " + " ".join(f"{v:+.0f}" for v in rows[arm]["shift_by_position_us"]) for arm in arms if arm != "plain"
    )
    past = ", ".join(f"{arm} {rows[arm]['after_first_pct']:+.2f}%" for arm in arms if "after_first_pct" in rows[arm])
    return (
        f"median shift by position in a run (µs, against plain at the same position): {shifts}\n"
        f"past the first step of its runs: {past}"
    )


def verdict(rows: dict[str, dict], own: dict | None = None) -> tuple[str, str]:
    light, control = rows["light"], rows["plain-b"]
    text = (
        f"light mode adds {light['median_pct']:+.2f}% (95 % interval {light['median_ci_low_pct']:+.2f}% .. "
        f"{light['median_ci_high_pct']:+.2f}%) to the median step outside the trace window, "
        f"{light['mean_pct']:+.2f}% to the mean (target <= {TARGET_PCT:.0f}% on the median)"
    )
    if own and own.get("own_us") is not None:
        text += (
            f"; gpudiag's own work: {own['own_us']:.1f} µs/step = "
            f"{100 * own['own_us'] / 1000 / rows['plain']['median_ms']:.2f}% of the plain median"
        )
    text += (
        f"; control {control['median_pct']:+.2f}% ({control['median_ci_low_pct']:+.2f}% .. "
        f"{control['median_ci_high_pct']:+.2f}%)"
    )
    if light["median_ci_high_pct"] <= TARGET_PCT:
        return "PASS", text
    if light["median_ci_low_pct"] > TARGET_PCT:
        return "FAIL", text
    return "NO VERDICT", text + ": the interval straddles the target"


def own_time(run_path: Path, first_step: int) -> dict:
    """gpudiag's own µs per light step (``overhead_us``), the share of them GPU-timed, and how many records
    the measured part wrote (one per light step: a check that detaching the hook stops the boundaries)."""
    records = step_records(run_path, first_step)
    own, timed = records["overhead_us"], records["gpu_timed"]
    return {
        "records": len(timed),
        "own_us": statistics.fmean(own) if own else None,
        "own_median_us": statistics.median(own) if own else None,
        "gpu_timed_pct": 100 * sum(timed) / len(timed) if timed else None,
    }


@contextlib.contextmanager
def light_share_intervals(share: float = LIGHT_SHARE):
    """While light is on ``share`` of the time, its clock-kept intervals divided by that share: the step
    log's here (a module constant the boundary reads), memory_stats' as the profile options yielded."""
    from diagnose.launch.capture_mode import ProfileOptions
    from diagnose.launch.runtime import steps

    record_interval_ns = steps.STEP_RECORD_INTERVAL_NS
    steps.STEP_RECORD_INTERVAL_NS = round(record_interval_ns / share)
    try:
        yield {"memory_stats_interval_ms": ProfileOptions.memory_stats_interval_ms / share}
    finally:
        steps.STEP_RECORD_INTERVAL_NS = record_interval_ns


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--warmup-steps", type=int, default=500)
    p.add_argument("--first-steps", type=int, default=40, help="light steps before the measure (window, snapshot)")
    p.add_argument("--run-steps", type=int, default=16, help="steps per run of one arm")
    p.add_argument(
        "--seconds", type=float, default=120, help="start no new round after this long; 0: only --max-rounds"
    )
    p.add_argument("--max-rounds", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the step times and the table here")
    p.add_argument(
        "--split",
        action="store_true",
        help="time each step's segments (batch, forward, backward, optimizer, item) and print their shifts per arm",
    )
    p.add_argument(
        "--arms",
        default=",".join(ARMS),
        help=f"the arms, light, plain and plain-b among them; extra ones: {', '.join(EXTRA_ARMS)}",
    )
    p.add_argument(
        "--trace-steps", type=int, default=None, help="light mode's --trace-steps (0: no trace window; issue 17)"
    )
    args = p.parse_args(argv)
    arms = tuple(a.strip() for a in args.arms.split(",") if a.strip())
    if not set(ARMS) <= set(arms) or not set(arms) <= set(ARMS) | set(EXTRA_ARMS) or len(set(arms)) != len(arms):
        raise SystemExit(
            f"--arms must hold {', '.join(ARMS)} once each, and only these besides: {', '.join(EXTRA_ARMS)}"
        )
    light_share = sum(a == "light" or a in EXTRA_ARMS for a in arms) / len(arms)
    from diagnose.launch.capture_mode import ProfileOptions

    window_done = ProfileOptions.trace_start + ProfileOptions.trace_steps + 1  # the first step after the snapshot
    if args.run_steps < 2 or args.first_steps <= window_done:
        raise SystemExit(
            f"--run-steps must be at least 2 and --first-steps above {window_done} "
            "(the default window and the snapshot come first)"
        )
    import torch

    import diagnose
    from diagnose.launch.runtime import lifecycle

    log, split = None, {}
    if args.split:
        step, log = make_split_step(args.device, args.width, args.depth, args.batch)
    else:
        step = make_step(args.device, args.width, args.depth, args.batch)
    time_steps(step, args.warmup_steps)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpudiag-interleaved-") as work:
        with (
            light_share_intervals(light_share) as options,
            diagnose.profile(
                out=Path(work) / "run",
                quiet=True,
                nvml=False,
                **options,
                **({} if args.trace_steps is None else {"trace_steps": args.trace_steps}),
            ) as run,
        ):
            time_steps(step, args.first_steps)
            hook = StepHook(lifecycle.active())
            times = run_rounds(step, hook, args.run_steps, args.seconds, args.max_rounds, args.seed, arms, log, split)
        own = own_time(run.path, args.first_steps)
    elapsed_s = time.monotonic() - t0
    rows = summarize(times, arms=arms)
    outcome, text = verdict(rows, own)
    light_steps = sum(rows[a]["steps"] for a in arms if a == "light" or a in EXTRA_ARMS)  # every arm with the hook
    cuda, gpu = device_info(torch, args.device)
    print(
        f"torch {torch.__version__} cuda {cuda} on {gpu}; {args.width}x{args.depth} MLP, batch {args.batch}; "
        f"{len(times)} rounds of {len(arms)} runs of {args.run_steps} steps after {args.first_steps} light steps, "
        f"{elapsed_s:.0f} s"
    )
    print(
        f"{'arm':<10} {'steps':>6} {'median ms':>10} {'mean ms':>8} {'median vs plain':>16} {'95% interval':>20} "
        f"{'mean vs plain':>14} {'95% interval':>20}"
    )
    for arm, row in rows.items():
        line = f"{arm:<10} {row['steps']:>6} {row['median_ms']:>10.4f} {row['mean_ms']:>8.4f}"
        if "median_pct" in row:
            line += (
                f" {row['median_pct']:>+15.2f}% {row['median_ci_low_pct']:>+8.2f}% .. "
                f"{row['median_ci_high_pct']:+.2f}% {row['mean_pct']:>+13.2f}% "
                f"{row['mean_ci_low_pct']:>+8.2f}% .. {row['mean_ci_high_pct']:+.2f}%"
            )
        print(line)
    print(position_shifts(rows, arms))
    own_line = (
        f"light steps: {own['records']} step records for {light_steps} light steps timed; own "
        f"{own['own_us']:.1f} µs/step mean, {own['own_median_us']:.1f} median; "
        f"GPU-timed {own['gpu_timed_pct']:.1f}%"
        if own["own_us"] is not None
        else "no step records"
    )
    print(own_line)
    if split:
        print(split_table(split, arms))
    print(f"{outcome}: {text}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "torch": torch.__version__,
                    "cuda": cuda,
                    "gpu": gpu,
                    "elapsed_s": elapsed_s,
                    "arms": arms,
                    "times_ms": times.round(5).tolist(),
                    "rows": rows,
                    "own": own,
                    "split_median_us": {
                        arm: (np.median(np.asarray(v, dtype=float), axis=0) / 1000).round(2).tolist()
                        for arm, v in split.items()
                    },
                    "verdict": outcome,
                    "text": text,
                }
            )
        )
    return 0 if outcome == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
