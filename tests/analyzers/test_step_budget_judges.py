"""The step budget split (issue 29): the budget is derived once per report (``Derived.step_budget()``,
diagnose/derive/step_budget_table.py) and judged by one module per diagnosis (diagnose/judges/step_budget/), which
work from the budget's notes alone, with no Profile; derive never judges, and judges import no analyzer."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

import diagnose
from diagnose.derive import step_budget_table
from diagnose.derive.derived import Derived
from diagnose.findings import Severity
from diagnose.judges.step_budget.compilation import compile_findings
from diagnose.judges.step_budget.periodic import periodic_findings
from diagnose.thresholds import Thresholds
from tests.paths import FIXTURES, REPO
from tools.layering import imported, modules

SYNC_PLANTED = FIXTURES / "runs" / "sync_planted"


def test_a_report_works_out_the_budget_once(monkeypatch):
    """fixtures/runs/sync_planted (H200, light mode): the budget, its traced steps and its sync calls are worked out
    once per report, by the report's Derived, and the analyzer's tables are the Derived's."""
    counts: Counter = Counter()
    real = step_budget_table.step_budget

    def counted(*args, **kwargs):
        counts["step_budget"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(step_budget_table, "step_budget", counted)
    analysis = diagnose.analyze(diagnose.load(SYNC_PLANTED, quiet=True, workers=1))
    assert counts["step_budget"] == 1
    assert [f.id for f in analysis.findings if f.analyzer == "step_budget"] == ["step_budget.sync"]
    budget = analysis.results["step_budget"].tables["budget"]
    assert budget.loc[budget["column"] == "median step", "wall_ms"].iloc[0] == pytest.approx(5.55598)


def test_the_derived_budget_is_kept_and_each_reader_gets_a_copy():
    derived = Derived(diagnose.load(SYNC_PLANTED, quiet=True, workers=1))
    first = derived.step_budget()
    first.budget["ms"] = 0.0
    first.ranks[0]["notes"].append("changed by a reader")
    second = derived.step_budget()
    assert sorted(second.ranks) == [0] and second.ranks[0]["steady_steps"] == 4
    assert "changed by a reader" not in second.ranks[0]["notes"]
    median = second.budget[second.budget["column"] == "median step"].set_index("part")
    assert median.loc["compute", "ms"] == pytest.approx(5.051346)
    assert median.loc["sync", "ms"] == pytest.approx(0.493786)
    assert list(second.traced_steps["run_step"]) == [4, 5, 6]
    assert second.sync_calls[0]["run_step"].isin([4, 5, 6]).all() and len(second.sync_calls[0])


def test_an_input_without_steps_has_an_empty_budget():
    """An ncu page (fixtures/ncu/tiny_kernels) has no steps: no rank, no budget table, and the analyzer says so."""
    profile = diagnose.load(FIXTURES / "ncu" / "tiny_kernels" / "raw.csv", quiet=True, workers=1)
    empty = Derived(profile).step_budget()
    assert empty.ranks == {} and not len(empty.budget) and empty.traced_steps is None
    result = diagnose.analyze(profile).results["step_budget"]
    assert [f.id for f in result.findings] == ["step_budget.not_measured"] and result.tables == {}


def test_the_periodic_judge_works_from_the_budgets_notes_alone():
    """A hand-built period (an evaluation in steps 19, 39 and 59 of a 10 ms step): no Profile, no trace."""
    work = [{"what": "evaluation", "ms": 45.0, "steps": [19, 39, 59], "locations": [("/abs/train.py:88", 3, 135.0)]}]
    period = {
        "period": 20,
        "offset": 19,
        "occurrences": 3,
        "excess_ms": 50.0,
        "steps": [19, 39, 59],
        "not_slow": [],
        "quiet_before": [],
        "input_ms": None,
        "input_wait": False,
        "traced_steps": [],
        "work": work,
    }
    (f,) = periodic_findings(
        {0: {"median_step_ms": 10.0, "steady_total_ms": 1000.0, "period": period}}, {}, Thresholds()
    )
    assert f.id == "step_budget.periodic" and f.analyzer == "step_budget" and f.section == "section-step_budget"
    assert f.title == (
        "Every 20 steps (step 19 + 20i: steps 19, 39, 59) a step is 50 ms slower than the median 10 ms: evaluation "
        "(model.eval() at train.py:88) takes 45 ms"
    )
    assert f.cost_share == pytest.approx(0.15) and f.severity == Severity.WARNING  # 3 x 50 ms of 1,000 ms
    assert f.recommendation.startswith("The evaluation that starts at train.py:88 stops training")
    assert f.subjects[0].name == "/abs/train.py:88" and [s.name for s in f.subjects[1:]] == ["19", "39", "59"]


def test_the_compilation_judge_keeps_its_threshold():
    """8 ms of compiles in a run of 1,000 ms after warm-up: 0.8 %, under compile_min_share (1 %); 20 ms is 2 %."""
    functions = [
        {"name": "jit(update)", "ms": 8.0, "count": 2, "steps": [40, 80], "locations": [("/a/t.py:12", 2, 8.0)]}
    ]
    meta = {
        "steady_total_ms": 990.0,
        "compile_steps_wall_ms": 10.0,
        "compile_ms": 8.0,
        "compile_count": 2,
        "compile_functions": functions,
        "compile_ms_by_step": {40: 4.0, 80: 4.0},
    }
    assert compile_findings({0: meta}, Thresholds()) == []
    functions[0]["ms"] = meta["compile_ms"] = 20.0
    (f,) = compile_findings({0: meta}, Thresholds())
    assert f.id == "step_budget.compilation" and f.cost_share == pytest.approx(0.02)
    assert f.title == (
        "update (jit) compiled again in 2 steps after warm-up (steps 40, 80): 20 ms in all, 10 ms each (t.py:12), "
        "2.0 % of the run after warm-up"
    )
    assert "jax_explain_cache_misses" in f.recommendation and "TORCH_LOGS" not in f.recommendation


def test_a_torch_compile_recompile_gets_torch_advice():
    """The advice follows the compiled function's recorder: torch.compile's dynamic shapes and TORCH_LOGS, not
    jax.jit's static_argnames."""
    functions = [
        {
            "name": "torch.compile(forward)",
            "ms": 300.0,
            "count": 3,
            "steps": [40, 80, 120],
            "locations": [("/a/model.py:31", 3, 300.0)],
        }
    ]
    meta = {
        "steady_total_ms": 1000.0,
        "compile_steps_wall_ms": 320.0,
        "compile_ms": 300.0,
        "compile_count": 3,
        "compile_functions": functions,
        "compile_ms_by_step": {40: 100.0, 80: 100.0, 120: 100.0},
    }
    (f,) = compile_findings({0: meta}, Thresholds())
    assert f.title.startswith("forward (torch.compile) compiled again in 3 steps after warm-up")
    assert f.recommendation.startswith("At model.py:31: Keep input shapes static")
    assert "torch.compile(dynamic=True)" in f.recommendation and "TORCH_LOGS=recompiles" in f.recommendation
    assert "jax" not in f.recommendation.lower()


def forbidden_imports(root: Path) -> list[str]:
    """Imports that break the split: a judge that imports an analyzer (the analyzer imports its judges), derive that
    imports a judge (derive computes, it never judges)."""
    found = []
    for module, path in modules(str(root)).items():
        rules = {"diagnose.judges": "diagnose.analyzers", "diagnose.derive": "diagnose.judges"}
        for package, banned in rules.items():
            if module == package or module.startswith(package + "."):
                for target, _ in imported(module, path, ast.parse(Path(path).read_text(encoding="utf-8"))):
                    if target == banned or target.startswith(banned + "."):
                        found.append(f"{module} imports {target}")
    return found


def test_judges_import_no_analyzer_and_derive_no_judge(tmp_path):
    assert forbidden_imports(REPO) == []
    (tmp_path / "diagnose" / "judges").mkdir(parents=True)
    (tmp_path / "diagnose" / "derive").mkdir(parents=True)
    (tmp_path / "diagnose" / "judges" / "planted.py").write_text("def f():\n    from diagnose.analyzers import sync\n")
    (tmp_path / "diagnose" / "derive" / "planted.py").write_text("from diagnose.judges.step_budget import causes\n")
    assert sorted(forbidden_imports(tmp_path)) == [
        "diagnose.derive.planted imports diagnose.judges.step_budget.causes",
        "diagnose.judges.planted imports diagnose.analyzers.sync",
    ]


def test_a_rank_without_steady_steps_has_notes_and_no_budget():
    """sync_planted's first 3 step rows, all marked warm-up: the rank's notes say so, and it has no budget."""
    profile = diagnose.load(SYNC_PLANTED, quiet=True, workers=1)
    derived = Derived(profile)
    rows = derived.step_table()
    rows = rows[rows["rank"] == 0].head(3).assign(warmup=True).reset_index(drop=True)
    meta, budget, *_ = step_budget_table.rank_budget(profile, derived, 0, rows, derived.trace_window(), Thresholds())
    assert budget is None and meta["warmup_steps"] == 3 and meta["steady_steps"] == 0
    assert meta["warmup_step_numbers"] == [int(s) for s in rows["step"]] == [0, 1, 2]
