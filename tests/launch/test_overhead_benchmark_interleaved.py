"""benchmarks/light_overhead_interleaved.py: the pooled ratios, their intervals, the verdict, and one short
CPU run that checks the hook switch really stops and restarts light mode's step boundaries.

Hand-made step times for the statistics (no timing here: the benchmark itself runs on the GPU machine).
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from tests.paths import REPO

spec = importlib.util.spec_from_file_location(
    "light_overhead_interleaved", REPO / "benchmarks" / "light_overhead_interleaved.py"
)
interleaved = importlib.util.module_from_spec(spec)
spec.loader.exec_module(interleaved)


def _times(
    light_factor: float, rounds: int = 300, run_steps: int = 4, drift: float = 0.0, noise: float = 0.05, seed: int = 1
) -> np.ndarray:
    """(rounds, arms, steps) step times around 2 ms: light scaled by light_factor, a slow drift over the
    rounds shared by all arms (what interleaving cancels) and per-step noise."""
    rng = np.random.default_rng(seed)
    base = 2.0 * (1 + drift * np.sin(np.linspace(0, 6, rounds)))[:, None, None]
    times = base * (1 + noise * rng.standard_normal((rounds, 3, run_steps)))
    times[:, interleaved.ARMS.index("light"), :] *= light_factor
    return times


def test_a_drift_shared_by_all_arms_cancels_and_the_cost_is_found():
    rows = interleaved.summarize(_times(1.02, drift=0.15), resamples=400)
    light, control = rows["light"], rows["plain-b"]
    assert light["median_pct"] == pytest.approx(2.0, abs=0.6) and light["mean_pct"] == pytest.approx(2.0, abs=0.6)
    assert light["median_ci_low_pct"] < light["median_pct"] < light["median_ci_high_pct"]
    assert control["median_ci_low_pct"] < 0 < control["median_ci_high_pct"]
    assert len(light["shift_by_position_us"]) == 4 and "median_pct" not in rows["plain"]


def test_verdict_passes_below_the_target_fails_above_it_and_abstains_across_it():
    assert interleaved.verdict(interleaved.summarize(_times(1.01, noise=0.01), resamples=300))[0] == "PASS"
    outcome, text = interleaved.verdict(interleaved.summarize(_times(1.06, noise=0.01), resamples=300))
    assert outcome == "FAIL" and "+6.0" in text
    outcome, text = interleaved.verdict(interleaved.summarize(_times(1.03, rounds=20, noise=0.2), resamples=300))
    assert outcome == "NO VERDICT" and "straddles" in text


def test_the_round_bootstrap_is_repeatable_and_brackets_the_ratio():
    times = _times(1.02)
    low, high = interleaved.round_bootstrap(times, 0, np.median, resamples=300)
    assert low < interleaved.pooled_ratio(times, 0, np.median) < high
    assert interleaved.round_bootstrap(times, 0, np.median, resamples=300) == (low, high)


def test_a_short_cpu_run_switches_light_mode_on_and_off(tmp_path):
    pytest.importorskip("torch")
    from diagnose.launch.runtime import lifecycle, steps

    interval = steps.STEP_RECORD_INTERVAL_NS
    out = tmp_path / "interleaved.json"
    interleaved.main(
        [
            "--device",
            "cpu",
            "--width",
            "32",
            "--depth",
            "2",
            "--batch",
            "4",
            "--warmup-steps",
            "5",
            "--first-steps",
            "16",
            "--run-steps",
            "3",
            "--seconds",
            "0",
            "--max-rounds",
            "6",
            "--json",
            str(out),
        ]
    )
    data = json.loads(out.read_text())
    assert np.asarray(data["times_ms"]).shape == (6, 3, 3)
    light_steps = data["rows"]["light"]["steps"]
    assert light_steps == 18 and data["rows"]["plain"]["steps"] == 18
    # one step record per light step (the last light step is still open at the end, the first step after
    # the warm-up closes the last warm-up step): the boundaries ran in light runs only
    assert data["own"]["records"] in (light_steps - 1, light_steps)
    assert data["verdict"] in ("PASS", "FAIL", "NO VERDICT")
    assert steps.STEP_RECORD_INTERVAL_NS == interval  # the tripled interval was put back
    assert lifecycle.active() is None


def test_past_the_first_step_leaves_out_the_cost_of_the_switch():
    """A light arm whose first step of each run costs +20 % (the switch: hooks back in, cold code) and the others +1 %:
    the pooled median reads more than 1 %, the median shift past the first step reads 1 %."""
    times = _times(1.0, run_steps=8, noise=0.0)
    light = interleaved.ARMS.index("light")
    times[:, light, 0] *= 1.20
    times[:, light, 1:] *= 1.01
    rows = interleaved.summarize(times, resamples=100)
    assert rows["light"]["after_first_pct"] == pytest.approx(1.0, abs=0.01)
    assert rows["light"]["shift_by_position_us"][0] == pytest.approx(400.0, rel=0.01)  # 20 % of 2 ms
    assert rows["plain-b"]["after_first_pct"] == pytest.approx(0.0, abs=0.01)
    assert "past the first step of its runs: light +1.00%, plain-b +0.00%" in interleaved.position_shifts(
        rows, interleaved.ARMS
    )


def test_the_jax_benchmark_runs_its_four_arms_in_one_process_and_only_two_make_boundaries(capsys):
    """benchmarks/jax_light_overhead_interleaved.py on JAX's CPU backend, briefly: light and no-sampler call light
    mode's proxy (a step record each), plain and plain-b jax's own function (none)."""
    pytest.importorskip("jax")
    spec = importlib.util.spec_from_file_location(
        "jax_light_overhead_interleaved", REPO / "benchmarks" / "jax_light_overhead_interleaved.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = ["--seconds", "0", "--max-rounds", "12", "--run-steps", "5", "--first-steps", "30", "--dispatch-calls", "20"]
    assert bench.main(args + ["--width", "16", "--batch", "8"]) == 0
    out = capsys.readouterr().out
    for arm in bench.JAX_ARMS:
        assert f"\n{arm} " in out, arm
    assert "12 rounds of 5 steps" in out
    # own_time counts the records from step --first-steps on: the measured steps less the jit finder's 8 choosing
    # calls (they made no steps) and the step in progress at the end. With the plain arms' 120 steps as boundaries
    # too it would read about 230.
    line = next(line for line in out.splitlines() if "step records" in line)
    records = int(line.split("overhead_us of ")[1].split()[0])
    assert 2 * 12 * 5 - 8 - 2 <= records <= 2 * 12 * 5, line


def _phase_timers_in(torch, steps) -> bool:
    """The optimizer pre hook in torch's table and the backward wrapper in torch.autograd.backward (both or none)."""
    from torch.optim.optimizer import _global_optimizer_pre_hooks

    pre = steps.optimizer_pre_hook_handle.id in _global_optimizer_pre_hooks
    wrapper = torch.autograd.backward is steps._backward_wrapper
    assert pre == wrapper, (pre, wrapper)
    return pre


def test_extra_arms_pause_one_part_of_light_mode_each(tmp_path):
    """--arms adds light with the long-step sampler or the forward timer paused: the hook is on in those runs (their
    steps have records), and the paused part is back on in the light arm."""
    torch = pytest.importorskip("torch")
    import diagnose
    from diagnose.launch.runtime import lifecycle

    step = interleaved.make_step("cpu", 16, 2, 4)
    with diagnose.profile(out=tmp_path / "run", quiet=True, nvml=False, trace_steps=0):
        interleaved.time_steps(step, 12)
        hook = interleaved.StepHook(lifecycle.active())
        steps = lifecycle.active().steps
        assert steps.forward is not None and steps.long_step_code is not None
        hook.set_arm("no-forward")
        assert steps.optimizer_hook_handle is not None and steps.forward._paused
        assert steps.long_step_code._running.is_set()
        hook.set_arm("no-sampler")
        assert not steps.forward._paused and not steps.long_step_code._running.is_set()
        hook.set_arm("no-phases")
        assert steps.optimizer_hook_handle is not None and not _phase_timers_in(torch, steps)
        hook.set_arm("phases-every-step")  # as light mode ran before it sampled the phases: in every step
        assert _phase_timers_in(torch, steps)
        interleaved.time_steps(step, 20)
        assert _phase_timers_in(torch, steps)
        hook.set_arm("no-events")
        assert steps._phase_sampling and steps._step_phased == _phase_timers_in(torch, steps)
        assert steps.gpu is None or steps.gpu.every == 1 << 62
        hook.set_arm("plain")
        assert steps.optimizer_hook_handle is None
        hook.set_arm("light")
        assert steps.optimizer_hook_handle is not None and not steps.forward._paused
        assert steps.long_step_code._running.is_set() and steps.optimizer_pre_hook_handle is not None
        assert steps.gpu is None or steps.gpu.every < 1 << 62
        # the phases sampled again, as light mode runs: their timers on in a timed step only
        assert steps._phase_sampling and steps._step_phased == _phase_timers_in(torch, steps)
    out = tmp_path / "arms.json"
    args = ["--device", "cpu", "--width", "16", "--depth", "2", "--batch", "4", "--warmup-steps", "5"]
    args += ["--first-steps", "16", "--run-steps", "3", "--seconds", "0", "--max-rounds", "4", "--json", str(out)]
    interleaved.main([*args, "--arms", "light,no-sampler,no-forward,no-phases,plain,plain-b"])
    data = json.loads(out.read_text())
    assert np.asarray(data["times_ms"]).shape == (4, 6, 3)
    assert data["arms"] == ["light", "no-sampler", "no-forward", "no-phases", "plain", "plain-b"]
    assert data["own"]["records"] in (47, 48)  # one per step of the four arms with the hook: 4 x 4 x 3
    assert "median_pct" in data["rows"]["no-forward"] and "median_pct" in data["rows"]["no-sampler"]
    with pytest.raises(SystemExit):
        interleaved.main([*args, "--arms", "light,plain"])


def test_split_times_each_segment_of_every_arm(tmp_path, capsys):
    """--split: each step's batch, forward, backward, optimizer and item segments, per arm; they add up to about the
    step (the step's own clock reads around them) and plain's shift from itself is 0."""
    pytest.importorskip("torch")
    out = tmp_path / "split.json"
    args = ["--device", "cpu", "--width", "16", "--depth", "2", "--batch", "4", "--warmup-steps", "5", "--split"]
    args += ["--first-steps", "16", "--run-steps", "3", "--seconds", "0", "--max-rounds", "4", "--json", str(out)]
    interleaved.main([*args, "--arms", "light,no-phases,plain,plain-b"])
    data = json.loads(out.read_text())
    split = data["split_median_us"]
    assert set(split) == {"light", "no-phases", "plain", "plain-b"}
    assert all(len(v) == len(interleaved.SEGMENTS) and min(v) > 0 for v in split.values()), split
    step_us = 1000 * data["rows"]["plain"]["median_ms"]
    assert 0.5 * step_us < sum(split["plain"]) <= 1.5 * step_us
    text = capsys.readouterr().out
    assert "segment µs" in text and all(seg in text for seg in interleaved.SEGMENTS)
