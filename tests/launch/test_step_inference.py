"""Steps without an optimizer or a marker: the end of each outermost backward pass is a boundary (issue 17)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import diagnose  # noqa: E402
from tests.launch.launch_helpers import EXAMPLES, gpudiag, manifest, records  # noqa: E402


def _steps(run_dir):
    return [r for r in records(run_dir) if r["kind"] == "step"]


def _sgd_by_hand(iterations: int, marker_from: int | None = None, checkpointed: bool = False) -> list[float]:
    """A hand-written SGD loop: in-place updates, no torch.optim."""
    torch.manual_seed(0)
    w1, w2 = torch.randn(16, 32, requires_grad=True), torch.randn(32, 1, requires_grad=True)

    def body(x):
        return torch.tanh(x @ w1)

    losses = []
    for i in range(iterations):
        x = torch.randn(8, 16, requires_grad=checkpointed)
        hidden = torch.utils.checkpoint.checkpoint(body, x, use_reentrant=True) if checkpointed else body(x)
        loss = (hidden @ w2).pow(2).mean()
        loss.backward()  # under reentrant checkpointing, backward runs torch.autograd.backward again inside
        with torch.no_grad():
            for p in (w1, w2):
                p.add_(p.grad, alpha=-0.01)
                p.grad = None
        if marker_from is not None and i >= marker_from:
            diagnose.step()
        losses.append(loss.item())
    return losses


def test_hand_written_sgd_gets_one_step_per_backward(tmp_path):
    baseline = _sgd_by_hand(10)
    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        losses = _sgd_by_hand(10)
    assert losses == baseline  # the wrapped backward computes the same thing
    steps = _steps(run.path)
    # 10 boundaries (one per backward) -> 9 finished steps, each from a backward's end to the next one's
    assert [s["step"] for s in steps] == list(range(9))
    assert {s["source"] for s in steps} == {"backward"}
    assert torch.autograd.backward.__module__ == "torch.autograd"  # unwrapped after the block
    assert not hasattr(torch.autograd.backward, "__wrapped__")


def test_reentrant_checkpoint_backward_inside_backward_is_not_a_boundary(tmp_path):
    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        _sgd_by_hand(8, checkpointed=True)
    assert [s["step"] for s in _steps(run.path)] == list(range(7))


def test_marker_takes_over_from_backward(tmp_path):
    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        _sgd_by_hand(8, marker_from=3)
    steps = _steps(run.path)
    # backwards 0..3 are boundaries (steps 0-2 by backward); the marker after backward 3 takes over without a
    # second boundary, then markers 4..7 end steps 3..6
    assert [s["source"] for s in steps] == ["backward"] * 3 + ["marker"] * 4
    assert [s["step"] for s in steps] == list(range(7))


def accumulate(updates: int, micro_batches: int, optimizer_after: int | None = None, step_it: bool = True):
    """``updates`` optimizer updates of ``micro_batches`` backward passes each; ``optimizer_after``: the optimizer is
    made only after that many backward passes (a loop that makes it late), the earlier ones updated by hand;
    ``step_it=False``: an optimizer is made but the weights are updated by hand."""
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01) if optimizer_after is None else None
    backwards = 0
    for _ in range(updates):
        for _ in range(micro_batches):
            (model(torch.randn(4, 16)).pow(2).mean() / micro_batches).backward()
            backwards += 1
            if opt is None and backwards == optimizer_after:
                opt = torch.optim.SGD(model.parameters(), lr=0.01)
        if opt is not None and step_it:
            opt.step()
        else:
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-0.01)
        model.zero_grad()


def test_gradient_accumulation_is_one_step_per_optimizer_update_from_step_0(tmp_path):
    init = torch.optim.Optimizer.__init__
    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        accumulate(updates=6, micro_batches=4)
    steps = _steps(run.path)
    # the optimizer was made before the first backward: its 4 micro-batch backwards wait for its first step(),
    # which starts step 0; 6 updates are 6 boundaries, 5 steps of 4 backwards each, none a micro-batch (before,
    # the first update's backwards were steps 0-2 and every later step number read 2 past the script's)
    assert [s["source"] for s in steps] == ["optimizer"] * 5
    assert [s["step"] for s in steps] == list(range(5))
    assert [s["backward_passes"] for s in steps] == [4] * 5  # each step's micro-batches, said by its record
    assert torch.optim.Optimizer.__init__ is init  # unwrapped after the block
    from diagnose.derive.derived import Derived
    from diagnose.derive.host_phases import phases_text

    phases = Derived(diagnose.load(run.path)).step_budget().ranks[0]["host_phases"]
    assert phases["backward_passes"] == 4
    text = phases_text(phases)
    assert "backward (issuing 4 passes)" in text and "each step makes 4 backward passes (gradient accumulation)" in text


def test_past_the_first_steps_the_phases_and_the_micro_batches_are_in_the_timed_steps_only(tmp_path):
    """40 updates of 4 micro-batches: once the optimizer defines the steps and the forward timer has learned its root,
    the backward and optimizer phases (and with them backward_passes) are in the steps the forward timer times, one
    in TIMED_EVERY; the phases of the median step still say 4 passes."""
    from diagnose.launch.runtime.forward_time import LEARN_STEPS, TIMED_EVERY

    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        accumulate(updates=41, micro_batches=4)
    steps = _steps(run.path)
    assert len(steps) == 40
    phased = [s["step"] for s in steps if "backward_ms" in s]
    later = [n for n in phased if n > LEARN_STEPS]
    assert phased[: LEARN_STEPS + 1] == list(range(LEARN_STEPS + 1))
    assert len(later) >= 2 and all(b - a == TIMED_EVERY for a, b in zip(later, later[1:])), phased
    assert all(s["backward_passes"] == 4 and "optimizer_ms" in s for s in steps if "backward_ms" in s)
    assert not any("backward_passes" in s for s in steps if "backward_ms" not in s)
    from diagnose.derive.derived import Derived

    assert Derived(diagnose.load(run.path)).step_budget().ranks[0]["host_phases"]["backward_passes"] == 4


def test_marker_steps_sample_the_phases_too(tmp_path):
    """Steps ended by diagnose.step() (an optimizer stepping too): the phase timers follow the forward timer's steps,
    as under an optimizer; a loop whose backward passes end the steps keeps them in every step (see above)."""
    from diagnose.launch.runtime.forward_time import TIMED_EVERY

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        for _ in range(41):
            model(torch.randn(4, 16)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            diagnose.step()
    steps = _steps(run.path)
    assert {s["source"] for s in steps[1:]} == {"marker"}
    phased = [s["step"] for s in steps if "backward_ms" in s]
    timed = [s["step"] for s in steps if "forward_ms" in s]
    assert len(steps) - len(phased) >= 30 and phased[-2:] == timed[-2:] and timed[-1] - timed[-2] == TIMED_EVERY
    with diagnose.profile(out=tmp_path / "h", trace_steps=0, nvml=False, quiet=True) as run:
        _sgd_by_hand(40)
    assert all("backward_ms" in s for s in _steps(run.path))


def test_an_optimizer_made_after_backward_steps_takes_over(tmp_path):
    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        accumulate(updates=6, micro_batches=4, optimizer_after=4)
    steps = _steps(run.path)
    # the first 4 backwards (no optimizer yet) are boundaries 0-3; the first optimizer step takes over without a
    # boundary, and from then on a step is one update (4 backwards)
    assert [s["source"] for s in steps] == ["backward"] * 3 + ["optimizer"] * 5
    assert [s["step"] for s in steps] == list(range(8))


def test_an_optimizer_that_never_steps_leaves_backward_steps_after_the_wait(tmp_path):
    """An optimizer made but never stepped (weights updated by hand): backwards wait at most
    BACKWARDS_BEFORE_OPTIMIZER_MAX, then define steps."""
    from diagnose.launch.runtime.steps import BACKWARDS_BEFORE_OPTIMIZER_MAX

    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        accumulate(updates=BACKWARDS_BEFORE_OPTIMIZER_MAX + 11, micro_batches=1, step_it=False)
    steps = _steps(run.path)
    assert {s["source"] for s in steps} == {"backward"}
    assert len(steps) == 10  # 11 boundaries after the wait


def test_unchanged_script_without_optimizer_gets_steps_and_a_trace(tmp_path):
    """examples/sgd_by_hand.py under `gpudiag profile` on CPU: before, it wrote no step and no trace."""
    out = tmp_path / "run"
    r = gpudiag(
        "profile",
        "-q",
        "-o",
        out,
        "--trace-start",
        "2",
        "--trace-steps",
        "2",
        "--",
        "python",
        EXAMPLES / "sgd_by_hand.py",
        "--steps",
        "12",
        "--device",
        "cpu",
        "--width",
        "64",
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    steps = _steps(out)
    assert len(steps) == 11 and {s["source"] for s in steps} == {"backward"}
    # the window covers steps 2 and 3; its export runs at the start of step 4, which is marked instrumented too
    assert [s["step"] for s in steps if s["instrumented"]] == [2, 3, 4]
    assert "trace/rank0.json.gz" in manifest(out)["artifacts"]
