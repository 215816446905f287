"""parsers/run_records.py: every record kind the runtime writes is read back by its reader field for field, the step
record's fast format writes what the general formatter writes, and a run's options come from its manifest in one
place. Hand-made records and manifests (tiny unit inputs)."""

from __future__ import annotations

import ast
import fnmatch
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import diagnose.launch.runtime  # noqa: F401  (registers the modules the runtime shares; a plain import in the parent)
from diagnose.derive.trace_window import window_of
from diagnose.launch.event_log import JsonlAppender
from diagnose.launch.runtime.coordinator import Runtime
from diagnose.launch.runtime.dataloader_config import LoaderConfigs
from diagnose.launch.runtime.gpu_time import GpuTime
from diagnose.launch.runtime.memory_capture import jax_memory_stats_record
from diagnose.launch.runtime.nvtx_ranges import TOOL_ENV, open_for_steps
from diagnose.launch.runtime.periodic_work import write_work
from diagnose.launch.runtime.sync_capture import sync_record
from parsers import run_folder
from parsers import run_records as rr
from parsers.events import read_event_tables
from parsers.memory_stats import read_memory_stats

T_NS = 1796239003581976984


def _runtime(events) -> Runtime:
    """A runtime past its first step boundary (rank 2, in step 1) that writes to ``events``."""
    runtime = Runtime(SimpleNamespace(mode="light", run_dir=None))
    runtime.rank, runtime.events, runtime.steps.current_step = 2, events, 1
    return runtime


def _write_every_kind(folder, monkeypatch) -> list[bytes]:
    """Rank 2's events file as the runtime's writers make it, one or more records of each kind; its lines."""
    events = JsonlAppender(str(folder / rr.EVENTS.path(2)))
    lines = [
        rr.format_record(
            rr.RUN_START,
            rank=2,
            world_size=4,
            pid=4242,
            framework="torch",
            mode="light",
            cuda=True,
            versions={"torch": "2.13.0"},
            t_ns=T_NS,
            install_ns=T_NS - 3_000_000_000,
            main_cpu_ms=3137.823,
            main_run_queue_ms=123.986,
            cpus_allowed=1,
            cpus=16,
            threads=9,
        ),
        rr.format_record(rr.RUN_EXPECT, rank=2, artifact=rr.TRACE.path(2), t_ns=T_NS + 1),
        rr.step_line(
            2, 0, T_NS + 2, 12.5, 11.25, "optimizer", False, 21.437, None, None, 6.125, 1.5, 3.25, backward_passes=4
        ),  # fmt: skip
        rr.step_line(2, 1, T_NS + 3, 50.25, None, "marker", True, 12.5, 41.1234567, rr.INPUT_FROM_LOOP),
        rr.step_line(2, 2, T_NS + 4, 3.0, 2.0, 'odd "source"', False, 5.0, 1.5),  # the general formatter's way
        # a JAX step jit_dispatch sampled: its dispatch and readiness
        rr.step_line(2, 4, T_NS + 6, 0.5, None, "jit", False, 3.0, dispatch_ms=0.125, ready_ms=0.25, queued_ms=0.0),
        rr.step_line(2, 5, T_NS + 7, 0.5, None, "jit", False, 3.0, dispatch_ms=0.0625),  # a jax without is_ready
        rr.format_record(
            rr.STEP,
            rank=2,
            step=3,
            t_start_ns=T_NS + 5,
            host_ms=4.5,
            gpu_ms=4.25,
            source="marker",
            instrumented=False,
            overhead_us=1.0,
            input_ms=0.5,
            input_from=rr.INPUT_FROM_LOOP,
            name="forward",
        ),
        sync_record(
            2,
            1,
            [("/abs/train.py", 88, "train"), ("/abs/main.py", 3, "<module>")],
            T_NS + 6,
            "aten::item",
            812,
            library="/site-packages/transformers/trainer.py:2400",
        ),
    ]
    for line in lines:
        events.append_line(line)
    runtime = _runtime(events)
    write_work(runtime, rr.WORK_CHECKPOINT, 1, T_NS + 7, 812_250_000, "/abs/train.py:90")
    write_work(runtime, rr.WORK_NEW_SHAPE, 2, T_NS + 8, 0, None, name="(64, 3), (64,)", cudnn_benchmark=True)
    write_work(runtime, rr.WORK_IMPORT, None, T_NS - 2_000_000_000, 1_250_500_000, "/abs/train.py:1", name="torch")
    write_work(
        runtime,
        rr.WORK_EVALUATION,
        3,
        T_NS + 8,
        812_000_000,
        "/abs/train.py:120",
        library_location="/site-packages/transformers/trainer.py:3120",
    )
    write_work(runtime, rr.WORK_GPUDIAG, 4, T_NS + 8, 70_000_000, None, name=rr.GPUDIAG_TRACE_EXPORT)
    write_work(
        runtime,
        rr.WORK_HOST_CODE,
        5,
        T_NS + 9,
        210_500_000,
        "/abs/train.py:18",
        name="host_metric",
        caller="/abs/train.py:29",
        share=0.975,
        samples=40,
        ordinary_share=0.05,
        sampled_ms=215.9,
        run_queue_ms=3.25,
    )
    runtime.write_record(rr.JIT_STEP, name="update", location="/abs/train.py:40", t_ns=T_NS + 9)
    loaders = LoaderConfigs(runtime)
    iterator = object()
    loader = SimpleNamespace(
        num_workers=2, prefetch_factor=2, batch_size=64, persistent_workers=True, dataset=FakeDataset()
    )
    loaders.on_iterator(iterator, loader)
    loaders.on_first_batch(iterator, T_NS + 8, sys._getframe())
    gpu = GpuTime(0, events, 2)
    gpu.event_ns.extend([100_000] * 16)  # 100 µs an event against 2 ms steps: one step in 50 is timed (0.2 %)
    gpu.host_ns.extend([2_000_000] * 32)
    gpu.choose(8)
    for name in TOOL_ENV:
        monkeypatch.delenv(name, raising=False)
    config = SimpleNamespace(mode="light", nvtx_always=False)
    open_for_steps(config, events, 2, lambda *a: None)
    events.append_line(
        rr.format_record(
            rr.RUN_END,
            rank=2,
            reason="exit",
            steps=4,
            written=[rr.EVENTS.path(2)],
            t_ns=T_NS + 9,
            main_cpu_ms=6879.62,
            main_run_queue_ms=1721.55,
            threads=23,
        )
    )
    events.close()
    return (folder / rr.EVENTS.path(2)).read_bytes().splitlines()


class FakeDataset:
    """Fake: a dataset the loader record names by its class."""


_LOADER_LINE = next(
    n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "loaders.on_first_batch(" in text
)


def _same(read, written) -> bool:
    if written is None:
        return read is None or read == "" or (isinstance(read, float) and math.isnan(read))
    if isinstance(written, list):
        return tuple(read) == tuple(written)
    if isinstance(written, float) or isinstance(read, float):
        return float(read) == pytest.approx(float(written), abs=1e-9)
    return read == written


def test_every_record_the_runtime_writes_is_read_back_field_for_field(tmp_path, monkeypatch):
    lines = _write_every_kind(tmp_path, monkeypatch)
    written = [json.loads(line) for line in lines]
    assert [list(r) for r in written] == [[k for k in kind_of(r).keys if k in r] for r in written]  # declared order
    tables = read_event_tables(tmp_path / rr.EVENTS.path(2))
    rows = {
        rr.STEP: tables.steps.to_dict("records"),
        rr.SYNC: tables.syncs.to_dict("records"),
        rr.WORK: tables.work.to_dict("records"),
        rr.GPU_TIME_EVERY: [vars(c) for c in tables.steps.attrs["gpu_time_choices"]],
        rr.DATALOADER: [vars(c) for c in tables.steps.attrs["dataloaders"]],
        rr.JIT_STEP: [
            {"rank": m.rank, "name": m.jit_step_name, "location": m.jit_step_location}
            for m in tables.steps.attrs["run_marks"]
            if m.jit_step_name
        ],
        # the run records' reader: the parent's (the manifest's ranks, artifacts, end of each rank)
        **{k: run_folder.read_child_records(tmp_path) for k in (rr.RUN_START, rr.RUN_EXPECT, rr.RUN_END, rr.NVTX)},
    }
    seen = {kind: set() for kind in rows}
    for record in written:
        kind = kind_of(record)
        fields = {k: v for k, v in record.items() if k not in ("kind", "event")}
        matches = [
            row for row in rows[kind] if all(_same(row.get(k), v) for k, v in fields.items() if k in ("rank", "step"))
        ]
        if kind in (rr.RUN_START, rr.RUN_EXPECT, rr.RUN_END, rr.NVTX):
            assert record in rows[kind]
        else:
            assert len(matches) == 1, (record, rows[kind])
            for key, value in fields.items():
                if kind is rr.JIT_STEP and key == "t_ns":
                    continue  # the run marks keep the name and the line, not when the choice was made
                if kind is rr.STEP and key == "source" and value not in rr.STEP_SOURCES:
                    value = ""  # a source this reader does not know is read as none
                assert _same(matches[0][key], value), (kind.kind, key, matches[0][key], value)
        seen[kind] |= set(fields)
    for kind, keys in seen.items():  # every field each kind declares was written and read here
        assert keys == set(kind.fields) | set(kind.optional), kind
    steps = tables.steps.set_index("step")
    assert list(steps["name"]) == [rr.STEP_NAME] * 3 + ["forward"] + [rr.STEP_NAME] * 2
    assert list(steps["source"]) == ["optimizer", "marker", "", "marker", "jit", "jit"]  # unknown: read as none
    assert list(steps["input_from"]) == ["", "loop", "dataloader", "loop", "", ""]
    assert (steps.loc[4, "dispatch_ms"], steps.loc[4, "ready_ms"], steps.loc[4, "queued_ms"]) == (0.125, 0.25, 0.0)
    assert steps.loc[5, "dispatch_ms"] == 0.0625 and steps.loc[5, ["ready_ms", "queued_ms"]].isna().all()
    assert steps.loc[[0, 1, 2, 3], ["dispatch_ms", "ready_ms", "queued_ms"]].isna().all().all()
    assert tables.syncs.loc[0, "location"] == "/abs/train.py:88"
    assert tables.syncs.loc[0, "library_location"] == "/site-packages/transformers/trainer.py:2400"
    assert (steps.loc[0, "backward_ms"], steps.loc[0, "optimizer_ms"], steps.loc[0, "forward_ms"]) == (6.125, 1.5, 3.25)
    assert steps.loc[[1, 2, 3], "backward_ms"].isna().all()  # not written: not measured
    work = tables.work.set_index("step")
    assert (work.loc[-1, "what"], work.loc[-1, "name"], work.loc[-1, "ms"]) == ("import", "torch", 1250.5)
    assert work.loc[3, "library_location"] == "/site-packages/transformers/trainer.py:3120"
    assert work["library_location"].isna().sum() == len(work) - 1
    assert (work.loc[5, "caller"], work.loc[5, "share"], work.loc[5, "samples"]) == ("/abs/train.py:29", 0.975, 40)
    assert work["caller"].isna().sum() == len(work) - 1
    (marks,) = tables.steps.attrs["run_marks"]
    assert (marks.rank, marks.install_ns, marks.start_ns, marks.end_ns) == (
        2,
        T_NS - 3_000_000_000,
        T_NS,
        written[-1]["t_ns"],
    )
    assert (marks.main_cpu_ms_at_start, marks.main_run_queue_ms_at_start) == (3137.823, 123.986)
    assert (marks.main_cpu_ms_at_end, marks.main_run_queue_ms_at_end) == (6879.62, 1721.55)
    assert (marks.cpus_allowed, marks.cpus, marks.threads) == (1, 16, 23)  # the more of 9 at the start, 23 at the end
    assert vars(tables.steps.attrs["dataloaders"][0]) == {
        "rank": 2,
        "step": 1,
        "num_workers": 2,
        "prefetch_factor": 2.0,
        "batch_size": 64.0,
        "persistent_workers": True,
        "dataset": "FakeDataset",
        "t_ns": pytest.approx(T_NS + 8),
        "location": f"{Path(__file__).resolve()}:{_LOADER_LINE}",
    }
    assert vars(tables.steps.attrs["gpu_time_choices"][0]) == {
        "rank": 2,
        "from_step": 9,
        "every": 50,
        "event_us": 100.0,
        "step_host_ms": 2.0,
        "budget_pct": 0.2,
        "t_ns": pytest.approx(written[-2]["t_ns"]),
    }


def kind_of(record: dict) -> rr.RecordKind:
    (kind,) = [k for k in rr.RECORD_KINDS if k.is_kind_of(record)]
    return kind


def test_the_memory_stats_record_is_read_back_field_for_field(tmp_path):
    device = SimpleNamespace(id=1, memory_stats=lambda: {"bytes_in_use": 1024, "peak_bytes_in_use": 4096})
    record = jax_memory_stats_record(SimpleNamespace(local_devices=lambda: [device]), 3, 17)
    stats = JsonlAppender(str(tmp_path / rr.MEMORY_STATS.path(3)))
    stats.append(record)
    stats.close()
    written = json.loads((tmp_path / rr.MEMORY_STATS.path(3)).read_bytes())
    assert list(written) == list(rr.MEMORY_STATS_RECORD.keys)
    row = read_memory_stats(tmp_path / rr.MEMORY_STATS.path(3)).iloc[0]
    assert (row["rank"], row["step"], row["t_ns"], row["framework"], row["device"]) == (
        3,
        17,
        pytest.approx(written["t_ns"]),
        "jax",
        1,
    )
    assert (row["allocated_bytes"], row["allocated_peak_bytes"]) == (1024, 4096)  # the "stats" field


@pytest.mark.parametrize(
    "host_ms, gpu_ms, source, instrumented, overhead_us, input_ms, input_from, backward_ms, optimizer_ms, forward_ms",
    [
        (1.7645124999, 1.7600006, "optimizer", False, 21.4374999, None, None, None, None, None),
        (0.000001, None, "marker", True, 0.0, 41.1234567, None, None, None, None),
        (12345.678901, 1e-06, "jit", False, 1234567.891, 3.5, rr.INPUT_FROM_LOOP, None, None, None),
        (3.5, float("nan"), "backward", False, float("inf"), None, None, None, None, None),  # not finite: null
        (2.0, 1.0, 'odd "source"\n', False, 5.0, 1.0, "dataloader", None, None, None),
        (19.85, 6.7, "optimizer", False, 3.5, 0.17, None, 9.1234567, 0.8, None),  # the host phases
        (19.85, 6.7, "optimizer", False, 3.5, 0.17, None, 9.1234567, 0.8, 4.5678901),  # with the forward
        (19.85, None, "backward", False, 3.5, None, None, 8.0, 0.0, 0.0),
        (19.85, None, "optimizer", False, 3.5, 0.17, None, float("nan"), 0.5, None),  # not finite: the general way
        (19.85, None, "optimizer", False, 3.5, 0.17, None, 8.0, 0.5, float("inf")),  # not finite: the general way
    ],
)
def test_the_fast_step_format_writes_what_format_record_writes(
    host_ms, gpu_ms, source, instrumented, overhead_us, input_ms, input_from, backward_ms, optimizer_ms, forward_ms
):
    fast = rr.step_line(
        3,
        12345,
        T_NS,
        host_ms,
        gpu_ms,
        source,
        instrumented,
        overhead_us,
        input_ms,
        input_from,
        backward_ms,
        optimizer_ms,
        forward_ms,
    )

    def rounded(value, digits):
        return round(value, digits) if value is not None and math.isfinite(value) else value

    optional = {} if input_ms is None else {"input_ms": rounded(input_ms, 6)}
    if input_ms is not None and input_from == rr.INPUT_FROM_LOOP:
        optional["input_from"] = input_from
    if backward_ms is not None:
        optional.update(backward_ms=rounded(backward_ms, 6), optimizer_ms=rounded(optimizer_ms, 6))
        if forward_ms is not None:
            optional["forward_ms"] = rounded(forward_ms, 6)
    assert_writes_what_format_record_writes(
        fast,
        rank=3,
        step=12345,
        t_start_ns=T_NS,
        host_ms=rounded(host_ms, 6),
        gpu_ms=rounded(gpu_ms, 6),
        source=source,
        instrumented=instrumented,
        overhead_us=rounded(overhead_us, 3),
        **optional,
    )


@pytest.mark.parametrize("passes, written", [(4, 4), (1, None), (None, None)])
def test_a_steps_backward_passes_are_written_where_more_than_one(passes, written):
    """Gradient accumulation: the step's outermost backward calls after the phases, only where more than one, and
    read back as a column (NaN where absent)."""
    fast = rr.step_line(3, 7, T_NS, 19.85, None, "optimizer", False, 3.5, None, None, 9.5, 0.8, 4.25,
                        backward_passes=passes)  # fmt: skip
    phases = {"backward_ms": 9.5, "optimizer_ms": 0.8, "forward_ms": 4.25}
    if written is not None:
        phases["backward_passes"] = written
    assert_writes_what_format_record_writes(
        fast, rank=3, step=7, t_start_ns=T_NS, host_ms=19.85, gpu_ms=None, source="optimizer", instrumented=False,
        overhead_us=3.5, **phases,
    )  # fmt: skip
    assert json.loads(fast).get("backward_passes") == written


def test_a_backward_passes_count_that_is_not_whole_is_refused_with_the_file_and_line(tmp_path):
    """Fake: a step record whose backward_passes is 2.5 (a step record that cannot be read is the file's error, as
    for its other fields)."""
    from parsers.errors import InputError

    good = rr.step_line(0, 0, T_NS, 5.0, None, "optimizer", False, 1.0, None, None, 2.0, 0.5, None,
                        backward_passes=4)  # fmt: skip
    path = tmp_path / "rank0.jsonl"
    path.write_bytes(good)
    assert read_event_tables(path).steps["backward_passes"].tolist() == [4.0]
    path.write_bytes(good + good.replace(b'"backward_passes":4', b'"backward_passes":2.5'))
    with pytest.raises(InputError, match="line 2: backward_passes should be a whole number ≥ 0, found '2.5'"):
        read_event_tables(path)


def assert_writes_what_format_record_writes(fast: bytes, **fields) -> None:
    """``fast`` (step_line's) is one line holding what the general formatter writes of ``fields``, in its order."""
    general = rr.format_record(rr.STEP, **fields)
    assert fast.endswith(b"}\n") and fast.count(b"\n") == 1
    assert list(json.loads(fast).items()) == list(json.loads(general).items())


# the fields of the sampled JAX step below other than its host_ms and samples
SAMPLED_STEP = {"rank": 0, "step": 77, "t_start_ns": T_NS, "gpu_ms": None, "source": "jit", "instrumented": False}


@pytest.mark.parametrize(
    "host_ms, dispatch_ms, ready_ms, queued_ms",
    [
        (0.52, 0.1234567, 0.3456789, 0.0),
        (0.52, 0.1234567, 0.3456789, 0.0456789),  # the previous step still on the device at the call
        (0.52, 0.1234567, None, None),  # a JAX without Array.is_ready: the dispatch only
        (0.52, 0.1234567, float("inf"), 0.0),  # not finite: the general way
    ],
)
def test_a_sampled_jax_step_writes_what_format_record_writes(host_ms, dispatch_ms, ready_ms, queued_ms):
    fast = rr.step_line(
        0, 77, T_NS, host_ms, None, "jit", False, 2.5, dispatch_ms=dispatch_ms, ready_ms=ready_ms, queued_ms=queued_ms
    )
    optional = {"host_ms": host_ms, "overhead_us": 2.5, "dispatch_ms": round(dispatch_ms, 6)}
    if ready_ms is not None:
        optional["ready_ms"] = round(ready_ms, 6) if math.isfinite(ready_ms) else ready_ms
    if queued_ms is not None:
        optional["queued_ms"] = round(queued_ms, 6)
    assert_writes_what_format_record_writes(fast, **SAMPLED_STEP, **optional)


def test_a_record_has_exactly_the_fields_its_kind_declares():
    with pytest.raises(ValueError, match="needs artifact"):
        rr.record(rr.RUN_EXPECT, rank=0, t_ns=1)
    with pytest.raises(ValueError, match="has no field colour"):
        rr.record(rr.RUN_EXPECT, rank=0, artifact="x", t_ns=1, colour="red")
    assert rr.record(rr.WORK, what="checkpoint", rank=0, step=1, t_ns=2, ms=3.0, location=None, name=None) == {
        "kind": "work",
        "what": "checkpoint",
        "rank": 0,
        "step": 1,
        "t_ns": 2,
        "ms": 3.0,
        "location": None,
        "name": None,
    }


def test_the_layout_names_each_ranks_files_and_finds_their_rank():
    assert [f.path(3) for f in (rr.EVENTS, rr.MEMORY_STATS, rr.SNAPSHOT, rr.TRACE, rr.JAX_TRACE)] == [
        "events/rank3.jsonl",
        "memory/rank3.stats.jsonl",
        "memory/rank3.snapshot.json.gz",
        "trace/rank3.json.gz",
        "trace/jax-rank3",
    ]
    assert rr.RANK_PATTERNS == (
        "trace/rank*.json*",
        "memory/rank*.snapshot.*",
        "memory/rank*.stats.jsonl",
        rr.EVENTS.pattern,
    )
    assert [rr.rank_in_path(p) for p in ("events/rank12.jsonl", "trace/rank1.json.gz", "nvml.csv")] == [12, 1, None]
    assert [rr.is_appended(p) for p in ("events/rank0.jsonl", "memory/rank0.stats.jsonl", "trace/rank0.json.gz")] == [
        True,
        True,
        False,
    ]
    # what the runtime writes is what the parent lists as artifacts and the loader reads
    for kind in (rr.EVENTS, rr.MEMORY_STATS, rr.SNAPSHOT, rr.TRACE):
        assert [fnmatch.fnmatchcase(kind.path(5), p) for p in rr.ARTIFACT_PATTERNS].count(True) == 1
        assert [fnmatch.fnmatchcase(kind.path(5), p) for p in rr.RANK_PATTERNS].count(True) == 1
    assert not any(fnmatch.fnmatchcase(rr.JAX_TRACE.path(0), p) for p in rr.ARTIFACT_PATTERNS + rr.RANK_PATTERNS)


def test_run_options_come_from_the_manifest_in_one_place():
    manifest = {
        "schema": rr.MANIFEST_SCHEMA,
        "options": {"child": {"mode": "light", "trace_start": 10, "trace_steps": 3, "sync_debug": True}, "nvml_hz": 10},
    }
    options = rr.run_options(manifest)
    assert (options.mode, options.trace_start, options.trace_steps, options.sync_debug, options.nvml_hz) == (
        "light",
        10,
        3,
        True,
        10,
    )
    assert options.trace_window == range(10, 13) == window_of(manifest)
    assert rr.run_options({"options": {"child": {"trace_start": 10, "trace_steps": 0}}}).trace_window is None
    assert rr.run_options({"options": {"child": {"trace_start": "10", "trace_steps": 3}}}).trace_window is None
    assert rr.run_options({"options": ["not", "an", "object"]}) == rr.RunOptions()
    assert rr.run_options(None) == rr.RunOptions() and window_of({}) is None
    assert rr.is_run_manifest(manifest) and not rr.is_run_manifest({"schema": "gpudiag.findings/1"})


def test_run_records_imports_the_standard_library_only():
    """The runtime loads it by its path inside the training process: no pandas, no other gpudiag module."""
    tree = ast.parse(Path(rr.__file__).read_text(encoding="utf-8"))
    imported = {
        name.split(".")[0]
        for node in ast.walk(tree)
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    }
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


@pytest.mark.parametrize(
    ("host_ns", "overhead_ns", "input_ns", "loop"),
    [
        (512_345, 3_456, None, False),
        (1, 0, None, False),
        (19_850_000_123, 999_999, 0, False),
        (512_345, 3_456, 41_123_457, True),
        (512_345, 3_456, 7, False),  # a DataLoader's wait
    ],
)
def test_the_jit_steady_step_lines_are_what_step_line_writes(host_ns, overhead_ns, input_ns, loop):
    """The drain's formats for light mode's JAX steady state (jit_step_line, jit_step_lines) write the bytes of
    step_line's record for the same step, ms and µs rounded from the integer ns alike."""
    general = rr.step_line(
        3, 12345, T_NS, host_ns / 1e6, None, "jit", False, overhead_ns / 1e3,
        None if input_ns is None else input_ns / 1e6, rr.INPUT_FROM_LOOP if loop else None,
    )  # fmt: skip
    assert rr.jit_step_line(3, 12345, T_NS, host_ns, overhead_ns, input_ns, loop) == general
    if input_ns is None:
        start_ns = 1_000_000
        batch = rr.jit_step_lines(3, T_NS - start_ns, [(12345, start_ns, start_ns + host_ns, overhead_ns)] * 2)
        assert batch == [general, general]
    json.loads(general)


def test_a_schedstat_figure_that_is_no_duration_is_left_out_of_the_run_marks(tmp_path):
    """Fake (bad input): start and end records whose main thread figures are text, negative, or run backwards; the
    run is read, those figures are None, and the steps analyzer makes no CPU-wait finding of them."""
    from diagnose.derive.host_cpu_wait import cpu_wait_by_rank
    from parsers.events import read_event_tables

    lines = [
        {
            "kind": "run",
            "event": "start",
            "rank": 0,
            "world_size": 1,
            "pid": 1,
            "framework": "torch",
            "mode": "light",
            "cuda": False,
            "versions": {},
            "t_ns": T_NS,
            "main_cpu_ms": "lots",
            "main_run_queue_ms": 500.0,
            "cpus_allowed": 0,
            "cpus": "sixteen",
        },
        {"kind": "step", "rank": 0, "step": 0, "t_start_ns": T_NS, "host_ms": 1.0, "gpu_ms": None},
        {
            "kind": "run",
            "event": "end",
            "rank": 0,
            "reason": "exit",
            "steps": 1,
            "written": [],
            "t_ns": T_NS + 10**9,
            "main_cpu_ms": -4.0,
            "main_run_queue_ms": 100.0,
            "threads": 2.5,
        },
    ]
    path = tmp_path / "fake_rank0.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    (marks,) = read_event_tables(path).steps.attrs["run_marks"]
    assert marks.main_cpu_ms_at_start is None and marks.main_cpu_ms_at_end is None
    assert (marks.main_run_queue_ms_at_start, marks.main_run_queue_ms_at_end) == (500.0, 100.0)
    assert (marks.cpus_allowed, marks.cpus, marks.threads) == (None, None, None)  # not counts: left out
    profile = SimpleNamespace(run_marks={0: vars(marks)})
    assert cpu_wait_by_rank(profile) == {}  # the wait ran backwards: no figure, no finding
