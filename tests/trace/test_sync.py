"""sync analyzer on the H200 captures with planted syncs, the sync-free one, and HTA's event-sync trace."""

from __future__ import annotations

import pandas as pd
import pytest

from diagnose.analysis import run_analyzer
from diagnose.analyzers import sync
from diagnose.derive import sync_calls
from diagnose.derive.sync_sites import where_words
from diagnose.findings import Severity
from diagnose.thresholds import Thresholds
from parsers.trace import read_trace
from tests.paths import FIXTURES, shared
from tests.trace.helpers import BAD, EVENT_SYNC, SYNC_FREE, SYNC_PLANTED, profile_of

# examples/sync_planted.py: the function each planted sync is in (Kineto names it by its first line),
# the op that issued it, and the exact line of the sync (ground truth from the script)
PLANTED = {
    "sync_planted.py:54": ("main", "aten::item", 52),
    "sync_planted.py:20": ("accuracy", "aten::to", 21),
    "sync_planted.py:25": ("timed", "cudaDeviceSynchronize", 28),
    "sync_planted.py:32": ("train_step", "aten::index", 38),
}


def test_every_planted_sync_is_found_at_its_function():
    result = run_analyzer(sync, profile_of(SYNC_PLANTED))
    loc = result.tables["locations"].set_index("location")
    assert set(loc.index) == set(PLANTED)
    for where, (function, op, _) in PLANTED.items():
        assert loc.loc[where, "function"] == function and loc.loc[where, "op"] == op
        assert not loc.loc[where, "line_exact"]
    # 4 analysed steps (the 5th is left out, as HTA does): .cpu() twice per step, the others once
    assert loc["count_per_step"].to_dict() == {
        "sync_planted.py:20": 2.0,
        "sync_planted.py:54": 1.0,
        "sync_planted.py:32": 1.0,
        "sync_planted.py:25": 1.0,
    }
    assert loc.loc["sync_planted.py:32", "blocked_ms_per_step"] == pytest.approx(3.05, abs=0.05)
    assert loc.loc["sync_planted.py:20", "gpu_idle_ms_per_step"] == pytest.approx(0.240, abs=0.005)
    assert result.summary["sync_count_per_step"] == 5.0
    assert result.summary["sync_gpu_idle_ms_per_step"] == pytest.approx(0.319, abs=0.005)
    f = next(f for f in result.findings if f.id == "sync.host_sync")
    assert f.severity == Severity.WARNING
    assert "accuracy() in sync_planted.py" in f.title and "not the exact line" in f.title
    assert f.subjects[0].name == "sync_planted.py:20" and f.subjects[0].severity == Severity.WARNING
    assert {s.name for s in f.subjects} == set(PLANTED)


def test_sync_free_capture_flags_nothing():
    result = run_analyzer(sync, profile_of(SYNC_FREE))
    assert [f.id for f in result.findings] == ["sync.none"]
    assert result.findings[0].severity == Severity.INFO
    assert result.summary["sync_count_per_step"] == 0.0


def fake_sync_records(trace_path, offset_ns: int = 300_000) -> pd.DataFrame:
    """Hand-made sync records (as `gpudiag profile` writes them) at the times of the trace's own syncs.

    The exact lines are the script's ground truth; the clock is shifted by ``offset_ns`` to check that
    matching tolerates a constant offset between the bootstrap's clock and Kineto's.
    """
    t = read_trace(trace_path)
    calls, _, _ = sync_calls.trace_syncs(t, Thresholds())
    base = t.metadata["header"]["baseTimeNanoseconds"]
    by_function = {v[0]: v[2] for v in PLANTED.values()}
    rows = []
    for c in calls.itertuples():
        line = by_function[c.function]
        rows.append(
            {
                "rank": 0,
                "step": int(c.step),
                "t_ns": int(c.ts_ns) + base + offset_ns,
                "dur_ns": int(c.blocked_ns),
                "op": c.op,
                "file": "/abs/examples/sync_planted.py",
                "line": line,
                "function": c.function,
                "location": f"/abs/examples/sync_planted.py:{line}",
                "stack": [],
            }
        )
    return pd.DataFrame(rows)


def test_sync_records_give_exact_lines():
    records = fake_sync_records(SYNC_PLANTED)
    result = run_analyzer(sync, profile_of(SYNC_PLANTED, sync_records={0: records}))
    loc = result.tables["locations"].set_index("location")
    assert set(loc.index) == {f"/abs/examples/sync_planted.py:{v[2]}" for v in PLANTED.values()}
    assert loc["line_exact"].all()
    assert loc.loc["/abs/examples/sync_planted.py:38", "op"] == "aten::index"
    f = next(f for f in result.findings if f.id == "sync.host_sync")
    assert "/abs/examples/sync_planted.py:21" in f.title and "not the exact line" not in f.title


def test_records_without_trace_list_blocked_time():
    records = fake_sync_records(SYNC_PLANTED)
    p = profile_of()
    p.sync_records = {0: records}
    result = run_analyzer(sync, p)
    loc = result.tables["locations"].set_index("location")
    assert len(loc) == 4 and loc["gpu_idle_ms"].isna().all()
    assert loc.loc["/abs/examples/sync_planted.py:38", "blocked_ms"] == pytest.approx(
        15.37, abs=0.05
    )  # all 5 steps: the records are not trimmed


def test_event_sync_trace_ops_and_kinds():
    result = run_analyzer(sync, profile_of(EVENT_SYNC))
    calls = result.tables["calls"]
    # the trace's last runtime call, a cudaDeviceSynchronize under no CPU op after the last GPU work, is torch.profiler's
    # own as it stops (profile.__exit__ synchronizes); without stacks it was counted as the script's third sync
    assert calls["op"].tolist() == ["aten::is_nonzero", "cudaEventSynchronize"]
    assert calls["call"].iloc[0] == "cudaMemcpyAsync + cudaStreamSynchronize"
    assert calls["blocked_ns"].tolist() == [35_000.0, 34_000.0]
    assert (calls["location"] == sync_calls.NO_FRAME).all()  # trace recorded without stacks
    assert calls["gpu_idle_ns"].iloc[0] > 0


def test_convnet_item_each_step():
    """The convnet loop is module-level code: Kineto names its frame `starter_torch.py(13): <module>`, 13 being the
    line the module was at when profiling began (the loss.item() is at line 19). No line is shown for it (issue 28:
    "aten::item at main.py:0")."""
    result = run_analyzer(sync, profile_of(shared("torch", "convnet.trace.json.gz")))
    loc = result.tables["locations"]
    assert loc["location"].tolist() == ["starter_torch.py (module level)"] and loc["op"].tolist() == ["aten::item"]
    assert loc["line"].tolist() == [-1] and not loc["line_exact"].any()
    assert loc["count"].tolist() == [12] and loc["count_per_step"].tolist() == [1.0]
    (f,) = [f for f in result.findings if f.id == "sync.host_sync"]
    assert "aten::item at the module-level code of starter_torch.py" in f.title, f.title
    assert "the trace names no line for module-level code" in f.title and ".py:" not in f.title


def test_cpu_only_and_missing_inputs():
    assert [f.id for f in run_analyzer(sync, profile_of(BAD / "trace_fake_cpu_only.json")).findings] == [
        "sync.not_measured"
    ]
    assert [f.id for f in run_analyzer(sync, profile_of()).findings] == ["sync.not_measured"]


def test_syncs_per_step_count_only_the_steps_they_were_captured_in(tmp_path):
    """A run folder without its trace: the 13 sync records come from the 3 trace-window steps (4-6) of an
    11-step run with four planted syncs a step; per step is 13 / 3, not 13 / 11 (issue 18)."""
    import shutil

    import diagnose

    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "runs" / "sync_planted", run)
    (run / "trace" / "rank0.json.gz").unlink()
    profile = diagnose.load(run)
    assert len(profile.sync_records[0]) == 13 and len(profile.step_events[0]) == 11
    summary = diagnose.analyze(profile).summary
    assert summary["sync_count_per_step"] == pytest.approx(13 / 3)


RUNS = FIXTURES / "runs"


def _run_sync(name):
    import diagnose

    return run_analyzer(sync, diagnose.load(RUNS / name))


def test_a_long_wait_keeps_the_line_light_mode_recorded():
    """fixtures/runs/sync_planted: the boolean mask's nonzero (line 38) waited 0.70 and 2.62 ms in the 2nd and 3rd
    traced steps, and torch's warning (the record) came at the end of the wait, not its start. Paired by start, those
    records went to the neighbouring .item() and the two syncs kept train_step's first line (sync_planted.py:32, not
    exact): one sync read as two sites. Issue 28 item 7: light mode's line, whenever it exists."""
    result = _run_sync("sync_planted")
    calls = result.tables["calls"]
    index = calls[calls["op"] == "aten::index"]
    assert index["location"].tolist() == ["/work/main/examples/sync_planted.py:38"] * 3
    assert index["line_exact"].all()
    assert index["blocked_ns"].tolist() == [8624.0, 704360.0, 2618569.0]
    loc = result.tables["locations"].set_index("location")
    assert loc["count"].to_dict() == {
        "/work/main/examples/sync_planted.py:22": 3,
        "/work/main/examples/sync_planted.py:52": 3,
        "/work/main/examples/sync_planted.py:21": 3,
        "/work/main/examples/sync_planted.py:38": 3,
        # the explicit torch.cuda.synchronize() has no record: its function, one site (its frame was named by line
        # 27 in the step the profiler began in and by its def line 25 after)
        "sync_planted.py:25": 3,
    }
    assert loc.loc["/work/main/examples/sync_planted.py:38", "blocked_ms_per_step"] == pytest.approx(1.110518)


def test_a_record_with_no_trace_call_does_not_shift_the_clock():
    """fixtures/runs/input_generator_h200: two records in the window, a sync warning inside optimizer.step() (line 53)
    654 us before the trace's one sync and the loss.item() of line 55, 45 us after its start (the usual 28-45 us).
    The median of the two put the clock halfway and gave the .item() line 53."""
    result = _run_sync("input_generator_h200")
    loc = result.tables["locations"]
    assert loc["location"].tolist() == ["/tmp/t/examples/input_generator.py:55"]
    assert loc["op"].tolist() == ["aten::item"] and loc["line_exact"].all()
    (f,) = [f for f in result.findings if f.id == "sync.host_sync"]
    assert "aten::item at /tmp/t/examples/input_generator.py:55" in f.title and "exact line" not in f.title


def test_a_function_the_records_saw_at_one_line_gives_that_line():
    """The records of fixtures/runs/sync_planted by place: main's syncs were all at line 52, so its .item() takes
    it; accuracy (21 and 22) and train_step (36 and 38) hold two lines each and give none."""
    import diagnose
    from diagnose.derive import trace_timeline as tl

    profile = diagnose.load(RUNS / "sync_planted")
    calls, _, _ = sync_calls.trace_syncs(tl.analysed(profile.traces[0]), Thresholds())
    in_op = calls["op"].astype(str).to_numpy() != calls["call"].astype(str).to_numpy()
    found = sync_calls._line_by_place(calls, profile.sync_records[0].reset_index(drop=True), in_op)
    records = profile.sync_records[0].reset_index(drop=True)
    assert {calls["op"].iat[c] for c in found} == {"aten::item"} and len(found) == 3
    assert {int(records["line"].iat[r]) for r in found.values()} == {52}


def test_no_location_is_ever_line_0():
    """Module-level code is named without a line (Kineto gives its frame the line it was at when profiling began,
    or 0: "aten::item at main.py:0"); a frame of unknown line is named by its function."""
    assert sync_calls.trace_location("main.py", 0, "<module>") == "main.py (module level)"
    assert sync_calls.trace_location("main.py", 0, "train") == "train() in main.py"
    assert sync_calls.trace_location("main.py", 170, "train") == "main.py:170"
    assert where_words("main.py (module level)", "<module>", "main.py", False) == "the module-level code of main.py"


@pytest.mark.parametrize(
    "path",
    [FIXTURES / "trace" / "jax" / "perfetto_trace.json.gz", RUNS / "jax_train"],
)
def test_traces_whose_kernels_have_no_launch_are_not_given_a_clean_bill(path, tmp_path):
    """A trace that links no GPU work to a launch call (fake: the JAX captures without XLA's correlation ids,
    tests/unlinked_jax.py): no sync can be seen there, so the analyzer says it could not judge, never "the host
    never waited" (issue 28 item 12)."""
    from tests.unlinked_jax import unlinked

    path = unlinked(path, tmp_path)
    import diagnose

    result = run_analyzer(sync, diagnose.load(path))
    assert [f.id for f in result.findings] == ["sync.not_measured"]
    (f,) = result.findings
    assert f.title == (
        "Host syncs could not be judged: the trace links none of its GPU work to a launch call "
        "(JAX/XLA perfetto traces do not)"
    )
    assert [(s.kind, s.name) for s in f.subjects] == [("rank", "0")]
    assert "never waited" not in f.recommendation


def test_a_sync_a_library_made_names_the_librarys_line_and_the_users():
    """fake records: the costliest sync (line 21's aten::item) made by library code the user's line called (as HF
    Trainer's per-step loss check is made inside `trainer.train()`): the subject and the title name both lines."""
    records = fake_sync_records(SYNC_PLANTED)
    library = "/venv/site-packages/fake_trainer/trainer.py:2400"
    records["library_location"] = [library if ln == 21 else None for ln in records["line"]]
    result = run_analyzer(sync, profile_of(SYNC_PLANTED, sync_records={0: records}))
    loc = result.tables["locations"].set_index("location")
    assert loc.loc["/abs/examples/sync_planted.py:21", "library_location"] == library
    assert loc.drop(index="/abs/examples/sync_planted.py:21")["library_location"].isna().all()
    f = next(f for f in result.findings if f.id == "sync.host_sync")
    subject = next(s for s in f.subjects if s.name == "/abs/examples/sync_planted.py:21")
    assert subject.figures["library_location"] == library
    assert f.subjects[0] is subject  # the costliest: the title names both lines
    assert f"aten::to at {library} (inside the call at /abs/examples/sync_planted.py:21)" in f.title


@pytest.mark.parametrize(
    "path",
    [FIXTURES / "trace" / "jax" / "perfetto_trace.json.gz", RUNS / "jax_train"],
)
def test_jax_traces_that_link_their_launches_are_judged(path):
    """The real JAX captures link their device ops to cuGraphLaunch and the host copies (issue 34): their syncs can
    be judged, and these loops have none inside their steps."""
    import diagnose

    result = run_analyzer(sync, diagnose.load(path))
    assert [f.id for f in result.findings] == ["sync.none"]
