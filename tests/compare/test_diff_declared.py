"""`gpudiag diff` on real captures with declared directions and resolutions, and environment mismatch warnings
(issue 19: low-L2 time rising called "better", two exports of one capture judged on -0.003 %, an RTX 3080 run
compared with a T4 run without a word)."""

from __future__ import annotations

import json

import pytest

from diagnose.comparison.runs import diff_paths
from reports.diff_html import render_diff_html, render_diff_terminal
from tests.compare.conftest import NCU, RUNS, gpudiag
from tests.paths import FIXTURES, shared

H200_TRACE = FIXTURES / "trace" / "sync_planted" / "trace.json.gz"
A100_TRACE = FIXTURES / "comm" / "hta" / "nccl_parser_config_nccl_data.json.gz"
RTX3060_NSYS = FIXTURES / "trace" / "nsys" / "nsight-2025.5.2.sqlite"


def test_more_gpu_time_in_low_l2_kernels_is_worse():
    """The two-process capture of examples/ncu_tiny_kernels.py has 96.7 % of its GPU time in kernels below the L2
    threshold, the single-process one 100 %: the same rise the user saw (0.911 -> 1.000) is "worse"."""
    d = diff_paths(NCU / "two_process_stdout" / "stdout.csv", NCU / "tiny_kernels" / "raw.csv")
    row = d.metrics.set_index("key").loc["l2_low_hit_gpu_time_share"]
    assert row["a"] == pytest.approx(0.9673, abs=1e-4) and row["b"] == 1.0
    assert (row["direction"], row["verdict"], row["unit"], row["declared"]) == ("lower", "worse", "share", True)
    assert "worse  l2_low_hit_gpu_time_share: 96.7 % -> 100.0 %" in render_diff_terminal(d)


def test_low_l2_share_falls_and_hit_rate_rises_is_better():
    """l2_random_gather (all its time at 17 % hit) -> kernel_kinds (4.7 % of time below the threshold, 93.5 % hit)."""
    d = diff_paths(NCU / "l2_random_gather" / "raw.csv", NCU / "kernel_kinds" / "raw.csv.gz")
    m = d.metrics.set_index("key")
    assert m.loc["l2_low_hit_gpu_time_share", "a"] == 1.0
    assert m.loc["l2_low_hit_gpu_time_share", "b"] == pytest.approx(0.04704, abs=1e-4)
    assert m.loc["l2_low_hit_gpu_time_share", "verdict"] == "better"
    assert m.loc["l2_hit_time_weighted_pct", "verdict"] == "better"
    assert m.loc["ncu_kernel_launches", "verdict"] == "changed"  # a count of what was profiled: neutral
    assert d.undeclared_keys() == [] and not d.environment_warnings  # both H200


@pytest.mark.parametrize("capture", ["l2_random_gather", "matmul_tiled", "small_grid", "tiny_kernels"])
def test_two_exports_of_one_capture_are_unchanged(capture):
    """ncu --page raw and raw --print-units base of the same report differ only by rounding."""
    d = diff_paths(NCU / capture / "raw.csv", NCU / capture / "raw_base.csv")
    assert len(d.metrics) == 17 and set(d.metrics["verdict"]) == {"unchanged"}
    assert set(d.kernels["median_dur_verdict"]) == {"unchanged"} and set(d.kernels["l2_hit_verdict"]) == {"unchanged"}
    assert not d.warnings


def test_convnet_raw_and_raw_base_every_metric_unchanged():
    """The shared convnet capture: 40 launches of 29 kernels; time-weighted L2 hit and occupancy move by
    +0.0005 and -0.0004 points between the two exports, below ncu's 0.01 % resolution."""
    a, b = shared("ncu", "convnet_raw.csv"), shared("ncu", "convnet_raw_base.csv")
    d = diff_paths(a, b)
    m = d.metrics.set_index("key")
    assert len(m) == 17 and set(m["verdict"]) == {"unchanged"}
    assert 0 < abs(m.loc["l2_hit_time_weighted_pct", "delta"]) < 0.001
    assert 0 < abs(m.loc["achieved_occupancy_time_weighted_pct", "delta"]) < 0.001
    assert m.loc["ncu_kernel_launches", "a"] == 40 and m.loc["ncu_distinct_kernels", "a"] == 29
    assert set(d.kernels["median_dur_verdict"]) == {"unchanged"} and set(d.kernels["l2_hit_verdict"]) == {"unchanged"}
    assert d.regressions(0, include_unknown_noise=True).empty
    assert d.environment_a == d.environment_b == {"gpu": "NVIDIA H200"} and not d.warnings


def test_a100_trace_against_h200_trace_warns_on_top(tmp_path):
    out_json, out_html = tmp_path / "d.json", tmp_path / "d.html"
    r = gpudiag("diff", A100_TRACE, H200_TRACE, "--json", out_json, "-o", out_html)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[2].startswith(
        "WARNING: A and B ran on different GPUs: NVIDIA A100-PG509-200 (A) vs NVIDIA H200 (B)"
    ), lines[:4]
    data = json.loads(out_json.read_text())
    assert data["warnings"][0].startswith("A and B ran on different GPUs: NVIDIA A100-PG509-200 (A) vs NVIDIA H200")
    assert data["environment"]["a"] == {"gpu": "NVIDIA A100-PG509-200"}
    assert data["environment"]["b"] == {"gpu": "NVIDIA H200", "cuda_driver": "13.0", "cuda_runtime": "13.0"}
    assert len(data["environment"]["mismatches"]) == 1  # the A100 trace records no CUDA version: not compared
    html = out_html.read_text()
    top = html.index('id="environment-warnings"')
    assert top < html.index('id="diff-metrics"') and "NVIDIA A100-PG509-200 (A) vs NVIDIA H200 (B)" in html


def test_shared_a100_trace_warns_too():
    d = diff_paths(shared("hta", "nccl_parser_config_nccl_data.json.gz"), H200_TRACE)
    assert [w.split(":")[0] for w in d.environment_warnings] == ["A and B ran on different GPUs"]


def test_nsys_export_on_rtx3060_against_h200_trace_names_gpu_and_cuda():
    """Nsight Systems records the driver and its CUDA version (13020 -> 13.2); Kineto on the H200 says 13.0."""
    d = diff_paths(RTX3060_NSYS, H200_TRACE)
    assert d.environment_a == {"gpu": "NVIDIA GeForce RTX 3060", "driver": "595.84", "cuda_driver": "13.2"}
    assert [w.split(":")[0] for w in d.environment_warnings] == [
        "A and B ran on different GPUs",
        "A and B ran on a different CUDA version of the driver",
    ]
    assert "13.2 (A) vs 13.0 (B)" in d.environment_warnings[1]


def test_same_gpu_run_folders_give_no_warning():
    d = diff_paths(RUNS / "sync_planted", RUNS / "sync_free")
    assert (
        d.environment_a
        == d.environment_b
        == {
            "gpu": "NVIDIA H200",
            "driver": "580.159.04",
            "cuda_driver": "13.0",
            "cuda_runtime": "13.0",
            "torch": "2.11.0+cu130",
        }
    )
    assert d.environment_warnings == [] and d.to_dict()["environment"]["mismatches"] == []
    assert "WARNING" not in render_diff_terminal(d) and 'id="environment-warnings"' not in render_diff_html(d)
    # a run folder and a bare trace of the same H200: only fields both know are compared
    assert diff_paths(RUNS / "sync_planted", H200_TRACE).environment_warnings == []


def test_jax_run_folder_compares_jax_not_torch():
    d = diff_paths(RUNS / "jax_train", RUNS / "jax_train")
    assert d.environment_a["jax"] == "0.11.2" and "torch" not in d.environment_a  # torch installed, not used
    assert not d.environment_warnings


@pytest.mark.browser
def test_environment_warning_is_the_first_thing_on_the_diff_page(tmp_path):
    from tests.browser import external_requests, visit

    out = tmp_path / "d.html"
    out.write_text(render_diff_html(diff_paths(A100_TRACE, H200_TRACE)))
    js = {
        "warning": "document.getElementById('environment-warnings').innerText",
        "warning_top": "document.getElementById('environment-warnings').getBoundingClientRect().top",
        "metrics_top": "document.getElementById('diff-metrics').getBoundingClientRect().top",
        "undeclared": "document.querySelectorAll('td.undeclared').length",
    }
    v = visit(out, evaluate=js)
    assert not v.console_errors and not v.page_errors and external_requests(v, out.as_uri()) == []
    e = v.evaluated
    assert "NVIDIA A100-PG509-200 (A) vs NVIDIA H200 (B)" in e["warning"]
    assert e["warning_top"] < e["metrics_top"] and e["undeclared"] == 0
