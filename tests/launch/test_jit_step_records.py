"""The jit step path's steady state (Steps.on_jit_step) writes the records the full boundary writes (issue 17).

After the first steps and the trace window, a JAX step boundary takes a shorter path: its wall clock is derived
from perf_counter, and the drain and memory_stats are checked against one precomputed time. These tests hold
its records to what the full boundary writes: the same line format, t_start_ns inside the call that started
the step, host_ms the distance to the next step's t_start_ns, the window's steps instrumented."""

from __future__ import annotations

import json
import re
import time
import types

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import diagnose  # noqa: E402
from diagnose.launch.runtime import lifecycle  # noqa: E402
from diagnose.launch.runtime import steps as steps_module  # noqa: E402
from diagnose.launch.runtime.steps import wall_clock_offset_ns  # noqa: E402
from tests.launch.launch_helpers import records  # noqa: E402

STEP_LINE = re.compile(
    rb'\{"kind":"step","rank":0,"step":(\d+),"t_start_ns":(\d+),"host_ms":\d+\.\d{6},"gpu_ms":null,'
    rb'"source":"jit","instrumented":(true|false),"overhead_us":\d+\.\d{3}'
    rb'(,"dispatch_ms":\d+\.\d+(,"ready_ms":\d+\.\d+)?(,"queued_ms":\d+\.\d+)?)?\}\n'
)  # a sampled step (jit_dispatch, one in 128) adds its dispatch and readiness


def _step_lines(run_dir) -> list[bytes]:
    lines = []
    for path in sorted(run_dir.rglob("*.jsonl")):
        lines += [line for line in path.read_bytes().splitlines(keepends=True) if b'"kind":"step"' in line]
    return lines


class OneClock:
    """A deterministic hook for the step clock: the wall clock is perf_counter plus a fixed offset, read at the
    last perf_counter read (so the full boundary's ``perf_counter_ns(); time.time_ns()`` pair is one instant), and
    ``wall_clock_offset_ns`` returns that offset. With real clocks the two are read apart, and on a busy machine a
    preemption between the reads moves a record by its length (wall_clock_offset_ns itself is tested below)."""

    def __init__(self):
        self.offset_ns = time.time_ns() - time.perf_counter_ns()
        self.last_perf_ns = time.perf_counter_ns()

    def perf_counter_ns(self) -> int:
        self.last_perf_ns = time.perf_counter_ns()
        return self.last_perf_ns

    def time_ns(self) -> int:
        return self.last_perf_ns + self.offset_ns

    def __getattr__(self, name):  # time.monotonic, time.sleep, ... as they are
        return getattr(time, name)


def test_steady_jit_steps_keep_the_record_format_and_the_wall_clock(tmp_path, monkeypatch):
    clock = OneClock()
    monkeypatch.setattr(steps_module, "perf_counter_ns", clock.perf_counter_ns)
    monkeypatch.setattr(steps_module, "time", clock)
    monkeypatch.setattr(steps_module, "wall_clock_offset_ns", lambda: clock.offset_ns)
    calls = 80
    before_ns, after_ns = [], []
    with diagnose.profile(out=tmp_path / "r", nvml=False, quiet=True) as run:  # the default window: steps 10-12
        update = jax.jit(lambda w: w * 0.999 + 0.001)
        w = jnp.ones(4)
        for _ in range(calls):
            before_ns.append(time.perf_counter_ns() + clock.offset_ns)
            w = update(w)
            after_ns.append(time.perf_counter_ns() + clock.offset_ns)
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
    for s, following in zip(steps, steps[1:]):  # each start is the perf_counter read of host_ms, on both paths
        assert abs((following["t_start_ns"] - s["t_start_ns"]) / 1e6 - s["host_ms"]) < 1e-6, (s, following)
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


def test_wall_clock_offset_is_within_its_reads_of_time_ns():
    """The offset read is off by at most half its narrowest read, so it lies within the call's own width of any
    other reading of ``time_ns() - perf_counter_ns()``: bounds that widen with the load, never a fixed µs."""
    for _ in range(5):
        before_ns = time.perf_counter_ns()
        offset_ns = wall_clock_offset_ns()
        width_ns = time.perf_counter_ns() - before_ns
        q0_ns = time.perf_counter_ns()
        wall_ns = time.time_ns()
        q1_ns = time.perf_counter_ns()  # the true offset is in [wall_ns - q1_ns, wall_ns - q0_ns]
        assert wall_ns - q1_ns - width_ns <= offset_ns <= wall_ns - q0_ns + width_ns, (offset_ns, wall_ns, width_ns)


def test_wall_clock_offset_takes_the_narrowest_of_three_reads(monkeypatch):
    perf = iter([0, 1_000, 5_000, 5_100, 9_000, 9_500])  # reads 1 000, 100 and 500 ns wide
    wall = iter([10_000_400, 10_005_070, 10_009_300])
    monkeypatch.setattr(steps_module, "perf_counter_ns", lambda: next(perf))
    monkeypatch.setattr(steps_module, "time", types.SimpleNamespace(time_ns=lambda: next(wall)))
    assert wall_clock_offset_ns() == 10_005_070 - 5_050  # the wall read against the middle of the 100 ns read


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
