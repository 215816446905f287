"""Issue 34 (3): a function compiled for the first time after warm-up is not "compiled again". On CPU
(fixtures/runs/jax_eval_outside_jit_cpu, examples/jax_eval_outside_jit.py): an evaluation of plain jnp operations
outside jit compiles four executables once in one step; fixtures/runs/jax_recompile (H200): the jitted update
compiles again for each new sequence length."""

from __future__ import annotations

import diagnose
from tests.paths import REPO

RUNS = REPO / "fixtures" / "runs"


def compilation(run: str):
    a = diagnose.analyze(diagnose.load(RUNS / run))
    return next(f for f in a.findings if f.id == "step_budget.compilation")


def test_jnp_ops_outside_jit_are_first_compiles_with_their_lines():
    f = compilation("jax_eval_outside_jit_cpu")
    assert f.title.startswith("_mean (jit) compiled for the first time after warm-up, in step 33: ")
    assert "compiled again" not in f.title
    assert (
        "4 functions compiled for the first time in step 33 at jax_eval_outside_jit.py:32–33 "
        "(jit(_mean), jit(_argmax), jit(equal), jit(matmul)): jnp operations run outside jit, one executable per "
        "operation and shape" in f.title
    )
    assert "These are first compiles, not recompiles" in f.recommendation and "jax.jit" in f.recommendation
    assert "Keep input shapes static" not in f.recommendation


def test_a_function_that_compiles_for_each_new_shape_is_compiled_again():
    f = compilation("jax_recompile")
    assert f.title.startswith("update (jit) compiled again in 7 steps after warm-up (steps 8, 23, 38, 53, 68, 83, …)")
    assert "Keep input shapes static" in f.recommendation
