"""JAX steps without a marker: the jitted function dispatched once per iteration (issue 17)."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import diagnose  # noqa: E402
from diagnose.launch.runtime.jit_steps import CHOOSE_AFTER_CALLS, CountedJit  # noqa: E402
from tests.launch.launch_helpers import EXAMPLES, gpudiag, records  # noqa: E402


def _steps(run_dir):
    return [r for r in records(run_dir) if r["kind"] == "step"]


def test_unchanged_jax_script_gets_its_update_as_steps(tmp_path):
    """examples/jax_unchanged.py: 2 epochs x 10 batches, one jitted update per batch, a jitted evaluate per epoch."""
    out = tmp_path / "run"
    r = gpudiag(
        "profile",
        "-q",
        "-o",
        out,
        "--trace-steps",
        "0",
        "--",
        "python",
        EXAMPLES / "jax_unchanged.py",
        "--epochs",
        "2",
        "--batches",
        "10",
        "--width",
        "64",
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    steps = _steps(out)
    # the first CHOOSE_AFTER_CALLS update calls choose the step function (warm-up, compilation); every later
    # update call is a boundary: 20 - 8 = 12 boundaries, the last step written at exit; evaluate is not a step
    assert CHOOSE_AFTER_CALLS == 8
    assert [s["step"] for s in steps] == list(range(12))
    assert {s["source"] for s in steps} == {"jit"}
    # the choice is told once: the step function and the loop's line that calls it (a module-level loop's trace has
    # no frame of it)
    (chosen,) = [r for r in records(out) if r.get("event") == "jit-step"]
    line = next(
        i for i, t in enumerate((EXAMPLES / "jax_unchanged.py").read_text().splitlines(), 1) if "= update(" in t
    )
    assert (chosen["name"], chosen["location"]) == ("update", f"{EXAMPLES / 'jax_unchanged.py'}:{line}")


def test_a_helper_called_twice_per_iteration_is_not_the_step(tmp_path):
    scale = jax.jit(lambda x: x * 0.5)

    @jax.jit
    def update(w, x):
        return w - 0.1 * jnp.mean(x) * w

    def loop(iterations):
        w = jnp.ones(4)
        for _ in range(iterations):
            x = scale(scale(jnp.arange(4.0)))  # two helper dispatches per iteration
            w = update(w, x)
        return w

    jax_jit = jax.jit
    # jax.jit above ran before the runtime wrapped jax.jit: jit again inside the block
    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        scale = jax.jit(lambda x: x * 0.5)
        update = jax.jit(update.__wrapped__)
        w = loop(10)
        finder_choice = diagnose.launch.runtime.lifecycle.active().steps.jit.chosen_name
    assert finder_choice.endswith(".update")
    # the choice is made at call 8 (iteration 3's second helper call: helper 6 calls, update 2); boundaries at
    # updates 3..10 = 8 boundaries -> 7 finished steps (in-process, the step in progress at the block's end is not one)
    assert [s["step"] for s in _steps(run.path)] == list(range(7))
    assert float(w[0]) == pytest.approx(float(loop(10)[0]))
    assert jax.jit is jax_jit  # unwrapped after the block


def test_a_helper_called_inside_the_step_while_it_compiles_is_not_the_step(tmp_path):
    """optax's AdamW calls its jitted tree_bias_correction twice inside a flax train step: while the step is traced
    (compiled), never on its own. Counted, those 2 calls made it "the function called least often" after 8 calls,
    and a flax/optax loop got no step at all."""
    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        correction = jax.jit(lambda m: m / 0.9)

        @jax.jit
        def train_step(w, x):
            return w - 0.1 * correction(jnp.mean(x) * w) - 0.01 * correction(w)  # 2 nested calls, traced once

        w = jnp.ones(4)
        for i in range(12):
            w = train_step(w, jnp.arange(4.0) + i)
        finder_choice = diagnose.launch.runtime.lifecycle.active().steps.jit.chosen_name
    assert finder_choice.endswith("train_step")
    # call 8 of train_step chooses it (the nested calls are not counted) and is a boundary, as are calls 9..12:
    # 5 boundaries -> 4 finished steps
    assert [s["step"] for s in _steps(run.path)] == [0, 1, 2, 3]


def test_the_proxy_behaves_like_jax_jitted_function(tmp_path):
    import functools

    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True):

        class Model:
            k = 3.0

            @functools.partial(jax.jit, static_argnums=0)  # the usual way to jit a method
            def apply(self, x):
                return x * self.k

        f = jax.jit(lambda x: x + 1.0)
        assert float(f(1.0)) == 2.0
        assert "module" in f.lower(1.0).as_text()  # jax's own attributes are forwarded
        assert float(Model().apply(jnp.float32(2.0))) == 6.0  # binds as a method
        assert float(jax.grad(f)(1.0)) == 1.0  # transformations accept the proxy
        if _jit_takes_no_fun():  # newer jax: jax.jit(static_argnums=...) returns a decorator
            g = jax.jit(static_argnums=1)(lambda x, n: x * n)
            assert float(g(2.0, 3)) == 6.0


def test_after_the_choice_only_the_step_proxy_runs_our_code(tmp_path):
    """From the choice on, a proxy's call is jax's function itself, but the chosen one's, which is a boundary first;
    a function jitted later is jax's own; after the block the step proxy forwards too. Each still works as before:
    results, attributes, binding as a method."""
    import functools

    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:

        class Model:
            k = 3.0

            @functools.partial(jax.jit, static_argnums=0)
            def apply(self, x):
                return x * self.k

        update = jax.jit(lambda w: w + 1.0)
        scale = jax.jit(lambda w: w * 0.5)
        w = jnp.zeros(2)
        for _ in range(12):
            w = scale(update(w))  # call 8 (scale's 4th) chooses update: both called 4 times, update first
        apply, later = Model.apply, jax.jit(lambda w: w - 1.0)
        assert update._finder.chosen_name.endswith("<lambda>") and update._finder.chosen == update._index
        for proxy in (scale, apply):  # a class of its own, whose call is jax's function
            assert type(proxy) is not CountedJit and isinstance(proxy, CountedJit)
            assert type(proxy).__call__ is proxy._jitted
        assert type(update).__call__ is not update._jitted
        assert not isinstance(later, CountedJit) and float(later(jnp.float32(3.0))) == 2.0
        assert float(Model().apply(jnp.float32(2.0))) == 6.0  # binds as a method
        assert "module" in scale.lower(w).as_text()  # jax's own attributes are forwarded
        assert float(jax.grad(lambda v: scale(v))(1.0)) == 0.5
        for _ in range(3):
            w = scale(update(w))
    assert type(update).__call__ is update._jitted  # the block's end: forwarding only
    assert float(update(jnp.float32(1.0))) == 2.0
    assert w.tolist() == pytest.approx([1 - 2**-15] * 2)
    # update's calls 5-15 are boundaries: 11 boundaries -> 10 finished steps
    assert [s["step"] for s in _steps(run.path)] == list(range(10))


def _jit_takes_no_fun() -> bool:
    try:
        jax.jit(static_argnums=1)
        return True
    except TypeError:
        return False


def test_marker_takes_precedence_over_jit(tmp_path):
    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        f = jax.jit(lambda x: x + 1.0)
        x = 0.0
        for _ in range(12):
            x = f(x)
            diagnose.step()
    steps = _steps(run.path)
    assert {s["source"] for s in steps} == {"marker"} and len(steps) == 11
