"""Paths and loaders shared by the memory tests: real H200 captures in fixtures/memory (PROVENANCE.md)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pandas as pd

from diagnose.analysis import run_analyzer
from diagnose.ingest.profile_data import Profile
from parsers import registry

ROOT = Path(__file__).resolve().parents[2]
MEMORY = ROOT / "fixtures" / "memory"
BAD = ROOT / "fixtures" / "bad"
SCENARIOS = ("churn", "expandable", "oom", "ring")


def snapshot_path(scenario: str) -> Path:
    return MEMORY / scenario / "snapshot.pickle.gz"


def stats_path(scenario: str) -> Path:
    return MEMORY / scenario / "stats.jsonl.gz"


def fake_profile() -> Profile:
    """A Profile with an empty kernels table (no ncu input)."""
    return Profile(kernels=pd.DataFrame())


def profile_of(*paths: Path) -> Profile:
    """A Profile of these artifacts as rank 0's, each read and put in its table as diagnose.load does (the
    reader parsers.registry detects, then Profile.add)."""
    profile = fake_profile()
    for path in paths:
        reader = registry.detect(path)
        profile.add(reader.table, reader.read(path), 0)
    return profile


@cache
def scenario_profile(scenario: str, with_stats: bool = True) -> Profile:
    return profile_of(snapshot_path(scenario), *([stats_path(scenario)] if with_stats else []))


@cache
def scenario_result(scenario: str, with_stats: bool = True):
    from diagnose.analyzers import fragmentation

    return run_analyzer(fragmentation, scenario_profile(scenario, with_stats))
