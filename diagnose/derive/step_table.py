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
    steps = steps.reset_index(drop=True)
    steps["step_ms"] = steps["host_ms"].where(steps["host_ms"].notna(), steps["gpu_ms"])
    position = steps.groupby("rank").cumcount()
    count = steps.groupby("rank")["step"].transform("size")
    steps["warmup"] = position < np.minimum(th.steps.warmup_steps, count // 2)
    # steps inside gpudiag's profiler trace window are slow by design: not the run's own timing. They are left out
    # with the warm-up (``warmup`` means "left out of the medians"); ``instrumented`` tells them apart for display
    steps["instrumented"] = steps["instrumented"].fillna(False).astype(bool) if "instrumented" in steps else False
    steps["warmup"] = steps["warmup"] | steps["instrumented"]
    return steps


def primary_name(events: pd.DataFrame) -> str:
    """'step' when the source has whole-step records, else the first name it gives."""
    names = events["name"].dropna()
    if (names == "step").any() or not len(names):
        return "step"
    return str(names.iloc[0])
