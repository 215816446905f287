"""compare() on tiny hand-made profiles/analyses: metrics, kernels, findings, regressions, renderers."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from diagnose.analysis import Analysis, declared_metrics
from diagnose.comparison.runs import compare
from diagnose.findings import Finding, Severity
from diagnose.ingest.profile_data import Profile
from diagnose.metrics import describe
from parsers.events import STEPS_SCHEMA
from parsers.schema import conform
from reports.diff_html import render_diff_html, render_diff_json, render_diff_terminal


def fake_profile(step_ms=None, kernels=None) -> Profile:
    steps = {}
    if step_ms is not None:
        host = np.asarray(step_ms, dtype=float)
        steps[0] = conform(
            pd.DataFrame(
                {
                    "rank": 0,
                    "step": np.arange(len(host)),
                    "name": "step",
                    "t_start_ns": 1.7e18 + np.cumsum(host) * 1e6,
                    "host_ms": host,
                    "gpu_ms": host * 0.9,
                }
            ),
            STEPS_SCHEMA,
        )
    return Profile(sources=["fake"], kernels=kernels if kernels is not None else pd.DataFrame(), step_events=steps)


def fake_kernels(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["kernel_short", "dur_ns", "l2_hit_pct"])


def fake_analysis(summary, findings=(), source=None) -> Analysis:
    """An Analysis as analyze() builds it: the summary's declarations filled in from the analyzers."""
    declared = {k: m for k in summary if (m := describe(k, declared_metrics())) is not None}
    return Analysis(
        summary=dict(summary), findings=list(findings), source=source or {"paths": ["fake"]}, metrics=declared
    )


def finding(fid, sev=Severity.WARNING):
    return Finding(id=fid, analyzer=fid.split(".")[0], severity=sev, title=f"title of {fid}")


def test_step_time_regression_is_significant_and_gates():
    a = [100.0] * 3 + list(100 + np.arange(20) % 5)  # 3 warm-up steps, then 100..104 ms
    b = [100.0] * 3 + list(130 + np.arange(20) % 5)  # 30 % slower
    pa, pb = fake_profile(a), fake_profile(b)
    sa = {"step_time_median_ms": 102.0, "peak_reserved_bytes": 1e9, "step_count": 20}
    sb = {"step_time_median_ms": 132.0, "peak_reserved_bytes": 2e9, "step_count": 20}
    d = compare(pa, pb, fake_analysis(sa), fake_analysis(sb))
    row = d.metrics.set_index("key").loc["step_time_median_ms"]
    assert row["verdict"] == "worse" and row["significant"] is True
    assert row["n_a"] == 20 and row["n_b"] == 20 and row["p_value"] < 1e-6
    assert row["change_pct"] == pytest.approx(100 * 30 / 102)
    mem = d.metrics.set_index("key").loc["peak_reserved_bytes"]
    assert mem["verdict"] == "worse" and mem["significant"] is None and mem["noise"] == "unknown (single numbers)"
    assert list(d.regressions(20)["what"]) == ["step_time_median_ms"]
    assert d.regressions(30).empty  # 29.4 % is not over 30 %
    assert set(d.regressions(20, include_unknown_noise=True)["what"]) == {"step_time_median_ms", "peak_reserved_bytes"}
    assert d.metrics.set_index("key").loc["step_count", "verdict"] == "unchanged"
    assert len(d.tables["step_samples"]) == 40


def test_same_input_twice_reports_no_change():
    p = fake_profile([100.0] * 3 + list(100 + np.arange(20) % 7))
    s = {"step_time_median_ms": 103.0, "gpu_idle_pct": 12.0}
    d = compare(p, p, fake_analysis(s), fake_analysis(s))
    assert set(d.metrics["verdict"]) == {"unchanged"}
    assert d.regressions(0, include_unknown_noise=True).empty


def test_kernels_grouped_tested_added_removed():
    ka = fake_kernels([("gemm", 1000.0 + i, 80.0) for i in range(8)] + [("old", 50.0, 10.0)])
    kb = fake_kernels([("gemm", 1500.0 + i, 60.0 + 0.1 * i) for i in range(8)] + [("new", 70.0, 20.0)] * 2)
    d = compare(fake_profile(kernels=ka), fake_profile(kernels=kb), fake_analysis({}), fake_analysis({}))
    k = d.kernels.set_index("kernel_short")
    assert list(d.kernels["kernel_short"]) == ["gemm", "new", "old"]  # by total time
    assert k.loc["gemm", "median_dur_verdict"] == "worse" and k.loc["gemm", "median_dur_significant"] is True
    assert k.loc["gemm", "median_dur_change_pct"] == pytest.approx(100 * 500 / 1003.5)
    assert k.loc["gemm", "l2_hit_verdict"] == "worse" and k.loc["gemm", "l2_hit_delta_pts"] == pytest.approx(
        -19.65, abs=0.01
    )
    assert (k.loc["new", "status"], k.loc["new", "launches_b"], k.loc["new", "total_time_b_ns"]) == ("added", 2, 140.0)
    assert k.loc["old", "status"] == "removed"
    assert set(d.regressions(10)["what"]) == {"kernel gemm: median_dur_ns", "kernel gemm: l2_hit_pct"}


def test_findings_appeared_disappeared_changed():
    fa = [finding("sync.host_sync"), finding("l2.low_hit_rate", Severity.WARNING)]
    fb = [finding("l2.low_hit_rate", Severity.CRITICAL), finding("steps.unstable")]
    d = compare(fake_profile(), fake_profile(), fake_analysis({}, fa), fake_analysis({}, fb))
    assert [f["id"] for f in d.findings_added] == ["steps.unstable"]
    assert [f["id"] for f in d.findings_removed] == ["sync.host_sync"]
    assert d.findings_changed == [
        {
            "id": "l2.low_hit_rate",
            "severity_a": "warning",
            "severity_b": "critical",
            "title_a": "title of l2.low_hit_rate",
            "title_b": "title of l2.low_hit_rate",
            "verdict": "worse",
        }
    ]


def test_renderers_on_empty_diff_and_escaping():
    ka = fake_kernels([("<script>alert(1)</script>", 10.0, 1.0)])
    d = compare(fake_profile(), fake_profile(kernels=ka), fake_analysis({}), fake_analysis({}))
    html = render_diff_html(d)
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html
    assert "https://" not in html.split("<script>", 1)[0]  # nothing before the inlined js loads remotely
    assert '<script src="http' not in html
    data = json.loads(render_diff_json(d))
    assert data["schema"] == "gpudiag.diff/1" and data["kernels"][0]["status"] == "added"
    empty = compare(fake_profile(), fake_profile(), fake_analysis({}), fake_analysis({}))
    assert "0 shared metrics" in render_diff_terminal(empty)
    assert empty.to_dict()["metrics"] == []
    assert "The two runs share no summary metric" in render_diff_html(empty)


def test_undeclared_key_is_neutral_and_said_so():
    """No name guessing: an undeclared `_ms` key that doubles is "changed", not "worse", and the diff names it."""
    sa = {"fake_new_thing_ms": 1.0, "step_time_median_ms": 10.0}
    sb = {"fake_new_thing_ms": 2.0, "step_time_median_ms": 10.0}
    d = compare(fake_profile(), fake_profile(), fake_analysis(sa), fake_analysis(sb))
    row = d.metrics.set_index("key").loc["fake_new_thing_ms"]
    assert (row["verdict"], row["direction"], row["declared"], row["unit"]) == ("changed", "neutral", False, "")
    assert d.undeclared_keys() == ["fake_new_thing_ms"] and d.to_dict()["undeclared_keys"] == ["fake_new_thing_ms"]
    assert d.regressions(0, include_unknown_noise=True).empty
    assert "fake_new_thing_ms: 1 -> 2 +100.0 %  [noise unknown] (undeclared" in render_diff_terminal(d)
    assert "undeclared" in render_diff_html(d)


def test_change_below_declared_resolution_is_unchanged():
    """NVML utilisation is whole percent: a mean that moves by 0.4 points is unchanged; one point is a change."""
    d = compare(
        fake_profile(),
        fake_profile(),
        fake_analysis({"nvml_gpu_util_mean_pct": 61.2, "gpu_idle_pct": 12.0}),
        fake_analysis({"nvml_gpu_util_mean_pct": 61.6, "gpu_idle_pct": 13.0}),
    )
    m = d.metrics.set_index("key")
    assert (
        m.loc["nvml_gpu_util_mean_pct", "verdict"] == "unchanged" and m.loc["nvml_gpu_util_mean_pct", "resolution"] == 1
    )
    assert m.loc["gpu_idle_pct", "verdict"] == "worse"
