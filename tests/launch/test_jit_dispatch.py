"""Light mode samples a JAX step's dispatch and readiness in one step of 128 (jit_dispatch, issue 34 (2)).

Real jax (its CPU backend, asynchronous as on a GPU) under ``diagnose.profile``: which steps are sampled, what their
records hold, that the script's results are untouched, and that a device still busy with the step before is waited
for first and the wait reported."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import diagnose  # noqa: E402
from diagnose.derive.jit_dispatch_samples import sentence  # noqa: E402
from diagnose.launch.runtime import jit_dispatch, lifecycle  # noqa: E402
from tests.launch.launch_helpers import records  # noqa: E402


def test_one_jax_step_in_128_records_its_dispatch_and_readiness(tmp_path):
    calls = 8 + 300
    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        update = jax.jit(lambda w, x: (w * 0.999 + x @ x.T @ w, jnp.sum(w)))
        w, x = jnp.ones((64, 64)), jnp.eye(64) * 0.001
        losses = []
        for _ in range(calls):
            w, loss = update(w, x)
            losses.append(float(loss))  # the loop waits for each step: the device is idle at every call
        next_sample = lifecycle.active().steps.jit_dispatch.next_step
    steps = {r["step"]: r for r in records(run.path) if r["kind"] == "step"}
    sampled = sorted(s for s, r in steps.items() if "dispatch_ms" in r)
    # without a trace window the steady state starts at step 0: samples from step 16 on, one in 128
    assert sampled == list(range(jit_dispatch.FIRST_AFTER_STEADY, calls - 8, jit_dispatch.EVERY)), sampled
    assert sampled == [16, 144, 272] and next_sample == 400
    for s in sampled:
        r = steps[s]
        assert r["queued_ms"] == 0, r  # float(loss) waited for the step before: nothing left on the device
        assert 0 < r["dispatch_ms"] <= r["ready_ms"] <= r["host_ms"], r  # the wait is inside the step
    # the results are the script's own: the same losses as without gpudiag
    w2, plain = jnp.ones((64, 64)), []
    for _ in range(calls):
        w2, loss = jax.jit(lambda w, x: (w * 0.999 + x @ x.T @ w, jnp.sum(w)))(w2, x)
        plain.append(float(loss))
    assert losses == plain

    # the step budget's steady steps (warm-up left out) carry them into the analysis
    samples = diagnose.analyze(diagnose.load(run.path, quiet=True)).results["step_budget"].meta["ranks"][0]
    samples = samples["jit_dispatch"]
    assert samples["samples"] == 3 and samples["ready_samples"] == 3 and samples["queued_samples"] == 0
    assert samples["ready_ms"] == pytest.approx(sorted(steps[s]["ready_ms"] for s in sampled)[1], rel=1e-6)
    assert samples["dispatch_ms"] == pytest.approx(sorted(steps[s]["dispatch_ms"] for s in sampled)[1], rel=1e-6)
    words = sentence(samples, "update")
    assert words.startswith("In 3 untraced steps light mode sampled (one in 128), jax's call of update took ")
    assert "its outputs were ready" in words
    # which words follow depends on the host's timing (on a busy CI host a 60 µs step's wait may reach the median)
    bounded = samples["ready_ms"] < samples["median_step_ms"]
    assert ("the device's work is at most that" in words) == bounded
    assert ("no less than the" in words) == (not bounded)


def test_a_sample_after_a_long_step_waits_for_it_and_then_times_its_own_call():
    """A step of a second or so of matmuls, dispatched twice back to back: at the second call the first one is still
    running on any machine that does not stall that long, and the sample waits for it (queued_ns) before timing its
    own call. Only what holds however busy the machine is asserted: the wait was measured, both outputs are ready
    after the sample, and the call's readiness is no earlier than its dispatch. (A jax host callback held until the
    sampler waits would make the pending step certain, but the CPU backend runs such a callback inside the call.)"""
    sampler = jit_dispatch.JitDispatchSampler(jax)
    heavy = jax.jit(lambda a: [a := a @ a / 512.0 for _ in range(40)][-1])
    a = jnp.ones((1024, 1024))
    heavy(a).block_until_ready()  # compiled
    sampler.start(0)
    step = sampler.next_step - 1
    assert sampler.due_at == step
    first = sampler.for_step(step)(heavy, (a,), {})  # keeps an output of this call
    assert sampler.due_at == step + 1
    second = sampler.for_step(step + 1)(heavy, (a,), {})
    (dispatch_ns, ready_ns, queued_ns) = sampler.samples[step + 1]
    assert first.is_ready() and second.is_ready()
    assert queued_ns is not None and queued_ns >= 0 and 0 < dispatch_ns <= ready_ns
    assert sampler.due_at == step + 1 + jit_dispatch.EVERY - 1


def test_the_kept_output_is_the_last_leaf_of_nested_outputs():
    sampler = jit_dispatch.JitDispatchSampler(jax)
    loss = jnp.float32(2.0)
    params = {"dense": {"w": jnp.ones(3), "b": jnp.zeros(3)}}
    assert sampler._one_output((params, loss)) is loss
    assert sampler._one_output({"a": jnp.ones(2), "z": loss}) is loss
    assert sampler._one_output([params]) is params["dense"]["b"]
    assert sampler._one_output(None) is None
    # no array at the end: the last leaf that is one, in jax's tree order (dict keys sorted)
    assert sampler._one_output((params, 3.0)) is params["dense"]["w"]
