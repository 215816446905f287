"""The ncu hot paths made fast for 100,000-launch captures give what the plain pandas code gave.

The L2 heatmap's cells (a numpy pass instead of a pandas groupby; binned by reports/l2_heatmap.py from the l2
analyzer's every-launch table), the per-launch kernel keys (worked out
once per distinct name and kept by the Profile's Derived, diagnose.derive.table_values), the limiter breakdown's per-kernel
means (kept per table): each against a straightforward reference on a real H200 capture.
"""

import math

import numpy as np
import pandas as pd
import pytest

from diagnose.analysis import run_analyzer
from diagnose.analyzers import l2
from diagnose.derive.kernel_limiter import kernel_limiters
from diagnose.derive.kernel_stats import kernel_key, label_of_launch, per_kernel, short_names, slim, weighted_mean
from diagnose.derive.table_values import TableValues
from diagnose.ingest.loading import load
from diagnose.thresholds import Thresholds
from reports import l2_heatmap
from tests.paths import FIXTURES

KINDS = FIXTURES / "ncu" / "kernel_kinds" / "raw.csv.gz"


@pytest.fixture(scope="module")
def kinds():
    return load(str(KINDS))


def heatmap_by_groupby(kernels: pd.DataFrame, stats: pd.DataFrame, max_columns: int) -> pd.DataFrame:
    """The heatmap cells as the pandas groupby computed them before (the reference)."""
    top = stats[stats["l2_hit_pct"].notna()]["kernel"].head(l2_heatmap.MAX_KERNELS).tolist()
    k = slim(kernels, "launch_id", "l2_hit_pct", "dram_throughput_pct", "grid_size", "grid_x", "grid_y", "grid_z")
    k = k.sort_values(["launch_id"], kind="stable").reset_index(drop=True)
    k = k.assign(label=label_of_launch(k, stats).to_numpy())
    k["order"] = np.arange(len(k))
    bin_size = max(1, int(np.ceil(len(k) / max_columns)))
    k = k[k["label"].isin(top) & k["l2_hit_pct"].notna()].copy()
    k["bin"] = k["order"] // bin_size
    rows = []
    for (label, b), g in k.groupby(["label", "bin"], sort=False):
        w = g["dur_ns"]
        first = g.iloc[int(np.argmax(w.fillna(0).to_numpy()))]
        rows.append(
            {
                "kernel": label,
                "bin": int(b),
                "first_launch": int(g["order"].min()),
                "last_launch": int(g["order"].max()),
                "launches": int(len(g)),
                "l2_hit_pct": weighted_mean(g["l2_hit_pct"], w),
                "dur_ns": float(w.sum()),
                "dram_throughput_pct": weighted_mean(g["dram_throughput_pct"], w),
                "grid_size": float(first["grid_size"]),
                "grid": "×".join(str(int(first[c])) for c in ("grid_x", "grid_y", "grid_z")),
            }
        )
    cells = pd.DataFrame(rows)
    cells.insert(1, "kernel_rank", cells["kernel"].map({name: i for i, name in enumerate(top)}))
    return cells.sort_values(["kernel_rank", "bin"]).reset_index(drop=True)


@pytest.mark.parametrize("max_columns", [400, 5, 2])
def test_heatmap_cells_equal_the_groupby_reference(kinds, max_columns):
    result = run_analyzer(l2, kinds, Thresholds())
    stats = result.tables["kernels"]
    cells, bin_size = l2_heatmap.heatmap_cells(result.tables["launches"], stats, max_columns=max_columns)
    # the means are sums over each cell in another order (np.add.reduceat): equal to the last few bits
    reference = heatmap_by_groupby(kinds.kernels, stats, max_columns)
    pd.testing.assert_frame_equal(cells, reference, check_exact=False, rtol=1e-12, atol=0)
    assert bin_size == math.ceil(23 / max_columns)
    assert cells["launches"].sum() == 23  # every launch with a hit rate is in one cell


def test_every_launch_in_launch_order_on_kernel_kinds(kinds):
    launches = run_analyzer(l2, kinds, Thresholds()).tables["launches"]
    assert len(launches) == len(kinds.kernels) == 23 and launches["launch"].tolist() == list(range(23))
    assert launches["launch_id"].is_monotonic_increasing
    assert launches["dur_ns"].sum() == pytest.approx(kinds.kernels["dur_ns"].sum(), rel=1e-12)
    assert launches.loc[launches["kernel"] == "execute_dist", "launch"].tolist() == [1, 2, 3, 4, 5, 6]


def test_heatmap_cells_numbers_on_kernel_kinds(kinds):
    result = run_analyzer(l2, kinds, Thresholds())  # bins of 5 launches: cells that average several
    cells, _ = l2_heatmap.heatmap_cells(result.tables["launches"], result.tables["kernels"], max_columns=5)
    assert len(cells) == 18
    dist = cells[cells["kernel"] == "execute_dist"]
    assert dist["bin"].tolist() == [0, 1]
    assert dist["launches"].tolist() == [4, 2]  # duration-weighted means of 4 and of 2 launches
    assert dist["l2_hit_pct"].tolist() == pytest.approx([93.057735, 96.489185], abs=1e-6)
    assert cells.iloc[0][["kernel", "bin", "grid"]].tolist() == ["stream_add", 1, "1056×1×1"]


def test_kernel_keys_of_fake_frame_with_missing_names():
    fake = pd.DataFrame(
        {
            "kernel_name": ["void a<int>()", None, "", "void b()", np.nan, "", "void a<int>()"],
            "kernel_short": ["a", "y", "z", None, None, "", "a"],
        }
    )
    assert list(kernel_key(fake)) == ["void a<int>()", "y", "z", "void b()", "<unnamed kernel>", "", "void a<int>()"]
    assert list(short_names(fake)) == ["a", "y", "z", "void b()", "<unnamed kernel>", "", "a"]
    assert all(type(k) is str for k in kernel_key(fake))


def test_kernel_key_follows_a_reassigned_column(kinds):
    kernels = kinds.kernels.copy()
    before = kernel_key(kernels)
    assert before.iloc[0] == kernels["kernel_name"].iloc[0]
    kernels["kernel_name"] = "void renamed()"
    assert set(kernel_key(kernels)) == {"void renamed()"}
    assert per_kernel(kernels)["kernel_name"].tolist() == ["void renamed()"]


def test_table_values_are_per_column_arrays():
    fake_a = pd.DataFrame({"x": [1.0, 2.0]})
    fake_b = pd.DataFrame({"x": [1.0, 2.0]})
    calls = []
    memo = TableValues()

    def compute(frame):
        calls.append(1)
        return float(frame["x"].sum())

    assert memo.get(fake_a, "sum", ("x",), lambda: compute(fake_a)) == 3.0
    assert memo.get(fake_a, "sum", ("x",), lambda: compute(fake_a)) == 3.0
    assert len(calls) == 1
    assert memo.get(fake_b, "sum", ("x",), lambda: compute(fake_b)) == 3.0  # other arrays: computed again
    fake_a["x"] = [5.0, 5.0]
    assert memo.get(fake_a, "sum", ("x",), lambda: compute(fake_a)) == 10.0
    assert len(calls) == 3
    assert TableValues().get(fake_a, "sum", ("x",), lambda: compute(fake_a)) == 10.0  # another Derived: its own
    assert len(calls) == 4


def test_kernel_limiters_kept_per_table_equal_a_fresh_table(kinds):
    kernels = kinds.kernels
    stats = per_kernel(kernels)
    first = kernel_limiters(kernels, stats)
    again = kernel_limiters(kernels, stats)
    fresh = kernel_limiters(kernels.copy(deep=True), stats)
    pd.testing.assert_frame_equal(first, again)
    pd.testing.assert_frame_equal(first, fresh)
    assert first["limiter_unit"].notna().all()
    column = next(c for c in kernels.columns if c.startswith("l1tex__data_pipe_lsu_wavefronts.avg.pct"))
    changed = kernels.assign(**{column: 100.0})
    assert set(kernel_limiters(changed, stats)["limiter_pct"]) == {100.0}
