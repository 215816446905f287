"""reports.sections.steps / utilization: draw what the analyzers computed; empty results draw a note."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from diagnose.analysis import run_analyzer
from diagnose.analyzers import steps, utilization
from diagnose.findings import Result
from diagnose.thresholds import Thresholds
from parsers.nvml import read_nvml
from reports.sections import steps as steps_section
from reports.sections import utilization as utilization_section
from tests.events.conftest import NVML_CAPTURE, fake_profile, fake_steps


def plotly_data(fragment: str) -> list[dict]:
    """The trace list passed to Plotly.newPlot in a figure fragment."""
    match = re.search(r'Plotly\.newPlot\(\s*"[^"]+",\s*(\[.*?\]),\s*\{', fragment, re.S)
    assert match, "no Plotly.newPlot call in the fragment"
    return json.loads(match.group(1))


@pytest.mark.parametrize("section, analyzer", [(steps_section, "steps"), (utilization_section, "utilization")])
def test_empty_result_renders_a_note(section, analyzer):
    html = section.render(Result(analyzer=analyzer))
    assert "muted" in html and "Plotly" not in html


def test_nvml_timeline_has_five_series_on_four_rows_and_step_marks():
    samples = read_nvml(NVML_CAPTURE)
    events = fake_steps([500.0] * 10, [400.0] * 10, t0_ns=float(samples["t_ns"].iloc[0]) + 5e9)
    result = run_analyzer(utilization, fake_profile(nvml=samples, step_events={0: events}), Thresholds())
    html = utilization_section.render(result)
    traces = plotly_data(html)
    assert [t["name"] for t in traces] == [
        "GPU 0 GPU util",
        "GPU 0 memory util",
        "GPU 0 memory used",
        "GPU 0 SM clock",
        "GPU 0 power",
    ]
    assert {t["xaxis"] for t in traces} == {"x", "x2", "x3", "x4"}
    assert html.count('"type":"line"') == 10  # one dotted line per step start
    assert 'id="utilization-per-gpu"' in html and "<script src=" not in html


def test_step_chart_draws_host_gpu_and_warmup():
    events = fake_steps([90, 80, 70] + [30] * 10, [85, 75, 65] + [10] * 10)
    result = run_analyzer(steps, fake_profile(step_events={0: events}), Thresholds())
    html = steps_section.render(result)
    names = [t["name"] for t in plotly_data(html)]
    assert names == ["host ms", "GPU ms", "warm-up"]
    assert "median 30.00 ms" in html and "3 steps here" in html
    assert 'id="steps-per_rank"' in html


def test_user_text_is_escaped_in_region_table():
    events = fake_steps([30] * 6, [10] * 6)
    events = pd.concat([events, fake_steps([5] * 6, [5] * 6, name="</td><script>x</script>")], ignore_index=True)
    html = steps_section.render(run_analyzer(steps, fake_profile(step_events={0: events}), Thresholds()))
    assert "<script>x</script>" not in html and "&lt;script&gt;" in html


def test_load_routes_both_formats(tmp_path):
    from diagnose.ingest.loading import load

    profile = load(NVML_CAPTURE)
    assert len(profile.nvml) == 239
    user = tmp_path / "fake_rank2_steps.json"
    user.write_text(json.dumps([{"name": "step", "step": i, "elapsed_ms": 10.0} for i in range(5)]))
    assert len(load(user).step_events[2]) == 5


def test_steps_after_the_last_nvml_sample_are_drawn_as_not_recorded(tmp_path):
    """sync_planted's real run folder with nvml.csv cut to its first 40 % of rows (an NVML sampler that stopped, as
    after a full disk): the chart marks the steps after the last sample as not recorded (issue 19)."""
    import shutil

    import diagnose
    from reports.sections import utilization
    from tests.paths import FIXTURES

    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "runs" / "sync_planted", run)
    lines = (run / "nvml.csv").read_text().splitlines()
    (run / "nvml.csv").write_text("\n".join(lines[: 1 + int(0.4 * (len(lines) - 1))]) + "\n")
    result = diagnose.analyze(diagnose.load(run)).results["utilization"]
    timeline, marks = result.tables["timeline"], result.tables["step_marks"]
    (span,) = result.meta["not_recorded"]
    assert span[0] == timeline["t_s"].max() and span[1] == marks["t_s"].max() and span[2] == "after the last sample"
    assert "NVML not recorded (after the last sample)" in utilization.render(result)
    full = diagnose.analyze(diagnose.load(FIXTURES / "runs" / "sync_planted")).results["utilization"]
    assert full.meta["not_recorded"] == []


def plotly_values(values) -> list:
    """A trace's x or y as a list: plotly writes numeric arrays as {"bdata": base64, "dtype": ...}."""
    if isinstance(values, dict) and "bdata" in values:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return list(values)


def test_step_chart_tells_the_trace_window_from_the_warm_up():
    """fixtures/runs/sync_planted (H200): steps 0-2 are warm-up, steps 4-7 ran inside gpudiag's profiler trace
    window. The legend had called both "warm-up" (issue 28)."""
    import diagnose
    from tests.paths import FIXTURES

    result = run_analyzer(steps, diagnose.load(FIXTURES / "runs" / "sync_planted"), Thresholds())
    html = steps_section.render(result)
    marks = {t["name"]: plotly_values(t["x"]) for t in plotly_data(html) if t.get("mode") == "markers"}
    assert marks["warm-up"] == [0, 1, 2]
    assert marks["profiler trace window"] == [4, 5, 6, 7]
    assert result.meta["warmup_excluded"] == 7 and result.meta["trace_window_excluded"] == 4
    assert "profiler trace window run slower by design" in html
