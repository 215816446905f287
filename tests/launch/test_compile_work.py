"""Light mode's compilation records (issue 18): each JAX jit compile and torch.compile compile, with its step, the
compiled function and the user's line; those before the first step with step -1 (issue 30); nothing off the main
thread."""

from __future__ import annotations

import statistics
import threading
import types
from pathlib import Path

import pytest

from diagnose.launch.runtime.compile_work import CompileWork, union_ns
from tests.launch.launch_helpers import EXAMPLES, SCRIPTS, gpudiag, records


def line_of(path, marker: str) -> int:
    (number,) = [i for i, text in enumerate(path.read_text().splitlines(), start=1) if marker in text]
    return number


def compiles_of(run_dir) -> list[dict]:
    return [r for r in records(run_dir) if r["kind"] == "work" and r["what"] == "compilation"]


def test_a_jax_loop_that_meets_new_shapes_writes_one_record_per_compile_in_its_step(tmp_path):
    """examples/jax_recompile.py, 40 iterations, a new sequence length at iterations 10, 20, 30. The step function
    is chosen at the 8th call (iteration 7 is step 0), so those iterations are steps 3, 13 and 23; the first
    compile (iteration 0) came before the first step: step -1, with the other compiles before it (the script's
    setup), written right after the run's start record."""
    pytest.importorskip("jax")
    pytest.importorskip("jax.monitoring")
    script = EXAMPLES / "jax_recompile.py"
    run = tmp_path / "run"
    done = gpudiag(
        "profile", "-q", "--trace-steps", "0", "-o", run, "--",
        "python3", script, "--steps", "40", "--new-every", "10",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    everything = records(run)
    found = [r for r in compiles_of(run) if r["step"] >= 0]
    before = [r for r in compiles_of(run) if r["step"] == -1]
    assert [(r["step"], r["name"], r["rank"]) for r in found] == [
        (3, "jit(update)", 0),
        (13, "jit(update)", 0),
        (23, "jit(update)", 0),
    ]
    assert {r["location"] for r in found} == {f"{script.resolve()}:{line_of(script, '# RECOMPILE')}"}
    first_update = [r for r in before if r["name"] == "jit(update)"]
    assert [r["location"] for r in first_update] == [f"{script.resolve()}:{line_of(script, '# RECOMPILE')}"]
    start = [i for i, r in enumerate(everything) if r["kind"] == "run" and r["event"] == "start"]
    held = [i for i, r in enumerate(everything) if r["kind"] == "work" and r["step"] == -1]
    assert start == [0] and held == list(range(1, len(held) + 1))  # right after the start record, in time order
    assert [everything[i]["t_ns"] for i in held] == sorted(everything[i]["t_ns"] for i in held)
    steps = {r["step"]: r for r in records(run) if r["kind"] == "step"}
    for r in found:  # trace + lowering + XLA compile, inside the step that dispatched it
        assert 5 < r["ms"] < steps[r["step"]]["host_ms"]
        assert steps[r["step"]]["t_start_ns"] <= r["t_ns"] <= steps[r["step"] + 1]["t_start_ns"]
    others = [s["host_ms"] for n, s in steps.items() if n not in (3, 13, 23) and n > 2]
    # a step that did not compile is faster than any compile: the median, so one preempted step cannot fail it
    assert statistics.median(others) < min(r["ms"] for r in found)


def test_torch_compile_recompiles_are_recorded_on_the_main_thread_only(tmp_path):
    """tests/launch/scripts/torch_compile_recompile.py: dynamic=False compiles per batch size (steps 0, 4, 8); the
    compile before the first step has step -1 and its own line; the one on another thread (step 6) is not recorded."""
    pytest.importorskip("torch")
    script = SCRIPTS / "torch_compile_recompile.py"
    run = tmp_path / "run"
    done = gpudiag("profile", "-q", "--trace-steps", "0", "-o", run, "--", "python3", script, timeout=300)
    assert done.returncode == 0, done.stderr
    before, *found = compiles_of(run)
    assert [(r["step"], r["name"]) for r in found] == [(s, "torch.compile(forward)") for s in (0, 4, 8)]
    assert {r["location"] for r in found} == {f"{script.resolve()}:{line_of(script, '# COMPILE-CALL')}"}
    assert (before["step"], before["name"]) == (-1, "torch.compile(forward)")
    assert before["location"] == f"{script.resolve()}:{line_of(script, '# COMPILE-BEFORE')}"
    assert not any("library_location" in r for r in [before, *found])  # the user called the compiled function
    assert all(r["ms"] > 0 for r in found)  # no ceiling: a compile on a busy machine takes what it takes


def test_the_union_of_phases_counts_a_nested_trace_once():
    assert union_ns([(0, 10), (2, 5), (20, 25)]) == 15
    assert union_ns([(5, 9), (0, 6)]) == 9
    assert union_ns([]) == 0


def test_unhook_takes_the_listener_and_the_callbacks_out():
    """In-process, with the real jax.monitoring and dynamo handler (the runtime is a stand-in: nothing is written)."""
    jax = pytest.importorskip("jax")
    callback = pytest.importorskip("torch._dynamo.callback")
    from jax._src import monitoring

    runtime = types.SimpleNamespace(disabled=False)
    work = CompileWork(runtime)
    work.hook_jax(jax)
    work.hook_dynamo(callback)
    assert work._on_jax_duration in monitoring.get_event_duration_listeners()
    assert work._on_dynamo_start in callback.callback_handler.start_callbacks
    work.unhook()
    assert work._on_jax_duration not in monitoring.get_event_duration_listeners()
    assert work._on_dynamo_start not in callback.callback_handler.start_callbacks
    assert work._on_dynamo_end not in callback.callback_handler.end_callbacks


def test_a_compile_on_the_autograd_thread_counts_while_the_main_thread_is_in_backward():
    """A CUDA backward runs on the autograd engine's device thread, and so does AOTAutograd's lazy compile of the
    backward graph: dynamo's callbacks fire there while the main thread waits in backward() (on the H100 the 4.9 s
    backward compile of examples/char_gpt.py --compile was missed). In-process with a stand-in runtime: the callbacks
    fired from another thread count only while the main thread is inside backward, named with its line."""
    written = []
    steps = types.SimpleNamespace(current_step=-1, _backward_depth=0)
    runtime = types.SimpleNamespace(
        disabled=False,
        steps=steps,
        faults=types.SimpleNamespace(writes_off=False, internal_error=lambda *a: written.append(("fault", a))),
        write_record=lambda kind, **fields: written.append(fields),
    )
    work = CompileWork(runtime)

    def compile_elsewhere():
        go = threading.Event()
        thread = threading.Thread(target=lambda: (go.wait(), work._on_dynamo_start(), work._on_dynamo_end()))
        thread.start()
        # the thread compiles only once this line runs, and the main thread stays on it until the thread ends
        thread.join(go.set())  # BACKWARD-WAIT: the main thread waits here, as it would in loss.backward()

    compile_elsewhere()  # the main thread is not in backward: a thread of the script's own
    assert written == []
    steps._backward_depth = 1
    compile_elsewhere()
    (record,) = written
    assert record["what"] == "compilation" and record["name"] == "torch.compile(backward)" and record["step"] == -1
    assert record["location"] == f"{Path(__file__).resolve()}:{line_of(Path(__file__), '# BACKWARD' + '-WAIT')}"
