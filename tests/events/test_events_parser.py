"""parsers.events: gpudiag's JSONL, the user CSV/JSON formats, and bad inputs by line."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from parsers.errors import InputError
from parsers.events import STEPS_SCHEMA, SYNCS_SCHEMA, read_event_tables
from parsers.registry import detect
from parsers.schema import missing_columns
from tests.events.conftest import BAD, RUN_ONLY_EVENTS

STEP = {"kind": "step", "rank": 1, "step": 3, "t_start_ns": 1796239003581976984, "host_ms": 12.5, "gpu_ms": 11.9}
SYNC = {
    "kind": "sync",
    "rank": 1,
    "step": 3,
    "t_ns": 1796239003590000000,
    "dur_ns": 812000,
    "op": "aten::item",
    "file": "/abs/train.py",
    "line": 19,
    "function": "main",
    "stack": ["/abs/train.py:19 main", "/abs/run.py:4 <module>"],
}


def jsonl(*records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_real_run_header_only_log_reads_as_empty_tables():
    steps, syncs, _ = read_event_tables(RUN_ONLY_EVENTS)
    assert len(steps) == 0 and len(syncs) == 0
    assert missing_columns(steps, STEPS_SCHEMA) == [] and missing_columns(syncs, SYNCS_SCHEMA) == []
    assert detect(RUN_ONLY_EVENTS).kind == "events"


def test_jsonl_step_and_sync_records(tmp_file):
    path = tmp_file("fake_rank1.jsonl", jsonl({"kind": "run", "rank": 1}, STEP, SYNC, {"kind": "from_the_future"}))
    steps, syncs, _ = read_event_tables(path)
    not_recorded = ["overhead_us", "input_ms", "input_from", "backward_ms", "optimizer_ms", "forward_ms"]
    not_recorded += ["backward_passes"]  # gradient accumulation's micro-batches
    not_recorded += ["dispatch_ms", "ready_ms", "queued_ms"]  # a JAX step's samples
    assert steps.drop(columns=not_recorded).to_dict("records") == [
        {
            "rank": 1,
            "step": 3,
            "name": "step",
            "t_start_ns": 1796239003581976984.0,
            "host_ms": 12.5,
            "gpu_ms": 11.9,
            "instrumented": False,
            "source": "",
        }
    ]
    assert (
        steps["overhead_us"].isna().all() and steps["input_ms"].isna().all() and (steps["input_from"] == "").all()
    )  # not recorded
    assert steps["backward_ms"].isna().all() and steps["optimizer_ms"].isna().all() and steps["forward_ms"].isna().all()
    assert steps[["dispatch_ms", "ready_ms", "queued_ms"]].isna().all().all()
    assert steps["step"].dtype == "int64"
    sync = syncs.iloc[0]
    assert sync["location"] == "/abs/train.py:19" and sync["op"] == "aten::item"
    assert sync["dur_ns"] == 812000.0 and sync["line"] == 19.0
    assert sync["stack"] == ("/abs/train.py:19 main", "/abs/run.py:4 <module>")
    assert sync["library_location"] is None  # not written: the user's code made the call


def test_step_source_is_kept_and_unknown_sources_are_empty(tmp_file):
    records = jsonl(dict(STEP, source="backward"), dict(STEP, step=4, source="time"), dict(STEP, step=5, source="<x>"))
    steps = read_event_tables(tmp_file("fake_sources.jsonl", records)).steps
    assert steps["source"].tolist() == ["backward", "time", ""]


def test_own_time_per_step_is_read_as_microseconds(tmp_file):
    steps = read_event_tables(
        tmp_file("fake_own.jsonl", jsonl(dict(STEP, overhead_us=21.437), dict(STEP, step=4)))
    ).steps
    assert steps["overhead_us"].dtype == "float64"
    assert steps["overhead_us"].iloc[0] == 21.437 and pd.isna(steps["overhead_us"].iloc[1])


def test_input_wait_per_step_is_read_in_ms_and_nan_where_absent(tmp_file):
    records = jsonl(dict(STEP, input_ms=9.75), dict(STEP, step=4, input_ms=0.0), dict(STEP, step=5))
    steps = read_event_tables(tmp_file("fake_input.jsonl", records)).steps
    assert steps["input_ms"].dtype == "float64"
    assert steps["input_ms"].tolist()[:2] == [9.75, 0.0] and pd.isna(steps["input_ms"].iloc[2])
    with pytest.raises(InputError, match="input_ms should be a duration"):
        read_event_tables(tmp_file("fake_negative_input.jsonl", jsonl(dict(STEP, input_ms=-1.0))))


def test_sync_without_user_frame_has_no_location(tmp_file):
    record = dict(SYNC, file=None, line=None, function=None, stack=[], dur_ns=None)
    syncs = read_event_tables(tmp_file("fake_nofile.jsonl", jsonl(record))).syncs
    assert syncs["location"].iloc[0] is None
    assert syncs["dur_ns"].isna().all()


def test_partial_last_line_is_dropped_with_a_warning():
    with pytest.warns(UserWarning, match="line 3 is cut short"):
        steps = read_event_tables(BAD / "events_partial_last_line.jsonl").steps
    assert steps["step"].tolist() == [0, 1]
    assert "line 3" in steps.attrs["warnings"][0]


def test_user_csv_elapsed(tmp_file):
    path = tmp_file("fake_steps.csv", "name,step,elapsed_ms\nstep,0,30.5\nstep,1,20\nforward,1,8.25\n")
    assert detect(path).kind == "events"
    steps, syncs, _ = read_event_tables(path)
    assert steps[["name", "step", "gpu_ms"]].values.tolist() == [
        ["step", 0, 30.5],
        ["step", 1, 20.0],
        ["forward", 1, 8.25],
    ]
    assert steps["host_ms"].isna().all() and steps["t_start_ns"].isna().all() and len(syncs) == 0


def test_user_csv_start_end_with_optional_columns(tmp_file):
    path = tmp_file("fake_span.csv", "step,name,start_ms,end_ms,rank,host_ms\n0,step,100.0,112.5,2,15\n")
    assert detect(path).kind == "events"
    row = read_event_tables(path).steps.iloc[0]
    assert (row["rank"], row["gpu_ms"], row["host_ms"]) == (2, 12.5, 15.0)


def test_user_json_list(tmp_file):
    path = tmp_file(
        "fake_steps.json",
        json.dumps(
            [
                {"name": "step", "step": 0, "elapsed_ms": 10.0},
                {"name": "step", "step": 1, "start_ms": 10, "end_ms": 21.5},
            ]
        ),
    )
    assert detect(path).kind == "events"
    steps = read_event_tables(path).steps
    assert steps["gpu_ms"].tolist() == [10.0, 11.5]


@pytest.mark.parametrize(
    "name, message",
    [
        ("events_empty.jsonl", "is empty"),
        ("events_truncated_middle.jsonl", r"line 2: expected one JSON object per line, found invalid JSON"),
        ("events_missing_columns.csv", r"line 1: the CSV header lacks elapsed_ms \(or start_ms and end_ms\)"),
        ("events_negative_duration.csv", r"line 3: elapsed_ms should be a duration ≥ 0, found '-3.0'"),
        ("events_end_before_start.csv", r"line 3: end_ms \(5.0\) is before start_ms \(10.0\)"),
        ("events_nan_duration.json", r"finite numbers, found NaN"),
        ("events_not_a_number.csv", r"line 4: elapsed_ms should be a number, found 'fast'"),
    ],
)
def test_bad_inputs(name, message):
    with pytest.raises(InputError, match=message) as err:
        read_event_tables(BAD / name)
    assert name in str(err.value)


@pytest.mark.parametrize(
    "record, message",
    [
        (dict(STEP, host_ms=None, gpu_ms=None), "a step record needs host_ms or gpu_ms"),
        (dict(STEP, gpu_ms=-1.0), "gpu_ms should be a duration"),
        (dict(STEP, overhead_us=-2.0), "overhead_us should be a duration"),
        (dict(STEP, step="three"), "step should be a number"),
        (dict(STEP, step=2.5), "step should be a whole number"),
        ({k: v for k, v in STEP.items() if k != "step"}, "step is missing"),
        (dict(SYNC, dur_ns=-5), "dur_ns should be a duration"),
        (dict(SYNC, stack="not a list"), "stack should be a list"),
    ],
)
def test_bad_record_names_its_line(tmp_file, record, message):
    path = tmp_file("fake_bad.jsonl", jsonl(STEP, record, STEP))
    with pytest.raises(InputError, match=f"line 2: {message}"):
        read_event_tables(path)


def test_non_object_line_and_only_a_partial_line(tmp_file):
    with pytest.raises(InputError, match="line 2: expected a JSON object, found list"):
        read_event_tables(tmp_file("fake_list_line.jsonl", jsonl(STEP) + "[1, 2]\n" + jsonl(STEP)))
    with pytest.raises(InputError, match="no complete event record"):
        read_event_tables(tmp_file("fake_only_partial.jsonl", '{"kind": "st'))


def test_user_json_entry_errors(tmp_file):
    with pytest.raises(InputError, match=r"entry 2: expected an object"):
        read_event_tables(tmp_file("fake_entries.json", '[{"name": "step", "step": 0, "elapsed_ms": 1}, 3]'))
    with pytest.raises(InputError, match=r"line 2: expected a JSON list"):
        read_event_tables(tmp_file("fake_broken.json", '[{"name": "step", "step": 0,\n "elapsed_ms": }]'))
