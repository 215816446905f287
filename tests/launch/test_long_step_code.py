"""The Python a long step runs, sampled (diagnose/launch/runtime/long_step_code.py): what no hook names."""

from __future__ import annotations

import json
import os

import pytest

import diagnose
from diagnose.launch.runtime.long_step_code import (
    LONG_MIN_MS,
    MAX_WAIT_S,
    MIN_WAIT_S,
    ORDINARY_MIN_STACKS,
    POLL_S,
    loop_depth,
    ordinary_share,
    shared_depth,
    wait_s,
    what_runs,
)
from parsers.events import read_event_tables
from tests.launch.launch_helpers import SCRIPTS, gpudiag, records

SCRIPT = SCRIPTS / "host_metrics_every_n.py"


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if marker in text)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("host_code") / "run"
    r = gpudiag("profile", "-q", "-o", out, "--trace-steps", "0", "--", "python", SCRIPT, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def test_each_long_step_names_the_function_the_loop_called_and_the_loop_line(run):
    code = [r for r in records(run) if r["kind"] == "work" and r["what"] == "host-code"]
    # host_metric runs in steps 14, 29, 44 and 59 (the last one is the step in progress at exit, not sampled to its
    # end); the first may come before the sampler has seen the loop's step time: at least two of the others
    assert len(code) >= 2 and {r["step"] for r in code} <= {14, 29, 44, 59}
    body = range(_line("def host_metric"), _line("return total") + 1)
    for r in code:
        assert r["name"] == "host_metric"
        assert r["caller"] == f"{SCRIPT}:{_line('# LOOP-CALL')}"
        file, _, line = r["location"].rpartition(":")
        assert file == str(SCRIPT) and int(line) in body
        assert r["share"] >= 0.8 and r["samples"] >= 1 and 0 < r["ms"] < 10_000


def test_the_report_names_the_metric_with_its_line_in_the_run_and_the_step_budget(run):
    analysis = diagnose.analyze(diagnose.load(run, quiet=True))
    by_id = {f.id: f for f in analysis.findings}
    loop_call = f"host_metrics_every_n.py:{_line('# LOOP-CALL')}"
    host = by_id["run_budget.host_code"]
    assert host.title.startswith("Python code in long steps takes ")
    assert "host_metric() at host_metrics_every_n.py:" in host.title and f"called at {loop_call}" in host.title
    assert "every 15 steps" in host.title
    periodic = by_id["step_budget.periodic"]
    assert periodic.title.startswith("Every 15 steps (step 14 + 15i")
    assert "the host runs host_metric() at host_metrics_every_n.py:" in periodic.title
    assert periodic.recommendation.startswith("host_metric() runs in the training loop's own thread")
    assert f"(called at {loop_call})" in periodic.recommendation


def _stack(*frames):
    return [(f"/u/{file}", function, line) for file, function, line in frames]


def test_the_frame_inside_the_loop_is_what_runs():
    loop = [
        _stack(("train.py", "<module>", 40), ("train.py", "main", 30), ("train.py", "train_step", 12)),
        _stack(("train.py", "<module>", 40), ("train.py", "main", 28)),
    ]
    depth = loop_depth(loop)
    assert depth == 2  # <module> and main: train_step is not in every ordinary step's stack
    sample = _stack(("train.py", "<module>", 40), ("train.py", "main", 33), ("train.py", "evaluate", 21))
    assert what_runs(sample, depth)[:2] == (("/u/train.py", "evaluate", 21), "/u/train.py:33")
    inline = _stack(("train.py", "<module>", 40), ("train.py", "main", 35))  # work on the loop's own line
    assert what_runs(inline, depth)[:2] == (("/u/train.py", "main", 35), "/u/train.py:40")


def test_a_long_step_is_at_the_loops_ordinary_lines_or_at_lines_of_its_own():
    loop = [
        _stack(("train.py", "<module>", 40), ("train.py", "train_step", 12), ("module.py", "_call_impl", 9)),
        _stack(("train.py", "<module>", 40), ("train.py", "train_step", 14), ("_tensor.py", "backward", 5)),
        _stack(("train.py", "<module>", 38)),  # the loop's own line: next(batches)
    ] * 2
    depth = loop_depth(loop)
    assert depth == 1
    slower = [  # the step's own code, slowed, in functions no ordinary stack holds
        _stack(("train.py", "<module>", 40), ("train.py", "train_step", 13), ("functional.py", "mse_loss", 9)),
        _stack(("train.py", "<module>", 38)),
    ]
    assert ordinary_share(loop, depth, slower) == 1.0
    evaluation = [  # called from a line of the loop no ordinary step is at, and one that is
        _stack(("train.py", "<module>", 44), ("train.py", "evaluate", 3), ("module.py", "_call_impl", 9)),
        _stack(("train.py", "<module>", 40), ("train.py", "train_step", 12), ("module.py", "_call_impl", 9)),
    ]
    assert ordinary_share(loop, depth, evaluation) == 0.5
    assert ordinary_share(loop[: ORDINARY_MIN_STACKS - 1], depth, slower) is None  # too few ordinary steps seen
    in_step = [_stack(("train.py", "<module>", 40), ("train.py", "train_step", 12))] * 6  # every one in train_step
    evaluate_in_step = [
        _stack(("train.py", "<module>", 40), ("train.py", "train_step", 20), ("train.py", "evaluate", 3))
    ]
    assert loop_depth(in_step) == 2 and ordinary_share(in_step, 2, evaluate_in_step) == 0.0


def test_where_no_ordinary_step_was_seen_most_samples_place_the_loop():
    """host_metrics_every_n.py's metric fills the run, so its first long steps come before any ordinary stack: the
    samples alone place the loop. One taken as the step ended, at the loop's line, shares only <module>; with "every
    sample" the metric was named <module>() (one CI run in three, 2026-12-06)."""
    metric = _stack(("m.py", "<module>", 30), ("m.py", "host_metric", 18))
    samples = [metric] * 9 + [_stack(("m.py", "<module>", 24))]
    assert loop_depth(samples) == 1 and shared_depth(samples) == 2
    assert what_runs(metric, shared_depth(samples) - 1)[0] == ("/u/m.py", "host_metric", 18)


def test_the_sampler_wakes_when_the_step_in_progress_would_turn_long():
    """Its wake-ups are what it costs a busy loop (the GIL taken from the main thread): once per LONG_MIN_MS in a
    loop of short steps, not every POLL_S, and at the step's threshold, not up to a poll after it."""
    ms = 1_000_000
    assert wait_s(0, 5 * ms, None) == POLL_S  # the typical step unknown yet
    assert wait_s(100 * ms, 100 * ms + ms // 2, 0.5 * ms) == pytest.approx(LONG_MIN_MS / 1e3 - 0.0005)
    assert wait_s(100 * ms, 110 * ms, 20 * ms) == pytest.approx(0.07)  # 4 typical steps of 20 ms, 10 ms gone
    assert wait_s(100 * ms, 130 * ms - 10, 0.5 * ms) == MIN_WAIT_S  # about to turn long
    assert wait_s(0, 0, 2_000 * ms) == MAX_WAIT_S  # 2 s steps: still polled (the typical step read again)


def test_a_record_with_a_share_above_one_is_dropped_with_a_warning(tmp_path):
    """Fake: a host-code work record whose share is 1.5 (written by no gpudiag), beside a readable one."""
    good = {"kind": "work", "what": "host-code", "step": 3, "ms": 12.0, "location": "t.py:5", "share": 0.5}
    bad = dict(good, step=4, share=1.5)
    step = {"kind": "step", "step": 0, "t_start_ns": 1, "host_ms": 1.0, "gpu_ms": None, "source": "marker"}
    path = tmp_path / "rank0.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (step, good, bad)) + "\n")
    with pytest.warns(UserWarning, match="work record not read"):
        tables = read_event_tables(path)
    assert tables.work[["step", "what", "share"]].values.tolist() == [[3, "host-code", 0.5]]
    assert (
        "line 3: work record not read (share should be between 0 and 1, found 1.5)" in tables.steps.attrs["warnings"][0]
    )


def test_an_error_in_the_sampler_is_told_once_and_stops_it_without_a_traceback():
    """Fake steps object whose step number cannot be read (bad input for the thread): the error goes to on_error,
    the thread ends, nothing is printed by threading's excepthook."""
    import threading

    from diagnose.launch.runtime.long_step_code import LongStepCode

    class Broken:
        _instrumented = False

        @property
        def current_step(self):
            raise RuntimeError("no step")

    told = []
    sampler = LongStepCode(Broken(), lambda **r: None, on_error=told.append)
    hooks_before = threading.excepthook
    seen = []
    threading.excepthook = seen.append
    try:
        sampler.start()
        sampler._thread.join()  # the first poll raises: the thread ends there
    finally:
        threading.excepthook = hooks_before
    assert [str(e) for e in told] == ["no step"] and seen == []


def test_the_trace_windows_start_and_steps_are_not_sampled(tmp_path, monkeypatch):
    """The step the window opens at holds the profiler's start (2.1-2.4 s on the CPU host's first start): the sampler
    sampled it as the script's work ("Tensor.backward 2,611 ms" in examples/wordlm_sgd.py's step 10), and its own
    Python calls, traced by the profiler, made 93,038 of that window's 95,520 Python function events. Fake: the
    profiler's start is made 0.4 s long here, so the test does not hang on how long Kineto's takes."""
    import gzip
    import time

    import torch

    from diagnose.launch.runtime import profilers

    start = profilers.TorchTraceWindow.start

    def slow_start(self):  # fake: a slow profiler start
        time.sleep(0.4)
        start(self)

    monkeypatch.setattr(profilers.TorchTraceWindow, "start", slow_start)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64)
    with diagnose.profile(out=tmp_path / "r", trace_start=30, trace_steps=2, nvml=False, quiet=True) as run:
        for _ in range(40):
            model(x).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            time.sleep(0.002)
    code = [r for r in records(run.path) if r["kind"] == "work" and r["what"] == "host-code"]
    assert not [r for r in code if 30 <= r["step"] <= 32], code
    events = json.loads(gzip.open(run.path / "trace" / "rank0.json.gz").read())["traceEvents"]
    python = [e for e in events if e.get("cat") == "python_function"]
    # gpudiag's threads hardly show. Run alone, the window holds Python events; inside the full suite's process it
    # held none (cause not found; other profiles ran in that process before), so this part holds where there are any
    if python:
        main = max({e["tid"] for e in python}, key=lambda tid: sum(e["tid"] == tid for e in python))
        assert sum(e["tid"] != main for e in python) < 0.2 * len(python)


BUSY = SCRIPTS / "busy_host.py"


def test_steps_slowed_by_a_busy_host_are_not_named_as_work(tmp_path):
    """Two processes share the loop's core for 0.35 s in every second and the loop runs at nice 19: a few steps run
    hundreds of times slower in the loop's own code. Before ordinary_share, those steps' samples became "the host runs
    Module._wrapped_call_impl() ... called at busy_host.py:46" in a periodic finding and the run budget's Python
    in long steps (a Lightning run on a loaded host read the same, with Lightning's own step)."""
    out = tmp_path / "run"
    r = gpudiag("profile", "-q", "-o", out, "--trace-steps", "0", "--", "python", BUSY, timeout=300)
    assert r.returncode == 0, r.stderr
    code = [r for r in records(out) if r["kind"] == "work" and r["what"] == "host-code"]
    loop_line = next(i for i, text in enumerate(BUSY.read_text().splitlines(), 1) if "# LOOP-LINE" in text)
    body = [
        r
        for r in code
        if r["caller"] and r["caller"].startswith(f"{BUSY}:") and int(r["caller"].rsplit(":")[1]) <= loop_line
    ]
    # steps slowed for 50 ms and more (a sample every 5 ms), once 5 ordinary steps were sampled
    sampled = [r for r in body if r["samples"] >= 10 and "ordinary_share" in r]
    assert sampled, code
    assert all(r["ordinary_share"] >= 0.5 for r in sampled), sampled
    analysis = diagnose.analyze(diagnose.load(out, quiet=True))
    titles = [f.title for f in analysis.findings if f.id in ("step_budget.periodic", "run_budget.host_code")]
    assert not any("busy_host.py:4" in t or "module.py" in t or "train_step" in t for t in titles), titles
    steps = [f for f in analysis.findings if f.id in ("steps.unstable", "steps.outliers")]
    assert len(steps) == 1 and "at the loop lines every step runs: no work of their own ran in them" in (
        steps[0].recommendation
    ), [(f.id, f.recommendation) for f in steps]
    evidence = {e.metric: e.value for e in steps[0].evidence}
    assert evidence["steps_slowed_in_own_code"] >= len(sampled)
    # the loop at nice 19 beside two spinners on its core: runnable and given no CPU most of the slowed time
    assert all(r["run_queue_ms"] > 0.5 * r["sampled_ms"] for r in sampled), sampled
    assert evidence["slowed_steps_run_queue_pct"] > 50 and "(Linux's run queue): other processes held" in (
        steps[0].recommendation
    )
    # over the whole loop: the spinners hold the core 0.35 s of each second for the last 4.5 s of about 7
    cpu_wait = next(f for f in analysis.findings if f.id == "steps.cpu_wait")
    waited = {e.metric: e.value for e in cpu_wait.evidence}
    assert 10 <= waited["cpu_wait_pct"] <= 100 and waited["cpu_wait_ms"] <= waited["cpu_wait_span_ms"]
    assert cpu_wait.title.startswith("The training loop's thread waited for a CPU ")
    # the slow steps' finding says so too, with the same figure
    assert f"waited for a CPU {waited['cpu_wait_pct']:.1f} % of the run (steps.cpu_wait)" in steps[0].recommendation
    # a CPU-only loop: no GPU waited with it
    assert "GPU" not in cpu_wait.recommendation and "DataLoader workers" in cpu_wait.recommendation
    # the budget's remainder holds that wait and says so, with the same figure
    unexplained = next(f for f in analysis.findings if f.id == "step_budget.unexplained")
    assert f"waited for a CPU {waited['cpu_wait_pct']:.1f} % of the run" in unexplained.title, unexplained.title


def test_a_record_before_the_loop_was_known_follows_its_lines_later_records():
    """The flax loop of examples/flax_eval_outside_jit.py on the busy CPU host: its first slow steps were sampled at
    the jitted step's call line before 5 ordinary steps had been (no ordinary_share); two later ones at that line
    read 1.0, the evaluations 0.0. The early ones go with their line's later records; the evaluations stay work."""
    import pandas as pd

    from diagnose.derive.step_own_code import split_work, step_own_code
    from diagnose.thresholds import Thresholds

    loop, evaluate = "/u/flax_eval_outside_jit.py:69", "/u/flax_eval_outside_jit.py:51"
    rows = [(25, loop, "<module>", None), (26, loop, "<module>", None), (92, evaluate, "evaluate", 0.0)]
    rows += [(158, loop, "<module>", 1.0), (192, evaluate, "evaluate", 0.0), (200, "/u/other.py:3", "log", None)]
    work = pd.DataFrame(
        [
            {"rank": 0, "step": s, "what": "host-code", "ms": 100.0, "location": at, "name": n, "ordinary_share": o}
            for s, at, n, o in rows
        ]
        + [{"rank": 0, "step": 3, "what": "checkpoint", "ms": 9.0, "location": loop, "name": None}]
    )
    work["library_location"] = None
    own = step_own_code(work, Thresholds())
    assert list(work.loc[own, "step"]) == [25, 26, 158]
    assert list(split_work(work, Thresholds())[0]["step"]) == [92, 192, 200, 3]


PINNED = SCRIPTS / "pinned_threads.py"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a CPU to spare besides the one it pins to")
def test_a_loop_pinned_to_one_cpu_is_told_its_affinity_not_a_busy_host(tmp_path):
    """The script pins itself to one CPU (as `taskset -c 0` would) while a thread of its own multiplies matrices:
    the loop waits on the run queue for its own thread, with CPUs to spare on the host. The start record says how
    many CPUs it could use, and steps.cpu_wait names the affinity instead of "the host's CPUs were busy with other
    work" (char_gpt under taskset on the H100 read 19.8 % so), and ranks above the unstable steps it causes."""
    out = tmp_path / "run"
    r = gpudiag("profile", "-q", "-o", out, "--trace-steps", "0", "--", "python", PINNED, timeout=300)
    assert r.returncode == 0, r.stderr
    start = next(r for r in records(out) if r["kind"] == "run" and r["event"] == "start")
    end = next(r for r in records(out) if r["kind"] == "run" and r["event"] == "end")
    # the script's own thread runs at the first step (the start record); at the end it has been joined
    assert start["cpus_allowed"] == 1 and start["cpus"] == os.cpu_count() and start["threads"] >= 2
    assert end["threads"] >= 1
    analysis = diagnose.analyze(diagnose.load(out, quiet=True))
    ids = [f.id for f in analysis.findings]
    cpu_wait = next(f for f in analysis.findings if f.id == "steps.cpu_wait")
    waited = {e.metric: e.value for e in cpu_wait.evidence}
    # two runnable threads on one CPU: the loop waits about half the time (10 % is far below that)
    assert waited["cpu_wait_pct"] >= 10 and waited["cpus_allowed"] == 1
    assert f"could run on only 1 CPU of the host's {os.cpu_count()} (its CPU affinity" in cpu_wait.title
    assert "busy with other work" not in cpu_wait.title and "Give the process more CPUs" in cpu_wait.recommendation
    if "steps.unstable" in ids:
        assert ids.index("steps.cpu_wait") < ids.index("steps.unstable"), ids
        unstable = analysis.findings[ids.index("steps.unstable")]
        assert f"waited for a CPU {waited['cpu_wait_pct']:.1f} % of the run" in unstable.recommendation
