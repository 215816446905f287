"""Bad ncu inputs: InputError naming the file and the problem, never a bare exception or an empty table.

The files are hand-made (fixtures/bad/ncu_*, see fixtures/bad/ncu_README.md) or made here from
the real fixtures (cut, gzipped); none is a capture in its own right.
"""

from __future__ import annotations

import gzip
import os

import numpy as np
import pytest

from parsers.errors import InputError
from parsers.ncu_csv import read_ncu_csv
from parsers.ncu_kernels import KERNELS_SCHEMA
from tests.ncu_read import ncu_kernels, ncu_rules
from tests.paths import FIXTURES

BAD = FIXTURES / "bad"
SMALL_GRID = FIXTURES / "ncu" / "small_grid"


def refused(path, *words):
    with pytest.raises(InputError) as e:
        ncu_kernels(path)
    msg = str(e.value)
    assert os.path.basename(str(path)) in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


@pytest.mark.parametrize(
    "name, words",
    [
        ("ncu_empty.csv", ["is empty"]),
        ("ncu_header_only.csv", ["no kernel rows"]),
        ("ncu_no_kernels_stdout.csv", ["no kernel was profiled", "No kernels were profiled"]),
        ("ncu_garbage.ncu-rep", ["binary"]),
    ],
)
def test_bad_fixture_is_refused(name, words):
    refused(BAD / name, *words)


@pytest.mark.parametrize("name, words", [("ncu_nvidia_smi.csv", ["timestamp"]), ("ncu_other_tool.csv", ["Time(%)"])])
def test_another_tools_csv_is_refused_by_detection_and_by_the_csv_reader(name, words):
    refused(BAD / name, "is not a format gpudiag reads", "an ncu CSV export")
    with pytest.raises(InputError) as e:
        read_ncu_csv(BAD / name)
    for w in (name, "not an Nsight Compute export", *words):
        assert w in str(e.value)


def test_zero_range_report_is_an_error_not_an_empty_table():
    pytest.importorskip("ncu_report")
    refused(BAD / "ncu_zero_range.ncu-rep", "zero ranges")
    with pytest.raises(InputError):
        ncu_rules(BAD / "ncu_zero_range.ncu-rep")


def test_missing_l2_metric_is_not_an_error():
    df = ncu_kernels(BAD / "ncu_missing_l2_metric.csv")
    assert len(df) == 2
    assert df["l2_hit_pct"].isna().all()
    assert df["dur_ns"].tolist() == [1535328.0, 1534336.0]  # "1.535328", "1.534336" ms
    assert df["kernel_short"].eq("cunn_SoftMaxForward").all()
    assert list(df.columns[: len(KERNELS_SCHEMA.columns)]) == list(KERNELS_SCHEMA.columns)


def dropped_partial_row(df, *why):
    """The one cut-short warning, saying why the row was partial (any of ``why``)."""
    (warning,) = [w for w in df.attrs["warnings"] if "cut short" in w]
    assert "dropped its partial last row" in warning and any(w in warning for w in why), warning
    return warning


@pytest.mark.parametrize("name, launches", [("ncu_truncated_last_row.csv", 1), ("ncu_details_truncated.csv", 1)])
def test_bad_fixture_cut_short_reads_its_whole_rows(name, launches):
    df = ncu_kernels(BAD / name)
    assert len(df) == launches
    assert df["kernel_short"].eq("cunn_SoftMaxForward").all()
    assert name in dropped_partial_row(df, "never closed")


def test_a_cut_short_copy_of_a_real_page_keeps_the_launches_before_the_cut(tmp_path):
    data = (SMALL_GRID / "raw.csv").read_bytes()
    full = ncu_kernels(SMALL_GRID / "raw.csv")
    second_row = data.rindex(b'\n"1","')  # where launch 1 (the last of two) starts
    for keep in (len(data) - 1 - 3, (second_row + len(data)) // 2):  # inside the last field, mid-row
        p = tmp_path / f"cut_{keep}.csv"
        p.write_bytes(data[:keep])
        df = ncu_kernels(p)
        assert df["launch_id"].tolist() == [0.0]
        assert df["dur_ns"].tolist() == full["dur_ns"].iloc[:1].tolist()
        dropped_partial_row(df, "never closed", "fields a row needs")


def test_a_cut_inside_the_only_kernel_row_is_refused(tmp_path):
    data = (SMALL_GRID / "raw.csv").read_bytes()
    first_row = data.index(b'\n"0","')
    p = tmp_path / "cut_first.csv"
    p.write_bytes(data[: first_row + 4000])
    refused(p, "cut short", "no complete kernel rows")


def test_a_last_row_missing_fields_is_dropped_with_a_warning(tmp_path):
    lines = (SMALL_GRID / "raw.csv").read_text().splitlines()
    last = lines[-1].split('","')
    p = tmp_path / "short_row.csv"
    p.write_text("\n".join(lines[:-1] + ['","'.join(last[:20]) + '"']) + "\n")
    df = ncu_kernels(p)
    assert df["launch_id"].tolist() == [0.0]
    n_fields = len(lines[0].split('","'))
    dropped_partial_row(df, f"20 of the {n_fields} fields")


def test_gzip_that_is_not_gzip(tmp_path):
    p = tmp_path / "broken.csv.gz"
    p.write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(200))
    refused(p)


def test_gzipped_csv_reads_like_the_plain_one(tmp_path):
    p = tmp_path / "raw.csv.gz"
    p.write_bytes(gzip.compress((SMALL_GRID / "raw.csv").read_bytes()))
    a, b = ncu_kernels(p), ncu_kernels(SMALL_GRID / "raw.csv")
    assert a.columns.tolist() == b.columns.tolist()
    np.testing.assert_array_equal(a["dur_ns"], b["dur_ns"])


def test_a_folder_and_a_missing_file(tmp_path):
    with pytest.raises(InputError):
        ncu_kernels(tmp_path)
    with pytest.raises(InputError) as e:
        ncu_kernels(tmp_path / "nope.ncu-rep")
    assert "nope.ncu-rep" in str(e.value)


def test_report_without_ncu_report_says_how_to_get_it(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ncu_report(name, *args, **kwargs):
        if name == "ncu_report":
            raise ImportError("no ncu_report here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ncu_report)
    msg = refused(SMALL_GRID / "report.ncu-rep.gz", "pip install ncu-report", "Linux x86_64", "CSV exports work")
    assert "ncu --import" in msg
