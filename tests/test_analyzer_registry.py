"""Analyzers describe themselves, and everything that lists them discovers them (issue 29).

Each analyzer module declares its section's heading, what it judges, what its findings' cost is a share of, the
thresholds it reads and the ids it makes; the report's headings, the verdict's words and the gate read those
declarations, so adding an analyzer touches its module, its section and its test. The causes of time (idle's gap
causes, the step budget's parts, the verdict's bar) are one vocabulary drawn in one palette.
"""

from __future__ import annotations

import ast
import dataclasses
import re

import pytest

import diagnose
from diagnose import verdict
from diagnose.analysis import Analysis, run_analyzer
from diagnose.analyzers import description_of, discover
from diagnose.derive import trace_timeline
from diagnose.findings import CAUSES, Cause, cause_of
from diagnose.metrics import Metric
from diagnose.thresholds import Thresholds
from reports import html as html_report
from reports.figures import CAUSE_COLORS
from tests.paths import FIXTURES, REPO

ANALYZERS = discover()
GROUPS = {f.name for f in dataclasses.fields(Thresholds)}
# the Derived's tables that read thresholds, and the groups they read (diagnose/derive/)
DERIVED_THRESHOLDS = {
    "step_table": {"steps"},
    "kernel_access": {"memory_access", "tiny_kernels"},
    "rank_calls": {"sync"},
    "step_budget": {"step_budget", "steps", "sync"},
}
# real captures of every kind: an ncu page, a run folder with steps and a trace, an allocator snapshot
FIXTURE_INPUTS = (
    FIXTURES / "ncu" / "tiny_kernels" / "raw.csv",
    FIXTURES / "ncu" / "kernel_kinds" / "raw.csv.gz",
    FIXTURES / "runs" / "sync_planted",
    FIXTURES / "runs" / "input_bound",
    FIXTURES / "memory" / "churn" / "snapshot.pickle.gz",
)


@pytest.fixture(scope="module")
def analyses():
    return {path: diagnose.analyze(diagnose.load(path, quiet=True)) for path in FIXTURE_INPUTS}


@pytest.mark.parametrize("mod", ANALYZERS, ids=[m.NAME for m in ANALYZERS])
def test_every_analyzer_declares_its_description(mod):
    name = mod.NAME
    assert isinstance(mod.ORDER, int)
    assert mod.SECTION == f"section-{name}"
    for attr in ("TITLE", "JUDGES", "COST_BASIS"):
        value = getattr(mod, attr, None)
        assert isinstance(value, str) and value.strip() == value and value, (name, attr)
    assert isinstance(mod.COST_BASIS_BY_ID, dict), name
    assert set(mod.COST_BASIS_BY_ID) <= set(mod.FINDING_IDS), name
    assert isinstance(mod.THRESHOLDS, tuple) and set(mod.THRESHOLDS) <= GROUPS, name
    assert isinstance(mod.FINDING_IDS, tuple) and all(i.startswith(f"{name}.") for i in mod.FINDING_IDS), name
    assert all(isinstance(m, Metric) for m in mod.SUMMARY_METRICS), name
    ranked = (*getattr(mod, "CAUSE_FINDING_IDS", ()), *getattr(mod, "SYMPTOM_FINDING_IDS", ()))
    assert set(ranked) <= set(mod.FINDING_IDS), name  # the ids rank_findings orders by are its own


@pytest.mark.parametrize("mod", ANALYZERS, ids=[m.NAME for m in ANALYZERS])
def test_declared_thresholds_hold_every_group_the_code_reads(mod):
    """Every ``th.<group>`` the module reads, and the groups of the shared tables it takes from the Derived."""
    judges = sorted((REPO / "diagnose" / "judges" / mod.NAME).glob("*.py"))  # the diagnoses it hands over
    source = "\n".join(p.read_text() for p in (REPO / "diagnose" / "analyzers" / f"{mod.NAME}.py", *judges))
    read = set(re.findall(r"\b(?:th|thresholds)\.([a-z_0-9]+)\b", source)) & GROUPS
    for table, groups in DERIVED_THRESHOLDS.items():
        if re.search(rf"\bderived\.{table}\(", source):
            read |= groups
    assert read <= set(description_of(mod).thresholds), (mod.NAME, read)


def test_finding_ids_are_declared_by_the_analyzer_that_makes_them(analyses):
    made = set()
    for analysis in analyses.values():
        for f in analysis.findings:
            described = analysis.analyzers[f.analyzer]
            assert f.id in described.finding_ids, f.id
            assert (f.section or described.section) == described.section, f.id
            made.add(f.id)
    # the fixtures make findings of the ncu, trace, step and memory analyzers alike
    assert {"tiny_kernels.launch_bound", "memory_access.uncoalesced", "sync.host_sync", "step_budget.input"} <= made
    assert {"fragmentation.at_peak"} <= made


def test_analysis_carries_every_description_and_a_hand_built_one_too(analyses):
    analysis = next(iter(analyses.values()))
    assert list(analysis.analyzers) == list(analysis.results) == [m.NAME for m in ANALYZERS]
    assert Analysis().analyzers == analysis.analyzers
    l2 = analysis.analyzers["l2"]
    assert (l2.title, l2.judges, l2.cost_basis, l2.section) == ("L2 cache", "L2 hit rates", "GPU time", "section-l2")
    assert l2.thresholds == ("l2", "speed_of_light", "tiny_kernels") and "l2.low_hit_rate" in l2.finding_ids
    steps = analysis.analyzers["steps"]
    assert steps.cost_of("steps.host_bound") == "the median step's host time" and steps.cost_of("x") == "step time"


def test_report_headings_and_verdict_words_come_from_the_declarations(analyses, monkeypatch):
    """A module's TITLE is its section's heading and its JUDGES the verdict's word for it: change one, see it."""
    from diagnose.analyzers import sync as sync_module

    monkeypatch.setattr(sync_module, "TITLE", "Where the host waits")
    monkeypatch.setattr(sync_module, "JUDGES", "every host wait")
    clean = diagnose.analyze(diagnose.load(FIXTURES / "runs" / "sync_free", quiet=True))
    assert clean.verdict.state == "clean" and "every host wait" in clean.verdict.sentence
    page = html_report.render_html(clean)
    assert '<a href="#section-sync">Where the host waits</a>' in page


def _collections_of_names(path, names: set[str]) -> list[int]:
    """Lines of dict, set, list or tuple literals in ``path`` that hold two or more analyzer names."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
        if not isinstance(node, (ast.Dict, ast.Set, ast.List, ast.Tuple)) or items is None:
            continue
        found = [i.value for i in items if isinstance(i, ast.Constant) and i.value in names]
        if len(found) >= 2:
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("path", ["diagnose/verdict.py", "reports/html.py"])
def test_no_hand_list_of_analyzer_names(path):
    names = {m.NAME for m in ANALYZERS}
    assert _collections_of_names(REPO / path, names) == [], path


def test_the_hand_list_check_finds_a_planted_list(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('TITLES = {"l2": "L2 cache", "occupancy": "Occupancy"}\nONE = ("l2",)\n')
    assert _collections_of_names(planted, {m.NAME for m in ANALYZERS}) == [1]


# -- one vocabulary of causes, one palette ------------------------------------------------------------------------


def test_every_cause_has_one_colour_and_no_two_share_one():
    assert list(CAUSE_COLORS) == [c.id for c in CAUSES]
    assert len(set(CAUSE_COLORS.values())) == len(CAUSE_COLORS)
    names = [n for c in CAUSES for n in (c.id, *c.aliases)]
    assert len(names) == len(set(names))  # an alias never names two causes


def test_idle_gap_causes_and_step_budget_parts_are_causes(analyses):
    for gap in trace_timeline.GAP_CAUSES:
        assert isinstance(cause_of(gap), Cause) and not cause_of(gap).busy and cause_of(gap).words, gap
    for analysis in analyses.values():
        budget = analysis.results["step_budget"].tables.get("budget")
        for part in [] if budget is None else budget["part"].unique():
            assert cause_of(part) is not None, part
        if analysis.verdict.budget is not None:
            assert all(cause_of(p.cause) is not None for p in analysis.verdict.budget.parts)
    assert cause_of("launch_bound").id == "host" and cause_of("memcpy").id == "non_compute"
    assert cause_of("other_wait").id == "other" and cause_of("no such cause") is None


def _figures(module, monkeypatch, result) -> list:
    """The plotly figures a section draws for ``result``."""
    drawn = []
    monkeypatch.setattr(module, "figure_html", lambda fig, div_id=None: drawn.append(fig) or "")
    module.render(result)
    return drawn


def _bar_colour_by_cause(budget) -> dict[str, str]:
    return {p["cause"]: p["color"] for p in html_report.budget_view(budget)["parts"]}


@pytest.mark.parametrize("run", ["mem_churn", "input_bound"])
def test_step_budget_chart_and_the_verdict_bar_draw_a_cause_in_one_colour(run, monkeypatch):
    """mem_churn's step budget has trace-window and unexplained parts: drawn grey and a sand colour by the section
    but yellow and light grey by the verdict's bar before the palettes were one."""
    from reports.sections import step_budget as section

    result = diagnose.analyze(diagnose.load(FIXTURES / "runs" / run, quiet=True)).results["step_budget"]
    (fig,) = _figures(section, monkeypatch, result)
    part_of = dict(zip(result.tables["budget"]["label"], result.tables["budget"]["part"]))
    drawn = {verdict.cause_id(part_of[trace.name]): trace.marker.color for trace in fig.data}
    parts = tuple(verdict.BudgetPart(c, c, 1 / len(drawn)) for c in drawn)
    assert drawn == _bar_colour_by_cause(verdict.StepBudget(0, 1, 1.0, parts))
    assert {"compute", "non_compute", "host"} <= set(drawn)
    if run == "mem_churn":
        assert {"trace_window", "unexplained"} <= set(drawn)


def test_idle_chart_and_the_verdict_bar_draw_a_cause_in_one_colour(monkeypatch):
    from reports.sections import idle as section

    analysis = diagnose.analyze(diagnose.load(FIXTURES / "runs" / "sync_planted", quiet=True))
    from diagnose.verdict import step_budget

    figures = _figures(section, monkeypatch, analysis.results["idle"])
    colours = {trace.name: trace.marker.color for fig in figures for trace in fig.data}
    # the idle breakdown's bar (the verdict shows the median step's here: its idle and syncs are put in that step)
    bar = _bar_colour_by_cause(step_budget(analysis.results["idle"]))
    assert colours["idle: held by syncs"] == bar["sync"] == CAUSE_COLORS["sync"]
    assert colours["idle: waiting for host launch"] == bar["host"]
    assert colours["idle: short kernel gaps"] == bar["short"]
    assert colours["busy"] == bar["compute"]


# -- thresholds the sections draw are the analysis's ----------------------------------------------------------------

NCU_TINY = FIXTURES / "ncu" / "tiny_kernels" / "raw.csv"
NCU_KINDS = FIXTURES / "ncu" / "kernel_kinds" / "raw.csv.gz"


def _section_with(name: str, path, overrides: dict, monkeypatch):
    """The figures and HTML of section ``name`` for ``path`` analysed with ``overrides``."""
    import importlib

    module = importlib.import_module(f"reports.sections.{name}")
    result = run_analyzer(name, diagnose.load(path, quiet=True), Thresholds().with_overrides(overrides))
    text = module.render(result)
    return _figures(module, monkeypatch, result), text


def test_an_overridden_l2_band_moves_the_heatmap_colours(monkeypatch):
    figures, _ = _section_with("l2", NCU_TINY, {"l2": {"warning_pct": 90.0, "critical_pct": 50.0}}, monkeypatch)
    scale = [tuple(stop) for stop in figures[0].data[0].colorscale]
    assert [s[0] for s in scale] == [0.0, 0.5, 0.9, 1.0]


def test_an_overridden_speed_of_light_bound_moves_the_lines(monkeypatch):
    figures, text = _section_with(
        "speed_of_light", NCU_TINY, {"speed_of_light": {"bound_pct": 70.0, "latency_pct": 30.0}}, monkeypatch
    )
    lines = sorted({s.x0 for s in figures[0].layout.shapes if s.x0 == s.x1})
    assert lines == [30.0, 70.0]
    assert "Bound at ≥ 70 % of peak on one unit; latency-bound under 30 % on both" in text


def test_an_overridden_tiny_kernel_bound_moves_the_line(monkeypatch):
    figures, _ = _section_with("tiny_kernels", NCU_TINY, {"tiny_kernels": {"max_dur_us": 3.0}}, monkeypatch)
    fig = figures[0]
    assert [s.x0 for s in fig.layout.shapes] == [3.0]
    assert "under the 3 µs bound" in fig.layout.title.text


def test_an_overridden_excess_share_moves_the_line(monkeypatch):
    figures, text = _section_with(
        "memory_access", NCU_KINDS, {"memory_access": {"excess_share_pct": 40.0}}, monkeypatch
    )
    assert [s.x0 for s in figures[0].layout.shapes] == [40.0]
    assert "Flagged at ≥ 40 % excess sectors" in text
