"""The formatting layer (diagnose/formatting.py) on exact values: what titles, tables and summaries print.

Issue 28 found ``1.18e+03 ms``, ``1.205e+04 ms``, "0.796 share", grid "16,384.00", bytes "150,754,820,096.00",
``<NA>`` cells and "1 host syncs" in reports of real runs.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from diagnose import findings
from diagnose.formatting import (
    agree,
    bytes_human,
    cell_text,
    count_human,
    label_of_key,
    ms_human,
    n_things,
    ns_human,
    number_human,
    offset_human,
    pct_human,
    plural_of,
    share_human,
    singular_of,
    unit_of_column,
    value_human,
)


@pytest.mark.parametrize(
    "ms,text",
    [
        (1180.4, "1.18 s"),  # was 1.18e+03 ms
        (12050.0, "12.1 s"),  # was 1.205e+04 ms
        (28220.8, "28.2 s"),
        (17.84, "17.8 ms"),
        (1.47, "1.47 ms"),
        (0.363, "363 µs"),
        (0.0123, "12.3 µs"),
        (0.00085, "850 ns"),
        (0.99996, "1 ms"),  # not "1000 µs"
        (3.7e6, "3,700 s"),
        (0.0, "0 s"),
        (-2.5, "-2.5 ms"),
    ],
)
def test_durations_pick_a_unit_and_three_significant_digits(ms, text):
    assert ms_human(ms) == text
    assert ns_human(ms * 1e6) == text


@pytest.mark.parametrize(
    "value,text",
    [
        (16384.0, "16,384"),
        (12345.6, "12,346"),
        (17.84, "17.8"),
        (2.0, "2"),
        (0.012345, "0.0123"),
        (1.05, "1.05"),
        (4.37e4, "43,700"),
        (1e-9, "< 0.000001"),
        (0, "0"),
    ],
)
def test_numbers_never_use_an_exponent(value, text):
    assert number_human(value) == text
    assert "e+" not in number_human(value) and "e-" not in number_human(value)


def test_counts_are_whole_with_separators_and_means_keep_three_digits():
    assert count_human(16384.0) == "16,384"
    assert count_human(np.int64(2175)) == "2,175"
    assert count_human(12.94) == "12.9"
    assert count_human(0.333333) == "0.333"


@pytest.mark.parametrize(
    "n,text",
    [
        (150_754_820_096, "140 GiB"),  # was 150,754,820,096.00
        (1020 * 2**20, "1,020 MiB"),  # was 1,020.00 MiB
        (7.7 * 2**30, "7.7 GiB"),
        (5.25 * 2**30, "5.25 GiB"),
        (512, "512 B"),
        (1536, "1.5 KiB"),
        (0, "0 B"),
    ],
)
def test_bytes_read_in_binary_units(n, text):
    assert bytes_human(n) == text


def test_shares_and_percentages_read_as_percent():
    assert share_human(0.796) == "79.6 %"  # was "0.796 share"
    assert share_human(1.0) == "100.0 %"
    assert pct_human(12.54) == "12.5 %"
    assert pct_human(87.87, 0) == "88 %"
    assert pct_human(0.04) == "< 0.1 %"
    assert share_human(0.0004) == "< 0.1 %"
    assert pct_human(-0.01) == "> -0.1 %"


@pytest.mark.parametrize(
    "n,thing,text",
    [
        (1, "host sync", "1 host sync"),  # was "1 host syncs"
        (3, "host sync", "3 host syncs"),
        (1.0, "kernel", "1 kernel"),
        (2175, "kernel", "2,175 kernels"),
        (12.9, "host sync", "12.9 host syncs"),
        (2, "process", "2 processes"),
        (1, "entry", "1 entry"),
        (2, "entry", "2 entries"),
        (1.0003, "sector", "1 sector"),  # as shown: "1", so singular
        (0, "step", "0 steps"),
        (3, "more kernel", "3 more kernels"),
    ],
)
def test_n_things_agrees_in_number(n, thing, text):
    assert n_things(n, thing) == text


def test_plural_and_singular_words():
    assert plural_of("launch") == "launches" and singular_of("launches") == "launch"
    assert plural_of("SM") == "SMs" and singular_of("SMs") == "SM"
    assert singular_of("entries") == "entry" and singular_of("waves") == "wave"
    assert agree(1, "takes", "take") == "takes" and agree(14, "takes", "take") == "take"


@pytest.mark.parametrize(
    "value,unit,text",
    [
        (16384.0, "blocks", "16,384 blocks"),  # was 1.64e+04 blocks
        (1.0, "launches", "1 launch"),
        (132.0, "SMs", "132 SMs"),
        (117_400_000.0, "sector", "117,400,000 sectors"),
        (2.67, "waves", "2.67 waves"),
        (0.796, "share", "79.6 %"),
        (4980.3, "1/s", "4,980 /s"),
        (43690.0, "/s", "43,690 /s"),
        (1132.4, "ms", "1.13 s"),  # the appendix' step_budget_compile_ms was 1.13e+03 ms
        (2207.0, "ns", "2.21 µs"),
        (33.0, "%", "33.0 %"),
        (1022.4, "ratio", "1,022×"),
        (1.5, "x", "1.5×"),
        (10.0, "step", "step 10"),  # a step's number (the first traced step) read "10 steps"
        (10.0, "steps", "10 steps"),  # the steps analyzer's outlier factor read "1.5 xes"
        (1980.0, "MHz", "1,980 MHz"),
        (float("nan"), "ms", "–"),
        (None, "%", "–"),
        (True, "", "yes"),
    ],
)
def test_value_human_writes_a_value_in_its_unit(value, unit, text):
    assert value_human(value, unit) == text


@pytest.mark.parametrize(
    "key,label,unit",
    [
        ("gpu_time_ns", "GPU time", "ns"),
        ("achieved_occupancy_pct", "Achieved occupancy", "%"),
        ("kernels_per_step", "Kernels per step", "count"),
        ("blocked_ms_per_step", "Blocked per step", "ms"),
        ("launch_rate_per_s", "Launch rate", "/s"),
        ("allocated_peak_bytes", "Allocated peak", "bytes"),
        ("share", "Share of GPU time", "share"),
        ("est_loss_share", "Est. loss", "share"),
        ("grid_size", "Grid (blocks)", "count"),
        ("host_over_gpu_ratio", "Host / GPU time", "ratio"),
        ("t_us", "Time", "timestamp µs"),
        ("t_start_s", "Time start", "timestamp s"),
        ("mem_util_p90_pct", "Memory utilisation p90", "%"),
        ("sm_clock_median_mhz", "SM clock median", "MHz"),
    ],
)
def test_column_names_read_as_labels_and_carry_their_unit(key, label, unit):
    assert label_of_key(key) == label
    assert "_" not in label_of_key(key)
    assert unit_of_column(key) == unit


def test_cells_follow_the_unit_of_their_column_and_missing_reads_as_a_dash():
    assert cell_text(16384.0, "grid_size") == "16,384"  # was 16,384.00
    assert cell_text(150754820096.0, "mem_total_bytes") == "140 GiB"
    assert cell_text(3614048.0, "gpu_time_ns") == "3.61 ms"
    assert cell_text(0.2057, "share") == "20.6 %"
    assert cell_text(pd.NA, "t_start_s") == "–"  # was <NA>
    assert cell_text(float("nan"), "x") == "–"
    assert cell_text(pd.NaT, "x") == "–"
    assert cell_text(None, "x") == "–"
    assert cell_text(np.bool_(True), "dram_bound") == "yes"
    assert cell_text("aten::item", "op") == "aten::item"
    assert cell_text(0.5038, "") == "0.504"


def test_timestamps_read_as_offsets():
    assert offset_human(1.23e9) == "+1.23 s"
    assert offset_human(-2.5e6) == "-2.5 ms"
    assert offset_human(math.nan) == "–"


def test_reports_take_the_layer_through_diagnose_findings():
    """The import rules: reports/ reads diagnose.findings' public names only; the layer is re-exported there."""
    import reports.format

    for name in ("ms_human", "bytes_human", "n_things", "value_human", "cell_text", "label_of_key"):
        assert getattr(findings, name) is getattr(reports.format, name)
