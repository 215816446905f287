"""The raw page streamed block by block (parsers.ncu_raw_stream) against the whole-file reader.

Real raw pages from fixtures/ must give the same table both ways. The hand-made pages below are
built from fixtures/ncu/tiny_kernels/raw.csv (its header, unit row and launches, repeated) with
one column changed late in the file, and read with blocks of a few rows, so that a column's type
seen in the first block turns out wrong further on: the cases the stream must resume from.
"""

from __future__ import annotations

import csv

import pandas as pd
import pytest

import parsers.ncu_csv as ncu_csv
import parsers.ncu_raw_stream as ncu_raw_stream
from parsers.ncu_csv import read_ncu_csv
from tests.paths import FIXTURES

RAW_PAGES = [
    ("ncu", "tiny_kernels", "raw.csv"),
    ("ncu", "tiny_kernels", "raw_base.csv"),
    ("ncu", "kernel_kinds", "raw.csv.gz"),  # gzip, 2,268 columns
    ("runs", "ncu_churn", "ncu", "raw.csv"),
]


def fixture(*parts: str) -> str:
    return str(FIXTURES.joinpath(*parts))


def whole_file(path) -> pd.DataFrame:
    """The same page through the whole-file reader (the stream declines it)."""
    saved = ncu_csv.stream_raw_columns
    ncu_csv.stream_raw_columns = lambda *a, **kw: None
    try:
        return read_ncu_csv(path)
    finally:
        ncu_csv.stream_raw_columns = saved


@pytest.mark.parametrize("parts", RAW_PAGES, ids="/".join)
def test_streamed_page_equals_whole_file_read(parts):
    path = fixture(*parts)
    streamed = read_ncu_csv(path)
    whole = whole_file(path)
    assert streamed.attrs["reader"] == "pyarrow, streamed"
    assert whole.attrs["reader"] == "pyarrow, whole file"
    pd.testing.assert_frame_equal(streamed, whole, check_exact=True)
    assert streamed.attrs["warnings"] == whole.attrs["warnings"] == []


@pytest.mark.parametrize("parts", RAW_PAGES, ids="/".join)
def test_page_streamed_in_small_blocks_equals_whole_file_read(parts, small_blocks):
    """The same pages, read a few launches per block (a 100,000-launch page's path) rather than whole from the first."""
    path = fixture(*parts)
    streamed = read_ncu_csv(path)
    assert streamed.attrs["reader"] == "pyarrow, streamed"
    pd.testing.assert_frame_equal(streamed, whole_file(path), check_exact=True)


def test_tiny_kernels_streamed_numbers():
    df = read_ncu_csv(fixture("ncu", "tiny_kernels", "raw.csv"))
    assert len(df) == 48
    assert df["dur_ns"].iloc[0] == pytest.approx(2112.0)  # "2.112000" us
    assert df["registers_per_thread"].iloc[0] == 32.0
    assert df["kernel_name"].iloc[0].startswith("void vectorized_elementwise_kernel<4")
    # text shares one str per distinct value (the point of interning for 100,000 launches)
    names = df["kernel_name"].to_numpy(dtype=object)
    firsts = {}
    assert all(firsts.setdefault(n, n) is n for n in names)


def made_page(tmp_path, launches: int, change) -> str:
    """tiny_kernels' raw page with its launches repeated ``launches`` times over; ``change(row_index, row, header)``
    edits a data row in place. Hand-made from the real fixture, for the type-change cases only."""
    with open(fixture("ncu", "tiny_kernels", "raw.csv"), newline="") as f:
        rows = list(csv.reader(f))
    header, units, data = rows[0], rows[1], rows[2:]
    out = tmp_path / "made_from_tiny_kernels_raw.csv"
    with open(out, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n")
        w.writerow(header)
        w.writerow(units)
        for i in range(launches):
            row = list(data[i % len(data)])
            row[0] = str(i)
            change(i, row, header)
            w.writerow(row)
    return str(out)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of ~50 launches (a row of kernel_kinds, 2,268 columns, is up to 135 KB) and a conversion every
    ~30: a 400-launch page spans over a dozen of each."""
    monkeypatch.setattr(ncu_raw_stream, "BLOCK_BYTES", 1 << 18)
    monkeypatch.setattr(ncu_raw_stream, "PROBE_BYTES", 1 << 18)
    monkeypatch.setattr(ncu_raw_stream, "FLUSH_VALUES", 20_000)


def test_thousands_separator_after_the_first_block(tmp_path, small_blocks):
    def late_separator(i, row, header):
        if i >= 350:
            row[header.index("launch__registers_per_thread")] = "1,234"

    path = made_page(tmp_path, 400, late_separator)
    streamed = read_ncu_csv(path)
    assert streamed.attrs["reader"] == "pyarrow, streamed"
    regs = streamed["registers_per_thread"]
    assert (regs.iloc[:350] == 32.0).all()  # the rows read before the separator was met are kept
    assert (regs.iloc[350:] == 1234.0).all()
    assert streamed["launch__registers_per_thread [register/thread]"].iloc[-1] == 1234.0
    pd.testing.assert_frame_equal(streamed, whole_file(path), check_exact=True)


def test_grouped_column_that_meets_text_is_text_throughout(tmp_path, small_blocks):
    column = "launch__grid_size"

    def grouped_then_text(i, row, header):
        row[header.index(column)] = "text after all" if i == 390 else "1,024"

    path = made_page(tmp_path, 400, grouped_then_text)
    streamed = read_ncu_csv(path)
    assert streamed.attrs["reader"] == "pyarrow, streamed"
    values = streamed[column]
    assert values.dtype == object
    assert values.iloc[0] == "1,024" and values.iloc[390] == "text after all"
    assert streamed["grid_size"].iloc[0] == 1.0  # "(1, 1, 1)": the text column is not a number source
    pd.testing.assert_frame_equal(streamed, whole_file(path), check_exact=True)


def test_cut_short_page_is_left_to_the_whole_file_reader():
    df = read_ncu_csv(fixture("bad", "ncu_truncated_last_row.csv"))
    assert df.attrs["reader"].startswith("line by line")
    assert any("cut short" in w for w in df.attrs["warnings"])
