"""How long each rank's training loop waited for a CPU: the main thread's run-queue time between its first step and
its end, from the run start and end records (Linux's schedstat, diagnose/launch/runtime/cpu_wait.py).

The steps analyzer judges it (``steps.cpu_wait``); the step budget's unexplained part names it, since no step clock
shows a CPU wait: the steps are only slower, and what slows them is in no measured part."""

from __future__ import annotations

from diagnose.ingest.profile_data import Profile, run_marks_of


def cpu_wait_by_rank(profile: Profile) -> dict[int, tuple[float, float]]:
    """Per rank: (ms its main thread waited for a CPU, ms of wall time) from its first step to its end, by the run
    start and end records' schedstat readings (light mode on Linux); ranks without both are left out."""
    out = {}
    for rank in sorted(getattr(profile, "run_marks", None) or {}):
        marks = run_marks_of(profile, rank)
        start, end = marks.get("start_ns"), marks.get("end_ns")
        before, after = marks.get("main_run_queue_ms_at_start"), marks.get("main_run_queue_ms_at_end")
        if None in (start, end, before, after) or end <= start or after < before:
            continue
        out[rank] = (after - before, (end - start) / 1e6)
    return out
