"""Issue 30's done-when on real runs of our own scripts (fixtures/runs/PROVENANCE.md): each figure of the run budget
against the script's own stopwatch (fixtures/run_clocks/<run>.json, written by the script with time.time_ns() around
the code in question). The captures: CPU ones (char_gpt_cpu, char_gpt_compile_cpu; no H200 was lent on 2026-12-05),
and H200 ones where tools/gpu_capture_run_budget.sh has run (CAPTURES lists what fixtures/runs/ holds).

(a) examples/char_gpt.py, a module-level loop that evaluates and saves every 200 of 600 iterations (fits 3 times):
    both named with their lines, first or second in the report, each share within 10 % of its clocked time;
(b) the same script under torch.compile: the compiling before the first step within 10 % of the clock around the
    first compiled calls, and named;
(c) examples/loader_workers.py, 4 workers slower than 4 steps: stalls every 4 steps named, their cost the summed
    waits ± 10 %; on the H100 the workers drifted apart and the waits repeat every 4 steps, spread over the slots
    (diagnose.derive.input_stalls's cyclic rule), which random stalls (a fake series) never pass;
(d) the parts add to the wall time (tests/analyzers/test_run_budget.py covers every run fixture).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

import diagnose
from diagnose.analysis import analyze
from diagnose.derive.derived import Derived
from diagnose.derive.input_stalls import input_stalls
from diagnose.judges.step_budget.input_stalls import stall_findings
from diagnose.thresholds import Thresholds
from tests.paths import FIXTURES

RUNS = FIXTURES / "runs"
CLOCKS = FIXTURES / "run_clocks"


def clocks(name: str) -> dict:
    return json.loads((CLOCKS / f"{name}.json").read_text())


def span_s(pair) -> float:
    return (pair[1] - pair[0]) / 1e9


def line_of(script: str, marker: str) -> int:
    text = (FIXTURES.parent / "examples" / script).read_text().splitlines()
    (number,) = [i for i, t in enumerate(text, start=1) if marker in t]
    return number


def evidence(finding, key: str) -> float:
    return next(e.value for e in finding.evidence if e.metric == key)


def captured(*names: str) -> list[str]:
    return [n for n in names if (RUNS / n / "manifest.json").exists()]


EVAL_RUNS = captured("char_gpt_cpu", "char_gpt_h200", "char_gpt_h100")
# where the evaluation also leads the report: on the H100 and H200 the eager step is host-bound, and launch-bound work is worth
# more of the run than the evaluation (test_a_on_a_gpu_the_host_bound_step_leads_and_the_evaluation_is_second_...)
LEAD_RUNS = captured("char_gpt_cpu")
# char_gpt_compile_h100 was captured before compile_work counted the backward's compile on the autograd thread:
# test_b_the_h100_capture_misses_the_backward_compile
COMPILE_RUNS = captured("char_gpt_compile_cpu", "char_gpt_compile_h200")
# on the H100 the 4 workers did not deliver in bursts of 4: test_c_on_the_h100_the_waits_are_counted
LOADER_RUNS = captured("loader_workers_h200")


@pytest.fixture(scope="module", params=EVAL_RUNS)
def char_gpt(request):
    profile = diagnose.load(RUNS / request.param, quiet=True)
    return profile, analyze(profile), clocks(request.param)


@pytest.mark.parametrize("name", LEAD_RUNS)
def test_a_evaluation_and_checkpoint_are_named_with_their_lines_and_lead(name):
    analysis = analyze(diagnose.load(RUNS / name, quiet=True))
    leading = [f.id for f in analysis.findings[:2]]
    evaluation = next(f for f in analysis.findings if f.id == "run_budget.evaluation")
    assert "run_budget.evaluation" in leading, leading
    assert f"char_gpt.py:{line_of('char_gpt.py', '# EVALUATION')}" in evaluation.title
    assert "every 200 steps" in evaluation.title
    assert analysis.verdict.top_finding_ids[0] == "run_budget.evaluation"
    assert "of the run's" in analysis.verdict.sentence


def test_a_each_share_is_within_ten_percent_of_the_clocked_time(char_gpt):
    profile, analysis, clock = char_gpt
    b = Derived(profile).run_budget()[0]
    for part in ("evaluation", "checkpoint"):
        clocked_ms = sum(span_s(p) for p in clock[part]) * 1e3
        assert b.part_ms(part) == pytest.approx(clocked_ms, rel=0.10), part
        assert (
            b.work[b.work["part"] == part]["location"]
            .str.endswith(f"char_gpt.py:{line_of('char_gpt.py', '# ' + part.upper())}")
            .all()
        )
    # the wall time is the process's: the script's own start to end lies inside it
    assert b.meta["start_ns"] <= clock["script_start_ns"] and clock["script_end_ns"] <= b.meta["end_ns"]


@pytest.mark.parametrize(
    ("name", "evaluation_share"),
    [(n, s) for n, s in (("char_gpt_h100", 0.132), ("char_gpt_h200", 0.119)) if captured(n)],
)
def test_a_on_a_gpu_the_host_bound_step_leads_and_the_evaluation_is_second_naming_the_checkpoint(
    name, evaluation_share
):
    """examples/char_gpt.py eager on the H100 (13.8 ms median step, 3.2 ms of GPU busy) and the H200 (10.5 ms,
    3.1 ms): launch-bound work holds 71.7 % / 51.8 % of the median step, more of the run than the evaluation's 3.34 s
    (13.2 %) / 2.34 s (11.9 %). The findings rank by the run's recoverable seconds, so the evaluation is second, with
    its line and period, ahead of the syncs' 16.6 % of the median step and the "GPU idle" that restates the
    launch-bound cause; the checkpoints, below their own finding's 5 %, are named in it with their line."""
    profile = diagnose.load(RUNS / name, quiet=True)
    analysis = analyze(profile)
    assert analysis.verdict.top_finding_ids[0] == "step_budget.launch_bound"
    assert [f.id for f in analysis.findings[:2]] == ["step_budget.launch_bound", "run_budget.evaluation"]
    evaluation = analysis.findings[1]
    assert f"char_gpt.py:{line_of('char_gpt.py', '# EVALUATION')}" in evaluation.title
    assert "about every 200 steps" in evaluation.title
    assert evaluation.cost_share == pytest.approx(evaluation_share, abs=0.001)
    assert f"checkpoint saving (torch.save at char_gpt.py:{line_of('char_gpt.py', '# CHECKPOINT')}) adds" in (
        evaluation.title
    )
    b = Derived(profile).run_budget()[0]
    assert evidence(evaluation, "run_checkpoint_ms") == pytest.approx(b.part_ms("checkpoint"))
    launch = analysis.findings[0]
    assert launch.cost_share * b.part_ms("steady") > evaluation.cost_share * evaluation_wall_ms(analysis)
    idle = [i for i, f in enumerate(analysis.findings) if f.id == "idle.gpu_idle"]
    assert idle and idle[0] > 2  # a symptom of the cause already first


def evaluation_wall_ms(analysis) -> float:
    return analysis.results["run_budget"].meta["ranks"][0]["wall_ms"]


def test_a_the_checkpoint_is_named_when_it_holds_five_percent(char_gpt):
    profile, analysis, _ = char_gpt
    b = Derived(profile).run_budget()[0]
    named = any(f.id == "run_budget.checkpoint" for f in analysis.findings)
    assert named == (b.part_ms("checkpoint") >= 0.05 * b.wall_ms)


@pytest.mark.parametrize("name", COMPILE_RUNS)
def test_b_compiling_before_the_first_step_matches_the_clock_around_the_first_compiled_calls(name):
    profile = diagnose.load(RUNS / name, quiet=True)
    analysis = analyze(profile)
    clock = clocks(name)
    compiled = next(f for f in analysis.findings if f.id == "run_budget.compilation")
    before_ms = evidence(compiled, "run_compilation_before_first_step_ms")
    clocked_ms = (span_s(clock["first_eval_call"]) + span_s(clock["first_train_call"])) * 1e3
    assert before_ms == pytest.approx(clocked_ms, rel=0.10)
    assert re.search(r"char_gpt\.py:\d+", compiled.title)
    assert analysis.findings[0].id == "run_budget.compilation"


def test_b_the_h100_capture_misses_the_backward_compile():
    """char_gpt_compile_h100 was captured before the autograd thread's compiles were counted (compile_work): its
    evaluation forward's compile matches the clock around the first evaluation call (8.36 s against 8.47 s), while the
    first training call's 11.0 s held the training forward's 6.17 s and the backward's, which this capture lacks
    (tests/launch/test_compile_work.py covers the fix; a new capture is needed)."""
    profile = diagnose.load(RUNS / "char_gpt_compile_h100", quiet=True)
    clock = clocks("char_gpt_compile_h100")
    work = profile.work_records[0]
    compiles = work[work["what"] == "compilation"].sort_values("t_ns")
    assert list(compiles["name"]) == ["torch.compile(forward)", "torch.compile(forward)"]
    eval_ms, train_ms = compiles["ms"]
    assert eval_ms == pytest.approx(span_s(clock["first_eval_call"]) * 1e3, rel=0.10)
    assert train_ms < 0.6 * span_s(clock["first_train_call"]) * 1e3


def test_c_on_the_h100_the_waits_are_counted():
    """examples/loader_workers.py on the H100's 16 cores: the 4 workers' batches did not come in bursts of 4 (the
    script's clock shows waits of ~50 ms every other step); the run budget's input part is the summed waits ± 10 %
    (5.69 s against 5.82 s) and the step budget names the input wait."""
    profile = diagnose.load(RUNS / "loader_workers_h100", quiet=True)
    analysis = analyze(profile)
    clock = clocks("loader_workers_h100")
    b = Derived(profile).run_budget()[0]
    assert b.part_ms("input") == pytest.approx(sum(clock["waits_ms"][1:]), rel=0.10)
    assert analysis.verdict.top_finding_ids[0] == "step_budget.input"


@pytest.mark.skipif(not LOADER_RUNS, reason="needs the H200 capture of examples/loader_workers.py (not lent yet)")
@pytest.mark.parametrize("name", LOADER_RUNS or ["loader_workers_h200"])
def test_c_stalls_every_num_workers_steps_are_named_and_cost_the_summed_waits(name):
    profile = diagnose.load(RUNS / name, quiet=True)
    analysis = analyze(profile)
    clock = clocks(name)
    stalls = next(f for f in analysis.findings if f.id == "step_budget.input_stalls")
    assert "every 4 steps" in stalls.title and "num_workers=4" in stalls.title
    assert evidence(stalls, "step_budget_input_stall_every") == 4
    # step k holds the wait for iteration k + 1's batch (its boundary is iteration k's optimizer.step)
    meta = analysis.results["step_budget"].meta["ranks"][0]
    steady = [s for s in profile.step_events[0]["step"] if s not in meta["warmup_step_numbers"]]
    steady = [s for s in steady if s not in meta["instrumented_step_numbers"] and s + 1 < len(clock["waits_ms"])]
    clocked = sum(clock["waits_ms"][s + 1] for s in steady)
    assert evidence(stalls, "step_budget_input_total_ms") == pytest.approx(clocked, rel=0.10)
    # and the run budget's input part is every step's wait
    b = Derived(profile).run_budget()[0]
    assert b.part_ms("input") == pytest.approx(sum(clock["waits_ms"][1:]), rel=0.10)


def loader_of(workers: int) -> pd.DataFrame:
    """A light-mode ``dataloader`` record as examples/loader_workers.py's (prefetch_factor 2, batch 32)."""
    return pd.DataFrame(
        [{"rank": 0, "step": -1, "num_workers": workers, "prefetch_factor": 2.0, "batch_size": 32.0, "t_ns": 0.0}]
    )


def stalls_of(waits_ms, workers: int, first_step: int = 0) -> dict:
    """input_stalls over one wait a step; the step's time is its wait plus 10 ms of work (the H100 run's ~10 ms)."""
    waits = np.asarray(waits_ms, dtype=float)
    rows = pd.DataFrame(
        {"step": np.arange(first_step, first_step + len(waits)), "input_ms": waits, "wall_ms": waits + 10.0}
    )
    return input_stalls(rows, loader_of(workers), 0, float(rows["wall_ms"].median()), Thresholds())


def h100_waits_ms() -> list[float]:
    """The script's own clock of each batch's wait on the H100 (fixtures/run_clocks/loader_workers_h100.json), less
    the first batch (196 ms: the workers starting)."""
    return clocks("loader_workers_h100")["waits_ms"][1:]


def test_c_on_the_h100_the_drifting_workers_repeat_every_4_steps():
    """The 4 workers drifted apart: the waits run 55, 1, 35, 13 | 48, 1, 41, 6 | 52, 1, 41, 7 ms, one slot per
    worker, the wait spread over three of the four slots. No residue holds 60 % of the stalls (48 of 104), but the
    step's slot explains 80 % of the waits' variance (median over 5 windows of 40 steps) at 4, and ~1 % at 3 or 5."""
    th = Thresholds()
    s = stalls_of(h100_waits_ms(), 4, first_step=1)
    assert len(s["stall_steps"]) == 104
    assert s["on_period"] == 48 < th.run_budget.stall_period_hit_share * 104  # the residue rule alone misses it
    assert (s["every"], s["every_by"]) == (4, "cycle")
    assert s["cycle_r2"] == pytest.approx(0.80, abs=0.01)
    assert s["batch_ms_per_worker"] == pytest.approx(141, abs=1)  # 4 x the mean step over the stalled span
    for workers in (3, 5):
        other = stalls_of(h100_waits_ms(), workers, first_step=1)
        assert other["every"] is None and other["every_by"] is None and other["on_period"] == 0
        assert other["cycle_r2"] < 0.05


def test_c_the_run_folder_of_the_h100_is_cyclic_every_4_steps():
    """The same run as gpudiag recorded it (fixtures/runs/loader_workers_h100: 232 steady steps, 5 windows): R² 0.86
    at 4; step_budget.input names the wait (the median step carries it), so the stall judge stays silent."""
    profile = diagnose.load(RUNS / "loader_workers_h100", quiet=True)
    analysis = analyze(profile)
    s = analysis.results["step_budget"].meta["ranks"][0]["input_stalls"]
    assert (s["every"], s["every_by"]) == (4, "cycle") and s["cycle_r2"] == pytest.approx(0.857, abs=0.005)
    assert "step_budget.input_stalls" not in [f.id for f in analysis.findings]


def test_c_the_cyclic_title_says_the_waits_repeat_not_that_each_stall_does():
    th = Thresholds()
    s = stalls_of(h100_waits_ms(), 4, first_step=1)
    (finding,) = stall_findings({0: {"input_stalls": s, "median_step_ms": 10.0}}, set(), th)
    assert (
        "the waits repeat every 4 steps, one slot per DataLoader worker (num_workers=4; the step's slot explains 80 %"
        in finding.title
    )
    assert "stalls come every" not in finding.title
    assert "the loop takes its batches from the workers in turn" in finding.recommendation
    assert evidence(finding, "step_budget_input_wait_cycle_r2") == pytest.approx(0.80, abs=0.01)
    assert evidence(finding, "step_budget_input_stall_every") == 4


def test_c_bursts_keep_the_residue_wording():
    """A synthetic series (not a capture): 4 workers that deliver together, one 60 ms wait every 4 steps."""
    waits = [60.0 if i % 4 == 3 else 0.2 for i in range(160)]
    s = stalls_of(waits, 4)
    assert (s["every"], s["every_by"], s["on_period"]) == (4, "residue", 40)
    (finding,) = stall_findings({0: {"input_stalls": s, "median_step_ms": 10.0}}, set(), Thresholds())
    assert "40 of the 40 stalls come every 4 steps, one per DataLoader worker (num_workers=4)" in finding.title
    assert "step_budget_input_wait_cycle_r2" not in [e.metric for e in finding.evidence]


@pytest.mark.parametrize("seed", range(20))
def test_c_fake_random_stalls_are_not_cyclic(seed):
    """A fake series (random, not a capture): 240 steps, each a 20-150 ms stall with chance 0.3, else under 1 ms,
    independent of its step. With 4 workers the slot explains by chance about 3/39 = 8 % of the variance: never the
    cyclic rule's 50 %, and no residue holds 60 % of the stalls."""
    rng = np.random.default_rng(seed)
    waits = np.where(rng.random(240) < 0.3, rng.uniform(20, 150, 240), rng.uniform(0, 1, 240))
    s = stalls_of(waits, 4)
    assert len(s["stall_steps"]) >= 3
    assert s["every"] is None and s["every_by"] is None
    assert s["cycle_r2"] < 0.25
    (finding,) = stall_findings({0: {"input_stalls": s, "median_step_ms": 10.0}}, set(), Thresholds())
    assert "every 4 steps" not in finding.title


def test_c_too_few_steps_for_three_windows_are_not_judged_cyclic():
    """A synthetic series: the H100 cycle, but only 100 steps (2 windows of 40): too few to judge."""
    s = stalls_of(h100_waits_ms()[40:140], 4, first_step=41)
    assert s["cycle_r2"] is None and s["every_by"] != "cycle"
