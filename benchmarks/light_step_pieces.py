"""Which piece of light mode costs a short training step how many host µs (a micro-benchmark, for the CPU first).

benchmarks/light_overhead_interleaved.py says what light mode adds to a step in %; this says which of its pieces
adds it. A tiny model (two ``nn.Linear`` of ``--width``, batch ``--batch``, SGD with momentum, ``loss.item()``, one
torch thread) keeps the step short, so a few µs show. Inside one ``diagnose.profile(trace_steps=0, nvml=False,
history_max_entries=0)`` (the steady state), rounds of ``--run-steps`` steps per arm, in a seeded random order per
round, switch the pieces on and off in place; the first step after a switch is not counted:

    plain       every piece off: no optimizer hooks, torch's own autograd.backward, no module hooks, the
                long-step sampler paused (the step as without gpudiag)
    light       every piece on (light mode as it runs)
    -PIECE      light with one piece off; the piece's cost is median(light) - median(-PIECE), with a 95 %
                interval from resampling whole rounds

The pieces: ``post-hook`` (the optimizer step post hook and the step boundary it calls), ``boundary`` (the hook
kept, the boundary a no-op: the boundary's own part of it), ``pre-hook`` (the optimizer step pre hook that starts
the optimizer phase), ``backward`` (the autograd.backward wrapper that times the backward phase), ``forward`` (the
hooks on the root modules that time the forward pass), ``input`` (the boundary's read of the DataLoader wait),
``forward-take`` (the boundary's read of the forward timer), ``drain`` (writing the held step records every 100
ms: in the mean, not the median), ``sampler`` (the long-step sampler's thread) and ``loop`` (Python 3.12+: the
monitoring callbacks that time the loop's waits for its iterator). With ``--loader`` the batches come from a
DataLoader and ``input-hook`` is the wrapper of its iterators' ``__next__`` (the input wait, each new shape, each
loader's configuration). With ``--mlp`` (or ``--device cuda``) the step is examples/train_mlp.py's, as in the
overhead benchmarks; on CUDA two more pieces come: ``events`` (CUDA events on one step in k) and ``stats`` (the
memory_stats records). Then each hook's body is timed alone in a tight loop (median ns a call): the code without
torch's dispatch and the cold caches of a real step, which make the in-place cost several times larger.

On the 2-core CPU host (Python 3.11, torch 2.13 CPU), 2026-12-05, 120 s a run, median µs a step, the tree before
and after that day's cuts (two runs each): light mode in all +23.5 / +22.7 → +18.2 / +17.8; the post hook with
the boundary +8.8 / +8.4 → +4.6 / +4.5, of which the boundary +7.1 / +7.0 → +3.3 / +3.2; the forward hooks +9.8
/ +10.0 → +9.4 / +9.0 (torch's module-call path with hooks, about 1.2 µs a hooked call alone, is most of it);
backward +1.9 / +1.8 → +1.6 / +1.5; pre hook +0.9 / +0.7 → +0.9 / +1.2; the boundary's forward read +1.0 → +0.1.
With a DataLoader (90 s): all +31.5 → +23.3, its ``__next__`` wrapper +6.8 → +4.6. Then the forward timer's hooks
went on in one step of eight only (forward_time.TIMED_EVERY), put back as dict entries: all +17.6 → +12.2 (mean
+21.6 → +15.3), the forward piece +9.2 → +2.8 (100 s). Here each arm's first step after a switch is not counted, so
the timed step and the one whose boundary takes the hooks off weigh a little more than one in eight. Since
2026-12-06 light mode runs the pre hook and the backward wrapper in the forward's timed steps only (one in sixteen
since then); here they run in every step (``Steps.set_phase_sampling(False)``), so their pieces read what each call
costs where it runs.

    PYTHONPATH=$PWD python3 benchmarks/light_step_pieces.py --seconds 60 [--loader] [--mlp --width 64 --depth 2]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [p for p in (str(REPO), str(REPO / "benchmarks")) if p not in sys.path]

PIECES = (
    "post-hook",
    "boundary",
    "pre-hook",
    "backward",
    "forward",
    "input",
    "forward-take",
    "drain",
    "sampler",
    "loop",
)
CUDA_PIECES = ("events", "stats")
LOADER_PIECES = (
    "input-hook",
)  # with --loader: the wrapper of the DataLoader iterators' __next__ (input_wait)  # with --device cuda: the CUDA events on one step in k, the memory_stats records
SWITCHED = (
    "post-hook",
    "pre-hook",
    "backward",
    "forward",
    "sampler",
    "loop",
    "input-hook",
)  # the hooks as light mode puts them in
ARMS = ("light", "plain") + tuple(f"-{piece}" for piece in PIECES + CUDA_PIECES + LOADER_PIECES)


def make_tiny_step(width: int, batch: int, loader: bool = False):
    """A training step short enough that µs show: forward, loss, backward, SGD with momentum, ``loss.item()``; with
    ``loader``, each step's batch comes from a torch DataLoader (a new iterator after each 512 batches)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 4))
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(batch, width), torch.randint(0, 4, (batch,))
    if loader:
        data = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(torch.randn(batch * 512, width), torch.randint(0, 4, (batch * 512,))),
            batch_size=batch,
        )
        batches = iter(())

    def step() -> float:
        nonlocal x, y, batches
        if loader:
            try:
                x, y = next(batches)
            except StopIteration:
                batches = iter(data)
                x, y = next(batches)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step, optimizer


def _noop(*args, **kwargs) -> None:
    return None


class Pieces:
    """Switches the active runtime's pieces off and on in place (``set(off)``: the pieces named in ``off`` off)."""

    def __init__(self, runtime):
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        steps = runtime.steps
        if steps.optimizer_hook_handle is None or steps._backward_original is None or steps.forward is None:
            raise SystemExit("light mode did not hook the optimizer, backward and forward: nothing to switch")
        steps.set_phase_sampling(False)  # the pre hook and the backward wrapper in every step: each piece in place
        self._steps, self._torch = steps, torch
        self._register_pre, self._register_post = register_optimizer_step_pre_hook, register_optimizer_step_post_hook
        self._backward_wrapper, self._backward_original = torch.autograd.backward, steps._backward_original
        self._forward, self._input_wait = steps.forward, steps.input_wait
        self._gpu, self._stats = steps.gpu, steps.memory.stats
        wait = steps.input_wait
        self._iterators = wait._iterator_class if wait is not None else None
        self._next = (wait._original, self._iterators.__next__) if wait is not None else None
        self._off: set[str] = set()

    def set(self, off: set[str]) -> None:
        steps = self._steps
        for piece in ("post-hook", "pre-hook"):
            handle_name = "optimizer_hook_handle" if piece == "post-hook" else "optimizer_pre_hook_handle"
            handle = getattr(steps, handle_name)
            if piece in off and handle is not None:
                handle.remove()
                setattr(steps, handle_name, None)
            elif piece not in off and handle is None:
                hook = steps.on_optimizer_step if piece == "post-hook" else steps.on_optimizer_start
                register = self._register_post if piece == "post-hook" else self._register_pre
                setattr(steps, handle_name, register(hook))
                steps._pre_hook_reused = None  # a new handle: the runtime's switch is made from it when needed
        self._torch.autograd.backward = self._backward_original if "backward" in off else self._backward_wrapper
        if "forward" in off:
            self._forward.pause()
        else:
            self._forward.resume()
        steps._sampling_step = 0  # the forward timer's schedule is read again at the next boundary
        loop = steps.loop_input
        if loop is not None and loop.armed and ("loop" in off) != ("loop" in self._off):
            # the loop's monitoring events off, or back on (as LoopInputWait.rearm sets them)
            sys.monitoring.set_local_events(loop._tool, loop._code, 0) if "loop" in off else loop.rearm()
        if self._iterators is not None:
            self._iterators.__next__ = self._next[0] if "input-hook" in off else self._next[1]
        sampler = steps.long_step_code
        if sampler is not None:
            sampler.pause() if "sampler" in off else sampler.resume()
        # the boundary's parts: instance attributes shadow the methods (taken off again when the piece is on)
        for piece, name, stub in (("boundary", "boundary", _noop), ("drain", "drain", _noop)):
            if piece in off:
                setattr(steps, name, stub)
            else:
                steps.__dict__.pop(name, None)
        steps.forward = None if "forward-take" in off else self._forward
        steps.input_wait = None if "input" in off else self._input_wait
        steps.gpu = None if "events" in off else self._gpu  # a step timed across the switch gets no gpu_ms
        stats = None if "stats" in off else self._stats
        if stats is not steps.memory.stats:
            steps.memory.stats = stats
            steps._next_stats_perf_ns = steps._next_due_perf_ns = 0  # maybe_stats is asked again (it said "never")
        self._off = set(off)


def arm_off(arm: str) -> set[str]:
    if arm == "light":
        return set()
    if arm == "plain":
        return set(SWITCHED)
    return {arm[1:]}


def timed_steps(step, n: int) -> list[int]:
    """ns of each of ``n`` steps. Light mode's first steps run here too, so on Python 3.12+ this is the loop whose
    waits for its iterator loop_input watches (the ``loop`` piece), as it would watch a training loop."""
    clock = time.perf_counter_ns
    times = []
    last = clock()
    for _ in range(n):
        step()
        now = clock()
        times.append(now - last)
        last = now
    return times


def run_rounds(step, pieces: Pieces, arms, run_steps: int, seconds: float, seed: int) -> np.ndarray:
    """Step times (µs), shaped (rounds, arms, run_steps)."""
    rng = random.Random(seed)
    rounds = []
    t0 = time.monotonic()
    while not rounds or time.monotonic() - t0 < seconds:
        order = list(range(len(arms)))
        rng.shuffle(order)
        row = [None] * len(arms)
        for i in order:
            pieces.set(arm_off(arms[i]))
            # the first step after a switch is not counted (the switch's own after-effects)
            row[i] = timed_steps(step, run_steps + 1)[1:]
        rounds.append(row)
    pieces.set(set())
    return np.asarray(rounds, dtype=float) / 1e3


def interval(times: np.ndarray, a: int, b: int, stat, resamples: int = 300, seed: int = 0) -> tuple[float, float]:
    """95 % interval of stat(arm a) - stat(arm b), resampling whole rounds."""
    rng = np.random.default_rng(seed)
    n = len(times)
    diffs = []
    for _ in range(resamples):
        pick = times[rng.integers(0, n, n)]
        diffs.append(stat(pick[:, a, :]) - stat(pick[:, b, :]))
    diffs.sort()
    return float(diffs[int(0.025 * resamples)]), float(diffs[int(0.975 * resamples) - 1])


def per_call_ns(call, n: int) -> float:
    """Median ns of one call of ``call`` over ``n`` calls (each timed alone; the clock's read included)."""
    clock = time.perf_counter_ns
    samples = []
    for _ in range(n):
        t = clock()
        call()
        samples.append(clock() - t)
    floor = []
    for _ in range(n):
        t = clock()
        floor.append(clock() - t)
    return statistics.median(samples) - statistics.median(floor)


def hook_bodies(runtime, optimizer, n: int) -> dict[str, float]:
    """Each hook's body called alone in a tight loop: median ns a call."""
    steps = runtime.steps
    forward = steps.forward
    module = forward._hooked_roots[0] if forward._hooked_roots else None
    args: tuple = ()
    kwargs: dict = {}

    def forward_pair():
        forward._pre(module, args)
        forward._post(module, args, None)

    def optimizer_pair():
        steps.on_optimizer_start(optimizer, args, kwargs)
        steps.on_optimizer_step(optimizer, args, kwargs)

    rows = {
        "on_optimizer_start (pre hook)": lambda: steps.on_optimizer_start(optimizer, args, kwargs),
        "on_optimizer_start + on_optimizer_step (both hooks, boundary included)": optimizer_pair,
        "boundary('optimizer')": lambda: steps.boundary("optimizer"),
        "_input_of_step": lambda: steps._input_of_step(1),
        "forward _pre + _post (one root call)": forward_pair,
    }
    return {name: per_call_ns(call, n) for name, call in rows.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--device",
        default="cpu",
        help="cuda: examples/train_mlp.py's step (--width 1024 --depth 4 "
        "--batch 64 as the overhead benchmarks) and the events and stats arms",
    )
    p.add_argument(
        "--mlp", action="store_true", help="on the CPU too: the overhead benchmarks' step (examples/train_mlp.py's)"
    )
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--depth", type=int, default=4, help="with --device cuda or --mlp only")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--loader", action="store_true", help="the tiny step's batches from a DataLoader (input-hook arm)")
    p.add_argument("--run-steps", type=int, default=8, help="steps per run of one arm")
    p.add_argument("--seconds", type=float, default=60, help="start no new round after this long")
    p.add_argument("--first-steps", type=int, default=200, help="light steps before the measure (roots learned)")
    p.add_argument("--calls", type=int, default=20000, help="calls per hook body timed alone")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--arms", default=",".join(ARMS), help="light and plain always run")
    args = p.parse_args(argv)
    arms = ["light", "plain"] + [a for a in args.arms.split(",") if a and a not in ("light", "plain")]
    if args.device == "cpu":
        arms = [a for a in arms if a[1:] not in CUDA_PIECES]
    if not args.loader:
        arms = [a for a in arms if a[1:] not in LOADER_PIECES]
    if any(a not in ARMS for a in arms):
        raise SystemExit(f"--arms: choose from {', '.join(ARMS)}")
    import torch

    import diagnose
    from diagnose.launch.runtime import lifecycle
    from parsers.events import read_event_tables

    if args.device == "cpu" and not args.mlp:
        torch.set_num_threads(1)
        step, optimizer = make_tiny_step(args.width, args.batch, args.loader)
    else:
        from light_overhead_paired import make_step

        step = make_step(args.device, args.width, args.depth, args.batch)
        optimizer = next(o for o in (c.cell_contents for c in step.__closure__) if isinstance(o, torch.optim.Optimizer))
    for _ in range(500):
        step()
    with tempfile.TemporaryDirectory(prefix="gpudiag-pieces-") as work:
        with diagnose.profile(
            out=Path(work) / "run", quiet=True, nvml=False, trace_steps=0, history_max_entries=0
        ) as run:
            timed_steps(step, args.first_steps)
            runtime = lifecycle.active()
            pieces = Pieces(runtime)
            times = run_rounds(step, pieces, arms, args.run_steps, args.seconds, args.seed)
            first_body_step = runtime.steps.current_step
            bodies = hook_bodies(runtime, optimizer, args.calls)
            if runtime.disabled:
                raise SystemExit(f"the runtime switched itself off during the measure: {runtime.faults.reported}")
        records = read_event_tables(Path(run.path) / "events" / "rank0.jsonl").steps
        own = records.loc[
            (records["step"] >= args.first_steps) & (records["step"] < first_body_step), "overhead_us"
        ].dropna()
    light, plain = arms.index("light"), arms.index("plain")
    if args.device == "cpu" and not args.mlp:
        model = f"{args.width}-wide 2-layer MLP, 1 torch thread{', batches from a DataLoader' if args.loader else ''}"
    else:
        gpu = torch.cuda.get_device_name() if args.device != "cpu" else "cpu"
        model = f"examples/train_mlp.py's {args.width}x{args.depth} MLP on {gpu}, {torch.get_num_threads()} threads"
    print(
        f"torch {torch.__version__}, Python {sys.version.split()[0]}; {model}, "
        f"batch {args.batch}; {len(times)} rounds of {len(arms)} runs of {args.run_steps} steps "
        f"({times.shape[0] * times.shape[2]} steps an arm)"
    )
    print(
        f"plain step: median {np.median(times[:, plain]):.1f} µs, mean {np.mean(times[:, plain]):.1f}; "
        f"light step: median {np.median(times[:, light]):.1f} µs, mean {np.mean(times[:, light]):.1f}"
    )
    print(f"{'what':<22} {'median µs':>10} {'95% interval':>17} {'mean µs':>9}")
    for i, arm in enumerate(arms):
        if arm == "light":
            continue
        # light - plain: all of light mode; light - (-piece): that piece
        a, b = (light, plain) if arm == "plain" else (light, i)
        label = "light mode, all" if arm == "plain" else arm[1:]
        low, high = interval(times, a, b, np.median)
        med = float(np.median(times[:, a]) - np.median(times[:, b]))
        mean = float(np.mean(times[:, a]) - np.mean(times[:, b]))
        print(f"{label:<22} {med:>+10.2f} {low:>+7.2f} .. {high:+6.2f} {mean:>+9.2f}")
    if len(own):
        print(
            f"boundary's own timer (overhead_us of the step records, every arm with boundaries): median "
            f"{own.median():.2f} µs, mean {own.mean():.2f} ({len(own)} records)"
        )
    print(f"hook bodies called alone ({args.calls} calls each, median ns a call, the clock's read taken off):")
    for name, ns in bodies.items():
        print(f"  {name:<72} {ns:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
