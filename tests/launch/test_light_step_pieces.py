"""benchmarks/light_step_pieces.py and the interleaved benchmark's plain arm: every per-step piece of light mode goes
off and comes back in place, and a short CPU run gives a row for each piece."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")

import diagnose  # noqa: E402
from diagnose.launch.runtime import lifecycle  # noqa: E402
from tests.launch.launch_helpers import records  # noqa: E402
from tests.paths import REPO  # noqa: E402


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pieces = _load("light_step_pieces")
interleaved = _load("light_overhead_interleaved")


def _hooks_of(steps) -> tuple:
    from torch.optim.optimizer import _global_optimizer_pre_hooks

    pre = steps.optimizer_pre_hook_handle
    return (
        steps.optimizer_hook_handle is not None,
        pre is not None and pre.id in _global_optimizer_pre_hooks,
        torch.autograd.backward is not steps._backward_original,
        not steps.forward._paused,  # the forward timer times one step in TIMED_EVERY (paused: none)
    )


def test_plain_takes_every_hook_out_and_light_puts_them_back(tmp_path):
    step, _ = pieces.make_tiny_step(8, 4)
    with diagnose.profile(out=tmp_path / "r", quiet=True, nvml=False, trace_steps=0) as run:
        pieces.timed_steps(step, 10)  # the roots are learned after 3 boundaries
        steps = lifecycle.active().steps
        switch = pieces.Pieces(lifecycle.active())
        assert _hooks_of(steps) == (True, True, True, True)
        switch.set(pieces.arm_off("plain"))
        assert _hooks_of(steps) == (False, False, False, False)
        before = steps.current_step
        pieces.timed_steps(step, 4)
        assert steps.current_step == before  # no boundary while plain
        switch.set(pieces.arm_off("light"))
        assert _hooks_of(steps) == (True, True, True, True)
        pieces.timed_steps(step, 4)
        assert steps.current_step == before + 4
        # the interleaved benchmark's plain arm takes the same hooks out (the pre hook and the backward wrapper
        # stayed in before 2026-12-05), and its light arm puts them back
        # (their light arm puts back light mode's own sampling: the pre hook and the wrapper in a timed step only)
        hook = interleaved.StepHook(lifecycle.active())
        hook.set(False)
        assert _hooks_of(steps) == (False, False, False, False)
        hook.set(True)
        assert _hooks_of(steps)[::3] == (True, True) and steps._phase_sampling
        pieces.timed_steps(step, 40)
    last = [r for r in records(run.path) if r["kind"] == "step"][-40:]
    timed = [r for r in last if "forward_ms" in r]
    assert len(timed) >= 2, last  # resumed: one step in TIMED_EVERY is timed, its phases with it
    assert all(r["forward_ms"] > 0 and r["backward_ms"] > 0 and r["optimizer_ms"] > 0 for r in timed), timed
    assert all("backward_ms" not in r for r in last if "forward_ms" not in r), last


def test_a_short_cpu_run_gives_a_row_for_each_piece(capsys):
    assert pieces.main(["--seconds", "0.3", "--first-steps", "20", "--calls", "200", "--run-steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "light mode, all" in out
    for piece in pieces.PIECES:
        assert f"\n{piece} " in out, piece
    assert lifecycle.active() is None
