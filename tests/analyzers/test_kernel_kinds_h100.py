"""Issue 32 (c) on a GPU: textbook kernels of our own (examples/ncu_kernel_kinds.py) under `ncu --set full` on the
lent H100 (fixtures/ncu/kernel_kinds_h100, PROVENANCE.md): each on-chip-bound kernel is named with its unit and its
cause's fix, and the tiled versions get a lower finding or none."""

from __future__ import annotations

import pytest

import diagnose
from diagnose.derive.derived import Derived
from tests.paths import FIXTURES

CAPTURE = FIXTURES / "ncu" / "kernel_kinds_h100" / "raw_base.csv.gz"


@pytest.fixture(scope="module")
def kinds():
    profile = diagnose.load(CAPTURE, quiet=True)
    return diagnose.analyze(profile), Derived(profile).onchip_bound().set_index("kernel")


def subjects(finding) -> dict:
    return {s.name: s for s in finding.subjects if s.kind == "kernel"}


def test_the_gemms_are_held_by_l1_and_the_tiled_one_less(kinds):
    analysis, table = kinds
    onchip = next(f for f in analysis.findings if f.id == "speed_of_light.onchip_bound")
    naive, tiled = table.loc["naive_gemm"], table.loc["tiled_gemm"]
    assert naive["limiter_unit"] == tiled["limiter_unit"] == "L1/TEX (LSU)"
    assert list(naive["causes"]) == ["reuse missed"] and list(tiled["causes"]) == ["shared-memory traffic"]
    by_name = subjects(onchip)
    assert by_name["naive_gemm"].severity > by_name["tiled_gemm"].severity
    assert onchip.recommendation.startswith("naive_gemm: per FLOP it moves 2 global bytes through L1")


def test_the_transposes_name_wasted_sectors_then_bank_conflicts_and_the_padded_one_nothing(kinds):
    analysis, table = kinds
    naive, conflicts, padded = (
        table.loc[k] for k in ("transpose_naive", "transpose_tiled_conflicts", "transpose_tiled")
    )
    assert naive["limiter_unit"].startswith("L2") and list(naive["causes"]) == ["wasted sectors"]
    assert conflicts["limiter_unit"] == "L1/TEX (LSU)" and list(conflicts["causes"]) == ["bank conflicts"]
    assert conflicts["shared_conflict_share"] == pytest.approx(0.925, abs=0.01)
    assert bool(naive["flagged"]) and bool(conflicts["flagged"]) and not bool(padded["flagged"])
    assert padded["limiter_unit"] == "DRAM"  # padded, it runs at its DRAM roofline's unit
    uncoalesced = next(f for f in analysis.findings if f.id == "memory_access.uncoalesced")
    assert uncoalesced.title.startswith("transpose_naive's global stores are uncoalesced: 78 % of its L2 sectors")


def test_the_streaming_add_is_at_its_dram_roofline(kinds):
    _, table = kinds
    add = table.loc["stream_add"]
    assert add["limiter_unit"] == "DRAM" and not bool(add["flagged"])
