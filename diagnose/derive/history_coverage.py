"""Which part of the run the allocator history saw: its recorded span against the run's, in steps and seconds.

A default light-mode run records the allocator history from CUDA's first use until the snapshot step (the
end of the trace window, ``diagnose/launch/runtime/memory_capture.py``) and then trains on: a 1,568-step run
had 3.5 s of history in 60 s. Whatever is drawn or summed from the history must therefore stop at its last
recorded entry and say how much of the run that is; the rest of the run was not recorded, and is shown as
such, never as the last known state.

The recorded span is the first to the last history entry (the snapshot carries no dump time, so nothing
after the last entry is known to have been recorded). The run's span is the manifest's start..end when the
run folder has one, else the steps, memory_stats records and history together. A step is covered when its
interval overlaps the recorded span. Step intervals come from the step events (each step's start; it ends
where the next one starts, the last one after its host time), else from memory_stats records, each taken as
the end of its step (as ``examples/mem_churn.py`` writes them; gpudiag runs always have step events).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

STEP_COLUMNS = ["step", "start_us", "end_us"]
SPAN_COLUMNS = ["span", "first_step", "last_step", "steps", "t_start_s", "t_end_s", "duration_s"]


def step_intervals(step_events: pd.DataFrame | None, memory_stats: pd.DataFrame | None) -> pd.DataFrame:
    """One row per step: ``step``, ``start_us``, ``end_us`` (unix µs), oldest first; empty when no step is timed."""
    e = step_events
    if e is not None and len(e) and "t_start_ns" in e and e["t_start_ns"].notna().all():
        e = e.sort_values("t_start_ns", kind="stable")
        starts = e["t_start_ns"].to_numpy(dtype=float) / 1e3
        host_us = e["host_ms"].to_numpy(dtype=float) * 1e3 if "host_ms" in e else np.zeros(len(e))
        last_end = starts[-1] + (host_us[-1] if np.isfinite(host_us[-1]) else 0.0)
        return pd.DataFrame({"step": e["step"].to_numpy(), "start_us": starts, "end_us": np.r_[starts[1:], last_end]})
    s = memory_stats
    if s is not None and len(s) and s["t_ns"].notna().all():
        if "framework" in s:
            s = s[s["framework"] == "torch"]
        s = s.sort_values("t_ns", kind="stable")
        ends = s["t_ns"].to_numpy(dtype=float) / 1e3
        if not len(ends):
            return pd.DataFrame(columns=STEP_COLUMNS)
        first_len = float(np.median(np.diff(ends))) if len(ends) >= 2 else 0.0
        return pd.DataFrame(
            {"step": s["step"].to_numpy(), "start_us": np.r_[ends[0] - first_len, ends[:-1]], "end_us": ends}
        )
    return pd.DataFrame(columns=STEP_COLUMNS)


@dataclass(frozen=True)
class Coverage:
    """The history's recorded span against the run's (unix µs), and the steps each holds.

    ``steps``: every timed step of the run with ``covered`` (its interval overlaps the recorded span).
    ``run_span_known``: the run's start and end came from something besides the history itself.
    ``starts_empty``: the allocator held nothing before the first entry (no segment or block predates it),
    so the time before it needs no band: nothing was there to record.
    """

    recorded_start_us: float
    recorded_end_us: float
    run_start_us: float
    run_end_us: float
    run_span_source: str
    run_span_known: bool
    starts_empty: bool
    steps: pd.DataFrame

    @property
    def covered_steps(self) -> pd.DataFrame:
        return self.steps[self.steps["covered"]]

    @property
    def run_steps(self) -> int:
        return int(len(self.steps))

    @property
    def recorded_s(self) -> float:
        return (self.recorded_end_us - self.recorded_start_us) / 1e6

    @property
    def run_s(self) -> float:
        return (self.run_end_us - self.run_start_us) / 1e6

    @property
    def steps_pct(self) -> float:
        """Share of the run's timed steps the history overlaps, in % (NaN without step timings)."""
        return 100.0 * len(self.covered_steps) / self.run_steps if self.run_steps else float("nan")

    @property
    def time_pct(self) -> float:
        """Share of the run's seconds between the history's first and last entry, in %; NaN when allocator state
        predates the history and nothing else bounds the run (how much earlier it began is unknown)."""
        if not self.run_span_known:
            return 100.0 if self.starts_empty else float("nan")
        if self.run_end_us <= self.run_start_us:
            return 100.0
        return float(np.clip(100.0 * self.recorded_s / self.run_s, 0.0, 100.0))

    @property
    def coverage_pct(self) -> float:
        """The one figure for the summary: share of steps when steps are timed, else of seconds."""
        return self.steps_pct if self.run_steps else self.time_pct

    @property
    def not_recorded_before(self) -> bool:
        """Part of the run before the first entry held allocator state the history never saw."""
        return not self.starts_empty and self.run_span_known and self.run_start_us < self.recorded_start_us

    @property
    def not_recorded_after(self) -> bool:
        return self.run_end_us > self.recorded_end_us

    def steps_before(self) -> pd.DataFrame:
        return self.steps[self.steps["end_us"] <= self.recorded_start_us]

    def steps_after(self) -> pd.DataFrame:
        return self.steps[self.steps["start_us"] > self.recorded_end_us]

    def spans(self, origin_us: float) -> pd.DataFrame:
        """The run cut into what the history recorded and what it did not, in seconds since ``origin_us``."""
        rows = []
        if self.not_recorded_before:
            rows.append(("not recorded", self.steps_before(), self.run_start_us, self.recorded_start_us))
        rows.append(("recorded", self.covered_steps, self.recorded_start_us, self.recorded_end_us))
        if self.not_recorded_after:
            rows.append(("not recorded", self.steps_after(), self.recorded_end_us, self.run_end_us))
        return pd.DataFrame(
            [
                {
                    "span": span,
                    "first_step": int(steps["step"].iloc[0]) if len(steps) else None,
                    "last_step": int(steps["step"].iloc[-1]) if len(steps) else None,
                    "steps": int(len(steps)),
                    "t_start_s": (a - origin_us) / 1e6,
                    "t_end_s": (b - origin_us) / 1e6,
                    "duration_s": (b - a) / 1e6,
                }
                for span, steps, a, b in rows
            ],
            columns=SPAN_COLUMNS,
        ).astype({"first_step": "Int64", "last_step": "Int64"})

    def as_meta(self, origin_us: float) -> dict:
        """The figures the report states, as plain numbers (seconds since ``origin_us``)."""
        covered = self.covered_steps
        before, after = self.steps_before(), self.steps_after()
        return {
            "recorded_start_s": float(self.recorded_start_us - origin_us) / 1e6,
            "recorded_end_s": float(self.recorded_end_us - origin_us) / 1e6,
            "recorded_s": float(self.recorded_s),
            "run_start_s": float(self.run_start_us - origin_us) / 1e6,
            "run_end_s": float(self.run_end_us - origin_us) / 1e6,
            "run_s": float(self.run_s),
            "run_span_source": self.run_span_source,
            "run_span_known": self.run_span_known,
            "starts_empty": self.starts_empty,
            "run_steps": self.run_steps,
            "covered_steps": int(len(covered)),
            "first_covered_step": int(covered["step"].iloc[0]) if len(covered) else None,
            "last_covered_step": int(covered["step"].iloc[-1]) if len(covered) else None,
            "steps_pct": self.steps_pct,
            "time_pct": self.time_pct,
            "coverage_pct": self.coverage_pct,
            "not_recorded_before": self.not_recorded_before,
            "not_recorded_after": self.not_recorded_after,
            "steps_not_recorded_before": int(len(before)),
            "steps_not_recorded_after": int(len(after)),
            "first_step_after": int(after["step"].iloc[0]) if len(after) else None,
            "last_step_after": int(after["step"].iloc[-1]) if len(after) else None,
            "first_step_before": int(before["step"].iloc[0]) if len(before) else None,
            "last_step_before": int(before["step"].iloc[-1]) if len(before) else None,
        }


def history_coverage(
    t_us: np.ndarray, steps: pd.DataFrame, manifest: dict | None, starts_empty: bool, other_times_us=()
) -> Coverage:
    """The coverage of a history whose entries happened at ``t_us`` (unix µs, ascending, finite).

    ``steps``: :func:`step_intervals`; ``manifest``: the run folder's (its ``start_ns``/``end_ns`` bound the
    run); ``other_times_us``: more instants the run is known to have reached (memory_stats records)."""
    first, last = float(t_us[0]), float(t_us[-1])
    manifest = manifest or {}
    if manifest.get("start_ns") and manifest.get("end_ns"):
        run_start, run_end = float(manifest["start_ns"]) / 1e3, float(manifest["end_ns"]) / 1e3
        source, known = "manifest", True
    else:
        known_times = [np.asarray(v, dtype=float) for v in other_times_us if len(v)]
        if len(steps):
            known_times += [steps["start_us"].to_numpy(dtype=float), steps["end_us"].to_numpy(dtype=float)]
        known = bool(known_times)
        pooled = np.concatenate(known_times) if known else np.zeros(0)
        pooled = pooled[np.isfinite(pooled)]
        source = "steps" if len(steps) else "memory_stats" if known else "history"
        run_start = float(min(first, pooled.min())) if len(pooled) else first
        run_end = float(max(last, pooled.max())) if len(pooled) else last
    run_start, run_end = min(run_start, first), max(run_end, last)  # the run held its own history
    table = steps.copy() if len(steps) else pd.DataFrame(columns=STEP_COLUMNS)
    table["covered"] = (table["end_us"].astype(float) > first) & (table["start_us"].astype(float) <= last)
    return Coverage(first, last, run_start, run_end, source, known, bool(starts_empty), table.reset_index(drop=True))
