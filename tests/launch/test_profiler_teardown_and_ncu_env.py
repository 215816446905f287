"""The trace window lets Kineto detach CUPTI when it closes; ncu mode turns off JAX's preallocation.

On the H200 (2026-12-03, torch 2.11.0+cu130) light mode with CUPTI left attached after the
window cost +35.9 % per steady-state step, with teardown +4.0 % (benchmarks/light_overhead.py
--ablation). These CPU tests check the environment handling; the fake torch objects here are
stand-ins named as such.
"""

from __future__ import annotations

import os
import types

import pytest

from diagnose.launch import ncu_command
from diagnose.launch.runtime import profilers


def _fake_torch(cuda_version):
    return types.SimpleNamespace(version=types.SimpleNamespace(cuda=cuda_version))


@pytest.fixture
def no_teardown_env(monkeypatch):
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)


def test_teardown_is_asked_for_while_the_profiler_stops(no_teardown_env):
    with profilers._cupti_teardown_on_stop(_fake_torch("13.0")):
        assert os.environ["TEARDOWN_CUPTI"] == "1"
    assert "TEARDOWN_CUPTI" not in os.environ


def test_teardown_env_restored_when_stop_raises(no_teardown_env):
    with pytest.raises(RuntimeError):
        with profilers._cupti_teardown_on_stop(_fake_torch("12.6")):
            raise RuntimeError("profiler stop failed")
    assert "TEARDOWN_CUPTI" not in os.environ


@pytest.mark.parametrize("cuda", ["12.4", "11.8", None, "rocm"])
def test_no_teardown_where_torch_keeps_cupti(no_teardown_env, cuda):
    with profilers._cupti_teardown_on_stop(_fake_torch(cuda)):
        assert "TEARDOWN_CUPTI" not in os.environ


def test_no_teardown_for_a_window_that_traced_no_cuda(no_teardown_env):
    """A CPU-only torch.profiler stopped with TEARDOWN_CUPTI=1 hung its process at exit on the lent GPU machine
    (torch 2.11+cu130; a script that never used the GPU, with or without gpudiag)."""
    with profilers._cupti_teardown_on_stop(_fake_torch("13.0"), with_cuda=False):
        assert "TEARDOWN_CUPTI" not in os.environ


@pytest.mark.parametrize("with_cuda", [False, True])
def test_the_trace_window_asks_for_teardown_only_when_it_traced_cuda(no_teardown_env, monkeypatch, with_cuda):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(profilers, "_cuda_at_least", lambda torch, version: True)  # as with CUDA 13 (a stand-in)
    window = profilers.TorchTraceWindow(torch, with_cuda=False)  # CPU activity only: this machine has no GPU
    window._with_cuda = with_cuda
    seen = []
    window._profiler = types.SimpleNamespace(stop=lambda: seen.append(os.environ.get("TEARDOWN_CUPTI")))
    window.stop()
    assert seen == (["1"] if with_cuda else [None])
    assert "TEARDOWN_CUPTI" not in os.environ


def test_users_own_teardown_setting_wins(monkeypatch):
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    with profilers._cupti_teardown_on_stop(_fake_torch("13.0")):
        assert os.environ["TEARDOWN_CUPTI"] == "0"
    assert os.environ["TEARDOWN_CUPTI"] == "0"


def test_ncu_child_env_turns_off_jax_preallocation_unless_set():
    assert ncu_command.child_env_additions({}) == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert ncu_command.child_env_additions({"XLA_PYTHON_CLIENT_PREALLOCATE": "true"}) == {}
