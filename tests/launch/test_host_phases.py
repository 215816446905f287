"""Light mode's host phases per step (issue 31): backward and optimizer host time in the step records, the forward's in
the steps it times (the first three, then one in TIMED_EVERY; the backward and optimizer in those same steps once the
optimizer defines the steps), and the
step budget's split of the median step by phase, on a CPU loop whose phases take known times
(tests/launch/scripts/timed_phases.py: forward 5 ms, backward 20 ms, optimizer 30 ms, each a sleep). Only lower
bounds and sums are asserted: a busy machine makes sleeps longer, never shorter."""

from __future__ import annotations

import sys

import pytest

from tests.launch.launch_helpers import SCRIPTS, gpudiag, records

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run = tmp_path_factory.mktemp("phases") / "r"
    r = gpudiag(
        "profile", "-q", "--trace-steps", "0", "-o", run, "--", sys.executable, SCRIPTS / "timed_phases.py", "60"
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return run


def test_the_timed_steps_carry_their_backward_optimizer_and_forward_time(run):
    from diagnose.launch.runtime.forward_time import LEARN_STEPS, TIMED_EVERY

    steps = [r for r in records(run) if r["kind"] == "step"]
    assert len(steps) >= 20
    phased = [s for s in steps if "backward_ms" in s]
    for s in phased:
        assert s["backward_ms"] >= 20.0 and s["optimizer_ms"] >= 30.0, s
    assert all("optimizer_ms" not in s and "forward_ms" not in s for s in steps if "backward_ms" not in s)
    timed = [s for s in steps if "forward_ms" in s]
    for s in timed:
        # the model's call sleeps 5 ms: the forward, apart from the backward's and the optimizer's time
        # disjoint from the backward's and the optimizer's time (a lower bound and a sum: no race with the clock)
        assert s["forward_ms"] >= 5.0 and s["host_ms"] - s["backward_ms"] - s["optimizer_ms"] >= s["forward_ms"], s
    numbers = [s["step"] for s in timed]
    # the steps the global hooks learn the roots in, then one step in TIMED_EVERY with the roots' hooks on
    assert numbers[:LEARN_STEPS] == list(range(LEARN_STEPS))
    later = numbers[LEARN_STEPS:]
    assert len(later) >= 2 and all(b - a == TIMED_EVERY for a, b in zip(later, later[1:])), numbers
    assert later[0] <= LEARN_STEPS + 1
    # the backward and optimizer timers: in every step until the optimizer defined the steps and the forward timer
    # learned its roots (the learning steps and the one that settles it), then in the forward's timed steps only
    phased_numbers = [s["step"] for s in phased]
    assert phased_numbers == list(range(LEARN_STEPS + 1)) + later, (phased_numbers, numbers)
    assert len(steps) - len(phased) >= 40  # the cost of the timers is off in these


def test_the_step_budget_names_the_phases_of_the_median_step(run):
    import diagnose
    from diagnose.derive.derived import Derived

    a = diagnose.analyze(diagnose.load(run))
    phases = Derived(diagnose.load(run)).step_budget().ranks[0]["host_phases"]
    median = phases["host_ms"]
    assert phases["phases"] == ["input", "forward", "backward", "optimizer", "rest", "gpudiag"]
    parts = [phases[f"{p}_ms"] for p in phases["phases"]]
    assert sum(parts) == pytest.approx(median)  # they add up to the median step the budget shows
    assert phases["backward_ms"] >= 20.0 * 0.9 and phases["optimizer_ms"] >= 30.0 * 0.9
    assert phases["forward_ms"] >= 5.0 * 0.9 and phases["rest_ms"] < phases["forward_ms"]
    assert not phases["input_measured"]
    (f,) = [f for f in a.findings if f.id == "step_budget.unexplained"]
    assert f.recommendation.startswith("Where the host's time goes, of the median step's ")
    assert "backward (issuing it)" in f.recommendation and "optimizer step" in f.recommendation
    assert "forward (the model's call)" in f.recommendation
    # every phase comes from the timed steps nearest the median of all steady steps (one in 16 after the first
    # four), and the text says so
    assert phases["sampled"] and phases["sampled_every"] == 16 and phases["forward_every"] == 16
    assert phases["steps"] >= 3 and phases["forward_steps"] == phases["steps"]
    assert f"(phases of the {phases['steps']} untraced steps nearest it among those light mode timed, one in 16)" in (
        f.recommendation
    )
    # 30 of about 55 ms: the optimizer stands out, and the advice says what shortens it
    assert phases["optimizer_share"] >= 0.2 and "unless it is fused already, use a fused optimizer" in f.recommendation


def test_a_hand_written_update_is_said_to_be_in_the_rest(tmp_path):
    """No optimizer: the 30 ms update by hand is no "optimizer step 0 s (0 %)", and the rest says it holds it."""
    import diagnose
    from diagnose.derive.derived import Derived

    run = tmp_path / "r"
    r = gpudiag(
        "profile", "-q", "--trace-steps", "0", "-o", run, "--", sys.executable, SCRIPTS / "timed_phases.py", "40",
        "by_hand",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    phases = Derived(diagnose.load(run)).step_budget().ranks[0]["host_phases"]
    assert phases["phases"] == ["input", "forward", "backward", "rest", "gpudiag"] and not phases["optimizer_seen"]
    assert sum(phases[f"{p}_ms"] for p in phases["phases"]) == pytest.approx(phases["host_ms"])
    assert phases["rest_ms"] >= 30.0 * 0.9 and phases["backward_ms"] >= 20.0 * 0.9
    (f,) = [f for f in diagnose.analyze(diagnose.load(run)).findings if f.id == "step_budget.unexplained"]
    assert "the rest (loss, the parameter update, batch preparation, logging)" in f.recommendation
    assert "no optimizer step() was called, so the parameter update is timed with the rest" in f.recommendation
    assert "optimizer step " not in f.recommendation


def test_the_forward_timer_learns_the_root_modules_then_hooks_them_alone():
    """In-process: the global module hooks go in at the first boundary and stay for LEARN_STEPS boundaries; then the
    model's own module carries the hooks in the steps it times (one in TIMED_EVERY), its children none, and a forward
    is still timed; nested calls count once.
    Inside torch.compile the hooks do nothing (dynamo folds torch.compiler.is_compiling()): no graph break."""
    import torch

    from diagnose.launch.runtime.forward_time import LEARN_STEPS, TIMED_EVERY, ForwardTime

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    timer = ForwardTime()
    assert timer.hook(torch) and not timer.timing  # nothing hooked before the first boundary
    timer.on_boundary()
    assert timer.learning and timer.timing
    for _ in range(LEARN_STEPS):
        model(torch.randn(2, 4))
        assert timer.take_ns() > 0
        timer.on_boundary()
    # learned: no hooks until a timed step starts, then on the model alone, then off again at its end
    assert timer.settled and not timer.learning and not timer.timing and not model._forward_pre_hooks
    model(torch.randn(2, 4))
    assert timer.take_ns() == 0
    timer.start_timing(step=LEARN_STEPS)
    assert timer.timing and timer.next_timed == LEARN_STEPS + TIMED_EVERY
    assert len(model._forward_pre_hooks) == 1 and not any(len(m._forward_pre_hooks) for m in model)
    model(torch.randn(2, 4))
    assert timer.take_ns() > 0
    timer.stop_timing()
    assert not timer.timing and not model._forward_pre_hooks
    timer.start_timing(step=LEARN_STEPS + TIMED_EVERY)
    from torch._dynamo.utils import counters

    compiled = torch.compile(model, backend="eager")
    compiled(torch.randn(2, 4))
    assert not counters["graph_break"]
    timer.unhook()
    assert not model._forward_pre_hooks and not timer.timing
    model(torch.randn(2, 4))
    assert timer.take_ns() == 0


def test_the_cuda_graph_prediction_is_the_larger_of_gpu_busy_and_the_host_work_outside_the_graph():
    """char_gpt_h100's phases with a forward of 3.4 ms timed apart (its hand measurement): a graph holds the forward,
    backward and optimizer; the rest and the input stay on the host."""
    from diagnose.derive.host_phases import graph_prediction

    phases = {"input_measured": False, "input_ms": 0.0, "rest_ms": 1.87, "forward_ms": 3.4}
    words = graph_prediction(phases, busy_ms=3.18, step_ms=13.8)
    assert words.startswith("Captured whole in a CUDA graph")
    assert "about 3.18 ms instead of 13.8 ms" in words and "here GPU busy" in words
    host_held = graph_prediction({**phases, "input_measured": True, "input_ms": 4.0}, busy_ms=3.18, step_ms=13.8)
    assert "about 5.87 ms" in host_held and "here the host work a graph cannot hold" in host_held
    assert graph_prediction(phases, busy_ms=13.0, step_ms=13.8) is None  # no saving worth saying
    assert graph_prediction({k: v for k, v in phases.items() if k != "rest_ms"}, 3.18, 13.8) is None  # no forward


def test_an_optimizer_step_with_a_closure_times_the_update_alone(tmp_path):
    """tests/launch/scripts/timed_phases.py with a closure: the forward (5 ms) and the backward (20 ms) run inside the
    closure the optimizer step is given (Lightning's loop, LBFGS), the update sleeps 30 ms. The closure's time is left
    out of the optimizer phase: the backward is counted once, and the forward stays outside both (lower bounds and
    sums only)."""
    run = tmp_path / "r"
    script = SCRIPTS / "timed_phases.py"
    r = gpudiag("profile", "-q", "--trace-steps", "0", "-o", run, "--", sys.executable, script, "12", "closure")
    assert r.returncode == 0, r.stderr[-2000:]
    # step 0 begins at the first backward's end (the optimizer is not known to define steps before its first step()
    # ends), so it holds two updates: the first iteration's and its own
    steps = [s for s in records(run) if s["kind"] == "step" and "backward_ms" in s][1:]
    assert len(steps) >= 3  # the phases are timed in the forward's timed steps once the optimizer defines the steps
    for s in steps:
        assert s["backward_ms"] >= 20.0 and s["optimizer_ms"] >= 30.0, s
        # with the closure inside the optimizer phase, backward and optimizer overlapped by 25 ms and this went negative
        assert s["host_ms"] - s["backward_ms"] - s["optimizer_ms"] >= 5.0, s
