"""The ncu CSV reader (through parsers.registry, as gpudiag reads a file) on every CSV form ncu writes, on
the real H200 convnet capture in fixtures/shared/ncu.

The same 40 launches exported three ways (raw page in human units, raw page in base units,
details page) must give the same standard columns; the stdout capture (20 launches,
ncu's lines interleaved) must read too. Numbers below were read off the CSV files by hand.
The capture's .ncu-rep (15.6 MB) is not committed: the report form is checked against the CSV
pages of the same capture on the project's own reports (tests/parsers/test_ncu_fixtures.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from parsers.ncu_kernels import KERNELS_SCHEMA, RULES_SCHEMA
from tests.ncu_read import ncu_kernels, ncu_rules
from tests.paths import shared

NCU = ("ncu",)
STANDARD = list(KERNELS_SCHEMA.columns)
NUMERIC = [c for c, d in KERNELS_SCHEMA.columns.items() if d == "float64"]


def ncu_file(name):
    return shared(*NCU, name)


@pytest.fixture(scope="module")
def raw():
    return ncu_kernels(ncu_file("convnet_raw.csv"))


@pytest.fixture(scope="module")
def raw_base():
    return ncu_kernels(ncu_file("convnet_raw_base.csv"))


@pytest.fixture(scope="module")
def details():
    return ncu_kernels(ncu_file("convnet_details.csv"))


def assert_schema(df):
    assert list(df.columns[: len(STANDARD)]) == STANDARD
    for col, dtype in KERNELS_SCHEMA.columns.items():
        assert str(df[col].dtype) == dtype, col


@pytest.mark.parametrize("form", ["raw", "raw_base", "details"])
def test_every_form_has_40_launches_and_the_schema(form, request):
    df = request.getfixturevalue(form)
    assert len(df) == 40
    assert_schema(df)
    assert df["launch_id"].tolist() == list(range(40))
    assert df["sm_count"].eq(132).all()
    assert df["cc"].eq("9.0").all()


def test_raw_human_units_come_out_in_base_units(raw):
    first = raw.iloc[0]
    assert first["kernel_short"] == "nll_loss_forward_reduce_cuda_kernel_2d"
    assert first["kernel_name"].startswith("void at::<unnamed>::nll_loss_forward_reduce_cuda_kernel_2d<float")
    assert first["dur_ns"] == 3296.0  # "3.296000" us
    assert first["l2_hit_pct"] == pytest.approx(44.228994)
    assert (first["grid_x"], first["grid_y"], first["grid_z"]) == (1, 1, 1)
    assert (first["block_x"], first["block_y"], first["block_z"]) == (32, 1, 1)
    assert first["grid_size"] == 1 and first["block_size"] == 32
    assert first["shared_mem_per_block_bytes"] == 1280.0  # "1.280000" Kbyte/block
    assert first["theoretical_occupancy_pct"] == 50.0
    assert first["occupancy_limit_shared_mem"] == 51.0
    assert first["process_id"] == 483 and first["process_name"] == "python3.12"
    assert first["context"] == 1 and first["stream"] == 7 and first["device"] == 0
    # other metrics keep their own column, in base units, named "<metric> [<unit>]"
    assert first["dram__bytes.sum.per_second [byte/s]"] == pytest.approx(0.002641e12)  # "0.002641" Tbyte/s
    assert first["launch__persisting_l2_cache_size [byte]"] == pytest.approx(11_796_480)  # "11.796480" Mbyte
    assert first["gpc__cycles_elapsed.avg.per_second [Hz]"] == pytest.approx(1.947057e9)  # "1.947057" Ghz
    assert first["device__attribute_display_name"] == "NVIDIA H200"
    assert np.isnan(first["derived__local_spilling_requests_pct [%]"])  # "no data"
    assert first["device__attribute_l2_cache_size"] == 62_914_560  # "62,914,560"
    sixth = raw.iloc[5]
    assert sixth["kernel_short"] == "Kernel2" and sixth["grid_z"] == 3 and sixth["dur_ns"] == 4064.0
    assert sixth["registers_per_thread"] == 76 and sixth["shared_mem_per_block_bytes"] == 21504.0


def test_total_gpu_time_of_the_capture(raw):
    assert raw["dur_ns"].sum() == pytest.approx(raw["gpu__time_duration.sum [ns]"].sum())
    assert raw["dur_ns"].sum() == pytest.approx(725_952.0)  # sum of the 40 "us" values × 1000


def test_raw_human_and_raw_base_give_the_same_columns_and_numbers(raw, raw_base):
    assert list(raw.columns) == list(raw_base.columns)
    pd.testing.assert_series_equal(raw["kernel_name"], raw_base["kernel_name"])
    for col in NUMERIC:
        # the base page prints 2 decimals where the human page prints 6
        np.testing.assert_allclose(raw_base[col], raw[col], atol=0.0051, rtol=0, err_msg=col)
    assert raw_base.loc[0, "dram__bytes.sum.per_second [byte/s]"] == pytest.approx(2_640_776_699.03)


def test_details_labels_map_to_the_standard_columns(details, raw):
    assert details["kernel_short"].tolist() == raw["kernel_short"].tolist()
    np.testing.assert_allclose(details["dur_ns"], raw["dur_ns"], atol=5.0, rtol=0)  # "3.30" us
    np.testing.assert_allclose(details["l2_hit_pct"], raw["l2_hit_pct"], atol=0.005, rtol=0)
    np.testing.assert_allclose(details["achieved_occupancy_pct"], raw["achieved_occupancy_pct"], atol=0.005)
    for col in [
        "grid_size",
        "block_size",
        "registers_per_thread",
        "occupancy_limit_blocks",
        "sm_count",
        "theoretical_occupancy_pct",
    ]:
        np.testing.assert_array_equal(details[col].to_numpy(), raw[col].to_numpy(), err_msg=col)
    # driver + dynamic + static shared memory, each printed to 2 decimals of a Kbyte
    np.testing.assert_allclose(details["shared_mem_per_block_bytes"], raw["shared_mem_per_block_bytes"], atol=10)
    assert details.loc[0, "Memory Workload Analysis: L2 Hit Rate [%]"] == 44.23
    assert details.loc[0, "GPU Speed Of Light Throughput: DRAM Frequency [Hz]"] == pytest.approx(3.15e9)
    assert details.loc[0, "Memory Workload Analysis: Memory Throughput [byte/s]"] == pytest.approx(2.64e9)


def test_stdout_capture_with_ncu_lines_interleaved():
    df = ncu_kernels(ncu_file("convnet_metrics_stdout.csv"))
    assert len(df) == 20
    assert_schema(df)
    assert df["process_id"].eq(1050).all()
    assert df.loc[0, "dur_ns"] == 3040.0 and df.loc[1, "dur_ns"] == 1760.0  # "1,760" ns
    assert df.loc[4, "grid_size"] == 2 and df.loc[4, "block_size"] == 128
    assert df.loc[1, "achieved_occupancy_pct"] == 5.93
    assert any("skipped 4 non-CSV lines" in w for w in df.attrs["warnings"])


def test_hit_rates_above_100_pct_are_not_rates():
    """ncu reports 209.94 % for a 1.8 µs fill kernel: the raw column keeps it, l2_hit_pct is NaN;
    100.66 % is within the 1-point noise band and is clipped to 100."""
    df = ncu_kernels(ncu_file("convnet_metrics_stdout.csv"))
    raw_l2 = df["lts__t_sector_hit_rate.pct [%]"]
    assert raw_l2[1] == 209.94 and np.isnan(df.loc[1, "l2_hit_pct"])
    assert raw_l2[9] == 100.66 and df.loc[9, "l2_hit_pct"] == 100.0
    assert (raw_l2 > 101).sum() == 9
    assert df["l2_hit_pct"].notna().sum() == 11
    valid = raw_l2 <= 100
    np.testing.assert_array_equal(df.loc[valid, "l2_hit_pct"], raw_l2[valid])


def test_rules_from_the_details_page():
    a = ncu_rules(ncu_file("convnet_details.csv"))
    assert list(a.columns) == list(RULES_SCHEMA.columns)
    assert len(a) == 120 and a["type"].eq("OPT").all()
    assert a["speedup_type"].value_counts().to_dict() == {"local": 49, "global": 31}
    first = a[(a["launch_id"] == 0) & (a["rule"] == "TheoreticalOccupancy")].iloc[0]
    assert first["section"] == "Occupancy" and first["speedup_type"] == "local"
    assert first["kernel_short"] == "nll_loss_forward_reduce_cuda_kernel_2d"
    assert first["estimated_speedup_pct"] == 50.0
    assert "limited by the number of blocks" in first["description"]


def test_raw_page_has_no_rules():
    rules = ncu_rules(ncu_file("convnet_raw.csv"))
    assert len(rules) == 0 and list(rules.columns) == list(RULES_SCHEMA.columns)
