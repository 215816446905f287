"""Input wait inside GPU idle gaps, on the H200 run of examples/input_generator.py (fixtures/runs/PROVENANCE.md).

The loop calls ``loss.item()`` every third step, then waits ~67 ms for its generator's next batch: the GPU's gap
after that sync is the input's, not the sync's. Before this split the sync analyzer read "aten::item … idles the
GPU 25.1 ms per step", the idle analyzer "mostly waiting for the host to launch work" and the launch analyzer
"the step is launch-bound" for a script whose only bottleneck is its input.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import diagnose
from diagnose.derive.trace_input_wait import _find_source, input_inside_gaps
from tests.paths import FIXTURES

RUN = FIXTURES / "runs" / "input_generator_h200"
REPO = FIXTURES.parent


@pytest.fixture(scope="module")
def analysis():
    # the trace names the script by the GPU machine's paths (/tmp/t/examples/...); it is found in this checkout
    with pytest.MonkeyPatch.context() as m:
        m.chdir(REPO)
        return diagnose.analyze(diagnose.load(RUN))


def only(analysis, finding_id: str):
    (finding,) = [f for f in analysis.findings if f.id == finding_id]
    return finding


def test_the_top_finding_is_the_generators_input_wait(analysis):
    top = analysis.findings[0]
    assert top.id == "step_budget.input"
    assert "the loop waits for its iterator batches at input_generator.py:31" in top.title, top.title
    assert top.cost_share == pytest.approx(0.966, abs=0.005)


def test_the_sync_gets_only_its_own_gap(analysis):
    sync = only(analysis, "sync.host_sync")
    assert analysis.results["sync"].summary["sync_gpu_idle_ms_per_step"] == pytest.approx(0.125, abs=0.01)
    assert "aten::item" in sync.title and sync.severity.name == "INFO"


def test_idle_names_input_and_launch_is_not_blamed(analysis):
    idle = only(analysis, "idle.gpu_idle")
    assert "mostly waiting for input" in idle.title, idle.title
    assert dict((e.metric, e.value) for e in idle.evidence)["idle_input_pct"] == pytest.approx(95.1, abs=0.2)
    launch = only(analysis, "launch.launch_bound")
    assert "launch overhead is visible" in launch.title and launch.severity.name == "INFO", launch.title
    assert dict((e.metric, e.value) for e in launch.evidence)["idle_host_pct"] < 5


def test_input_inside_gaps_clips_each_gap_to_the_fetches():
    gaps_start, gaps_end = np.array([0, 100, 300]), np.array([50, 200, 400])
    fetches = pd.DataFrame({"ts_ns": [40, 150, 160], "end_ns": [120, 170, 350]})  # two overlap: merged
    index, start, end = input_inside_gaps(gaps_start, gaps_end, fetches)
    assert index.tolist() == [0, 1, 1, 2]
    assert list(zip(start.tolist(), end.tolist())) == [(40, 50), (100, 120), (150, 200), (300, 350)]
    assert [len(a) for a in input_inside_gaps(gaps_start, gaps_end, fetches.iloc[:0])] == [0, 0, 0]


def test_a_source_named_by_another_machines_path_is_found_by_its_tail(tmp_path):
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "train.py").write_text("def batches():\n    yield 1\n")
    found = _find_source("/nowhere/t/examples/train.py", (str(tmp_path),))
    assert found == str((tmp_path / "examples" / "train.py").resolve())
    assert _find_source("/nowhere/t/examples/missing.py", (str(tmp_path),)) is None
