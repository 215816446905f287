"""Light mode's input wait for a loop over any iterable (diagnose/launch/runtime/loop_input.py, Python 3.12+).

The watcher needs ``sys.monitoring`` (Python 3.12+). The runs below use a Python 3.12+ interpreter for the profiled
script (the parent gpudiag runs on whatever runs the tests): this one when it is 3.12+, else ``python3.12`` or
``python3.13`` from PATH; without one they skip (CI has only 3.11). The loop finding itself is plain ``dis`` and is
tested on every version.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import textwrap

import pytest

from diagnose.launch.runtime.loop_input import enclosing_for_iter, find_loop, is_user_code
from tests.launch.launch_helpers import base_env, gpudiag, records


def _python312() -> str | None:
    if sys.version_info >= (3, 12):
        return sys.executable
    for name in ("python3.13", "python3.12"):
        path = shutil.which(name)
        if path and subprocess.run([path, "-c", "import sys"], capture_output=True).returncode == 0:
            return path
    return None


PY312 = _python312()
needs_312 = pytest.mark.skipif(PY312 is None, reason="no Python 3.12+ interpreter (sys.monitoring) here")

FETCH_S = 0.02  # each item takes 20 ms to produce
LOOPS = {
    # a generator, the step marked in the loop
    "generator": """
        def batches():
            while True:
                time.sleep(FETCH_S)
                yield 1
        for i, b in enumerate(batches()):
            if i == 12:
                break
            time.sleep(0.005)
            diagnose.step()
    """,
    # a class with __next__, the step marked inside a function the loop calls
    "next_method": """
        class Batches:
            def __iter__(self):
                return self
            def __next__(self):
                time.sleep(FETCH_S)
                return 1
        def train_step(b):
            time.sleep(0.005)
            diagnose.step()
        for i, b in zip(range(12), Batches()):
            train_step(b)
    """,
}


def _run(tmp_path, name: str, body: str) -> list[dict]:
    script = tmp_path / f"{name}.py"
    script.write_text("import time\nimport diagnose\nFETCH_S = %r\n" % FETCH_S + textwrap.dedent(body))
    out = tmp_path / name
    r = gpudiag("profile", "-q", "-o", out, "--trace-steps", "0", "--", PY312, script, env=base_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    return [e for e in records(out) if e["kind"] == "step"]


@needs_312
@pytest.mark.parametrize("name", sorted(LOOPS))
def test_the_loops_wait_on_its_iterator_is_each_steps_input(tmp_path, name):
    steps = _run(tmp_path, name, LOOPS[name])
    assert len(steps) == 11
    assert "input_ms" not in steps[0]  # the loop is found at the first step's end, from then on every step
    waits = [s["input_ms"] for s in steps[1:]]
    assert {s.get("input_from") for s in steps[1:]} == {"loop"}
    # at least the fetch's sleep, and not the step's own 5 ms sleep, which host_ms holds beside it: bounds that
    # hold however long a busy machine stretches either
    host = [s["host_ms"] for s in steps[1:]]
    assert all(FETCH_S * 1e3 * 0.95 <= w <= h - 5 for w, h in zip(waits, host)), (waits, host)


@needs_312
def test_a_loop_over_a_list_waits_for_nothing(tmp_path):
    steps = _run(tmp_path, "list", "for i in list(range(12)):\n    time.sleep(0.005)\n    diagnose.step()\n")
    waits = [s["input_ms"] for s in steps[1:]]
    assert len(waits) == 10 and all(w <= s["host_ms"] - 5 for w, s in zip(waits, steps[1:])), waits
    assert statistics.median(waits) < 0.5, waits  # a list's next() takes nanoseconds: a preempted one is no median


def _loop_with_inner(steps):
    for i in range(steps):  # line of the for statement
        frame = sys._getframe()
        if i == 0:
            return frame, frame.f_lasti


def test_the_loop_is_the_user_frame_with_a_for_around_the_call():
    frame, lasti = _loop_with_inner(3)
    offset = enclosing_for_iter(frame.f_code, lasti)
    assert offset is not None
    code, found = find_loop(frame)
    assert code is _loop_with_inner.__code__ and found == offset
    assert is_user_code("/home/me/train.py") and is_user_code("train.py")
    assert not is_user_code("/usr/lib/python3.11/threading.py")
    assert not is_user_code("/x/site-packages/torch/optim/optimizer.py")
    assert not is_user_code("/work/main/diagnose/launch/runtime/steps.py")
    assert enclosing_for_iter(test_the_loop_is_the_user_frame_with_a_for_around_the_call.__code__, 2) is None


@needs_312
def test_each_epochs_first_fetch_is_counted(tmp_path):
    """A new iterator every epoch whose first item is slow (workers starting, a shard opened): 80 ms, then 20 ms."""
    body = """
        def batches(n):
            time.sleep(0.08)
            for _ in range(n):
                yield 1
                time.sleep(FETCH_S)
        for epoch in range(3):
            for b in batches(4):
                time.sleep(0.005)
                diagnose.step()
    """
    steps = _run(tmp_path, "epochs", body)
    waits = {s["step"]: s["input_ms"] for s in steps[1:]}
    host = {s["step"]: s["host_ms"] for s in steps[1:]}
    assert len(waits) == 10
    # step k holds the fetch of item k + 1: steps 3 and 7 fetch the next epoch's first item, waiting for the old
    # iterator's last 20 ms (its StopIteration) and the new one's 80 ms; every step also sleeps 5 ms of its own,
    # outside the fetch. Lower bounds and containment only, so a busy machine cannot fail it; a wait counted in
    # the wrong step exceeds that step's host_ms
    assert waits[3] >= 95 and waits[7] >= 95, waits
    assert all(19 <= w <= host[k] - 5 for k, w in waits.items()), (waits, host)


def _torch_in(python: str | None) -> bool:
    return python is not None and subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0


@needs_312
@pytest.mark.skipif(not _torch_in(PY312), reason="no torch in the Python 3.12+ interpreter")
def test_epoch_starts_are_still_counted_after_the_trace_window(tmp_path):
    """torch's profiler (the trace window, steps 10-12) switches Python profiling on and off; on Python 3.12.1 that
    left the loop's GET_ITER event off, and each later epoch's first fetch read 0 ms until the watcher re-armed."""
    body = """
        import torch
        def shard(n):
            time.sleep(0.2)  # opening a shard: the first item of every epoch
            for _ in range(n):
                time.sleep(FETCH_S / 4)
                yield torch.randn(8, 16)
        model = torch.nn.Linear(16, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            for x in shard(20):
                model(x).sum().backward()
                opt.step()
    """
    script = tmp_path / "epochs_torch.py"
    script.write_text("import time\nFETCH_S = %r\n" % FETCH_S + textwrap.dedent(body))
    out = tmp_path / "run"
    r = gpudiag("profile", "-q", "-o", out, "--", PY312, script, env=base_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    steps = {e["step"]: e for e in records(out) if e["kind"] == "step"}
    assert steps[11]["instrumented"] and "trace/rank0.json.gz" in (out / "manifest.json").read_text()
    # steps 19 and 39 hold the next epoch's first fetch: the shard's 200 ms, before and after the window's steps
    assert steps[19]["input_ms"] > 190 and steps[39]["input_ms"] > 190, (steps[19], steps[39])
    assert all(steps[s]["input_from"] == "loop" for s in (19, 39))
