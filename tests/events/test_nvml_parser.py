"""parsers.nvml: the real capture-1 samples, and every bad input refused with its line."""

from __future__ import annotations

import math

import pytest

from parsers.errors import InputError
from parsers.nvml import NVML_COLUMNS, NVML_SCHEMA, read_nvml
from parsers.schema import missing_columns
from tests.events.conftest import BAD, NVML_CAPTURE

HEADER = ",".join(NVML_COLUMNS)


def test_schema_is_the_contract_header():
    assert list(NVML_SCHEMA.columns) == HEADER.split(",")
    assert NVML_SCHEMA.columns["gpu"] == "int64"
    assert all(d == "float64" for c, d in NVML_SCHEMA.columns.items() if c != "gpu")


def test_real_capture_numbers():
    samples = read_nvml(NVML_CAPTURE)
    assert missing_columns(samples, NVML_SCHEMA) == []
    assert len(samples) == 239
    assert samples["gpu"].unique().tolist() == [0]
    assert samples["t_ns"].is_monotonic_increasing
    assert samples["gpu_util_pct"].max() == 74.0
    assert samples["mem_util_pct"].max() == 8.0
    assert samples["mem_used_bytes"].max() == 113889902592.0
    assert samples["mem_total_bytes"].iloc[0] == 150754820096.0
    assert samples["sm_clock_mhz"].min() == 345.0
    assert samples["power_w"].iloc[0] == pytest.approx(128.451)
    assert (samples["t_ns"].iloc[-1] - samples["t_ns"].iloc[0]) / 1e9 == pytest.approx(22.197, abs=0.001)


def test_empty_cell_is_nan(tmp_file):
    path = tmp_file("fake_nvml.csv", HEADER + "\n1000,0,50,,1,2,,3,,4,5,\n")
    row = read_nvml(path).iloc[0]
    assert row["gpu_util_pct"] == 50.0
    assert math.isnan(row["mem_util_pct"]) and math.isnan(row["power_w"]) and math.isnan(row["temperature_c"])


def test_partial_last_line_is_dropped_with_a_warning():
    with pytest.warns(UserWarning, match="line 4 is cut short"):
        samples = read_nvml(BAD / "nvml_partial_last_line.csv")
    assert samples["gpu_util_pct"].tolist() == [50.0, 60.0]


def test_header_only_is_an_empty_typed_table():
    samples = read_nvml(BAD / "nvml_header_only.csv")
    assert len(samples) == 0 and list(samples.columns) == list(NVML_COLUMNS)


@pytest.mark.parametrize(
    "name, message",
    [
        ("nvml_empty.csv", "is empty"),
        ("nvml_wrong_header.csv", r"line 1: expected the NVML header .*missing mem_used_bytes"),
        ("nvml_not_a_number.csv", r"line 3: gpu_util_pct should be a number, found 'high'"),
    ],
)
def test_bad_inputs(name, message):
    with pytest.raises(InputError, match=message) as err:
        read_nvml(BAD / name)
    assert name in str(err.value)


@pytest.mark.parametrize(
    "line, message",
    [
        ("1,0,50", "expected 12 comma-separated values, found 3"),
        (",0,1,2,3,4,5,6,7,8,9,10", "t_ns is empty"),
        ("1,-1,1,2,3,4,5,6,7,8,9,10", "gpu should be a device index"),
        ("1,0,inf,2,3,4,5,6,7,8,9,10", "finite"),
    ],
)
def test_malformed_line_in_the_middle_names_its_line(tmp_file, line, message):
    path = tmp_file("fake_nvml_bad.csv", f"{HEADER}\n1,0,1,2,3,4,5,6,7,8,9,10\n{line}\n2,0,1,2,3,4,5,6,7,8,9,10\n")
    with pytest.raises(InputError, match=f"line 3: .*{message}"):
        read_nvml(path)
