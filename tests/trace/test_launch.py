"""launch analyzer: kernels per step, kernels shorter than their launch, queues, the ops to fuse."""

from __future__ import annotations

import pytest

from diagnose.analysis import run_analyzer
from diagnose.analyzers import launch
from diagnose.findings import Severity
from tests.paths import shared
from tests.trace.helpers import BAD, EVENT_SYNC, SAMPLED_RANK0, SYNC_PLANTED, TRACE, profile_of


def test_event_sync_trace_exact():
    result = run_analyzer(launch, profile_of(EVENT_SYNC))
    s = result.summary
    assert s["launch_kernels_per_step"] == 4.0
    assert s["launch_shorter_than_launch_pct"] == 50.0  # fill (1 µs vs 36 µs launch) and gt (1 vs 12)
    ops = result.tables["ops"].set_index("op")
    assert ops.loc["aten::ones", "short_kernels_per_step"] == 1.0
    assert ops.loc["aten::gt", "short_kernels_per_step"] == 1.0
    assert ops.loc["aten::sum", "short_kernels_per_step"] == 0.0
    f = next(f for f in result.findings if f.id == "launch.launch_bound")
    assert f.severity == Severity.WARNING and {s.name for s in f.subjects} == {"aten::ones", "aten::gt"}


def test_convnet_is_launch_bound_and_names_ops():
    result = run_analyzer(launch, profile_of(shared("torch", "convnet.trace.json.gz")))
    assert result.summary["launch_kernels_per_step"] == pytest.approx(498 / 12)
    assert result.summary["launch_shorter_than_launch_pct"] == pytest.approx(57.2, abs=0.1)
    f = next(f for f in result.findings if f.id == "launch.launch_bound")
    assert f.severity == Severity.WARNING
    assert f.subjects[0].name == "autograd::engine::evaluate_function: ConvolutionBackward0"
    assert "torch.compile" in f.recommendation


def test_sampled_trace_not_launch_bound():
    result = run_analyzer(launch, profile_of(SAMPLED_RANK0))
    assert result.summary["launch_kernels_per_step"] == 577.0
    f = next(f for f in result.findings if f.id == "launch.launch_bound")
    assert f.severity == Severity.INFO  # 21 % short kernels: under the 50 % threshold
    queues = result.tables["queues"]
    assert len(queues) == 20 and queues["queue_ns"].is_monotonic_decreasing


def test_sync_planted_capture():
    s = run_analyzer(launch, profile_of(SYNC_PLANTED)).summary
    assert s["launch_kernels_per_step"] == 31.0


def test_no_launch_links_or_no_gpu(tmp_path):
    from tests.unlinked_jax import JAX_TRACE, unlinked

    assert [f.id for f in run_analyzer(launch, profile_of(BAD / "trace_fake_cpu_only.json")).findings] == [
        "launch.not_measured"
    ]
    assert [f.id for f in run_analyzer(launch, profile_of(unlinked(JAX_TRACE, tmp_path))).findings] == [
        "launch.not_measured"
    ]


def test_a_jax_trace_links_its_kernels_to_their_graph_launch_and_gets_jax_advice():
    """fixtures/trace/jax (H200, XLA): every device op is linked, its kernels to the cuGraphLaunch of the step's
    command buffer (issue 34); the advice is about dispatching jitted calls, not torch.compile."""
    result = run_analyzer(launch, profile_of(TRACE / "jax" / "perfetto_trace.json.gz"))
    (f,) = [f for f in result.findings if f.id == "launch.launch_bound"]
    assert "XLA already launches a jitted step's kernels together" in f.recommendation
    assert "torch.compile" not in f.recommendation


def test_a_trace_without_steps_is_launch_bound_as_a_whole():
    """The nsys export (fixtures/trace/nsys) has no iterations: its 5 kernels, all shorter than their launch, are
    counted over the span, and the finding says it of the GPU work, never "the step" nor a per-step figure
    (issue 28, per_step_needs_steps)."""
    import diagnose
    from diagnose.checks.report_invariants import check_analysis

    profile = diagnose.load(TRACE / "nsys" / "nsight-2025.5.2.sqlite", quiet=True)
    result = run_analyzer(launch, profile)
    assert result.tables["stats"]["steps"].tolist() == [0]
    f = next(f for f in result.findings if f.id == "launch.launch_bound")
    assert f.severity == Severity.WARNING
    assert f.title.endswith("the GPU waits for the host 49 % of the time: the GPU work is launch-bound")
    assert [(s.name, s.figures["kernels_in_span"], s.figures["short_kernels_in_span"]) for s in f.subjects] == [
        ("(no CPU op)", 5.0, 5.0)
    ]
    assert not any("per_step" in k for s in f.subjects for k in s.figures)
    assert {e.metric: e.value for e in f.evidence}["launch_kernels_in_span"] == 5.0
    assert not [v for v in check_analysis(diagnose.analyze(profile)) if v.invariant == "per_step_needs_steps"]
