"""Each report invariant (diagnose/checks/report_invariants.py) on small hand-made findings: fakes that break it, and
findings that hold it (their wording copied from real reports). The real inputs are checked in
tests/test_report_invariants_fixtures.py, every fuzzed input in tests/fuzz/oracle.py."""

from __future__ import annotations

import pandas as pd
import pytest

from diagnose.analysis import Analysis
from diagnose.checks.report_invariants import (
    Violation,
    check_budget_adds_up,
    check_clean_numbers,
    check_doc,
    check_no_line_zero,
    check_no_self_advice,
    check_part_le_whole,
    check_per_step_needs_steps,
    check_subject_severity,
    check_title_numbers_in_evidence,
    check_verdict_matches_finding,
    numbers_in,
)
from diagnose.findings import Result


def fake_finding(title, evidence=(), subjects=(), fid="step_budget.sync", severity="warning", cost_share=None, **kw):
    return {
        "id": fid,
        "analyzer": fid.split(".")[0],
        "severity": severity,
        "title": title,
        "cost_share": cost_share,
        "subjects": list(subjects),
        "evidence": [{"metric": m, "value": v, "unit": u, "threshold": t} for m, v, u, t in evidence],
        "recommendation": kw.get("recommendation", ""),
    }


def fake_doc(*findings, verdict=None, manifest=None, summary=None):
    return {"verdict": verdict, "source": {"manifest": manifest}, "summary": summary or {}, "findings": list(findings)}


def fake_analysis(tables: dict[str, dict[str, pd.DataFrame]], meta: dict | None = None) -> Analysis:
    results = {name: Result(name, tables=t, meta=(meta or {}).get(name, {})) for name, t in tables.items()}
    return Analysis(results=results)


def invariants(violations: list[Violation]) -> list[str]:
    return [v.invariant for v in violations]


# the step_budget.sync finding of fixtures/runs/sync_heavy as the report shows it, with the traced steps its title
# names carried in its evidence (the real one does not carry them: scratch/notes/h6-violations.md)
SYNC_HEAVY = fake_finding(
    "Host syncs hold the GPU idle 0.363 ms of the 1.43 ms median step (25.3 %), measured in traced steps 10–12; "
    "the costliest is aten::to at /tmp/t/examples/sync_heavy.py:51 (0.237 ms a step as traced)",
    evidence=[
        ("step_budget_sync_ms", 0.363105, "ms", None),
        ("step_budget_step_ms", 1.434949, "ms", None),
        ("step_budget_sync_share", 0.25304383640115435, "share", 0.05),
        ("step_budget_traced_first_step", 10, "step", None),
        ("step_budget_traced_last_step", 12, "step", None),
    ],
    subjects=[
        {"kind": "rank", "name": "0", "severity": "warning", "ms": 0.363105, "step_ms": 1.434949, "share": 0.253},
        {
            "kind": "location",
            "name": "/tmp/t/examples/sync_heavy.py:51",
            "op": "aten::to",
            "gpu_idle_ms_per_step": 0.23664,
        },
    ],
    cost_share=0.25304383640115435,
)


def test_numbers_are_read_as_a_reader_reads_them():
    shown = numbers_in(
        "sm80_xmma tilesize64x64x8 runs 2.67 waves; p10 1.7 ms, 1,132 ms, < 0.1 %, ~1,023×, (+16 %) 494 µs"
    )
    assert [(n.raw, n.value, n.kind, n.prefix) for n in shown] == [
        ("2.67", 2.67, "plain", ""),
        ("1.7 ms", 1.7, "time", ""),
        ("1,132 ms", 1132.0, "time", ""),
        ("0.1 %", 0.1, "pct", "<"),
        ("1,023×", 1023.0, "plain", "~"),
        ("16 %", 16.0, "pct", "+"),
        ("494 µs", pytest.approx(0.494), "time", ""),
    ]
    assert numbers_in("7.70 GiB")[0].value == pytest.approx(7.70 * 2**30)


def test_a_real_finding_holds_every_invariant():
    assert check_doc(fake_doc(SYNC_HEAVY)) == []


# --- part <= whole ----------------------------------------------------------------------------------------------


def test_part_larger_than_whole_in_a_title():
    fake = fake_finding("The GPU waits for input 41.2 ms of the 40.4 ms median step (102.0 %)")
    assert "part 41.2 ms is larger than its whole 40.4 ms" in check_part_le_whole(fake_doc(fake))[0].detail
    fake = fake_finding("51 of 48 launches (106 %) run under 5 µs", fid="tiny_kernels.launch_bound")
    assert invariants(check_part_le_whole(fake_doc(fake))) == ["part_le_whole"]
    fake = fake_finding("GPU idle 100.8 % of the time on rank 0", fid="idle.gpu_idle")
    assert "over 100 %" in check_part_le_whole(fake_doc(fake))[0].detail


def test_stated_share_must_be_part_over_whole():
    fake = fake_finding("The GPU waits for input 36.2 ms of the 40.4 ms median step (79.0 %)")
    assert "is not 36.2 ms / 40.4 ms" in check_part_le_whole(fake_doc(fake))[0].detail
    real = fake_finding("The GPU waits for input 36.2 ms of the 40.4 ms median step (89.6 %)")
    assert check_part_le_whole(fake_doc(real)) == []


def test_costliest_sync_larger_than_all_syncs():
    """Issue 28 item 3: "1.47 ms of the 17.8 ms median step … the costliest is aten::item at main.py:0 (13.8 ms a step)"."""
    fake = fake_finding(
        "Host syncs hold the GPU idle 1.47 ms of the 17.8 ms median step (8.3 %); the costliest is aten::item at "
        "main.py:0 (13.8 ms a step)",
        evidence=[("step_budget_sync_ms", 1.47, "ms", None), ("step_budget_step_ms", 17.8, "ms", None)],
        subjects=[{"kind": "location", "name": "main.py:0", "op": "aten::item", "gpu_idle_ms_per_step": 13.8}],
    )
    details = [v.detail for v in check_part_le_whole(fake_doc(fake))]
    assert details == ["subject 'main.py:0': gpu_idle_ms_per_step 13.8 is larger than step_budget_sync_ms 1.47"]
    assert invariants(check_no_line_zero(fake_doc(fake))) == ["no_line_zero"] * 2  # title and subject name


def test_a_sites_traced_mean_may_pass_the_budgets_median_part_by_a_quarter():
    """The H200 word LM without stacks (fixtures/trace/wordlm_sgd_h200): one sync site, 0.247 ms a traced step on
    average, where the budget's sync part, the median step's, is 0.233 ms. Issue 28's 13.8 against 1.47 ms (above)
    is still a violation."""

    def doc(site_ms):
        return fake_doc(
            fake_finding(
                "Host syncs hold the GPU idle 233 µs of the 3.54 ms median step (6.6 %)",
                evidence=[("step_budget_sync_ms", 0.2333, "ms", None), ("step_budget_step_ms", 3.54, "ms", None)],
                subjects=[{"kind": "location", "name": "x", "op": "aten::item", "gpu_idle_ms_per_step": site_ms}],
            )
        )

    assert check_part_le_whole(doc(0.2466)) == []
    assert [v.detail for v in check_part_le_whole(doc(0.30))] == [
        "subject 'x': gpu_idle_ms_per_step 0.3 is larger than step_budget_sync_ms 0.2333"
    ]


def test_share_over_one_and_budget_part_over_step():
    fake = fake_finding("x", evidence=[("step_budget_sync_share", 1.2, "share", None)], cost_share=1.2)
    assert len(check_part_le_whole(fake_doc(fake))) == 2
    fake_budget = pd.DataFrame(
        {
            "rank": [0, 0],
            "column": ["median step"] * 2,
            "wall_ms": [27.6, 27.6],
            "steps": [23, 23],
            "part": ["compute", "unexplained"],
            "label": ["GPU busy: compute", "unexplained"],
            "gpu_busy": [True, False],
            "ms": [31.9, -4.3],
            "shown_ms": [31.9, 0.0],
            "share": [1.156, -0.156],
            "measured_in": ["traced steps 10–11", "the remainder"],
        }
    )
    analysis = fake_analysis({"step_budget": {"budget": fake_budget}})
    assert "longer than the 27.6 ms step" in check_part_le_whole(fake_doc(), analysis)[0].detail
    assert "drawn add to 115.58 %" in check_budget_adds_up(fake_doc(), analysis)[0].detail


# --- a budget adds to 100 % ---------------------------------------------------------------------------------------


def test_budget_shares_add_to_100():
    fake_bar = {"basis": "rank 0", "parts": [{"cause": "compute", "share": 0.5}, {"cause": "host", "share": 0.45}]}
    assert "add to 95.00 %" in check_budget_adds_up(fake_doc(verdict={"step_budget": fake_bar}))[0].detail
    real_bar = {"basis": "rank 0", "parts": [{"cause": "compute", "share": 0.554}, {"cause": "host", "share": 0.4462}]}
    assert check_budget_adds_up(fake_doc(verdict={"step_budget": real_bar})) == []
    fake_idle = fake_finding(
        "GPU idle 94.3 % of the time",
        fid="idle.gpu_idle",
        evidence=[
            ("gpu_idle_pct", 94.3, "%", 20.0),
            ("gpu_compute_pct", 5.5, "%", None),
            ("gpu_non_compute_pct", 0.2, "%", None),
            ("idle_input_pct", 0.0, "%", None),
            ("idle_sync_pct", 10.0, "%", None),
            ("idle_host_pct", 73.8, "%", None),
            ("idle_short_pct", 0.1, "%", None),
            ("idle_other_pct", 0.4, "%", None),
            ("idle_unlinked_pct", 0.0, "%", None),
        ],
    )
    assert "the idle causes add to 84.30 %" in check_budget_adds_up(fake_doc(fake_idle))[0].detail


def test_per_step_breakdown_must_fill_the_step():
    fake_per_step = pd.DataFrame(
        {"rank": [0], "step": [0], "step_ms": [2.2], "busy_ms": [0.2], "idle_sync_ms": [0.0], "idle_host_ms": [0.0],
         "idle_short_ms": [0.0], "idle_other_ms": [0.0], "idle_unlinked_ms": [1.5]}
    )  # fmt: skip
    analysis = fake_analysis({"idle": {"per_step": fake_per_step}})
    assert "add to 77.27 % of the step" in check_budget_adds_up(fake_doc(), analysis)[0].detail
    analysis.results["idle"].tables["per_step"] = fake_per_step.assign(idle_unlinked_ms=2.0)
    assert check_budget_adds_up(fake_doc(), analysis) == []


# --- per step only with steps ------------------------------------------------------------------------------------


def _launch_stats(steps: int) -> pd.DataFrame:
    return pd.DataFrame({"rank": [0], "kernels": [39], "steps": [steps]})


def test_per_step_needs_steps():
    fake = fake_finding(
        "40 kernels per step run shorter than their launch: the step is launch-bound",
        fid="launch.launch_bound",
        subjects=[{"kind": "op", "name": "aten::mm", "kernels_per_step": 40.0}],
    )
    without = fake_analysis({"launch": {"stats": _launch_stats(0)}})
    assert invariants(check_per_step_needs_steps(fake_doc(fake), without)) == ["per_step_needs_steps"]
    with_steps = fake_analysis({"launch": {"stats": _launch_stats(3)}})
    assert check_per_step_needs_steps(fake_doc(fake), with_steps) == []


# --- line 0 ----------------------------------------------------------------------------------------------------------


def test_no_line_zero():
    fake = fake_finding("the costliest is aten::item at main.py:0 (13.8 ms a step)")
    assert check_no_line_zero(fake_doc(fake))[0].detail == "main.py:0 in the title"
    real = fake_finding("the costliest is aten::item at main.py:10 (13.8 ms a step); segment 0x7f00:0x10")
    assert check_no_line_zero(fake_doc(real)) == []
    fake_table = pd.DataFrame({"location": ["train.py:41", "main.py:0"], "line": [41, 0]})
    analysis = fake_analysis({"sync": {"locations": fake_table}})
    assert check_no_line_zero(fake_doc(), analysis)[0].finding_id == "table sync.locations"


# --- no advice to capture with gpudiag profile on a run folder it wrote -------------------------------------------


def test_no_self_advice_on_run_folders():
    advice = "profile with `gpudiag profile` for lines"
    fake = fake_finding("1 host sync per step", fid="sync.host_sync", recommendation=advice)
    run = {"schema": "gpudiag.run/1", "mode": "light"}
    assert invariants(check_no_self_advice(fake_doc(fake, manifest=run))) == ["no_self_advice"]
    assert check_no_self_advice(fake_doc(fake, manifest=None)) == []  # a trace from elsewhere: the advice follows
    ncu_advice = fake_finding(
        "x", fid="memory_access.not_measured", recommendation="`gpudiag profile --ncu` collects it"
    )
    assert check_no_self_advice(fake_doc(ncu_advice, manifest=run)) == []  # a light run: --ncu is new advice
    ncu_run = {"schema": "gpudiag.run/1", "mode": "ncu"}
    assert invariants(check_no_self_advice(fake_doc(ncu_advice, manifest=ncu_run))) == ["no_self_advice"]


# --- the verdict's figure is its finding's -----------------------------------------------------------------------


def _verdict(sentence, cost, ids=("step_budget.sync",)):
    return {"sentence": sentence, "state": "limited", "cost_share": cost, "top_finding_ids": list(ids)}


def test_verdict_figures_come_from_the_finding_it_cites():
    sentence = SYNC_HEAVY["title"] + "; fixing it could save up to 25.3 % of the median step."
    assert check_verdict_matches_finding(fake_doc(SYNC_HEAVY, verdict=_verdict(sentence, 0.253043836))) == []
    fake_cost = _verdict(sentence, 0.30)
    assert (
        "is not step_budget.sync's" in check_verdict_matches_finding(fake_doc(SYNC_HEAVY, verdict=fake_cost))[0].detail
    )
    fake_sentence = _verdict(SYNC_HEAVY["title"] + "; fixing it could save up to ~99 % of step time.", 0.253043836)
    assert [v.detail for v in check_verdict_matches_finding(fake_doc(SYNC_HEAVY, verdict=fake_sentence))] == [
        "99 % is in no cited finding"
    ]


def test_verdict_saving_of_step_time_is_the_budgets():
    """Issue 28 item 6: "~99 % of step time" in the verdict, against 79.0 % of the median step in the step budget."""
    idle = fake_finding(
        "GPU idle 99.0 % of the time on rank 0",
        fid="idle.gpu_idle",
        evidence=[("gpu_idle_pct", 99.0, "%", 20.0)],
        subjects=[{"kind": "rank", "name": "0"}],
        cost_share=0.99,
    )
    budget = pd.DataFrame(
        {"rank": [0, 0], "column": ["median step"] * 2, "part": ["compute", "input"], "gpu_busy": [True, False],
         "share": [0.21, 0.79]}
    )  # fmt: skip
    analysis = fake_analysis({"step_budget": {"budget": budget}})
    fake = _verdict(
        "GPU idle 99.0 % of the traced time; fixing it could save up to ~99 % of step time.", 0.99, ["idle.gpu_idle"]
    )
    (v,) = check_verdict_matches_finding(fake_doc(idle, verdict=fake), analysis)
    assert "step budget gives that cause 79.0 %" in v.detail
    said_right = _verdict("GPU idle 99.0 % of the traced time; fixing it could save up to 99.0 % of the traced time.", 0.99, ["idle.gpu_idle"])  # fmt: skip
    assert check_verdict_matches_finding(fake_doc(idle, verdict=said_right), analysis) == []


# --- numbers read as numbers -----------------------------------------------------------------------------------------


def test_clean_numbers():
    for fake_title in ("a step takes 1.18e+03 ms", "grid <NA>", "idle nan %", "inf ms per step"):
        assert invariants(check_clean_numbers(fake_doc(fake_finding(fake_title)))) == ["clean_numbers"], fake_title
    fake_count = fake_finding("2.5 kernels run under 5 µs", evidence=[("tiny_launches", 2.5, "launches", None)])
    assert len(check_clean_numbers(fake_doc(fake_count))) == 2  # the title's count and the evidence's
    real = fake_finding(
        "12.9 host syncs per step in segment 0x7fa6e4000000; 1.05 sectors requested per DRAM sector",
        evidence=[("sync_count_per_step", 12.9, "count", None)],
        subjects=[{"kind": "segment", "name": "0x7fa6e4000000", "launches": 3}],
    )
    assert check_clean_numbers(fake_doc(real)) == []
    fake_table = pd.DataFrame({"launches": [3.0, 2.5]})
    analysis = fake_analysis({"kernels": {"kernels": fake_table}})
    assert check_clean_numbers(fake_doc(), analysis)[0].finding_id == "table kernels.kernels"


# --- title numbers are in the evidence ---------------------------------------------------------------------------


def test_title_numbers_in_evidence():
    fake = fake_finding(
        "Every 20 steps a step is 497 ms slower than the median 2.7 ms",
        fid="step_budget.periodic",
        evidence=[("step_budget_period_steps", 20, "count", None), ("step_budget_period_excess_ms", 497.2, "ms", None)],
    )
    assert [v.detail for v in check_title_numbers_in_evidence(fake_doc(fake))] == [
        "'2.7 ms' is in none of its evidence"
    ]
    real = fake_finding(
        "rank 0: 32 % of the 7.70 GiB reserved was never allocated (peak < 0.1 %); sm80_gemm_64x64 runs 2.67 waves, "
        "494 µs; 2 kernels (49.8 % of GPU time); 1 more kernel. Nsight Systems warning: driver version (13.2)",
        fid="fragmentation.at_peak",
        evidence=[
            ("reserved_unused_at_peak_pct", 31.8, "%", 25.0),
            ("peak_reserved_bytes", 8264876032.0, "bytes", None),
            ("peak_external_fragmentation_pct", 0.04, "%", None),
            ("waves", 2.6667, "waves", None),
            ("sync_ms", 0.4944, "ms", None),
        ],
        subjects=[
            {"kind": "rank", "name": "0"},
            {"kind": "kernel", "name": "sm80_gemm_64x64", "share": 0.3},
            {"kind": "kernel", "name": "other", "share": 0.198},
        ],
    )
    assert check_title_numbers_in_evidence(fake_doc(real)) == []


# --- subject severities ------------------------------------------------------------------------------------------


def test_subject_never_more_severe_than_its_finding():
    """Issue 28 item 12: an info finding whose subject says critical."""
    fake = fake_finding("x", severity="info", subjects=[{"kind": "rank", "name": "0", "severity": "critical"}])
    assert check_subject_severity(fake_doc(fake))[0].detail == "subject is critical, its finding info"
    assert check_subject_severity(fake_doc(SYNC_HEAVY)) == []
