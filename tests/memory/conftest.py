"""Paths and loaders shared by the memory tests: real H200 captures in fixtures/memory (PROVENANCE.md)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pandas as pd

from diagnose.analysis import run_analyzer
from diagnose.ingest.loading import add_artifact
from diagnose.ingest.profile_data import Profile

ROOT = Path(__file__).resolve().parents[2]
MEMORY = ROOT / "fixtures" / "memory"
BAD = ROOT / "fixtures" / "bad"
SCENARIOS = ("churn", "expandable", "oom", "ring")


def snapshot_path(scenario: str) -> Path:
    return MEMORY / scenario / "snapshot.pickle.gz"


def stats_path(scenario: str) -> Path:
    return MEMORY / scenario / "stats.jsonl.gz"


def fake_profile() -> Profile:
    """A Profile without an ncu table (parsers.ncu belongs to another package)."""
    return Profile(kernels=pd.DataFrame())


@cache
def scenario_profile(scenario: str, with_stats: bool = True) -> Profile:
    profile = fake_profile()
    add_artifact(profile, snapshot_path(scenario), rank=0)
    if with_stats:
        add_artifact(profile, stats_path(scenario), rank=0)
    return profile


@cache
def scenario_result(scenario: str, with_stats: bool = True):
    from diagnose.analyzers import fragmentation

    return run_analyzer(fragmentation, scenario_profile(scenario, with_stats))
