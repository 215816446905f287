"""benchmarks/light_overhead_paired.py: the block order and the pairing its verdict rests on.

Hand-made block medians (no timing here: the benchmark itself runs on the GPU machine).
"""
from __future__ import annotations

import importlib.util

import pytest

from tests.paths import REPO

spec = importlib.util.spec_from_file_location("light_overhead_paired", REPO / "benchmarks" / "light_overhead_paired.py")
paired = importlib.util.module_from_spec(spec)
spec.loader.exec_module(paired)


def test_blocks_alternate_abba_so_a_drift_cancels():
    order = paired.block_order(2, with_window=False)
    assert order == ["plain", "light", "light", "plain", "light", "plain", "plain", "light"]
    assert order.count("plain") == order.count("light")
    assert paired.block_order(2, with_window=True)[-4:] == ["plain", "light-window", "after", "plain"]


def test_each_light_block_is_judged_against_its_nearest_plain_blocks():
    medians = [("plain", 2.0), ("light", 2.2), ("light", 2.1), ("plain", 2.2),
               ("light", 2.3), ("plain", 2.4)]
    ratios = paired.pair_ratios(medians, "light")
    assert ratios == pytest.approx([2.2 / 2.1, 2.1 / 2.1, 2.3 / 2.3])


def test_a_steady_drift_with_no_cost_reads_as_no_cost():
    """Step time rising 1 % per block, light costing nothing: ABBA pairing gives a median ratio of 1."""
    order = paired.block_order(4, with_window=False)
    medians = [(kind, 2.0 * (1.01 ** i)) for i, kind in enumerate(order)]
    ratios = paired.pair_ratios(medians, "light")
    mid = sorted(ratios)[len(ratios) // 2 - 1: len(ratios) // 2 + 1]
    assert sum(mid) / 2 == pytest.approx(1.0, abs=0.002)
