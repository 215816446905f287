"""The ncu readers (through parsers.registry, as gpudiag reads a file) on the project's own H200 captures of
planted problems (fixtures/ncu/, see its PROVENANCE.md).

Each scenario was exported as raw (human units), raw (base units), details and .ncu-rep: the four
must agree on what the analyzers read. Numbers were read off the CSV files.
"""

from __future__ import annotations

import numpy as np
import pytest

from parsers.ncu_kernels import KERNELS_SCHEMA
from tests.ncu_read import ncu_kernels, ncu_rules
from tests.paths import FIXTURES

NCU = FIXTURES / "ncu"
# scenario: (launches, kernel_short, first dur_ns, first l2_hit_pct (human raw page), grid_size, block_size)
EXPECTED = {
    "l2_random_gather": (3, "_scatter_gather_elementwise_kernel", 496224.0, 17.118222, 16384, 128),
    "matmul_tiled": (3, "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", 1421888.0, 71.819923, 132, 384),
    "small_grid": (2, "cunn_SoftMaxForward", 1535328.0, 25.104012, 16, 1024),
    "tiny_kernels": (48, "vectorized_elementwise_kernel", 2112.0, 43.153611, 1, 128),
}
DETAILS = {"tiny_kernels": "details.csv.gz"}


def forms(scenario):
    out = {
        "raw": NCU / scenario / "raw.csv",
        "raw_base": NCU / scenario / "raw_base.csv",
        "details": NCU / scenario / DETAILS.get(scenario, "details.csv"),
    }
    try:
        import ncu_report  # noqa: F401

        out["report"] = NCU / scenario / "report.ncu-rep.gz"
    except ImportError:
        pass
    return out


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_scenario_reads_the_same_in_every_form(scenario):
    launches, short, dur, l2, grid, block = EXPECTED[scenario]
    frames = {name: ncu_kernels(path) for name, path in forms(scenario).items()}
    for name, df in frames.items():
        assert list(df.columns[: len(KERNELS_SCHEMA.columns)]) == list(KERNELS_SCHEMA.columns), name
        assert len(df) == launches, name
        assert df["kernel_short"].iloc[0] == short, name
        assert df["grid_size"].iloc[0] == grid and df["block_size"].iloc[0] == block, name
        assert df["sm_count"].eq(132).all(), name
    raw = frames["raw"]
    assert raw["dur_ns"].iloc[0] == dur
    assert raw["l2_hit_pct"].iloc[0] == pytest.approx(l2)
    np.testing.assert_allclose(frames["raw_base"]["l2_hit_pct"], raw["l2_hit_pct"], atol=0.005, rtol=0)
    np.testing.assert_array_equal(frames["raw_base"]["dur_ns"], raw["dur_ns"])
    np.testing.assert_allclose(frames["details"]["dur_ns"], raw["dur_ns"], rtol=0.005)  # 3 significant digits
    np.testing.assert_allclose(frames["details"]["l2_hit_pct"], raw["l2_hit_pct"], atol=0.005, rtol=0)
    if "report" in frames:
        rep = frames["report"]
        assert rep["kernel_short"].tolist() == raw["kernel_short"].tolist()
        np.testing.assert_array_equal(rep["dur_ns"], raw["dur_ns"])
        np.testing.assert_allclose(rep["l2_hit_pct"], raw["l2_hit_pct"], atol=5e-7, rtol=0)
        np.testing.assert_allclose(rep["l2_read_hit_pct"], raw["l2_read_hit_pct"], atol=5e-7, rtol=0)
        assert set(rep.columns) == set(raw.columns)


def test_read_and_write_hit_rates_from_the_extra_metrics():
    df = ncu_kernels(NCU / "l2_random_gather" / "raw.csv")
    assert df["l2_read_hit_pct"].iloc[0] == pytest.approx(0.503369)
    # ncu says 100.326116 % for the second launch: counter noise on a saturated rate, clipped to 100
    assert df["lts__t_sector_op_write_hit_rate.pct [%]"].iloc[1] == 100.326116
    assert df["l2_write_hit_pct"].tolist() == [99.974624, 100.0, 99.975752]
    assert df["dram_throughput_pct"].iloc[0] == pytest.approx(53, abs=1)


def test_tiny_kernels_details_is_read_gzipped_and_has_rules():
    df = ncu_kernels(NCU / "tiny_kernels" / "details.csv.gz")
    assert len(df) == 48 and (df["dur_ns"] < 5000).all()
    rules = ncu_rules(NCU / "tiny_kernels" / "details.csv.gz")
    assert len(rules) == 144 and set(rules["launch_id"]) == set(range(48))


def test_two_processes_on_stdout():
    df = ncu_kernels(NCU / "two_process_stdout" / "stdout.csv")
    assert len(df) == 50
    assert df["process_id"].value_counts().to_dict() == {1725.0: 48, 1692.0: 2}
    assert df.groupby("process_id")["kernel_short"].first().to_dict() == {
        1692.0: "cunn_SoftMaxForward",
        1725.0: "vectorized_elementwise_kernel",
    }
    assert df["launch_id"].tolist() == list(range(50))
    assert df.loc[0, "dur_ns"] == 1533728.0
    # 182.07 % on a 2 µs kernel: kept in the metric column, not a hit rate
    assert df.loc[2, "lts__t_sector_hit_rate.pct [%]"] == 182.07 and np.isnan(df.loc[2, "l2_hit_pct"])
    assert any("skipped 7 non-CSV lines" in w for w in df.attrs["warnings"])


# -- the .ncu-rep form against the CSV pages of the same capture, column by column ----------------------------------
# (the shared convnet capture's report, 15.6 MB, is not committed: these are its tests, on these four reports)

EXACT = [  # standard columns ncu_report gives exactly as the raw page prints them
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "grid_size",
    "block_size",
    "dur_ns",
    "registers_per_thread",
    "shared_mem_per_block_bytes",
    "context",
    "stream",
    "device",
    "occupancy_limit_registers",
    "occupancy_limit_warps",
    "theoretical_occupancy_pct",
]
PERCENTAGES = [
    "l2_hit_pct",
    "achieved_occupancy_pct",
    "dram_throughput_pct",
    "memory_throughput_pct",
    "sm_throughput_pct",
]
RULES = {"l2_random_gather": 3, "matmul_tiled": 9, "small_grid": 6, "tiny_kernels": 144}  # rule results, details page


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def capture(request):
    """One scenario's frames in the report and the two raw pages, and its details page's path."""
    pytest.importorskip("ncu_report")
    paths = forms(request.param)
    return request.param, {name: ncu_kernels(paths[name]) for name in ("report", "raw", "raw_base")}, paths["details"]


def test_report_and_raw_csv_agree(capture):
    scenario, frames, _ = capture
    report, raw, raw_base = frames["report"], frames["raw"], frames["raw_base"]
    assert report["kernel_short"].tolist() == raw["kernel_short"].tolist()
    # C++ kernels have an Itanium-mangled name; extern "C" ones (cuBLAS's nvjet_… in matmul_tiled) are their own
    cpp = raw["kernel_name"].str.startswith("void ")  # demangled C++ names start with their return type
    assert (report["kernel_mangled"].str.startswith("_Z") == cpp).all()
    assert (report.loc[~cpp, "kernel_mangled"] == report.loc[~cpp, "kernel_short"]).all()
    assert (~cpp).sum() == (3 if scenario == "matmul_tiled" else 0)
    for col in EXACT:
        np.testing.assert_array_equal(report[col].to_numpy(), raw[col].to_numpy(), err_msg=col)
    for col in PERCENTAGES:
        np.testing.assert_allclose(report[col], raw[col], atol=5e-7, rtol=0, err_msg=col)  # 6 decimals
        np.testing.assert_allclose(report[col], raw_base[col], atol=0.005, rtol=0, err_msg=col)  # 2 decimals
    np.testing.assert_allclose(report["waves_per_sm"], raw["waves_per_sm"], atol=0.005, rtol=0)
    # the same metric columns: the report is read in the CSV's base units
    assert set(report.columns) == set(raw.columns)
    assert report["process_id"].isna().all()  # ncu_report does not expose the process


def test_report_metric_columns_match_the_base_page(capture):
    _, frames, _ = capture
    report, raw_base = frames["report"], frames["raw_base"]
    for col in report.columns[len(KERNELS_SCHEMA.columns) :]:
        a, b = report[col], raw_base[col]
        if a.dtype == object or b.dtype == object:
            assert a.fillna("").astype(str).tolist() == b.fillna("").astype(str).tolist() or col.startswith(
                ("launch__func", "device__attribute")
            ), col
            continue
        np.testing.assert_allclose(a, b, rtol=0.005, atol=0.0051, err_msg=col)


def test_rules_from_details_and_report_agree(capture):
    scenario, _, details = capture
    key = ["launch_id", "rule"]
    a = ncu_rules(details).sort_values(key).reset_index(drop=True)
    b = ncu_rules(NCU / scenario / "report.ncu-rep.gz").sort_values(key).reset_index(drop=True)
    assert len(a) == len(b) == RULES[scenario]
    assert a[key + ["section", "type"]].equals(b[key + ["section", "type"]])
    assert a["speedup_type"].fillna("").tolist() == b["speedup_type"].fillna("").tolist()
    np.testing.assert_allclose(a["estimated_speedup_pct"], b["estimated_speedup_pct"], atol=0.5)
    assert (a["description"] == b["description"]).mean() > 0.95  # markup rendered as the CSV prints it
