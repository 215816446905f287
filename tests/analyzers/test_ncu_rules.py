"""ncu_rules: ncu's own rule results beside gpudiag's verdicts, on the real H200 capture of
fixtures/ncu/kernel_kinds (details page; the .ncu-rep when this checkout has it) and on hand-made frames."""

from __future__ import annotations

import html as html_lib

import pandas as pd
import pytest

import diagnose
from diagnose.analysis import run_analyzer
from diagnose.analyzers import ncu_rules
from diagnose.findings import Result, Severity
from diagnose.thresholds import Thresholds
from parsers.ncu_kernels import RULES_SCHEMA
from reports.sections import ncu_rules as section
from tests.analyzers.fake_frames import fake_kernels_with_metrics, fake_rules
from tests.analyzers.ncu_isolated import analyze_report, in_fresh_process, report_path
from tests.paths import REPO

KINDS = REPO / "fixtures" / "ncu" / "kernel_kinds"
RAW = KINDS / "raw.csv.gz"
DETAILS = KINDS / "details.csv.gz"


@pytest.fixture(scope="module")
def details_result():
    return run_analyzer(ncu_rules, diagnose.load(DETAILS), Thresholds())


@pytest.fixture(scope="module")
def rep_result():
    return in_fresh_process(analyze_report, "ncu_rules", report_path())


def test_profile_has_a_typed_empty_rules_table_by_default():
    p = diagnose.Profile()
    assert list(p.ncu_rules.columns) == list(RULES_SCHEMA.columns) and not len(p.ncu_rules)
    assert p.ncu_rules["estimated_speedup_pct"].dtype == "float64" and p.ncu_rules["rule"].dtype == object
    assert not p.has("ncu_rules")


def test_rules_table_of_the_details_page(details_result):
    rules = details_result.tables["rules"]
    assert details_result.summary["ncu_rule_results_count"] == 191  # the 251 results less the INF ones
    assert set(rules["type"]) == {"OPT", "WRN"}
    top = rules.iloc[0]  # the largest share of GPU time ncu says could be saved
    assert (top["kernel"], top["rule"], top["about"]) == ("naive_gemm", "MemoryCacheAccessPattern", "global loads")
    assert (
        top["estimated_speedup_pct"] == pytest.approx(42.525, abs=1e-3)
        and round(top["est_gpu_time_share"], 4) == 0.1941
    )
    row = rules[(rules["kernel"] == "strided_copy") & (rules["rule"] == "UncoalescedGlobalAccess")].iloc[0]
    assert row["launches_fired"] == 2 and row["launches"] == 2 and row["speedup_type"] == "global"
    assert round(row["estimated_speedup_pct"], 2) == 75.49 and row["topic"] == "uncoalesced"
    not_compared = details_result.meta["not_compared_rules"]
    assert not_compared["CPIStall"] == 23 and not_compared["MemoryCacheAccessPattern (local loads)"] == 1
    assert "SOLBottleneck" in details_result.meta["compared_rules"]


def test_details_page_bottlenecks_agree_and_sectors_are_not_measured(details_result):
    c = details_result.tables["comparison"].set_index(["kernel", "topic", "ncu_rule"])
    for kernel, verdict in (
        ("naive_gemm", "high throughput (L1)"),
        ("transpose_naive", "high throughput (L2)"),
        ("stream_add", "memory-heavy (DRAM)"),
        ("strided_copy", "memory-heavy (DRAM)"),
    ):
        row = c.loc[(kernel, "bottleneck", "SOLBottleneck")]
        assert (row["ncu_verdict"], row["agreement"]) == (verdict, "agree"), kernel
    assert c.loc[("init_curand", "bottleneck", "SOLBottleneck"), "agreement"] == "threshold"  # balanced vs bound
    assert c.loc[("DeviceReduceKernel", "bottleneck", "SOLBottleneck"), "agreement"] == "scope"
    row = c.loc[("strided_copy", "uncoalesced", "UncoalescedGlobalAccess")]
    assert row["agreement"] == "not measured" and "details page" in row["why"]
    f = details_result.findings[0]
    assert f.id == "ncu_rules.disagreement" and f.severity == Severity.INFO and f.cost_share is None
    assert [(s.name, s.figures["ncu_rule"]) for s in f.subjects] == [
        ("transpose_naive", "AchievedOccupancy"),
        ("execute_dist", "AchievedOccupancy"),
    ]


def test_report_names_where_ncu_and_gpudiag_disagree(rep_result):
    c = rep_result.tables["comparison"].set_index(["kernel", "topic", "ncu_rule", "ncu_verdict"])
    agree = c[c["agreement"] == "agree"].reset_index()
    got = set(zip(agree["kernel"], agree["ncu_rule"]))
    for pair in (
        ("strided_copy", "UncoalescedGlobalAccess"),
        ("strided_copy", "MemoryCacheAccessPattern"),
        ("transpose_naive", "UncoalescedGlobalAccess"),
        ("transpose_naive", "MemoryCacheAccessPattern"),
        ("naive_gemm", "SOLBottleneck"),
        ("stream_add", "SOLBottleneck"),
    ):
        assert pair in got, pair
    strided = c.xs(("strided_copy", "uncoalesced", "UncoalescedGlobalAccess"), level=[0, 1, 2]).iloc[0]
    assert strided["gpudiag_verdict"] == "77.8 % of sectors excess (loads); flagged"
    assert round(strided["ncu_speedup_pct"], 2) == 75.11
    f = rep_result.findings[0]
    assert f.id == "ncu_rules.disagreement" and rep_result.summary["ncu_rules_disagreement_count"] == 4
    subjects = [(s.name, s.figures["topic"], s.figures["ncu_rule"]) for s in f.subjects]
    assert subjects == [
        ("naive_gemm", "uncoalesced", "MemoryCacheAccessPattern"),
        ("transpose_naive", "occupancy", "AchievedOccupancy"),
        ("execute_dist", "occupancy", "AchievedOccupancy"),
        ("init_curand", "uncoalesced", "MemoryCacheAccessPattern"),
    ]
    naive = f.subjects[0].figures
    assert naive["ncu_verdict"] == "global loads: 18.0 of 32 bytes per sector used (in L1TEX)"
    assert (
        round(naive["ncu_estimated_speedup_pct"], 1) == 42.5 and naive["gpudiag_verdict"] == "0.0 % of sectors excess"
    )
    assert "broadcast" in naive["why"] and "2.0 sectors per request" in naive["why"]
    assert "saturated_unit_pct" in f.subjects[1].figures["why"]
    assert "not compared: MemoryL2Compression" in f.recommendation
    # the stores of init_curand are uncoalesced but 1.2 % of its traffic: another bar, not another verdict
    curand = c.xs(("init_curand", "uncoalesced", "MemoryCacheAccessPattern"), level=[0, 1, 2])
    assert list(curand["agreement"]) == ["disagree", "threshold"]


def test_raw_page_has_no_rules():
    r = run_analyzer(ncu_rules, diagnose.load(RAW), Thresholds())
    assert [f.id for f in r.findings] == ["ncu_rules.not_measured"] and not r.tables
    assert "--page details" in r.findings[0].recommendation


# --- hand-made frames ------------------------------------------------------------------------------------------


def _kernel(name, dur, sm, mem, **extra):
    return {"kernel_short": name, "dur_ns": dur, "sm_throughput_pct": sm, "memory_throughput_pct": mem, **extra}


def _rule(launch, kernel, rule, description, speedup=None, kind="OPT", section="SpeedOfLight"):
    return {
        "launch_id": float(launch),
        "kernel_short": kernel,
        "kernel_name": kernel,
        "section": section,
        "rule": rule,
        "type": kind,
        "description": description,
        "estimated_speedup_pct": speedup,
        "speedup_type": "global" if speedup is not None else None,
    }


def _profile(kernels, rules):
    return diagnose.Profile(sources=["fake"], kernels=fake_kernels_with_metrics(kernels), ncu_rules=fake_rules(rules))


MEMORY_DRAM = (
    "Memory is more heavily utilized than Compute: Look at the Memory Workload Analysis section to identify the DRAM "
    "bottleneck."
)


def test_fake_bottleneck_side_and_unit():
    kernels = [
        # gpudiag: its busiest breakdown metric is the FMA pipe (compute), ncu: memory-heavy (DRAM)
        _kernel(
            "fake_side",
            500_000.0,
            70.0,
            75.0,
            **{"sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed [%]": 90.0},
        ),
        # gpudiag: L2 is the busiest, ncu: DRAM
        _kernel("fake_unit", 500_000.0, 10.0, 80.0, **{"lts__t_sectors.avg.pct_of_peak_sustained_elapsed [%]": 80.0}),
        _kernel("fake_odd", 500_000.0, 10.0, 80.0),
    ]
    rules = [
        _rule(0, "fake_side", "SOLBottleneck", MEMORY_DRAM),
        _rule(1, "fake_unit", "SOLBottleneck", MEMORY_DRAM),
        _rule(2, "fake_odd", "SOLBottleneck", "A message this version of gpudiag has not seen."),
    ]
    r = run_analyzer(ncu_rules, _profile(kernels, rules), Thresholds())
    c = r.tables["comparison"].set_index("kernel")
    assert c.loc["fake_side", "agreement"] == "disagree" and "FMA pipe" in c.loc["fake_side", "why"]
    assert c.loc["fake_unit", "agreement"] == "disagree" and "prefix (DRAM)" in c.loc["fake_unit", "why"]
    assert c.loc["fake_odd", "agreement"] == "not measured"
    assert [s.name for s in r.findings[0].subjects] == ["fake_side", "fake_unit"]


def test_fake_small_speedups_are_tabled_not_listed():
    kernels = [
        _kernel(
            "fake_occ",
            500_000.0,
            30.0,
            30.0,
            achieved_occupancy_pct=20.0,
            theoretical_occupancy_pct=50.0,
            occupancy_limit_registers=4.0,
            occupancy_limit_shared_mem=8.0,
            occupancy_limit_warps=8.0,
            occupancy_limit_blocks=32.0,
            grid_size=10_000.0,
        )
    ]
    rules = [
        _rule(
            0,
            "fake_occ",
            "TheoreticalOccupancy",
            "The 8.00 theoretical warps per scheduler this kernel can issue "
            "according to its occupancy are below the hardware maximum of 16. This kernel's theoretical occupancy "
            "(50.0%) is limited by the number of required registers.",
            speedup=3.0,
            section="Occupancy",
        ),
        _rule(0, "fake_occ", "CPIStall", "Stalls.", speedup=30.0, section="WarpStateStats"),
    ]
    r = run_analyzer(ncu_rules, _profile(kernels, rules), Thresholds())
    row = r.tables["comparison"].iloc[0]
    assert (row["ncu_verdict"], row["agreement"]) == ("theoretical occupancy limited by registers", "disagree")
    assert "its limiter is the same" in row["why"]
    assert not r.findings and r.summary["ncu_rules_disagreement_count"] == 0  # +3 % < min_speedup_pct
    th = Thresholds().with_overrides({"ncu_rules": {"min_speedup_pct": 1.0}})
    assert [f.id for f in run_analyzer(ncu_rules, _profile(kernels, rules), th).findings] == ["ncu_rules.disagreement"]
    assert r.meta["not_compared_rules"] == {"CPIStall": 1}
    cpi = r.tables["rules"].set_index("rule").loc["CPIStall"]
    assert cpi["est_gpu_time_share"] == pytest.approx(0.3) and pd.isna(cpi["topic"])


def test_fake_rules_without_kernels_and_empty_inputs():
    p = diagnose.Profile(sources=["fake"], ncu_rules=fake_rules([_rule(0, "fake_a", "CPIStall", "x", speedup=10.0)]))
    r = run_analyzer(ncu_rules, p, Thresholds())
    assert len(r.tables["rules"]) == 1 and not len(r.tables["comparison"]) and not r.findings
    assert r.tables["rules"].iloc[0]["kernel"] == "fake_a"
    assert run_analyzer(ncu_rules, diagnose.Profile(), Thresholds()).findings == []


def test_fake_bottleneck_messages_parse():
    assert ncu_rules.ncu_bottleneck(MEMORY_DRAM) == ("memory-heavy", "memory", "DRAM")
    assert ncu_rules.ncu_bottleneck(
        "This workload is utilizing greater than 80.0% of the available compute or memory performance of the device. "
        "Start by analyzing workloads in the Compute Workload Analysis section."
    ) == ("high throughput", "compute", None)
    assert ncu_rules.ncu_bottleneck("This kernel grid is too small to fill the available resources")[0] == "small grid"
    assert ncu_rules.ncu_bottleneck("") == (None, None, None)
    assert ncu_rules.unit_family("lts__xbar2lts_cycles_active.avg.pct_of_peak_sustained_elapsed") == "L2"
    assert ncu_rules.unit_family("sm__pipe_fma_cycles_active") is None and ncu_rules.unit_family(None) is None


# --- the report section ----------------------------------------------------------------------------------------


def test_section_renders_an_empty_result():
    html = section.render(Result("ncu_rules"))
    assert "No " in html and "<script" not in html


def test_section_shows_the_side_by_side_table(details_result):
    html = section.render(details_result)
    assert 'id="ncu-rules-comparison"' in html and 'id="ncu-rules-table"' in html
    assert "Not compared" in html and "CPIStall (23)" in html
    evil = "fake_k</script><script>alert(1)</script>"
    r = run_analyzer(
        ncu_rules,
        _profile([_kernel(evil, 500_000.0, 10.0, 75.0)], [_rule(0, evil, "SOLBottleneck", MEMORY_DRAM + evil)]),
        Thresholds(),
    )
    out = section.render(r)
    assert evil not in out and html_lib.escape(evil) in out
