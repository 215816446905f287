"""The run's step rows: each rank's whole steps with their time, and which are left out of the medians.

Shared because the steps analyzer, the step budget and the utilization analyzer (and ``gpudiag diff``) must
agree on what a step is, which steps are warm-up or inside gpudiag's trace window, and how long each took:
``step_ms`` is the host time when it was measured, else the GPU time (docs/step-timings.md).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.ingest.profile_data import Profile
from diagnose.thresholds import Thresholds
from parsers.run_records import WORK_GPUDIAG


def step_table(profile: Profile, th: Thresholds) -> pd.DataFrame:
    """Whole-step rows of every rank with ``step_ms`` and ``warmup``; other names (regions) are left out.

    ``step_ms`` is the host time when it was measured (what the user waits for), else the GPU time.
    """
    frames = [f for f in profile.step_events.values() if len(f)]
    if not frames:
        columns = ["rank", "step", "name", "t_start_ns", "host_ms", "gpu_ms", "step_ms", "warmup", "instrumented"]
        return pd.DataFrame(columns=columns)
    events = pd.concat(frames, ignore_index=True)
    steps = events[events["name"] == primary_name(events)].sort_values(["rank", "step"], kind="stable")
    steps = drop_slices_before_steps(steps).reset_index(drop=True)
    steps["step_ms"] = steps["host_ms"].where(steps["host_ms"].notna(), steps["gpu_ms"])
    position = steps.groupby("rank").cumcount()
    count = steps.groupby("rank")["step"].transform("size")
    steps["warmup"] = position < np.minimum(th.steps.warmup_steps, count // 2)
    # steps inside gpudiag's profiler trace window are slow by design: not the run's own timing. They are left out
    # with the warm-up (``warmup`` means "left out of the medians"); ``instrumented`` tells them apart for display
    steps["instrumented"] = steps["instrumented"].fillna(False).astype(bool) if "instrumented" in steps else False
    # a step that held gpudiag's own work (the trace's export right after the window, the snapshot's dump) is
    # gpudiag's too: 0.07-2.8 s of export made the step after the window the run's slowest (issue 30)
    steps["instrumented"] = steps["instrumented"] | holds_own_work(profile, steps)
    steps["warmup"] = steps["warmup"] | steps["instrumented"]
    return steps


def primary_name(events: pd.DataFrame) -> str:
    """'step' when the source has whole-step records, else the first name it gives."""
    names = events["name"].dropna()
    if (names == "step").any() or not len(names):
        return "step"
    return str(names.iloc[0])


def drop_slices_before_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """A rank's time slices (source ``time``) left out when another source ended its later steps: light mode
    slices by time when no step came for 30 s (docs/step-timings.md), and a torch.compile that compiles for longer
    than that before the first optimizer step made ten 1-s "steps" of compiling (CPU, 2026-12-05). They were not
    iterations: that time is before the first step (the run budget's setup and compilation)."""
    if "source" not in steps or not (steps["source"] == "time").any():
        return steps
    real = steps["source"].notna() & (steps["source"] != "time")
    has_real = real.groupby(steps["rank"]).transform("any")
    return steps[~(has_real & (steps["source"] == "time"))]


def holds_own_work(profile: Profile, steps: pd.DataFrame) -> pd.Series:
    """Which step rows held gpudiag's own work (light mode's ``gpudiag`` work records: trace start and export,
    snapshot dump), by rank and step."""
    own = [w[w["what"] == WORK_GPUDIAG][["rank", "step"]] for w in profile.work_records.values() if len(w)]
    own = [w for w in own if len(w)]
    if not own:
        return pd.Series(False, index=steps.index)
    keys = set(map(tuple, pd.concat(own).astype(int).to_numpy()))
    return pd.Series([(int(r), int(s)) in keys for r, s in zip(steps["rank"], steps["step"])], index=steps.index)
