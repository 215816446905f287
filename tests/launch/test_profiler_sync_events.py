"""The trace window's synchronizing calls read from Kineto's raw events (diagnose.launch.runtime.profilers).

``profile.events()`` builds a Python object and a tree for every event; after a three-step window of
examples/wordlm_sgd.py on the CPU host it took about 10 s (101,325 Python function events), charged to the step
after the window. The raw path must find the same calls with the same outermost aten op, wait, time and stack as
torch's tree. A CPU profile has no CUDA runtime calls, so these tests ask for CPU ops by name instead: the
matching, not the names, is what is shared."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from diagnose.launch.runtime.profilers import TorchTraceWindow  # noqa: E402

NAMES = ("aten::addmm", "aten::mm", "aten::item", "aten::_local_scalar_dense")


def lstm_step(model, head, vocab: int) -> float:
    x = torch.randint(0, vocab, (8, 20))
    out, _ = model(torch.nn.functional.one_hot(x, vocab).float())
    loss = torch.nn.functional.cross_entropy(head(out).reshape(-1, vocab), x.reshape(-1))
    loss.backward()
    return loss.item()


@pytest.fixture(scope="module")
def window(tmp_path_factory):
    torch.manual_seed(0)
    vocab = 16
    model, head = torch.nn.LSTM(vocab, 32, batch_first=True), torch.nn.Linear(32, vocab)
    lstm_step(model, head, vocab)
    w = TorchTraceWindow(torch, with_cuda=False)
    w.start()
    for _ in range(3):
        lstm_step(model, head, vocab)
    w.stop_and_export(str(tmp_path_factory.mktemp("trace") / "rank0.json.gz"))
    return w


def test_the_raw_events_give_what_torchs_tree_gives(window):
    fast = window.sync_events(NAMES)
    slow = window._sync_events_from_function_events(NAMES)
    assert len(fast) == len(slow) >= 9  # each step: the head's addmm or mm, and the loss's item
    for a, b in zip(fast, slow):
        assert a["op"] == b["op"] and a["stack"] == b["stack"]
        assert abs(a["t_ns"] - b["t_ns"]) <= 1_000 and abs(a["dur_ns"] - b["dur_ns"]) <= 1_000  # torch rounds to µs
    ops = {e["op"] for e in fast}
    # the item's _local_scalar_dense is named by its outermost op, as a sync's cudaStreamSynchronize is
    assert "aten::item" in ops and "aten::_local_scalar_dense" not in ops
    assert [e["t_ns"] for e in fast] == sorted(e["t_ns"] for e in fast)


def test_a_window_without_cuda_has_no_runtime_calls_to_read(window, monkeypatch):
    def no_tree():
        raise AssertionError("events() was called")

    monkeypatch.setattr(window._profiler, "events", no_tree)
    assert window.sync_events() == []
    assert len(window.sync_events(NAMES)) >= 9  # the raw path, without the tree


def test_the_profilers_own_synchronize_is_no_sync_of_the_script():
    """The Python stack of the one cudaDeviceSynchronize in fixtures/runs/char_gpt_h100's trace (H100), innermost
    first as Kineto gives it: the window's stop under gpudiag's boundary, above the user's optimizer step. Its
    record put it at the user's line; it is left out now, as the sync analyzer leaves it out of the trace."""
    from diagnose.launch.runtime.profilers import profiler_internal

    stop = [
        "<built-in function _cuda_synchronize>",
        "torch/cuda/__init__.py(1152): synchronize",
        "torch/autograd/profiler.py(403): __exit__",
        "torch/profiler/profiler.py(278): stop_trace",
        "torch/profiler/profiler.py(924): _transit_action",
        "torch/profiler/profiler.py(879): stop",
        "diagnose/launch/runtime/profilers.py(104): stop",
        "diagnose/launch/runtime/profilers.py(109): stop_and_export",
        "diagnose/launch/runtime/trace_window.py(87): close",
        "diagnose/launch/runtime/steps.py(492): _after_step",
        "examples/char_gpt.py(163): main",
    ]
    assert profiler_internal(stop)
    user = ["torch/_tensor.py(626): item", "examples/char_gpt.py(163): main"]
    assert not profiler_internal(user) and not profiler_internal(None)


class TraceFileEvent:
    """One complete event of a real trace file (fixtures/runs/char_gpt_h100, H100) read through the accessors of
    Kineto's raw events; the file holds no per-op Python stack, so ``stack()`` is empty."""

    def __init__(self, event: dict):
        self._event = event

    def name(self) -> str:
        return self._event["name"]

    def start_ns(self) -> int:
        return int(round(self._event["ts"] * 1000))

    def end_ns(self) -> int:
        return int(round((self._event["ts"] + self._event.get("dur", 0)) * 1000))

    def start_thread_id(self) -> int:
        return self._event["tid"]

    end_thread_id = start_thread_id

    def stack(self) -> list:
        return []


def test_the_windows_stop_is_left_out_whatever_stack_kineto_gives_it():
    """On an H100 (2026-12-06) the stop's cudaDeviceSynchronize came back from the raw events with the user's
    examples/mlp_model.py:20 as its stack, no profiler frame, and became a sync record there. It is its thread's last
    CUDA runtime call in every CUDA trace of fixtures/runs; the stream syncs before it stay."""
    import gzip
    import json

    from diagnose.launch.runtime.profilers import raw_sync_events
    from tests.paths import FIXTURES

    trace = json.load(gzip.open(FIXTURES / "runs" / "char_gpt_h100" / "trace" / "rank0.json.gz"))
    events = [
        TraceFileEvent(e)
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime")
    ]
    names = ("cudaDeviceSynchronize", "cudaStreamSynchronize")
    found = raw_sync_events(events, 0, 0, names)
    assert len(found) == 6 and {e["op"] for e in found} == {"aten::to"}  # the batches' copies, each a stream sync
    planted = trace["traceEvents"] + [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": e["tid"], "ts": e["ts"] + 50, "dur": 3}
        for e in trace["traceEvents"]
        if e.get("name") == "cudaDeviceSynchronize"
    ]  # a launch after the device sync: then the sync is not the stop's, and it stays
    later = [TraceFileEvent(e) for e in planted if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime")]
    assert "cudaDeviceSynchronize" in {e["op"] for e in raw_sync_events(later, 0, 0, names)}
