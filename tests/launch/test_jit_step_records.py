"""The jit step path's steady state (Steps.on_jit_step) writes the records the full boundary writes (issue 17).

After the first steps and the trace window, a JAX step boundary takes a shorter path: its wall clock is derived
from perf_counter, and the drain and memory_stats are checked against one precomputed time. These tests hold
its records to what the full boundary writes: the same line format, t_start_ns inside the call that started
the step, host_ms the distance to the next step's t_start_ns, the window's steps instrumented."""

from __future__ import annotations

import json
import re
import time

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import diagnose  # noqa: E402
from diagnose.launch.runtime import lifecycle  # noqa: E402
from diagnose.launch.runtime.steps import wall_clock_offset_ns  # noqa: E402
from tests.launch.launch_helpers import records  # noqa: E402

STEP_LINE = re.compile(
    rb'\{"kind":"step","rank":0,"step":(\d+),"t_start_ns":(\d+),"host_ms":\d+\.\d{6},"gpu_ms":null,'
    rb'"source":"jit","instrumented":(true|false),"overhead_us":\d+\.\d{3}\}\n'
)


def _step_lines(run_dir) -> list[bytes]:
    lines = []
    for path in sorted(run_dir.rglob("*.jsonl")):
        lines += [line for line in path.read_bytes().splitlines(keepends=True) if b'"kind":"step"' in line]
    return lines


def test_steady_jit_steps_keep_the_record_format_and_the_wall_clock(tmp_path):
    calls = 80
    before_ns, after_ns = [], []
    with diagnose.profile(out=tmp_path / "r", nvml=False, quiet=True) as run:  # the default window: steps 10-12
        update = jax.jit(lambda w: w * 0.999 + 0.001)
        w = jnp.ones(4)
        for _ in range(calls):
            before_ns.append(time.time_ns())
            w = update(w)
            after_ns.append(time.time_ns())
        steady = lifecycle.active().steps._steady
    assert steady  # the later boundaries took the short path, so the records below are its records
    lines = _step_lines(run.path)
    assert all(STEP_LINE.fullmatch(line) for line in lines), lines[:3]
    steps = [r for r in records(run.path) if r["kind"] == "step"]
    # calls 0-6 choose the step function, call 7 starts step 0; in-process the last step is not finished
    assert [s["step"] for s in steps] == list(range(calls - 8))
    for s in steps:  # each step starts inside the call that started it
        call = s["step"] + 7
        assert before_ns[call] <= s["t_start_ns"] <= after_ns[call], (s, before_ns[call], after_ns[call])
    for s, following in zip(steps, steps[1:]):  # wall and host clocks agree to a µs over the whole run
        assert abs((following["t_start_ns"] - s["t_start_ns"]) / 1e6 - s["host_ms"]) < 0.001, (s, following)
    # the window's steps 10-12, and step 13, at whose start the trace was exported
    assert [s["step"] for s in steps if s["instrumented"]] == [10, 11, 12, 13]


def test_a_marker_after_steady_jit_steps_takes_over(tmp_path):
    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        update = jax.jit(lambda w: w + 1.0)
        w = jnp.zeros(2)
        for _ in range(30):
            w = update(w)
        steady = lifecycle.active().steps._steady
        for _ in range(10):
            w = update(w)
            diagnose.step()
    assert steady
    steps = [r for r in records(run.path) if r["kind"] == "step"]
    sources = [s["source"] for s in steps]
    # calls 8-30 and the marker loop's first are jit boundaries (steps 0-23 start there); the first marker is a
    # boundary (the jit step in progress ends, step 24 starts), each later one too; no later jit call is one
    assert sources == ["jit"] * 24 + ["marker"] * 9, sources
    assert [s["step"] for s in steps] == list(range(33))


def test_wall_clock_offset_matches_time_ns():
    for _ in range(5):
        offset_ns = wall_clock_offset_ns()
        derived_ns = time.perf_counter_ns() + offset_ns
        wall_ns = time.time_ns()
        assert 0 <= wall_ns - derived_ns < 50_000, wall_ns - derived_ns


def test_jit_step_records_are_json(tmp_path):
    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        update = jax.jit(lambda w: w + 1.0)
        w = jnp.zeros(2)
        for _ in range(20):
            w = update(w)
    lines = _step_lines(run.path)
    assert [json.loads(line)["step"] for line in lines] == list(range(12))  # calls 7-19 are boundaries


def test_steady_jit_steps_keep_the_dataloader_wait(tmp_path):
    torch = pytest.importorskip("torch")
    loader = torch.utils.data.DataLoader(torch.arange(80.0).reshape(40, 2), batch_size=1)
    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        update = jax.jit(lambda w, x: w + x)
        w = jnp.zeros(2)
        for batch in loader:  # one DataLoader batch per jit call: every step has a measured input wait
            w = update(w, batch.numpy()[0])
        steady = lifecycle.active().steps._steady
    assert steady
    steps = [r for r in records(run.path) if r["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(40 - 8))
    assert all(0 < s["input_ms"] < s["host_ms"] and "input_from" not in s for s in steps), steps[:3]
    assert float(w[1]) == pytest.approx(sum(range(1, 80, 2)))
