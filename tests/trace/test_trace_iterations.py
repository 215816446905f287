"""Iterations of traces without ProfilerStep ranges (issue 17): what repeats at the top."""

from __future__ import annotations

import numpy as np
import pytest

import diagnose.derive.trace_timeline as tl
from diagnose.analysis import run_analyzer
from parsers.trace import read_trace
from tests.paths import FIXTURES, shared


def test_jax_trace_without_markers_steps_on_its_jitted_step():
    """fixtures/trace/jax: jax.profiler trace of a jitted `step` dispatched 5 times: 4 dispatch-to-dispatch iterations."""
    trace = read_trace(FIXTURES / "trace" / "jax" / "perfetto_trace.json.gz")
    windows = tl.steps(trace)
    assert windows.attrs["source"] == "JAX dispatches of PjitFunction(step) (no step markers in the trace)"
    assert windows["step"].tolist() == [0, 1, 2, 3]
    starts, ends = windows["cpu_start_ns"].to_numpy(), windows["cpu_end_ns"].to_numpy()
    assert (starts[1:] == ends[:-1]).all() and (ends > starts).all()  # contiguous, dispatch to dispatch


def test_jax_helpers_dispatched_as_often_are_not_the_step():
    """fixtures/runs/jax_train: jax.random's _threefry_split, _normal, _randint and unstack are dispatched as often as
    train_step (3 times each in the window); the step is the one whose XLA module runs longest."""
    trace = read_trace(FIXTURES / "runs" / "jax_train" / "trace" / "rank0.json.gz")
    windows = tl.steps(trace)
    assert windows.attrs["source"] == "JAX dispatches of PjitFunction(train_step) (no step markers in the trace)"
    assert len(windows) == 2


def test_torch_trace_without_profilerstep_steps_on_optimizer_steps():
    path = shared("torch", "convnet.trace.json.gz")
    trace = read_trace(path)
    windows = tl.steps(trace)
    assert windows.attrs["source"] == "Optimizer.step annotations (no ProfilerStep in the trace)"
    assert len(windows) == 12


def test_profilerstep_wins_when_present():
    trace = read_trace(FIXTURES / "trace" / "sync_planted" / "trace.json.gz")
    windows = tl.steps(trace)
    assert windows.attrs["source"] == "ProfilerStep annotations" and len(windows) == 5


def test_nothing_repeats_means_no_steps():
    """A trace of bad input named as such: no annotations, no frames, no dispatches."""
    trace = read_trace(FIXTURES / "trace" / "fake_jax_perfetto.trace.json")
    windows = tl.steps(trace)
    assert windows.attrs["source"] == "whole trace" and len(windows) == 0


def test_depths_are_vectorised_and_exact():
    from diagnose.derive.trace_iterations import _depths

    parent = np.array([-1, 0, 1, 1, -1, 4, 2])
    assert _depths(parent).tolist() == [0, 1, 2, 2, 0, 1, 3]


@pytest.mark.parametrize("n", [2, 3])
def test_starts_based_sources_need_three_calls(n):
    import pandas as pd

    from diagnose.derive.trace_iterations import MIN_REPEATS, _starts_based

    events = pd.DataFrame({"ts_ns": np.arange(n) * 100, "end_ns": np.arange(n) * 100 + 10})
    found = _starts_based(events, "x")
    assert MIN_REPEATS == 3
    assert (found is None) == (n < 3)


def test_a_trace_where_nothing_repeats_gets_span_figures_never_per_step(tmp_path):
    """HTA's real A100 trace with its one ProfilerStep range taken out (what a capture without a schedule looks like):
    no optimizer, no frames, no dispatches repeat. Its syncs are counted over the span, and nothing says "per step"."""
    import gzip
    import json

    import diagnose

    src = FIXTURES / "trace" / "hta" / "critical_path_cuda_event_sync_event_sync_trace.json.gz"
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    path = tmp_path / "no_steps.json"
    path.write_text(json.dumps(doc))
    analysis = diagnose.analyze(diagnose.load(path))
    assert tl.steps(read_trace(path)).attrs["source"] == "whole trace"
    with_steps = diagnose.analyze(diagnose.load(src)).summary
    summary = analysis.summary
    assert not [k for k in summary if k.endswith("_per_step")], summary
    assert summary["sync_count_in_span"] == with_steps["sync_count_per_step"]  # one step before: same syncs
    assert summary["launch_kernels_in_span"] > 0
    (sync,) = [f for f in analysis.findings if f.id == "sync.host_sync"]
    assert "in the traced span (no iterations found" in sync.title and "per step" not in sync.title
    assert {s.figures.get("count") for s in sync.subjects} and not any(
        "count_per_step" in s.figures for s in sync.subjects
    )


NO_PROFILERSTEP = FIXTURES / "trace" / "no_profilerstep"


def _ops_per_iteration(trace, windows, name: str) -> list[int]:
    """Top-level ops named ``name`` that start in each iteration."""
    ops = trace.cpu_ops[(trace.cpu_ops["name"].astype(str) == name) & (trace.cpu_ops["parent_index"] < 0)]
    starts = ops["ts_ns"].to_numpy()
    return [int(((starts >= a) & (starts < b)).sum()) for a, b in zip(windows["cpu_start_ns"], windows["cpu_end_ns"])]


@pytest.mark.parametrize(
    "name, source",
    [
        ("sgd_stacks.json.gz", "backward passes (no ProfilerStep or optimizer in the trace)"),
        (
            "sgd_nostacks.json.gz",
            "backward passes of the autograd engine (no ProfilerStep, optimizer or stacks in the trace)",
        ),
    ],
)
def test_hand_written_sgd_on_the_h200_gets_one_step_per_iteration(name, source):
    """fixtures/trace/no_profilerstep: torch.profiler.profile() around 8 iterations of examples/sgd_by_hand.py's
    loop on the H200 (no schedule, no optimizer). Without stacks the whole trace had been one step."""
    trace = read_trace(NO_PROFILERSTEP / name)
    windows = tl.steps(trace)
    assert windows.attrs["source"] == source
    assert len(windows) == 8
    # each iteration holds one backward pass (one loss backward) and the next iteration's forward is not cut
    assert _ops_per_iteration(trace, windows, "autograd::engine::evaluate_function: NllLossBackward0") == [1] * 8
    assert _ops_per_iteration(trace, windows, "aten::cross_entropy_loss") == [1] * 8


def test_backward_on_the_main_thread_without_stacks(tmp_path):
    """On the CPU the autograd engine runs on the main thread: a pass still ends where the forward begins."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    x = torch.randn(32, 64)
    path = tmp_path / "cpu_nostacks.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(6):
            loss = model(x).square().mean()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.01 * p.grad
                    p.grad = None
    prof.export_chrome_trace(str(path))
    trace = read_trace(path)
    windows = tl.steps(trace)
    assert windows.attrs["source"].startswith("backward passes of the autograd engine")
    assert len(windows) == 6
    assert _ops_per_iteration(trace, windows, "aten::mean") == [1] * 6


def test_the_idle_section_says_what_the_steps_of_a_trace_are():
    import diagnose
    from diagnose.analyzers import idle
    from reports.sections import idle as idle_section

    result = run_analyzer(idle, diagnose.load(NO_PROFILERSTEP / "sgd_nostacks.json.gz"))
    html = idle_section.render(result)
    assert "Steps of the trace: backward passes of the autograd engine (no ProfilerStep" in html
    profilerstep = idle_section.render(
        run_analyzer(idle, diagnose.load(FIXTURES / "trace" / "sync_planted" / "trace.json.gz"))
    )
    assert "Steps of the trace" not in profilerstep  # ProfilerStep ranges need no word


WORDLM = FIXTURES / "trace" / "wordlm_sgd"


@pytest.mark.parametrize(
    "name, source",
    [
        ("wordlm_stacks.json.gz", "backward passes (no ProfilerStep or optimizer in the trace)"),
        (
            "wordlm_nostacks.json.gz",
            "backward passes of the autograd engine (no ProfilerStep, optimizer or stacks in the trace)",
        ),
    ],
)
def test_word_lm_with_hand_written_sgd_gets_one_step_per_backward_pass(name, source):
    """fixtures/trace/wordlm_sgd (CPU): 24 iterations of a word-level LSTM LM, SGD by hand, one loss.item() each, no
    ProfilerStep (issue 28 item 15: a trace of this shape read "12.9 host syncs per step", 13 iterations a step)."""
    trace = read_trace(WORDLM / name)
    windows = tl.steps(trace)
    assert windows.attrs["source"] == source
    assert len(windows) == 24
    assert _ops_per_iteration(trace, windows, "aten::cross_entropy_loss") == [1] * 24  # one forward
    assert _ops_per_iteration(trace, windows, "autograd::engine::evaluate_function: NllLossBackward0") == [1] * 24
    # an iteration ends where its backward does: its loss.item() opens the next one, the last one's is after it
    assert _ops_per_iteration(trace, windows, "aten::item") == [0] + [1] * 23


@pytest.mark.parametrize(
    "path, passes",
    [
        (WORDLM / "wordlm_stacks.json.gz", 24),
        (WORDLM / "wordlm_nostacks.json.gz", 24),
        (NO_PROFILERSTEP / "sgd_stacks.json.gz", 8),
        (NO_PROFILERSTEP / "sgd_nostacks.json.gz", 8),
    ],
)
def test_backward_passes_from_sequence_numbers_alone(path, passes):
    """A pass begins at an engine op numbered above every one before it: no thread layout, no interrupting op
    needed, on the CPU (engine on the main thread) as on the H200 (engine on its own thread)."""
    from diagnose.derive.trace_iterations import _engine_passes_by_sequence, _top_engine_ops

    trace = read_trace(path)
    assert (trace.cpu_ops["sequence_number"] >= 0).sum() > 0
    found = _engine_passes_by_sequence(_top_engine_ops(trace))
    assert len(found) == passes
    assert (found["ts_ns"].to_numpy()[1:] >= found["end_ns"].to_numpy()[:-1]).all()  # passes do not overlap


def test_python_frames_missing_passes_yield_to_the_engine():
    """When the Python frames of backward show fewer passes than the engine ran, the engine's passes are the
    iterations. Input: the real trace with its backward frames after the first 8 calls taken out (made here, named
    so: a trace that lost frames)."""
    import dataclasses

    trace = read_trace(WORDLM / "wordlm_stacks.json.gz")
    py = trace.python
    from diagnose.derive.trace_iterations import _BACKWARD_FILES

    is_backward = (py["function"].astype(str) == "backward") & py["file"].astype(str).str.endswith(_BACKWARD_FILES)
    cut = int(py.loc[is_backward, "ts_ns"].sort_values().iloc[8])
    lost = dataclasses.replace(trace, python=py[~is_backward | (py["ts_ns"] < cut)])
    windows = tl.steps(lost)
    assert len(windows) == 24
    assert windows.attrs["source"].startswith("backward passes of the autograd engine (24; the trace's Python frames")
