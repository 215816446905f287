"""The array paths that cut a report's fixed cost on small traces give what the pandas code they replace gave.

Each fast path (sync's per-op and per-location grouping, launch's per-op table, the GPU step windows, the
memoized steps and empty schema frames, the literal metric keys) is compared, exactly and with dtypes, with
the plain pandas computation it stands for, on real traces; the memoized values are checked to be copies.
"""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from diagnose.analysis import declared_metrics
from diagnose.analyzers import launch
from diagnose.derive import trace_input_wait as tiw
from diagnose.derive import trace_timeline as tl
from diagnose.derive.sync_calls import trace_syncs
from diagnose.derive.sync_sites import group_syncs
from diagnose.ingest.loading import load
from diagnose.metrics import describe
from diagnose.thresholds import Thresholds
from parsers.events import WORK_SCHEMA
from parsers.trace import GPU_SCHEMA
from parsers.trace_collectives import COLLECTIVES_SCHEMA, CollectiveArgs, rows_frame
from tests.paths import FIXTURES, shared

TRACES = [
    FIXTURES / "trace" / "sync_planted" / "trace.json.gz",  # aten::item: two runtime calls, one sync (merged)
    FIXTURES / "trace" / "no_profilerstep" / "sgd_nostacks.json.gz",  # no Python frames: file/function all None
    FIXTURES / "trace" / "hta" / "critical_path_cuda_event_sync_event_sync_trace.json.gz",
    FIXTURES / "runs" / "sync_heavy",  # sync records too
    FIXTURES / "runs" / "epoch_stall",  # DataLoader fetch ranges
]


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.parent.name + "/" + p.name)
def case(request):
    profile = load(str(request.param), quiet=True)
    trace = tl.analysed(profile.traces[0])
    fetches = tiw.input_fetches(trace, tl.steps(trace), tiw.source_dirs_of(profile))
    calls, step_ns, n_steps = trace_syncs(trace, Thresholds(), fetches)
    return profile, trace, calls, step_ns, max(n_steps, 1)


def grouped_by_pandas(calls: pd.DataFrame, n_steps: int, step_ns: float) -> pd.DataFrame:
    """group_syncs as the two-key named aggregation computed it (the reference)."""
    out = (
        calls.groupby(["location", "op"], sort=False, dropna=False)
        .agg(
            function=("function", "first"),
            file=("file", "first"),
            line=("line", "first"),
            line_exact=("line_exact", "all"),
            library_location=("library_location", "first"),
            calls=("call", lambda s: ", ".join(dict.fromkeys(map(str, s)))),
            count=("call", "size"),
            blocked_ns=("blocked_ns", "sum"),
            gpu_idle_ns=("gpu_idle_ns", lambda s: s.sum(min_count=1)),
        )
        .reset_index()
    )
    out["count_per_step"] = out["count"] / n_steps
    out["blocked_ms"] = out["blocked_ns"] / 1e6
    out["gpu_idle_ms"] = out["gpu_idle_ns"] / 1e6
    out["blocked_ms_per_step"] = out["blocked_ms"] / n_steps
    out["gpu_idle_ms_per_step"] = out["gpu_idle_ms"] / n_steps
    out["share_of_step"] = out["gpu_idle_ns"] / n_steps / step_ns if step_ns and step_ns == step_ns else np.nan
    out = out.sort_values(["gpu_idle_ms_per_step", "blocked_ms_per_step"], ascending=False, na_position="last")
    return out[[c for c in group_syncs(calls.iloc[:0], 1, 1.0).columns]].reset_index(drop=True)


def test_sync_locations_equal_the_named_aggregation(case):
    profile, _, calls, step_ns, n_steps = case
    if "epoch_stall" in profile.sources[0]:
        assert not len(calls)  # a DataLoader stall, no sync
        return
    assert len(calls)
    # as found, reversed, with repeated rows (groups of several calls), and with missing keys (fake: no frame, no op)
    missing = calls.copy()
    missing.loc[missing.index[::2], "location"] = None
    missing.loc[missing.index[::3], "op"] = None
    variants = (calls, calls.iloc[::-1].reset_index(drop=True), pd.concat([calls, calls], ignore_index=True), missing)
    for c in variants:
        pd.testing.assert_frame_equal(
            group_syncs(c, n_steps, step_ns), grouped_by_pandas(c, n_steps, step_ns), check_exact=True
        )


def test_sync_instances_merged_as_the_groupby_merged_them():
    trace = tl.analysed(load(str(TRACES[0]), quiet=True).traces[0])
    calls, _, _ = trace_syncs(trace, Thresholds())
    merged = calls["call"].str.contains(" + ", regex=False)
    assert merged.sum() == 8  # eight aten::item calls: a memcpy and a stream sync each


def ops_by_groupby(launches: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    g = launches.groupby("op", sort=False)
    out = pd.DataFrame(
        {
            "kernels_per_step": g.size() / n_steps,
            "short_kernels_per_step": g["shorter_than_launch"].sum() / n_steps,
            "launch_us_per_step": g["launch_ns"].sum() / n_steps / 1e3,
            "kernel_us_per_step": g["dur_ns"].sum() / n_steps / 1e3,
            "median_kernel_us": g["dur_ns"].median() / 1e3,
            "median_launch_us": g["launch_ns"].median() / 1e3,
        }
    ).reset_index()
    out["short_share"] = out["short_kernels_per_step"] / out["kernels_per_step"]
    return out.sort_values(["short_kernels_per_step", "launch_us_per_step"], ascending=False).reset_index(drop=True)


def test_launch_ops_equal_the_groupby(case):
    _, trace, _, _, _ = case
    launches = launch.launch_table(trace)
    assert len(launches)
    for n_steps in (1, 3):
        for table in (launches, launches.iloc[::-1].reset_index(drop=True)):
            got = launch.ops_table(table, n_steps)
            pd.testing.assert_frame_equal(got, ops_by_groupby(table, n_steps), check_exact=True)


def gpu_windows_by_groupby(trace, windows: pd.DataFrame) -> pd.DataFrame:
    step_of = tl.gpu_step_of(trace, windows)
    launched = step_of >= 0
    per_step = (
        pd.DataFrame(
            {
                "step": step_of[launched],
                "ts": trace.gpu["ts_ns"].to_numpy()[launched],
                "end": trace.gpu["end_ns"].to_numpy()[launched],
            }
        )
        .groupby("step")
        .agg(first=("ts", "min"), last=("end", "max"), kernels=("ts", "size"))
    )
    rows, prev_end = [], None
    for step in windows["step"].tolist():
        if step not in per_step.index:
            continue
        first, last = int(per_step.at[step, "first"]), int(per_step.at[step, "last"])
        start = first if prev_end is None else min(prev_end, first)
        rows.append(
            {"step": step, "gpu_start_ns": start, "gpu_end_ns": last, "kernels": int(per_step.at[step, "kernels"])}
        )
        prev_end = last
    return pd.DataFrame(rows, columns=["step", "gpu_start_ns", "gpu_end_ns", "kernels"])


def test_gpu_step_windows_equal_the_groupby_and_are_copies(case):
    _, trace, _, _, _ = case
    windows = tl.steps(trace)
    got = tl.gpu_step_windows(trace, windows)
    pd.testing.assert_frame_equal(got, gpu_windows_by_groupby(trace, windows), check_exact=True)
    got["gpu_end_ns"] = -1  # a caller's change stays its own
    again = tl.gpu_step_windows(trace, windows)
    assert (again["gpu_end_ns"] >= 0).all()
    windows["step"] = -5  # the memo follows the windows' values, not their frame
    assert (tl.steps(trace)["step"] >= 0).all()
    assert len(tl.gpu_step_windows(trace, windows)) == 0


def test_steps_memo_is_per_tables(case):
    _, trace, _, _, _ = case
    first = tl.steps(trace)
    first.loc[:, "cpu_end_ns"] = 0  # a caller's change stays its own
    assert (tl.steps(trace)["cpu_end_ns"] > 0).all()
    other = dataclasses.replace(trace)
    pd.testing.assert_frame_equal(tl.steps(other), tl._steps(other))
    other.annotations = other.annotations.iloc[:0]  # a new table: worked out again
    again = tl.steps(other)
    pd.testing.assert_frame_equal(again, tl._steps(other))
    assert again.attrs == tl._steps(other).attrs


def test_loader_ranges_are_the_dataloader_fetches(case):
    _, trace, _, _, _ = case
    ts, end = tiw._loader_ranges(trace)
    reference = tiw.dataloader_fetches(trace)
    assert ts.tolist() == reference["ts_ns"].tolist()
    assert end.tolist() == reference["end_ns"].tolist()


def test_epoch_stall_has_dataloader_fetches():
    trace = tl.analysed(load(str(TRACES[4]), quiet=True).traces[0])
    ts, end = tiw._loader_ranges(trace)
    assert len(ts) == 3 and (end > ts).all()


@pytest.mark.parametrize("schema", [WORK_SCHEMA, GPU_SCHEMA])
def test_empty_frames_are_fresh_copies(schema):
    a = schema.empty()
    built = pd.DataFrame({c: pd.Series([], dtype=d) for c, d in schema.columns.items()})
    pd.testing.assert_frame_equal(a, built)
    a["extra"] = []
    assert "extra" not in schema.empty().columns


def describe_by_patterns(key: str, metrics):
    """describe() with every key matched by its compiled pattern (the reference for literal keys)."""
    rank, base = None, key
    if key.startswith("rank") and "." in key and key[4 : key.index(".")].isdigit():
        rank, base = key[4 : key.index(".")], key[key.index(".") + 1 :]
    for m in metrics:
        found = m.pattern().match(base)
        if found is not None:
            fields = {k: v.replace("_", " ") for k, v in found.groupdict().items()}
            label = m.label.format(**fields) if fields else m.label
            return dataclasses.replace(m, key=key, label=label if rank is None else f"{label} (rank {rank})")
    return None


def test_literal_metric_keys_match_as_their_patterns():
    metrics = declared_metrics()
    literal = [m.key for m in metrics if "{" not in m.key]
    assert len(literal) > 50
    keys = [k for key in literal for k in (key, key + "x", "x" + key, f"rank2.{key}", key + "\n")]
    keys += ["gpu_idle_stream7_host_wait_pct", "rank1.gpu_idle_stream7_host_wait_pct", "not_a_metric"]
    for key in keys:
        assert describe(key, metrics) == describe_by_patterns(key, metrics), key
    assert describe("sync_count_per_step", metrics).unit == "count"
    assert describe("not_a_metric", metrics) is None


def test_shared_convnet_launch_ops():
    trace = tl.analysed(load(str(shared("torch", "convnet.trace.json.gz")), quiet=True).traces[0])
    launches = launch.launch_table(trace)
    pd.testing.assert_frame_equal(launch.ops_table(launches, 4), ops_by_groupby(launches, 4), check_exact=True)


def test_no_collectives_is_the_frame_of_no_rows():
    got = CollectiveArgs().frame()
    pd.testing.assert_frame_equal(got, rows_frame([]), check_exact=True, check_index_type=True)
    assert list(got.columns) == list(COLLECTIVES_SCHEMA.columns)
    got["extra"] = []  # a fresh frame each time
    assert "extra" not in CollectiveArgs().frame().columns
