"""Whether a run used a GPU, as steps.cpu_wait's advice asks before it says "the GPU waited with it": a torch run's
CUDA-event step times, a JAX run's GPU work in its trace (its steps have no GPU time), never NVML samples alone (light
mode samples a GPU host's GPUs while a script runs on its CPU)."""

from __future__ import annotations

import pytest

import diagnose
from diagnose.analyzers.steps import used_gpu
from diagnose.derive.derived import Derived
from tests.paths import FIXTURES


@pytest.mark.parametrize(
    "name, gpu",
    [
        ("char_gpt_h100", True),  # CUDA-event step times
        ("flax_host_bound_h200", True),  # JAX on the H200: no step GPU time, GPU work in the trace
        ("char_gpt_cpu", False),
        ("jax_eval_outside_jit_cpu", False),
    ],
)
def test_a_run_is_seen_using_a_gpu_by_its_step_times_or_its_trace(name, gpu):
    profile = diagnose.load(FIXTURES / "runs" / name, quiet=True)
    steps = Derived(profile).step_table()
    assert used_gpu(profile, steps) is gpu


def test_nvml_samples_alone_do_not_make_a_cpu_run_a_gpu_run():
    """The CPU run given the H200 run's real NVML samples (147 of them): still a CPU run."""
    profile = diagnose.load(FIXTURES / "runs" / "char_gpt_cpu", quiet=True)
    profile.nvml = diagnose.load(FIXTURES / "runs" / "flax_host_bound_h200", quiet=True).nvml
    assert len(profile.nvml) == 147
    assert not used_gpu(profile, Derived(profile).step_table())
