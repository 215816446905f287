"""memory_access: uncoalesced global accesses, on the real H200 capture of fixtures/ncu/kernel_kinds (raw page, and
the .ncu-rep when this checkout has it) and on hand-made frames (``*_fake_*``)."""

from __future__ import annotations

import html as html_lib
import json

import numpy as np
import pandas as pd
import pytest

import diagnose
from diagnose.analysis import run_analyzer
from diagnose.analyzers import memory_access
from diagnose.derive.kernel_access import access_kinds, access_label
from diagnose.findings import Result, Severity
from diagnose.thresholds import Thresholds
from reports.sections import memory_access as section
from tests.analyzers.fake_frames import fake_kernels_with_metrics, fake_profile
from tests.analyzers.ncu_isolated import analyze_report, in_fresh_process, read_report, report_path
from tests.paths import REPO

KINDS = REPO / "fixtures" / "ncu" / "kernel_kinds"
RAW = KINDS / "raw.csv.gz"
DETAILS = KINDS / "details.csv.gz"
EXCESS = "derived__memory_l2_theoretical_sectors_global_excessive [sector]"
SECTORS = "memory_l2_theoretical_sectors_global [sectors]"
IDEAL = "memory_l2_theoretical_sectors_global_ideal [sectors]"


@pytest.fixture(scope="module")
def raw_result():
    return run_analyzer(memory_access, diagnose.load(RAW), Thresholds())


@pytest.fixture(scope="module")
def rep_result():
    return in_fresh_process(analyze_report, "memory_access", report_path())


def _check_capture(result: Result) -> None:
    """What the raw page and the report agree on (the same run)."""
    table = result.tables["kernels"].set_index("kernel")
    assert set(table.index[table["flagged"]]) == {"transpose_naive", "strided_copy"}
    for kernel in ("stream_add", "tiled_gemm", "naive_gemm"):
        assert table.loc[kernel, "excess_sectors"] == 0 and not table.loc[kernel, "flagged"], kernel
    t, s = table.loc["transpose_naive"], table.loc["strided_copy"]
    # both launches: 58,720,256 of 75,497,472 sectors excess (stores), 3,670,016 of 4,718,592 (loads): 7/9 each
    assert (t["excess_sectors"], t["sectors"]) == (2 * 58_720_256, 2 * 75_497_472)
    assert (s["excess_sectors"], s["sectors"], s["ideal_sectors"]) == (2 * 3_670_016, 2 * 4_718_592, 2 * 1_048_576)
    assert t["excess_share_pct"] == pytest.approx(700 / 9) and s["excess_share_pct"] == pytest.approx(700 / 9)
    assert (t["access"], s["access"]) == ("stores", "loads")
    assert t["ld_excess_sectors"] == 0 and s["st_excess_sectors"] == 0
    # the broadcast loads of naive_gemm: 18 of 32 bytes used per sector, 2 sectors per request, and no excess
    naive = table.loc["naive_gemm"]
    assert (naive["ld_bytes_per_sector"], naive["ld_sectors_per_request"]) == (18.0, 2.0)
    assert (s["ld_sectors_per_request"], s["ld_bytes_per_sector"]) == (32.0, 4.0)
    assert t["st_sectors_per_request"] == pytest.approx(32.0, abs=0.01) and t["st_bytes_per_sector"] == 4.0
    # recoverable: share × 7/9 × memory throughput
    assert round(t["est_loss_share"], 4) == 0.0947 and round(s["est_loss_share"], 5) == 0.00663
    assert round(t["share"], 4) == 0.1444 and round(s["share"], 4) == 0.0108
    assert {k: round(v, 4) for k, v in result.summary.items()} == {
        "uncoalesced_excess_sector_share": 0.0534,
        "uncoalesced_gpu_time_share": 0.1552,
        "uncoalesced_est_loss_share": 0.1013,
    }
    (f,) = result.findings
    assert f.id == "memory_access.uncoalesced" and f.severity == Severity.CRITICAL
    kernels = {s.name: s for s in f.subjects if s.kind == "kernel"}
    assert list(kernels) == ["transpose_naive", "strided_copy"]
    assert kernels["transpose_naive"].severity == Severity.CRITICAL  # 9.5 % of GPU time recoverable
    assert kernels["strided_copy"].severity == Severity.INFO  # 0.66 %: flagged, but little time
    assert round(f.cost_share, 4) == 0.1013
    assert "transpose_naive — uncoalesced stores" in f.recommendation and "shared memory" in f.recommendation
    assert "strided_copy — uncoalesced loads" in f.recommendation and "structure of arrays" in f.recommendation


def test_raw_page_flags_transpose_stores_and_strided_loads(raw_result):
    _check_capture(raw_result)
    table = raw_result.tables["kernels"].set_index("kernel")
    assert set(table["excess_source"]) == {"ncu theoretical sectors"}
    assert table.loc["transpose_naive", "access_source"] == "bytes per sector"  # the CSV has no instructions
    (f,) = raw_result.findings
    assert memory_access.NEEDS_REPORT in f.recommendation
    assert all(s.kind == "kernel" for s in f.subjects) and table["top_location"].isna().all()


def test_report_gives_the_source_line_of_strided_copys_load(rep_result):
    _check_capture(rep_result)
    table = rep_result.tables["kernels"].set_index("kernel")
    s, t = table.loc["strided_copy"], table.loc["transpose_naive"]
    assert s["top_location"].endswith(".cubin.cu:43") and s["top_sass"].startswith("LDG.E")  # out[i] = in[i * stride]
    assert t["top_location"].endswith(".cubin.cu:51") and t["top_sass"].startswith("STG.E")  # out[x * n + y] = ...
    assert s["access_source"] == "per instruction"
    assert s["source_lines"].endswith(":43 load 7,340,032 excess of 8,388,608")
    (f,) = rep_result.findings
    locations = {x.name: x for x in f.subjects if x.kind == "location"}
    assert set(locations) == {s["top_location"], t["top_location"]}
    assert locations[s["top_location"]].figures["kernel"] == "strided_copy"
    assert locations[s["top_location"]].figures["access"] == "loads"
    assert memory_access.NEEDS_REPORT not in f.recommendation and ":43" in f.recommendation
    # the cuRAND kernels have no line info: their SASS is named instead
    assert table.loc["init_curand", "source_lines"].startswith("SASS `LDG.E R0")


def test_report_excess_sources_column_per_launch():
    kernels, _ = in_fresh_process(read_report, report_path())
    strided = kernels[kernels["kernel_short"] == "strided_copy"]
    assert len(strided) == 2
    data = json.loads(strided["global_excess_sources"].iloc[0])
    assert data["excess_by_access"] == {"load": 3_670_016.0}
    (line,) = data["lines"]
    assert (line["line"], line["access"], line["excess_sectors"], line["sectors"]) == (43, "load", 3_670_016, 4_194_304)
    assert line["file"].endswith(".cubin.cu") and line["sass"] == "LDG.E R7, desc[UR4][R6.64]"
    stream = json.loads(kernels.loc[kernels["kernel_short"] == "stream_add", "global_excess_sources"].iloc[0])
    assert stream == {"excess_by_access": {}, "lines": []}  # measured, none excessive


def test_details_page_says_not_measured():
    r = run_analyzer(memory_access, diagnose.load(DETAILS), Thresholds())
    (f,) = r.findings
    assert f.id == "memory_access.not_measured" and f.severity == Severity.INFO
    assert "--section SourceCounters" in f.recommendation and not r.tables


def test_thresholds_move_the_bar(raw_result):
    th = Thresholds().with_overrides({"memory_access": {"excess_share_pct": 80.0}})
    assert not run_analyzer(memory_access, diagnose.load(RAW), th).findings
    th = Thresholds().with_overrides({"memory_access": {"critical_loss_share": 0.2, "warning_loss_share": 0.005}})
    (f,) = run_analyzer(memory_access, diagnose.load(RAW), th).findings
    assert [s.severity for s in f.subjects] == [Severity.WARNING, Severity.WARNING]


# --- hand-made frames ------------------------------------------------------------------------------------------


def _launch(name, dur, excess, sectors, ideal=None, mem=80.0, **extra):
    row = {"kernel_short": name, "dur_ns": dur, "memory_throughput_pct": mem, EXCESS: excess, SECTORS: sectors}
    if ideal is not None:
        row[IDEAL] = ideal
    return {**row, **extra}


def _l1(direction, sectors, requests, bytes_per_sector):
    return {
        f"l1tex__t_sectors_pipe_lsu_mem_global_op_{direction}.sum [sector]": sectors,
        f"l1tex__t_requests_pipe_lsu_mem_global_op_{direction}.sum": requests,
        f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{direction}.ratio [byte/sector]": bytes_per_sector,
    }


def _analyze(launches, th=None):
    profile = diagnose.Profile(sources=["fake"], kernels=fake_kernels_with_metrics(launches))
    return run_analyzer(memory_access, profile, th or Thresholds())


def test_fake_severity_follows_the_recoverable_time():
    r = _analyze(
        [
            _launch(
                "fake_heavy", 900_000.0, 600.0, 1000.0, mem=100.0, **_l1("st", 1000, 50, 8.0), **_l1("ld", 100, 25, 32)
            ),
            _launch("fake_light", 20_000.0, 500.0, 1000.0, mem=50.0, **_l1("ld", 1000, 30, 16.0)),
            _launch("fake_coalesced", 80_000.0, 0.0, 1000.0),
        ]
    )
    t = r.tables["kernels"].set_index("kernel")
    assert t.loc["fake_heavy", "est_loss_share"] == pytest.approx(0.9 * 0.6 * 1.0)
    assert t.loc["fake_light", "est_loss_share"] == pytest.approx(0.02 * 0.5 * 0.5)
    assert t.loc["fake_heavy", "access"] == "stores" and t.loc["fake_light", "access"] == "loads"
    (f,) = r.findings
    sev = {s.name: s.severity for s in f.subjects}
    assert sev == {"fake_heavy": Severity.CRITICAL, "fake_light": Severity.INFO}
    assert f.severity == Severity.CRITICAL and f.cost_share == pytest.approx(0.54 + 0.005)
    assert "fake_coalesced" not in sev


def test_fake_broadcast_is_not_excess_without_theoretical_sectors():
    """Only the L1 metrics (no SourceCounters): a broadcast (2 sectors per request, 18 of 32 bytes used) has no
    excess; a 32-sector stride (4 of 32 bytes) has 7/8 of its sectors excess."""
    broadcast = {"kernel_short": "fake_broadcast", "dur_ns": 500_000.0, **_l1("ld", 2000, 1000, 18.0)}
    strided = {
        "kernel_short": "fake_strided",
        "dur_ns": 500_000.0,
        **_l1("ld", 3200, 100, 4.0),
        **_l1("st", 400, 100, 32),
    }
    r = _analyze([broadcast, strided])
    t = r.tables["kernels"].set_index("kernel")
    assert t.loc["fake_broadcast", "excess_sectors"] == 0 and not t.loc["fake_broadcast", "flagged"]
    assert t.loc["fake_strided", "excess_sectors"] == pytest.approx(3200 * 28 / 32)
    assert t.loc["fake_strided", "excess_share_pct"] == pytest.approx(100 * 2800 / 3600)
    assert t.loc["fake_strided", "excess_source"] == "estimated from bytes per sector"
    assert [s.name for s in r.findings[0].subjects] == ["fake_strided"]


def test_fake_pct_form_of_bytes_per_sector_and_ideal_only():
    """``.pct`` (of 32 bytes) stands for ``.ratio``; total and ideal without the derived metric give the excess."""
    row = {
        "kernel_short": "fake_pct",
        "dur_ns": 100_000.0,
        SECTORS: 800.0,
        IDEAL: 200.0,
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum [sector]": 800.0,
        "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": 25.0,
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct [%]": 25.0,
    }
    t = _analyze([row]).tables["kernels"].set_index("kernel")
    assert t.loc["fake_pct", "excess_sectors"] == 600 and t.loc["fake_pct", "excess_share_pct"] == 75
    assert t.loc["fake_pct", "ld_bytes_per_sector"] == 8.0 and t.loc["fake_pct", "access"] == "loads"


def test_fake_excess_sources_merge_over_launches_and_name_the_line():
    def sources(excess_load, excess_store):
        return json.dumps(
            {
                "lines": [
                    {
                        "file": "/src/k.cu",
                        "line": 7,
                        "access": "store",
                        "excess_sectors": excess_store,
                        "sectors": 80,
                        "sass": "STG.E [R2], R5",
                    },
                    {
                        "file": "/src/k.cu",
                        "line": 3,
                        "access": "load",
                        "excess_sectors": excess_load,
                        "sectors": 40,
                        "sass": "LDG.E R5, [R4]",
                    },
                ],
                "excess_by_access": {"store": excess_store, "load": excess_load},
            }
        )

    launches = [
        _launch("fake_k", 100_000.0, 70.0, 120.0, global_excess_sources=sources(10.0, 60.0)),
        _launch("fake_k", 100_000.0, 70.0, 120.0, global_excess_sources=sources(20.0, 50.0)),
    ]
    r = _analyze(launches)
    t = r.tables["kernels"].set_index("kernel")
    assert (t.loc["fake_k", "st_excess_sectors"], t.loc["fake_k", "ld_excess_sectors"]) == (110.0, 30.0)
    assert t.loc["fake_k", "access"] == "stores"  # the loads carry 30 of 140 excess sectors: under a quarter
    assert t.loc["fake_k", "top_location"] == "/src/k.cu:7" and t.loc["fake_k", "top_sass"] == "STG.E [R2], R5"
    assert t.loc["fake_k", "source_lines"] == "/src/k.cu:7 store 110 excess of 160; /src/k.cu:3 load 30 excess of 80"
    (f,) = r.findings
    (loc,) = [s for s in f.subjects if s.kind == "location"]
    assert loc.name == "/src/k.cu:7" and loc.severity == f.subjects[0].severity


def test_fake_no_line_info_says_to_build_with_lineinfo():
    text = json.dumps(
        {
            "lines": [
                {
                    "file": None,
                    "line": None,
                    "access": "load",
                    "excess_sectors": 90,
                    "sectors": 100,
                    "sass": "LDG.E R1, [R2]",
                }
            ],
            "excess_by_access": {"load": 90},
        }
    )
    (f,) = _analyze([_launch("fake_nolines", 100_000.0, 90.0, 100.0, global_excess_sources=text)]).findings
    assert "-lineinfo" in f.recommendation and "fake_nolines" in f.recommendation
    assert all(s.kind == "kernel" for s in f.subjects) and f.subjects[0].figures["top_sass"] == "LDG.E R1, [R2]"


def test_fake_small_and_tiny_kernels_are_shown_not_flagged():
    r = _analyze(
        [
            _launch("fake_big", 1_000_000.0, 0.0, 100.0),
            _launch("fake_small", 4_000.0 * 1, 90.0, 100.0),  # 0.4 % of GPU time, and 4 µs: a micro-kernel
            *[_launch("fake_short", 3_000.0, 90.0, 100.0) for _ in range(10)],  # 3 % of the time, 3 µs each
        ]
    )
    t = r.tables["kernels"].set_index("kernel")
    assert not t["flagged"].any() and not r.findings
    assert t.loc["fake_short", "excess_share_pct"] == 90 and not t.loc["fake_short", "judged"]
    assert r.summary["uncoalesced_gpu_time_share"] > 0  # still counted in the summary


def test_fake_no_sector_metrics_is_not_measured_and_empty_is_empty():
    r = run_analyzer(memory_access, fake_profile([{"kernel_short": "fake_a", "dur_ns": 1e5}]), Thresholds())
    assert [f.id for f in r.findings] == ["memory_access.not_measured"]
    assert run_analyzer(memory_access, diagnose.Profile(), Thresholds()).findings == []
    assert run_analyzer(memory_access, diagnose.Profile(kernels=pd.DataFrame()), Thresholds()).findings == []


def test_fake_access_labels():
    assert access_label({"load": 90.0, "store": 10.0}) == "loads"
    assert access_label({"load": 50.0, "store": 50.0, "atomic": 50.0}) == "loads, stores and atomics"
    assert access_label({}) is None and access_label({"load": 0.0}) is None
    assert access_kinds("loads and stores") == ["load", "store"]
    assert access_kinds(None) == [] and access_kinds(np.nan) == []


# --- the report section ----------------------------------------------------------------------------------------


def test_section_renders_an_empty_result():
    html = section.render(Result("memory_access"))
    assert "No " in html and "<script" not in html


def test_section_renders_the_capture_and_escapes(raw_result):
    html = section.render(raw_result)
    assert "fig-memory-access" in html and "transpose_naive" in html
    assert html_lib.escape(memory_access.NEEDS_REPORT) in html
    evil = "fake_k</script><script>alert(1)</script>"
    r = _analyze([_launch(evil, 100_000.0, 90.0, 100.0)])
    assert evil not in section.render(r)


@pytest.mark.browser
def test_kinds_report_renders_in_chromium(tmp_path):
    from reports.html import render_html
    from tests.browser import external_requests, visit

    out = tmp_path / "report.html"
    out.write_text(render_html(diagnose.analyze(diagnose.load(RAW))))
    v = visit(out, evaluate={"bars": "document.querySelectorAll('#fig-memory-access .bars .point').length"})
    assert v.page_errors == [] and v.console_errors == [] and external_requests(v, out.as_uri()) == []
    assert v.rendered_plots == v.figure_divs and v.evaluated["bars"] == 12  # the 12 kernels with sector counts
