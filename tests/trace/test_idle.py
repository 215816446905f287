"""idle analyzer: temporal and per-stream idle breakdown against HTA 0.5.0 on the same traces.

HTA reference numbers were measured with ``benchmarks/hta_reference.py`` (HTA 0.5.0 in its own venv,
pandas 3.1.1, default ``TraceAnalysis(trace_dir=...)`` i.e. the last ProfilerStep left out,
``get_temporal_breakdown()`` and ``get_idle_time_breakdown(ranks=[r])`` with HTA's default
consecutive_kernel_delay=30 µs), on 2026-12-02, one trace per folder as ``rank-0.json.gz``.
"""

from __future__ import annotations

import pytest

from diagnose.analysis import run_analyzer
from diagnose.analyzers import idle
from tests.paths import shared
from tests.trace.helpers import BAD, EVENT_SYNC, SAMPLED_RANK0, TRACE, profile_of

# trace → (idle %, compute %, non-compute %) from HTA's get_temporal_breakdown
HTA_TEMPORAL = {
    "event_sync": (78.71, 18.63, 2.66),
    "sampled_rank0": (53.56, 17.71, 28.74),
    "sampled_rank1": (54.72, 22.57, 22.72),
    "nccl": (77.78, 17.26, 4.97),
    "convnet": (99.33, 0.67, 0.00),
}
# trace → {stream: {category: idle_time_ratio}} from HTA's get_idle_time_breakdown (ratios rounded to 2 places)
HTA_STREAMS = {
    "event_sync": {7: {"host_wait": 1.0, "other": 0.0}},
    "sampled_rank0": {
        23: {"host_wait": 1.0, "kernel_wait": 0.0, "other": 0.0},
        84: {"host_wait": 1.0, "kernel_wait": 0.0, "other": 0.0},
        25: {"kernel_wait": 0.0, "other": 1.0},
        7: {"host_wait": 0.45, "kernel_wait": 0.0, "other": 0.55},
    },
    "sampled_rank1": {
        23: {"host_wait": 1.0, "kernel_wait": 0.0, "other": 0.0},
        25: {"kernel_wait": 0.0, "other": 1.0},
        7: {"host_wait": 0.36, "kernel_wait": 0.0, "other": 0.64},
        84: {"host_wait": 0.92, "other": 0.08},
    },
    "nccl": {7: {"host_wait": 0.99, "kernel_wait": 0.01, "other": 0.0}, 40: {"host_wait": 1.0, "other": 0.0}},
    "convnet": {
        7: {"host_wait": 1.0, "kernel_wait": 0.0, "other": 0.0},
        30: {"host_wait": 1.0, "other": 0.0},
        13: {"host_wait": 1.0, "other": 0.0},
    },
}


def _path(name):
    return {
        "event_sync": lambda: EVENT_SYNC,
        "sampled_rank0": lambda: SAMPLED_RANK0,
        "sampled_rank1": lambda: shared("hta", "trace_filter_sampled_rank-1.json.gz"),
        "nccl": lambda: shared("hta", "nccl_parser_config_nccl_data.json.gz"),
        "convnet": lambda: shared("torch", "convnet.trace.json.gz"),
    }[name]()


@pytest.mark.parametrize("name", sorted(HTA_TEMPORAL))
def test_temporal_and_stream_breakdown_agree_with_hta(name):
    result = run_analyzer(idle, profile_of(_path(name)))
    s = result.summary
    hta_idle, hta_compute, hta_non = HTA_TEMPORAL[name]
    assert s["gpu_idle_pct"] == pytest.approx(hta_idle, abs=2.0)
    assert s["gpu_compute_pct"] == pytest.approx(hta_compute, abs=2.0)
    assert s["gpu_non_compute_pct"] == pytest.approx(hta_non, abs=2.0)
    assert s["gpu_idle_pct"] + s["gpu_compute_pct"] + s["gpu_non_compute_pct"] == pytest.approx(100.0)
    for stream, cats in HTA_STREAMS[name].items():
        for cat, ratio in cats.items():
            assert s.get(f"gpu_idle_stream{stream}_{cat}_pct", 0.0) == pytest.approx(100 * ratio, abs=2.0), (
                stream,
                cat,
            )


def test_exact_numbers_on_sampled_trace():
    result = run_analyzer(idle, profile_of(SAMPLED_RANK0))
    s = result.summary
    assert s["gpu_span_ns"] == 600_058_000  # HTA: kernel_time 600058 µs (last step left out)
    assert s["gpu_idle_pct"] == pytest.approx(100 * 321_378 / 600_058, abs=0.01)
    steps = result.tables["per_step"]
    assert steps["step"].tolist() == [551]
    row = steps.iloc[0]
    parts = row.busy_ns + row.idle_sync_ns + row.idle_host_ns + row.idle_short_ns + row.idle_other_ns
    assert parts == pytest.approx(row.step_ns)
    f = next(f for f in result.findings if f.id == "idle.gpu_idle")
    assert f.severity.label == "critical" and "waiting for the host" in f.title


def test_multi_rank_keys():
    p = profile_of(SAMPLED_RANK0, shared("hta", "trace_filter_sampled_rank-1.json.gz"))
    s = run_analyzer(idle, p).summary
    assert s["gpu_idle_pct"] == pytest.approx(53.56, abs=0.01)
    assert s["rank1.gpu_idle_pct"] == pytest.approx(54.72, abs=0.01)


def test_sync_free_capture_is_busy():
    s = run_analyzer(idle, profile_of(TRACE / "sync_free" / "trace.json.gz")).summary
    assert s["gpu_idle_pct"] < 2.0 and s["gpu_compute_pct"] > 98.0


def test_jax_perfetto_capture():
    result = run_analyzer(idle, profile_of(TRACE / "jax" / "perfetto_trace.json.gz"))
    assert result.summary["gpu_idle_pct"] == pytest.approx(84.62, abs=0.01)


def test_cpu_only_trace_says_no_gpu_activity():
    result = run_analyzer(idle, profile_of(BAD / "trace_fake_cpu_only.json"))
    assert [f.id for f in result.findings] == ["idle.no_gpu_activity"]
    assert result.findings[0].severity.label == "info" and not result.summary


def test_trace_warnings_become_info_findings():
    result = run_analyzer(idle, profile_of(BAD / "trace_fake_unknown_categories.json"))
    warnings = [f for f in result.findings if f.id == "idle.trace_warning"]
    assert any("quantum_flux" in f.title for f in warnings)
    assert result.summary["gpu_idle_pct"] == pytest.approx(100 * 20 / 40)  # kernels 20–30 and 50–60 µs


def test_jax_idle_is_said_plainly_to_be_unattributable_with_what_the_trace_shows(tmp_path):
    """fake: fixtures/runs/jax_train without XLA's correlation ids (tests/unlinked_jax.py), so no kernel is linked
    to a launch. Before, 97.9 % of the span read as "waiting on other streams or events" with cudaStreamWaitEvent
    advice (issue 18)."""
    import diagnose
    from tests.unlinked_jax import JAX_RUN, unlinked

    result = run_analyzer(idle, diagnose.load(unlinked(JAX_RUN, tmp_path)))
    (f,) = [f for f in result.findings if f.id == "idle.gpu_idle"]
    assert f.title == (
        "GPU idle 98.1 % of the time on rank 0; the trace links no kernel to its launch, so 97.9 % of the span "
        "cannot be attributed to a cause"
    )
    assert "cudaStreamWaitEvent" not in f.recommendation
    assert "PjitFunction(train_step) 6x, 2.73 ms" in f.recommendation
    assert "3 device-to-host copies" in f.recommendation and "6 host-to-device copies" in f.recommendation
    row = result.tables["breakdown"].iloc[0]
    assert row["idle_other_ns"] == 0 and row["idle_unlinked_ns"] > 0.97 * row["span_ns"]


def test_jax_idle_is_attributed_where_xla_links_its_device_ops():
    """fixtures/runs/jax_train (H200): XLA's correlation ids link 129 of its 141 device ops to their cuGraphLaunch
    or host copy (issue 34): most of the idle is the host dispatching work, with JAX's advice."""
    import diagnose
    from parsers.trace import read_trace
    from tests.paths import FIXTURES

    trace = read_trace(next((FIXTURES / "runs" / "jax_train" / "trace").glob("*.json.gz")))
    assert (len(trace.gpu), int((trace.gpu["runtime_index"] >= 0).sum())) == (141, 129)
    result = run_analyzer(idle, diagnose.load(FIXTURES / "runs" / "jax_train"))
    (f,) = [f for f in result.findings if f.id == "idle.gpu_idle"]
    assert (
        f.title
        == "GPU idle 98.1 % of the time on rank 0, mostly waiting for the host to launch work (60.4 % of the span)"
    )
    assert "each jitted call (or each op run outside jit) is dispatched from Python" in f.recommendation
    assert "DataLoader" not in f.recommendation and "torch.compile" not in f.recommendation


def test_torch_traces_link_their_launches():
    """A Kineto trace links every kernel to its launch: nothing is left unattributed."""
    row = run_analyzer(idle, profile_of(EVENT_SYNC)).tables["breakdown"].iloc[0]
    assert row["idle_unlinked_ns"] == 0
