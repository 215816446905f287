"""Every summary key an analyzer writes on a real fixture is declared (diagnose.metrics): `gpudiag diff` judges
direction, unit and resolution from the declaration, so an undeclared key would be compared as neutral."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from diagnose.analysis import analyze, declared_metrics
from diagnose.analyzers import discover
from diagnose.ingest.loading import load
from diagnose.metrics import HIGHER, LOWER, NEUTRAL, UNITS, describe
from parsers.errors import InputError
from tests.paths import FIXTURES

KINDS = ("ncu", "trace", "runs", "memory", "comm")
NOT_INPUTS = (".md", ".log", ".txt", ".cu")


def fixture_inputs() -> list[Path]:
    """Each real input under fixtures/<kind>/: run folders whole, other folders file by file (fake_* left out)."""
    out = []
    for kind in KINDS:
        for p in sorted((FIXTURES / kind).iterdir()):
            if p.name.startswith("fake_") or p.name.endswith(NOT_INPUTS):
                continue
            if p.is_dir() and (p / "manifest.json").exists():
                out.append(p)
            elif p.is_dir():
                out.extend(
                    f
                    for f in sorted(p.iterdir())
                    if f.is_file() and not f.name.endswith(NOT_INPUTS) and f.name != "LICENSE"
                )
            else:
                out.append(p)
    return out


@cache
def summaries() -> dict[str, dict]:
    """Summary and declarations of every fixture input gpudiag reads (a few are side files: ncu source pages)."""
    out = {}
    for p in fixture_inputs():
        try:
            a = analyze(load(p))
        except InputError:
            continue
        out[str(p.relative_to(FIXTURES))] = {"summary": a.summary, "metrics": a.metrics}
    return out


def test_fixtures_cover_every_kind():
    seen = summaries()
    assert len(seen) >= 40
    for kind in KINDS:
        assert any(name.startswith(f"{kind}/") for name in seen), kind


def test_every_summary_key_of_every_fixture_is_declared():
    undeclared = {
        f"{name}: {key}" for name, s in summaries().items() for key in s["summary"] if key not in s["metrics"]
    }
    assert not undeclared, sorted(undeclared)


def test_declarations_are_filled_in_per_key():
    """Templated and per-rank keys resolve to their declaration with the varying part named in the label."""
    s = summaries()
    idle = s["trace/sync_planted/trace.json.gz"]["metrics"]["gpu_idle_stream7_host_wait_pct"]
    assert (idle.label, idle.unit, idle.direction, idle.analyzer) == (
        "Stream 7: host wait share of idle time",  # the key's field as words (issue 28: no snake_case in labels)
        "%",
        NEUTRAL,
        "idle",
    )
    comm = s["comm/gloo_straggler"]["metrics"]
    assert comm["rank1.comm_wait_ms_per_step"].label == "Wait for other ranks per step (rank 1)"
    assert comm["rank1.comm_wait_ms_per_step"].direction == LOWER
    l2 = s["ncu/l2_random_gather/raw.csv"]["metrics"]
    assert (l2["l2_low_hit_gpu_time_share"].direction, l2["l2_low_hit_gpu_time_share"].resolution) == (LOWER, 0.001)
    assert (l2["l2_hit_time_weighted_pct"].direction, l2["l2_hit_time_weighted_pct"].resolution) == (HIGHER, 0.01)


def test_declarations_are_well_formed_and_unique():
    declared = declared_metrics()
    keys = [m.key for m in declared]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    for m in declared:
        assert m.label and m.unit in UNITS and m.resolution > 0, m
        assert m.analyzer in {mod.NAME for mod in discover()}, m
    # every analyzer writes a summary, so every discovered analyzer declares its keys
    assert {m.analyzer for m in declared} == {mod.NAME for mod in discover()}


@pytest.mark.parametrize(
    "key",
    ["gpu_idle_pct", "rank2.gpu_idle_pct", "rank2.launch_queue_median_ns", "rank1.sync_count_per_step"],
)
def test_per_rank_copies_resolve(key):
    m = describe(key, declared_metrics())
    assert m is not None and m.key == key and ("rank" in m.label) == key.startswith("rank")
