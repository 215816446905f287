"""diagnose.derive.trace_input_wait for loops without a DataLoader: fetches from the loop's own iterator.

Real captures: fixtures/trace/input_generator (a generator-fed loop traced by light mode on the CPU) and
fixtures/runs/sync_planted (H200, a training loop that is itself a generator, yielding once a step: its
resumes are the loop body, never input). The expected waits are recomputed from the raw JSON here.
"""

from __future__ import annotations

import gzip
import json
import textwrap

import pytest

import diagnose
from diagnose.derive import trace_timeline as tl
from diagnose.derive.trace_input_wait import input_wait_per_step, is_generator, iterator_fetches, loop_frame
from parsers.trace import read_trace
from tests.launch.launch_helpers import EXAMPLES, gpudiag
from tests.paths import FIXTURES

TRACE = FIXTURES / "trace" / "input_generator" / "trace.json.gz"


@pytest.fixture(scope="module")
def generator_trace():
    trace = tl.analysed(read_trace(TRACE))
    return trace, tl.steps(trace)


def test_generator_resumes_are_the_input_wait(generator_trace):
    trace, steps = generator_trace
    assert trace.python.loc[loop_frame(trace, steps), "name"] == "input_generator.py(53): main"
    fetches = iterator_fetches(trace, steps, [EXAMPLES])
    assert fetches["name"].tolist() == ["input_generator.py(31): batches"] * 3
    wait = input_wait_per_step(trace, steps, [EXAMPLES])
    # by hand from the JSON: the generator's frames clipped to each step's host window
    with gzip.open(TRACE, "rt") as f:
        frames = [
            (e["ts"] * 1e3, (e["ts"] + e["dur"]) * 1e3)
            for e in json.load(f)["traceEvents"]
            if e.get("cat") == "python_function" and e["name"] == "input_generator.py(31): batches"
        ]
    windows = zip(steps["cpu_start_ns"], steps["cpu_end_ns"])
    by_hand = [sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in frames) / 1e6 for lo, hi in windows]
    assert wait.tolist() == pytest.approx(by_hand, abs=1e-3)
    assert wait.round(1).tolist() == [0.0, 32.8, 31.0]
    host_ms = (steps["cpu_end_ns"] - steps["cpu_start_ns"]) / 1e6
    assert (wait.iloc[1:] / host_ms.iloc[1:] > 0.7).all()  # the loop spends most of each step in the generator


def test_without_the_source_a_generator_is_not_known(generator_trace, tmp_path):
    trace, steps = generator_trace
    assert input_wait_per_step(trace, steps, [tmp_path]).tolist() == [0.0, 0.0, 0.0]


def test_a_training_loop_written_as_a_generator_is_not_input():
    """sync_planted.py's main() yields once a step to an outer loop: its resumes hold the step boundaries."""
    profile = diagnose.load(FIXTURES / "runs" / "sync_planted")
    trace = tl.analysed(profile.traces[0])
    steps = tl.steps(trace)
    assert is_generator("sync_planted.py", 54, "main", (str(EXAMPLES),))
    assert len(iterator_fetches(trace, steps, [EXAMPLES])) == 0
    assert input_wait_per_step(trace, steps, [EXAMPLES]).tolist() == [0.0, 0.0, 0.0]


def test_generator_lines_come_from_the_source(tmp_path):
    source = tmp_path / "loop.py"
    source.write_text(
        textwrap.dedent(
            """\
            import functools

            @functools.lru_cache
            def decorated():
                yield 1

            def outer():
                def inner():
                    yield 2
                return inner

            def not_a_generator():
                return (x for x in range(3))
            """
        )
    )
    dirs = (str(tmp_path),)
    assert is_generator("loop.py", 3, "decorated", dirs) and is_generator("loop.py", 5, "decorated", dirs)
    assert is_generator("loop.py", 9, "inner", dirs) and not is_generator("loop.py", 7, "outer", dirs)
    assert not is_generator("loop.py", 12, "not_a_generator", dirs)
    assert not is_generator("loop.py", 40, "decorated", dirs)  # outside the function
    (tmp_path / "broken.py").write_text("def f(:\n    yield\n")
    assert not is_generator("broken.py", 1, "f", dirs)  # not Python: nothing is a generator, nothing raises


def test_light_mode_writes_no_dataloader_input_ms_for_a_loop_without_one(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    r = gpudiag(
        "profile", "-q", "-o", out, "--trace-steps", "0", "--",
        "python", EXAMPLES / "input_generator.py", "--steps", "6", "--device", "cpu", "--batch", "64",
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    steps = [json.loads(line) for line in (out / "events" / "rank0.jsonl").open() if '"kind":"step"' in line]
    assert len(steps) == 5
    # no DataLoader: no input_ms, except that Python 3.12+ times the loop's for statement (input_from "loop")
    assert all("input_ms" not in s or s.get("input_from") == "loop" for s in steps)
    assert "input_ms" not in steps[0]
