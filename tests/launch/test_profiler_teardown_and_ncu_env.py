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


def test_users_own_teardown_setting_wins(monkeypatch):
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    with profilers._cupti_teardown_on_stop(_fake_torch("13.0")):
        assert os.environ["TEARDOWN_CUPTI"] == "0"
    assert os.environ["TEARDOWN_CUPTI"] == "0"


def test_ncu_child_env_turns_off_jax_preallocation_unless_set():
    assert ncu_command.child_env_additions({}) == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert ncu_command.child_env_additions({"XLA_PYTHON_CLIENT_PREALLOCATE": "true"}) == {}
