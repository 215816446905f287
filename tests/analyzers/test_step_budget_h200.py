"""The step-time budget and its ranking on issue 18's three H200 run folders (fixtures/runs/PROVENANCE.md).

Numbers were measured on these fixtures with the analyzer of issue 18; each is asserted tightly so that a
change in how the budget is split, or in how findings are ranked, shows here.
"""

from __future__ import annotations

import pytest

import diagnose
from diagnose.analysis import run_analyzer
from diagnose.analyzers import step_budget
from diagnose.derive.step_budget_table import PARTS
from tests.paths import FIXTURES

RUNS = FIXTURES / "runs"
EXAMPLES = FIXTURES.parent / "examples"
NAMES = ("input_bound", "epoch_stall", "sync_heavy")


@pytest.fixture(scope="module")
def analysed():
    return {name: diagnose.analyze(diagnose.load(RUNS / name)) for name in NAMES}


def budget_of(analysis, column: str = "median step"):
    """One budget column of rank 0, indexed by part."""
    b = analysis.results["step_budget"].tables["budget"]
    return b[(b["rank"] == 0) & (b["column"] == column)].set_index("part")


def only(analysis, finding_id: str):
    (finding,) = [f for f in analysis.findings if f.id == finding_id]
    return finding


def line_of(script: str, marker: str) -> int:
    """The line of ``examples/<script>`` that carries ``marker`` (the planted bottleneck's tag)."""
    lines = (EXAMPLES / script).read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if line.rstrip().endswith(marker))


def test_input_bound_ranks_the_input_wait_first_and_the_verdict_says_so(analysed):
    a = analysed["input_bound"]
    top = a.findings[0]
    assert top.id == "step_budget.input"
    assert top.cost_share == pytest.approx(0.896, abs=0.001)
    assert "36.2 ms of the 40.4 ms median step" in top.title
    assert a.verdict.sentence.startswith("The GPU waits for input")
    # the symptoms it explains are still reported, after it
    ids = [f.id for f in a.findings]
    assert ids.index("utilization.low_gpu_util") == 1 and ids.index("idle.gpu_idle") == 2


def test_input_bound_measured_parts_fall_short_of_the_step_by_9_percent(analysed):
    """The directly measured parts (all but the inferred launch-bound part and the remainder) cover 90.8 % of the
    median step. The aim of docs/step-budget.md is 5 %; it is NOT met on this capture: the 9.2 % left is GPU idle
    the traced steps show as host-caused, so the budget infers it as launch-bound host work (3.71 ms)."""
    m = budget_of(analysed["input_bound"])
    wall_ms = m["wall_ms"].iloc[0]
    assert wall_ms == pytest.approx(40.393, abs=0.001)
    inferred = m.index[m["measured_in"].str.startswith("inferred:")].tolist()
    assert inferred == ["launch_bound"]
    measured_ms = m["ms"].drop([*inferred, "unexplained"]).sum()
    gap = 1 - measured_ms / wall_ms
    assert gap == pytest.approx(0.0918, abs=0.0005)
    assert gap < 0.10
    assert m.loc["launch_bound", "ms"] == pytest.approx(3.708, abs=0.001)
    assert m.loc["unexplained", "ms"] == 0.0  # the inference takes the whole remainder


def test_epoch_stall_names_the_period_and_the_input_wait(analysed):
    a = analysed["epoch_stall"]
    top = a.findings[0]
    assert top.id == "step_budget.periodic"
    assert top.cost_share == pytest.approx(0.768, abs=0.001)
    assert [s.name for s in top.subjects] == ["19", "39", "59", "79"]
    assert "waiting 450 ms for input" in top.title
    assert "persistent_workers=True" in top.recommendation
    period = a.results["step_budget"].meta["ranks"][0]["period"]
    assert (period["period"], period["offset"], period["steps"]) == (20, 19, [19, 39, 59, 79])
    assert period["input_wait"] is True and period["input_ms"] == pytest.approx(450.2, abs=0.1)
    assert a.verdict.sentence.startswith("Every 20 steps (step 19 + 20i")


def test_sync_heavy_names_the_sync_3_line_and_launch_bound_is_the_larger_cause(analysed):
    a = analysed["sync_heavy"]
    line = line_of("sync_heavy.py", "# SYNC-3")
    sync = only(a, "step_budget.sync")
    assert sync.cost_share == pytest.approx(0.253, abs=0.001)
    assert f"sync_heavy.py:{line}" in sync.title
    assert sync.subjects[1].kind == "location" and sync.subjects[1].name.endswith(f"sync_heavy.py:{line}")
    budget_findings = [f for f in a.findings if f.analyzer == "step_budget"]
    assert max(budget_findings, key=lambda f: f.cost_share).id == "step_budget.launch_bound"
    assert only(a, "step_budget.launch_bound").cost_share == pytest.approx(0.557, abs=0.001)
    # of that 0.557, the traced steps measured 0.549 of the median step as launch-bound; the 0.0076 they left
    # unexplained is taken into the inferred part, so the median budget's remainder is 0
    m, traced = budget_of(a), budget_of(a, "traced steps")
    wall_ms = m["wall_ms"].iloc[0]
    assert traced.loc["launch_bound", "ms"] / wall_ms == pytest.approx(0.549, abs=0.001)
    assert traced.loc["unexplained", "ms"] / wall_ms == pytest.approx(0.0076, abs=0.0002)
    assert m.loc["unexplained", "ms"] == 0.0 and abs(m.loc["unexplained", "ms"]) < 0.05 * wall_ms


@pytest.mark.parametrize("name", NAMES)
def test_every_budget_has_each_part_once_and_adds_up_to_its_wall_time(analysed, name):
    b = analysed[name].results["step_budget"].tables["budget"]
    parts = [p for p, _, _ in PARTS]
    assert sorted(b["column"].unique()) == ["median step", "slow steps", "traced steps"]
    for (rank, column), rows in b.groupby(["rank", "column"]):
        assert rows["part"].tolist() == parts, (rank, column)
        assert rows["ms"].notna().all(), (rank, column)
        assert rows["wall_ms"].nunique() == 1, (rank, column)
        assert rows["ms"].sum() == pytest.approx(rows["wall_ms"].iloc[0], rel=1e-9), (rank, column)


def test_traced_steps_input_wait_fits_inside_the_traced_step():
    a = diagnose.analyze(diagnose.load(RUNS / "input_bound"))
    traced = a.results["step_budget"].tables["traced_steps"]
    # run step 10's 69 ms fetch came before its GPU window opened: only what falls inside the window counts
    assert traced["input_ms"].iloc[0] == pytest.approx(68.965, abs=0.001)
    assert (traced["input_in_window_ms"] <= traced["wall_ms"]).all()
    assert (
        budget_of(a, "traced steps").loc["unexplained", "ms"] > -0.05 * budget_of(a, "traced steps")["wall_ms"].iloc[0]
    )


@pytest.mark.parametrize(
    "name, measured_share", [("input_bound", 0.908), ("epoch_stall", 0.411), ("sync_heavy", 0.443)]
)
def test_what_is_measured_directly_and_what_is_inferred(analysed, name, measured_share):
    """Nothing is left unexplained in the median step: the GPU idle left after the measured parts is host work, as
    the traced steps show it; the directly measured parts hold the share given."""
    m = budget_of(analysed[name])
    wall = m["wall_ms"].iloc[0]
    assert abs(m.loc["unexplained", "ms"]) < 0.05 * wall
    assert m["ms"].drop(["launch_bound", "unexplained"]).sum() / wall == pytest.approx(measured_share, abs=0.002)
    assert m.loc["launch_bound", "measured_in"].startswith("inferred:")


def test_without_a_trace_the_rest_stays_unexplained():
    """No traced steps, no inference: input_bound's steps without its trace leave the remainder unexplained."""
    from diagnose.thresholds import Thresholds

    profile = diagnose.load(RUNS / "input_bound")
    profile.traces.clear()
    b = run_analyzer(step_budget, profile, Thresholds()).tables["budget"]
    m = b[b["column"] == "median step"].set_index("part")
    assert m.loc["input", "share"] == pytest.approx(0.896, abs=0.001)
    assert m.loc["unexplained", "share"] == pytest.approx(0.104, abs=0.001)


def test_the_verdict_bar_is_the_step_budget_when_the_verdict_names_its_cause(analysed):
    """input_bound: the verdict names the input wait, so its bar is the median step's budget, not the traced GPU
    time (which read 97.4 % "waiting for the host to launch work")."""
    budget = analysed["input_bound"].verdict.budget
    assert budget.basis() == "rank 0, the median steady step of 52, 40.4 ms"
    shares = {p.cause: p.share for p in budget.parts}
    assert shares["input"] == pytest.approx(0.896, abs=0.001) and shares["host"] == pytest.approx(0.092, abs=0.001)
    assert sum(shares.values()) == pytest.approx(1.0)
    # sync_heavy: the step budget's launch-bound part (55.7 % of the median step) now leads, not the idle share of
    # the traced time (94.3 %): verdict, bar and saving on the median step (issue 28)
    verdict = analysed["sync_heavy"].verdict
    assert verdict.top_finding_ids[0] == "step_budget.launch_bound" and verdict.cost_of == "the median step"
    assert verdict.budget.basis() == "rank 0, the median steady step of 52, 1.43 ms"
    assert verdict.sentence.endswith("; fixing it could save up to 55.7 % of the median step.")
