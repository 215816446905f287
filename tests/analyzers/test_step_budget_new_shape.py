"""Steps that met a new input shape after warm-up (issue 18): kept out of the steady figures, named when slow.

fixtures/runs/cudnn_new_shape is a real CPU capture of examples/cudnn_new_shape.py (fixtures/runs/PROVENANCE.md):
1,000 images in batches of 64 with drop_last=False, so the last batch of the first epoch (step 14) holds 40 images,
a shape the run had not seen (one new-shape record, cudnn_benchmark true). On a CPU there is no cuDNN to re-tune:
that step is faster than the median (fewer images), so the finding is checked with the slow factor set under 1,
and its default wording on a copy of the fixture whose step 14 was made slow (a derived fake, named so)."""

from __future__ import annotations

import json
import shutil

import pytest

import diagnose
from diagnose.analysis import run_analyzer
from diagnose.analyzers import step_budget
from diagnose.findings import Severity
from diagnose.thresholds import Thresholds
from parsers.events import read_event_tables
from tests.paths import FIXTURES

RUN = FIXTURES / "runs" / "cudnn_new_shape"
SHAPE = "(40, 3, 32, 32), (40,)"
MEDIAN_MS = 109.196134  # the 43 steady steps' median, step 14 left out
STEP_14_MS = 61.416032


@pytest.fixture(scope="module")
def result():
    return run_analyzer(step_budget, diagnose.load(RUN), Thresholds())


def test_the_new_shape_step_is_kept_out_of_the_steady_figures(result):
    meta = result.meta["ranks"][0]
    assert meta["new_shape_step_numbers"] == [14]
    assert meta["new_shape_steps_wall_ms"] == pytest.approx(STEP_14_MS, abs=1e-6)
    assert meta["steady_steps"] == 43  # 47 step records less 3 warm-up and the one that met a new shape
    assert meta["median_step_ms"] == pytest.approx(MEDIAN_MS, abs=1e-6)
    assert meta["new_shapes"] == [
        {
            "step": 14,
            "shape": SHAPE,
            "cudnn_benchmark": True,
            "wall_ms": pytest.approx(STEP_14_MS, abs=1e-6),
            "over_median_ms": pytest.approx(STEP_14_MS - MEDIAN_MS, abs=1e-6),
            "slow": False,
        }
    ]
    assert result.summary["step_budget_new_shape_steps"] == 1
    assert any(
        "1 step after warm-up met a new input shape (61.4 ms in all, 0 of them slow)" in n for n in meta["notes"]
    )


def test_a_new_shape_step_that_is_not_slow_is_no_finding(result):
    assert not [f for f in result.findings if f.id == "step_budget.new_shape"]


def test_the_finding_names_the_step_and_the_shape_under_a_lower_slow_factor():
    th = Thresholds().with_overrides({"step_budget": {"new_shape_slow_factor": 0.5}})
    (f,) = [f for f in run_analyzer(step_budget, diagnose.load(RUN), th).findings if f.id == "step_budget.new_shape"]
    assert f.title == (
        f"1 step met a new input shape after warm-up (step 14: batch {SHAPE}): 61.4 ms against the median 109 ms; "
        "cudnn.benchmark=True re-tunes convolutions for each new shape"
    )
    assert f.cost_share == 0.0 and f.severity == Severity.INFO
    (step,) = f.subjects
    assert (step.kind, step.name, step.figures["shape"]) == ("step", "14", SHAPE)
    assert "drop_last=True" in f.recommendation and "cudnn.benchmark = False" in f.recommendation


def slowed_copy(tmp_path, extra_ms: float, cudnn_benchmark: bool = True):
    """Derived fake: the fixture with step 14 made ``extra_ms`` slower (as on a GPU re-tuning cuDNN)."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    path = run / "events" / "rank0.jsonl"
    out = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "step" and r.get("step") == 14:
            r["host_ms"] += extra_ms
        if r.get("what") == "new-shape":
            r["cudnn_benchmark"] = cudnn_benchmark
        out.append(json.dumps(r))
    path.write_text("\n".join(out) + "\n")
    return run


def test_a_slow_new_shape_step_is_the_finding_with_cudnn_named(tmp_path):
    result = run_analyzer(step_budget, diagnose.load(slowed_copy(tmp_path, 150.0)), Thresholds())
    (f,) = [f for f in result.findings if f.id == "step_budget.new_shape"]
    excess = STEP_14_MS + 150.0 - MEDIAN_MS  # 102.2 ms
    assert f.title == (
        f"1 step met a new input shape after warm-up (step 14: batch {SHAPE}): 102 ms slower than the median "
        "109 ms; cudnn.benchmark=True re-tunes convolutions for each new shape"
    )
    steady_ms = result.meta["ranks"][0]["steady_total_ms"]
    assert f.cost_share == pytest.approx(excess / (steady_ms + STEP_14_MS + 150.0), abs=1e-9)
    assert f.severity == Severity.INFO  # 2.1 % of the run after warm-up
    assert result.meta["ranks"][0]["median_step_ms"] == pytest.approx(MEDIAN_MS, abs=1e-6)  # unchanged by it
    assert not [f for f in result.findings if f.id == "step_budget.periodic"]


def test_without_cudnn_benchmark_the_finding_does_not_blame_cudnn(tmp_path):
    result = run_analyzer(step_budget, diagnose.load(slowed_copy(tmp_path, 150.0, cudnn_benchmark=False)), Thresholds())
    (f,) = [f for f in result.findings if f.id == "step_budget.new_shape"]
    assert f.title.endswith("; a new shape costs allocator growth and new kernels (cudnn.benchmark is off)")
    assert "cudnn" not in f.recommendation and "drop_last=True" in f.recommendation


def test_a_malformed_new_shape_record_is_dropped_with_a_warning(tmp_path):
    """Fake: the fixture's events with a new-shape record whose cudnn_benchmark is not a boolean, and one whose
    name is not text: both dropped like any unreadable work record; the real one stays."""
    lines = (RUN / "events" / "rank0.jsonl").read_text().splitlines()
    bad_flag = {"kind": "work", "what": "new-shape", "step": 20, "ms": 0, "name": SHAPE, "cudnn_benchmark": "yes"}
    bad_name = {"kind": "work", "what": "new-shape", "step": 21, "ms": 0, "name": [40, 3], "cudnn_benchmark": True}
    lines.insert(3, json.dumps(bad_flag))
    lines.insert(4, json.dumps(bad_name))
    path = tmp_path / "rank0.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match="work record not read"):
        tables = read_event_tables(path)
    assert tables.work[["step", "what", "name", "cudnn_benchmark"]].values.tolist() == [[14, "new-shape", SHAPE, True]]
    warned = tables.steps.attrs["warnings"]
    assert "line 4: work record not read (cudnn_benchmark should be true or false, found 'yes')" in warned[0]
    assert "line 5: work record not read (name should be the compiled function's name or a shape" in warned[1]
    assert len(tables.steps) == 47
