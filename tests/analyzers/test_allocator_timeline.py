"""Profiled launches and allocator segments on one clock (diagnose.derive.allocator_timeline, the l2 section)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive.allocator_timeline import allocator_timeline, hit_after_new_segment
from parsers.ncu_launch_starts import LAUNCH_STARTS_SCHEMA
from parsers.snapshot import read_snapshot
from tests.ncu_read import ncu_kernels
from tests.paths import REPO

CHURN = REPO / "fixtures" / "memory" / "churn" / "snapshot.pickle.gz"
KINDS = REPO / "fixtures" / "ncu" / "kernel_kinds" / "raw.csv.gz"


def fake_starts_over(snapshot, kernels, first: int, last: int) -> pd.DataFrame:
    """fake: launch times spread evenly over the churn history's events first..last (both captures are real,
    their clocks are not the same run's), so that segment events fall between known launches."""
    t_us = snapshot.trace.sort_values("seq")["t_us"].to_numpy()
    times = np.linspace(t_us[first], t_us[last], len(kernels)) * 1000.0
    frame = pd.DataFrame(
        {
            "launch_id": kernels["launch_id"].astype("int64"),
            "kernel": kernels["kernel_short"],
            "t_start_ns": times.astype("int64"),
        }
    )
    return frame.astype({c: d for c, d in LAUNCH_STARTS_SCHEMA.columns.items() if c != "kernel"})


def test_reserved_bytes_run_back_from_the_dump_and_launches_after_new_segments_are_marked():
    snapshot, kernels = read_snapshot(CHURN), ncu_kernels(KINDS)
    trace = snapshot.trace.sort_values("seq")
    grows = trace[trace["action"] == "segment_alloc"]
    first, last = int(grows.index[0]), int(grows.index[-1])  # the span that holds every new segment
    timeline = allocator_timeline(kernels, fake_starts_over(snapshot, kernels, first, last), snapshot)
    launches, segments = timeline["launches"], timeline["segments"]
    assert len(launches) == len(kernels) == 23
    assert set(segments["action"]) == {"segment_alloc"}  # churn never returns a segment
    assert len(segments) == 37  # every segment_alloc of the history lies in the launches' span
    # no segment is freed, so the bytes reserved after the last event are the segments at the dump
    assert segments["reserved_bytes"].iloc[-1] == snapshot.segments["total_size_bytes"].sum()
    assert (np.diff(segments["reserved_bytes"]) == segments["size_bytes"].iloc[1:].to_numpy()).all()
    assert launches["t_s"].iloc[0] == 0.0 and launches["t_s"].is_monotonic_increasing
    # a launch follows a new segment when one was created after the launch before it
    t_alloc = segments["t_s"].to_numpy()
    expected = [
        bool(((t_alloc > (launches["t_s"].iloc[i - 1] if i else -np.inf)) & (t_alloc <= t)).any())
        for i, t in enumerate(launches["t_s"])
    ]
    assert launches["after_new_segment"].tolist() == expected and any(expected)
    figures = hit_after_new_segment(launches)
    assert figures["launches_after_new_segment"] + figures["launches_other"] == 23


def test_no_timeline_without_launch_times_or_history():
    snapshot, kernels = read_snapshot(CHURN), ncu_kernels(KINDS)
    assert allocator_timeline(kernels, LAUNCH_STARTS_SCHEMA.empty(), snapshot) == {}
    assert allocator_timeline(kernels, fake_starts_over(snapshot, kernels, 0, 10), None) == {}


NCU_CHURN = REPO / "fixtures" / "runs" / "ncu_churn"


def test_real_ncu_run_draws_launches_and_segments_on_one_clock():
    """fixtures/runs/ncu_churn: `gpudiag profile --ncu --ncu-step 3` of examples/mem_churn.py on the H200."""
    import diagnose

    profile = diagnose.load(NCU_CHURN)
    assert len(profile.launch_starts) == len(profile.kernels) == 52
    l2 = diagnose.analyze(profile).results["l2"]
    launches, segments = l2.tables["timeline_launches"], l2.tables["timeline_segments"]
    assert len(launches) == 52 and launches["t_s"].is_monotonic_increasing
    assert round(launches["t_s"].iloc[-1], 1) == 39.2  # ncu's 15 replay passes per launch, on the host's clock
    assert len(segments) == 33 and set(segments["action"]) == {"segment_alloc"}
    # step 3 (4,096-token batches) grows the pool just before its first kernel, the only launch after new segments
    assert (segments["t_s"] < 0).all() and launches["after_new_segment"].tolist() == [True] + [False] * 51
    assert round(l2.meta["l2_hit_after_new_segment_pct"], 1) == 100.0
    assert round(l2.meta["l2_hit_other_pct"], 1) == 79.1
    assert segments["reserved_bytes"].iloc[-1] == 6_142_558_208  # 5.72 GiB: the peak reserved mem_churn printed


def test_real_ncu_run_timeline_renders_in_chromium(tmp_path):
    import diagnose
    from tests.browser import visit

    out = tmp_path / "ncu_churn.html"
    diagnose.write_html(diagnose.analyze(diagnose.load(NCU_CHURN)), out)
    html = out.read_text()
    assert "fig-l2-timeline" in html and "Launches and allocator segments" in html
    v = visit(out, evaluate={"points": "document.querySelectorAll('#fig-l2-timeline .scatterlayer .point').length"})
    assert not v.console_errors and not v.page_errors
    assert not [r for r in v.requests if not r.startswith("file:")] and v.rendered_plots == v.figure_divs
    assert v.evaluated["points"] == 52 + 33  # every launch, and a marker per segment event


def test_launches_after_the_history_are_drawn_as_not_recorded():
    """fake launch times: the churn history's last third and as long again after its last entry. The reserved-bytes
    line stops at the last launch the history saw; the rest is a labelled not-recorded band (issue 19)."""
    from reports.sections.l2 import _timeline

    snapshot, kernels = read_snapshot(CHURN), ncu_kernels(KINDS)
    t_us = snapshot.trace.sort_values("seq")["t_us"].to_numpy()
    span = t_us[-1] - t_us[0]
    times = np.linspace(t_us[-1] - span / 3, t_us[-1] + span / 3, len(kernels)) * 1000.0
    starts = pd.DataFrame(
        {"launch_id": kernels["launch_id"].astype("int64"), "kernel": kernels["kernel_short"], "t_start_ns": times}
    ).astype({c: d for c, d in LAUNCH_STARTS_SCHEMA.columns.items() if c != "kernel"})
    timeline = allocator_timeline(kernels, starts, snapshot)
    launches, segments = timeline["launches"], timeline["segments"]
    assert 0 < int(launches["in_history"].sum()) < len(launches)
    page = _timeline(launches, segments, {})
    assert "allocator history not recorded" in page
    import json
    import re

    figure = json.loads(re.search(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*(\[.*?\]),\s*\{", page, re.S).group(1))
    (line,) = [t for t in figure if t.get("name") == "reserved bytes"]
    last_seen = max(launches.loc[launches["in_history"], "t_s"].max(), segments["t_s"].max())
    assert line["x"][-1] == last_seen < launches["t_s"].max()
