"""The kernel analyzers on NVIDIA's own Nsight Compute samples (RTX A4500, ncu 2024.1): reports from another GPU
and another ncu than ours. Their licence (NVIDIA's EULA) does not allow committing them: the tests run where they
are present (scratch/public_ncu, or GPUDIAG_NVIDIA_NCU_SAMPLES; how to fetch them: fixtures/ncu/PROVENANCE.md)
and skip otherwise. Each report is read in a fresh process (tests/analyzers/ncu_isolated.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.analyzers.ncu_isolated import in_fresh_process
from tests.paths import REPO

SAMPLES = Path(
    os.environ.get("GPUDIAG_NVIDIA_NCU_SAMPLES", REPO / "scratch" / "public_ncu" / "nsight-compute-2024.1.1.4_12.4.1-2")
)


def verdicts(path: str) -> dict:
    import diagnose

    a = diagnose.analyze(diagnose.load(path))
    sol = a.results["speed_of_light"].tables["kernels"].iloc[0]
    return {
        "limiter": (sol["limiter_unit"], round(float(sol["limiter_pct"]), 1)),
        "findings": {f.id: f.severity.label for f in a.findings if not f.id.endswith("not_measured")},
        "subjects": {f.id: {s.name: s.severity.label for s in f.subjects} for f in a.findings},
    }


def sample(name: str) -> str:
    pytest.importorskip("ncu_report")
    path = SAMPLES / name
    if not path.exists():  # one reason for all, so the skip summary counts them together
        pytest.skip(
            "needs NVIDIA's Nsight Compute samples (their EULA forbids committing them): set GPUDIAG_NVIDIA_NCU_SAMPLES"
            " (fixtures/ncu/PROVENANCE.md)"
        )
    return os.fspath(path)


def test_streaming_add_at_dram_peak_is_compulsory_and_its_occupancy_gap_is_info():
    v = in_fresh_process(verdicts, sample("uncoalescedGlobalAccesses/addConstDouble.ncu-rep"))
    assert v["limiter"] == ("DRAM", 90.6)
    assert v["findings"]["l2.compulsory_misses"] == "info" and "l2.low_hit_rate" not in v["findings"]
    assert v["subjects"]["occupancy.gap"] == {"addConstDouble": "info"}  # 26 points, but at 90.6 % of DRAM peak


def test_fp64_sobel_is_limited_by_the_fp64_pipe():
    v = in_fresh_process(verdicts, sample("instructionMix/sobelDouble.ncu-rep"))
    assert v["limiter"] == ("FP64 pipe", 85.2)


def test_tiled_transpose_with_bank_conflicts_is_limited_by_the_l1_load_path():
    v = in_fresh_process(verdicts, sample("sharedBankConflicts/transposeCoalesced.ncu-rep"))
    assert v["limiter"] == ("L1/TEX (LSU)", 90.2)


def test_shared_bank_conflicts_hold_the_transpose_on_its_l1_path_and_the_fixed_one_is_at_its_roofline():
    v = in_fresh_process(onchip, sample("sharedBankConflicts/transposeCoalesced.ncu-rep"))
    assert v["severity"] == "critical" and v["causes"] == ["bank conflicts"]
    assert v["unit"] == ("L1/TEX (LSU)", 90.2) and v["conflict_share"] == 0.92
    # its DRAM bytes at the A4500's peak: 880 µs of 1.42 ms; NVIDIA's padded version took 998 µs
    assert v["roofline_us"] == 880 and "pad the shared array" in v["recommendation"]
    fixed = in_fresh_process(onchip, sample("sharedBankConflicts/transposeNoBankConflicts.ncu-rep"))
    assert fixed is None  # DRAM-limited at 88.7 %: no on-chip finding


def onchip(path: str) -> dict | None:
    import diagnose

    a = diagnose.analyze(diagnose.load(path))
    f = next((f for f in a.findings if f.id == "speed_of_light.onchip_bound"), None)
    if f is None:
        return None
    s = f.subjects[0].figures
    return {
        "severity": f.severity.label,
        "causes": s["causes"].split(", "),
        "unit": (s["limiter_unit"], round(s["limiter_pct"], 1)),
        "conflict_share": round(s["shared_conflict_share"], 2),
        "roofline_us": round(s["roofline_ns"] / 1000),
        "recommendation": f.recommendation,
    }
