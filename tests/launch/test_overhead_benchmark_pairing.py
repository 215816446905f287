"""benchmarks/light_overhead_paired.py: the block order, the pairing and the verdict rule it rests on.

Hand-made block medians (no timing here: the benchmark itself runs on the GPU machine), plus one
short CPU run of the whole benchmark.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.paths import REPO

spec = importlib.util.spec_from_file_location("light_overhead_paired", REPO / "benchmarks" / "light_overhead_paired.py")
paired = importlib.util.module_from_spec(spec)
spec.loader.exec_module(paired)


def test_every_measured_block_sits_between_plain_blocks_and_groups_alternate():
    order = paired.block_order(2)
    assert order[0] == "plain" and order[-1] == "plain"
    for i, kind in enumerate(order):
        if kind not in ("plain", "light", "after"):
            assert order[i - 1] in ("plain", "after") and order[i + 1] == "plain", (i, kind)
        if kind == "light":
            assert order[i + 1] == "after" and order[i - 1] == "plain"
    first, second = paired.group_order(0), paired.group_order(1)
    assert first[:3] == ["light", "after", "plain"] and second[-3:] == ["light", "after", "plain"]
    assert sorted(first) == sorted(second)
    assert {k: order.count(k) for k in paired.KINDS} == {k: 2 for k in paired.KINDS}


def test_each_block_is_judged_against_its_nearest_plain_blocks():
    medians = [("plain", 2.0), ("light", 2.2), ("after", 2.1), ("plain", 2.2), ("control", 2.3), ("plain", 2.4)]
    assert paired.pair_ratios(medians, "light") == pytest.approx([2.2 / 2.1])
    assert paired.pair_ratios(medians, "after") == pytest.approx([2.1 / 2.1])
    assert paired.pair_ratios(medians, "control") == pytest.approx([2.3 / 2.3])


def test_a_steady_drift_with_no_cost_reads_as_no_cost():
    """Step time rising 1 % per block, nothing costing anything: every kind's median ratio is 1."""
    order = paired.block_order(4)
    medians = [(kind, 2.0 * (1.01**i)) for i, kind in enumerate(order)]
    rows = paired.summarize(medians)
    for kind in ("light-late", "gap", "light-history", "light-steps", "light-every", "control", "profiler"):
        assert rows[kind]["pct"] == pytest.approx(0.0, abs=0.01), kind
    # light and after share one plain neighbour pair with a block between: half a block of drift each way
    assert rows["light"]["pct"] == pytest.approx(-0.5, abs=0.05)
    assert rows["after"]["pct"] == pytest.approx(0.5, abs=0.05)


def _medians(light_costs: list[float], groups: int = 8) -> list[tuple[str, float]]:
    """Plain blocks at 2 ms; the light blocks cost light_costs in turn (their noise), the rest nothing."""
    medians, light_seen = [], 0
    for kind in paired.block_order(groups):
        factor = 1.0
        if kind == "light":
            factor += light_costs[light_seen % len(light_costs)]
            light_seen += 1
        medians.append((kind, 2.0 * factor))
    return medians


def test_verdict_passes_when_the_interval_is_below_the_target_and_fails_when_it_is_above():
    outcome, text = paired.verdict(paired.summarize(_medians([0.005, 0.01, 0.015])))
    assert outcome == "PASS" and "+1.00%" in text
    outcome, text = paired.verdict(paired.summarize(_medians([0.04, 0.05, 0.06])))
    assert outcome == "FAIL" and "+5.00%" in text


def test_verdict_abstains_when_the_interval_straddles_the_target():
    outcome, text = paired.verdict(paired.summarize(_medians([-0.05, 0.03, 0.10])))
    assert outcome == "NO VERDICT" and "straddles" in text


def test_own_time_is_reported_as_a_share_of_the_plain_median():
    rows = paired.summarize(_medians([0.01]), {"light": [20.0, 22.0, 24.0]})
    assert rows["light"]["own_us"] == 22.0 and rows["light"]["own_pct"] == pytest.approx(1.1)
    assert "22.0 µs/step = 1.10%" in paired.verdict(rows)[1]


def test_bootstrap_interval_brackets_the_median_and_is_repeatable():
    values = [1.0, 1.01, 0.99, 1.02, 1.0, 0.98, 1.03, 1.0]
    low, high = paired.median_interval(values)
    assert low <= 1.0 <= high and high - low < 0.05
    assert paired.median_interval(values) == (low, high)


def test_a_short_cpu_run_writes_every_kind(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "paired.json"
    paired.main(
        [
            "--device",
            "cpu",
            "--width",
            "64",
            "--depth",
            "2",
            "--batch",
            "8",
            "--groups",
            "2",
            "--block-steps",
            "40",
            "--skip",
            "5",
            "--warmup-steps",
            "10",
            "--json",
            str(out),
        ]
    )
    data = json.loads(out.read_text())
    assert set(data["rows"]) == {"plain", "after", *paired.KINDS}
    assert all(data["rows"][k]["blocks"] == 2 for k in paired.KINDS)
    assert data["rows"]["light-every"]["gpu_timed_pct"] == 0.0  # no CUDA here: no step has a GPU time
    assert 0 < paired.WINDOW_CLOSE_S[0] < 60  # the light blocks' window close (export) was timed for "gap"
    assert data["verdict"] in ("PASS", "FAIL", "NO VERDICT")


def test_kinds_can_be_chosen_and_light_api_brought_back():
    order = paired.block_order(1, ("light", "light-api"))
    assert order == ["plain", "light", "after", "plain", "light-api", "plain"]
    with pytest.raises(SystemExit):
        paired.main(["--kinds", "light,nonsense"])
