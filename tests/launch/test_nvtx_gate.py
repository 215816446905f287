"""Light mode pushes its per-step NVTX ranges only when an NVTX tool can receive them; ncu mode always.

Uses the real ``nvtx`` package (a test dependency) as the backend: on a machine without a GPU it is the
first backend that loads, and without a tool its calls go nowhere, as on a GPU machine.
"""

from __future__ import annotations

import json

import pytest

from diagnose.launch import child_config, event_log
from diagnose.launch.runtime import nvtx_ranges
from diagnose.launch.runtime.coordinator import Runtime

pytest.importorskip("nvtx")


@pytest.mark.parametrize(
    "environ, listening",
    [
        ({}, False),
        ({"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0"}, False),
        ({"NVTX_INJECTION64_PATH": ""}, False),  # set but empty: the NVTX library loads nothing either
        ({"NVTX_INJECTION64_PATH": "/opt/nsight-systems/target-linux-x64/libToolsInjection64.so"}, True),
        ({"CUDA_INJECTION64_PATH": "/usr/lib/libcupti.so"}, True),
        ({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}, True),  # may carry an injection: keep ranges
        ({"NSYS_PROFILING_SESSION_ID": "3"}, True),
    ],
)
def test_a_tool_may_listen_only_when_the_environment_shows_a_way_in(environ, listening):
    assert nvtx_ranges.tool_may_listen(environ) is listening


def test_nvtx_always_round_trips_through_the_environment(tmp_path):
    for nvtx, always, value in ((True, False, "1"), (True, True, "always"), (False, False, "0")):
        config = child_config.ChildConfig(run_dir=str(tmp_path), nvtx=nvtx, nvtx_always=always)
        assert config.to_env()["GPUDIAG_NVTX"] == value
        assert child_config.from_env(config.to_env()) == config


def _runtime(tmp_path, monkeypatch, environ: dict, **config):
    for name in nvtx_ranges.TOOL_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    runtime = Runtime(child_config.ChildConfig(run_dir=str(tmp_path), **config))
    runtime.rank = 0
    runtime.events = event_log.JsonlAppender(str(tmp_path / "events.jsonl"))
    runtime.steps.nvtx = nvtx_ranges.open_for_steps(
        runtime.config, runtime.events, runtime.rank, runtime.faults.log_once
    )  # as the runtime's start does
    runtime.events.close()
    records = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    return runtime, [r for r in records if r.get("event") == "nvtx"]


def test_without_a_tool_light_mode_pushes_no_ranges_and_says_why(tmp_path, monkeypatch):
    runtime, records = _runtime(tmp_path, monkeypatch, {})
    assert runtime.steps.nvtx is None
    assert len(records) == 1 and records[0]["ranges"] is False and records[0]["backend"] is None
    assert "NVTX_INJECTION64_PATH" in records[0]["why_not"]


@pytest.mark.parametrize(
    "environ, config",
    [
        ({"NVTX_INJECTION64_PATH": "/nonexistent/libToolsInjection64.so"}, {}),
        ({}, {"nvtx_always": True}),
        ({}, {"mode": "ncu"}),  # under ncu the ranges are the profiling window
    ],
)
def test_with_a_tool_or_when_asked_the_ranges_are_pushed(tmp_path, monkeypatch, environ, config):
    runtime, records = _runtime(tmp_path, monkeypatch, environ, **config)
    assert runtime.steps.nvtx is not None and runtime.steps.nvtx.name == "nvtx"
    assert records == [{**records[0], "ranges": True, "backend": "nvtx", "why_not": None}]
    handle = runtime.steps.nvtx.start(child_config.nvtx_range_name(5))  # the real library: a no-op without a tool
    runtime.steps.nvtx.end(handle)


def test_profile_options_take_always(tmp_path):
    from diagnose.launch.capture_mode import ProfileOptions

    assert ProfileOptions(nvtx="always").child_config(str(tmp_path)).nvtx_always is True
    assert ProfileOptions().child_config(str(tmp_path)).nvtx_always is False
    assert ProfileOptions(nvtx=False).child_config(str(tmp_path)).nvtx is False
    with pytest.raises(TypeError, match="nvtx must be"):
        ProfileOptions(nvtx="off")  # a truthy string that would have meant the opposite


def test_the_api_refuses_an_unknown_nvtx_value_as_bad_input():
    import diagnose
    from parsers.errors import InputError

    with pytest.raises(InputError, match="nvtx must be"):
        diagnose.profile(nvtx="sometimes")
