"""One minimal reproducer per crash that fuzzing found, so each stays fixed.

All inputs here are hand-made (inline bytes, or tests/fuzz/repro/ with its README), written after
tools/fuzz_campaign.py or tests/fuzz found the crash on a mutated real fixture; the real fixture
is used where the crash was on real, unmutated data.
"""

from __future__ import annotations

import gzip
import json
import pickle
import warnings
from pathlib import Path

import pytest

from parsers.errors import InputError
from parsers.events import read_event_tables
from parsers.memory_stats import read_memory_stats
from parsers.snapshot import read_snapshot
from parsers.trace import read_trace
from tests.fuzz.oracle import check_snapshot, check_trace
from tests.ncu_read import ncu_kernels
from tests.paths import FIXTURES

REPRO = Path(__file__).parent / "repro"
SEEDS_NCU_RAW = FIXTURES / "ncu" / "small_grid" / "raw.csv"


def _write(tmp_path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _kineto(*events, **top) -> bytes:
    return json.dumps({"schemaVersion": 1, **top, "traceEvents": list(events)}).encode()


# --- parsers/trace.py ------------------------------------------------------------------------------


def test_trace_without_python_frames_links_nothing_to_row_0():
    """Found on real data: the gloo capture has no Python frames, and every cpu op and runtime call had
    python_index 0 (conform() fills a missing int column with 0), pointing into an empty table."""
    t = read_trace(FIXTURES / "comm" / "gloo_straggler" / "trace" / "rank0.json.gz")
    assert len(t.python) == 0 and len(t.cpu_ops) > 0
    assert (t.cpu_ops["python_index"] == -1).all()
    assert check_trace(t) == []


def test_trace_without_cpu_ops_or_kernels_links_runtime_calls_to_nothing(tmp_path):
    rt = {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "ts": 10,
        "dur": 2,
        "pid": 1,
        "tid": 1,
        "args": {"correlation": 7},
    }
    t = read_trace(_write(tmp_path, "fake_runtime_only.json", _kineto(rt)))
    assert t.runtime[["gpu_index", "cpu_op_index", "python_index"]].eq(-1).all().all()
    assert check_trace(t) == []


@pytest.mark.parametrize(
    "field,value",
    [("cat", {"a": 1}), ("cat", ["kernel"]), ("ph", ["X"]), ("ph", {"X": 1}), ("name", ["k"]), ("name", {"k": 1})],
)
def test_trace_event_with_an_array_or_object_where_text_was_is_no_crash(tmp_path, field, value):
    """TypeError: unhashable type (found by unknown_enum on the sync_planted capture)."""
    ev = {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "pid": 1, "tid": 1, "args": {"correlation": 1}}
    ok = dict(ev, ts=5)
    t = read_trace(_write(tmp_path, "fake_odd_field.json", _kineto(dict(ev, **{field: value}), ok)))
    assert check_trace(t) == []
    assert len(t.gpu) >= 1


def test_trace_events_without_a_name_get_no_other_events_properties(tmp_path):
    """IndexError in _gpu when no GPU event had a name (swap_columns renamed "name" on the sync_planted
    capture); with some named, a nameless event took the last category's kind / step / file."""

    def ev(cat, ts, name=None, **args):
        e = {"ph": "X", "cat": cat, "ts": ts, "dur": 1, "pid": 1, "tid": 1, "args": args}
        return e if name is None else dict(e, name=name)

    only_nameless = _kineto(ev("kernel", 1, correlation=1), ev("cuda_runtime", 0, correlation=1))
    t = read_trace(_write(tmp_path, "fake_nameless.json", only_nameless))
    assert t.gpu["kind"].tolist() == ["compute"] and t.runtime["sync_kind"].isna().all()
    mixed = _kineto(
        ev("kernel", 1),
        ev("kernel", 5, "ncclDevKernel_AllReduce"),
        ev("user_annotation", 0),
        ev("user_annotation", 3, "ProfilerStep#7"),
        ev("python_function", 0),
        ev("python_function", 4, "train.py(12): main"),
        ev("cuda_runtime", 0),
        ev("cuda_runtime", 6, "cudaDeviceSynchronize"),
    )
    t = read_trace(_write(tmp_path, "fake_mixed.json", mixed))
    assert t.gpu["kind"].tolist() == ["compute", "comm"]
    assert t.annotations["step"].isna().tolist() == [True, False]
    assert t.python["line"].tolist() == [-1, 12] and t.python["file"].isna().tolist() == [True, False]
    assert t.runtime["sync_kind"].isna().tolist() == [True, False]
    assert check_trace(t) == []


@pytest.mark.parametrize("field,value", [("dur", [1]), ("ts", [1]), ("pid", [1]), ("args", {"bytes": [1]})])
def test_trace_numbers_that_are_one_element_lists_are_no_crash(tmp_path, field, value):
    """IndexError: too many indices (found by atheris on the sync_planted capture): when every event of a
    chunk has ts or dur ``[x]``, numpy builds a 2-D array; now such events are skipped or get NaN / -1."""
    ev = {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "pid": 1, "tid": 1, "args": {"correlation": 1}}
    flows = [{"ph": "s", "ts": [1], "id": 1, "pid": 1, "tid": 1}, {"ph": "f", "ts": [2], "id": 1, "pid": 1, "tid": 1}]
    t = read_trace(
        _write(tmp_path, "fake_lists.json", _kineto(dict(ev, **{field: value}), dict(ev, **{field: value}), *flows))
    )
    assert check_trace(t) == []


def test_trace_times_beyond_int64_ns_are_skipped_not_wrapped(tmp_path):
    """A ts or dur of 1e39 µs wrapped around in the int64 ns columns (negative or garbage times)."""
    ev = {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "pid": 1, "tid": 1}
    t = read_trace(
        _write(tmp_path, "fake_huge.json", _kineto(ev, dict(ev, dur=1e39), dict(ev, ts=-1e39), dict(ev, pid=1e30)))
    )
    assert t.gpu[["ts_ns", "dur_ns", "pid"]].values.tolist() == [[1000, 2000, 1], [1000, 2000, -1]]
    assert any(w.startswith("2 complete events") for w in t.warnings)


# --- parsers/snapshot.py -----------------------------------------------------------------------------


def _snapshot(**block_frame) -> dict:
    frame = {"filename": "/work/train.py", "line": 12, "name": "main", **block_frame}
    return {
        "segments": [
            {
                "device": 0,
                "address": 1 << 20,
                "total_size": 2 << 20,
                "stream": 0,
                "blocks": [
                    {
                        "address": 1 << 20,
                        "size": 512,
                        "requested_size": 500,
                        "state": "active_allocated",
                        "frames": [frame],
                    }
                ],
            }
        ],
        "device_traces": [
            [{"action": "alloc", "addr": 1 << 20, "size": 512, "stream": 0, "time_us": 1, "frames": [frame]}]
        ],
    }


@pytest.mark.parametrize("line", [float("inf"), float("nan"), 2**70, "12", None])
def test_snapshot_frame_line_that_is_not_a_line_number_reads_as_0(tmp_path, line):
    """OverflowError / ValueError from int(inf) / int(nan) in frames_table (bad_numbers on the oom pickle)."""
    p = _write(tmp_path, "fake_line.pickle", pickle.dumps(_snapshot(line=line), protocol=4))
    s = read_snapshot(p)
    assert s.frames["line"].tolist() == [0]
    assert check_snapshot(s) == []


@pytest.mark.parametrize(
    "field,value", [("addr", 1e400), ("size", float("inf")), ("addr", 2**70), ("stream", -(2**64))]
)
def test_snapshot_history_number_beyond_int64_is_an_input_error(tmp_path, field, value):
    """OverflowError from int(inf) in _trace and from np.asarray(..., int64) (bad_numbers, both forms)."""
    data = _snapshot()
    data["device_traces"][0][0][field] = value
    p = _write(tmp_path, "fake_big.pickle", pickle.dumps(data, protocol=4))
    with pytest.raises(InputError, match="fake_big.pickle"):
        read_snapshot(p)


def test_snapshot_stream_handle_above_2_63_is_still_read_as_its_signed_twin(tmp_path):
    data = _snapshot()
    data["device_traces"][0][0]["stream"] = (1 << 64) - 5
    data["segments"][0]["stream"] = (1 << 64) - 5
    s = read_snapshot(_write(tmp_path, "fake_stream.pickle", pickle.dumps(data, protocol=4)))
    assert s.trace["stream"].tolist() == [-5] and s.segments["stream"].tolist() == [-5]


@pytest.mark.parametrize("value", [float("inf"), 2**70])
def test_snapshot_segment_number_beyond_int64_is_an_input_error(tmp_path, value):
    data = _snapshot()
    data["segments"][0]["address"] = value
    with pytest.raises(InputError, match="address"):
        read_snapshot(_write(tmp_path, "fake_seg.pickle", pickle.dumps(data, protocol=4)))


@pytest.mark.parametrize(
    "frames",
    [
        7,
        "frames",
        {"filename": "x"},
        [{"filename": {"a": 1}, "line": 1, "name": "f"}],
        [{"filename": ["x.py"], "line": [1], "name": "f"}],
    ],
)
def test_snapshot_frames_that_are_not_a_list_of_frames_are_no_crash(tmp_path, frames):
    """TypeError: 'int' object is not iterable / unhashable type: 'dict' in the stack interner (swap_columns,
    bad_numbers on the oom pickle)."""
    data = _snapshot()
    data["device_traces"][0][0]["frames"] = frames
    s = read_snapshot(_write(tmp_path, "fake_frames.pickle", pickle.dumps(data, protocol=4)))
    assert check_snapshot(s) == []


def test_snapshot_lone_surrogate_in_a_path_is_replaced_not_a_crash(tmp_path):
    """UnicodeEncodeError from pyarrow building the frames table (encoding on the snapshot JSON)."""
    raw = json.dumps(_snapshot(filename="/work/tr\udce9in.py")).encode()  # json.dumps writes the \\udce9 escape
    assert b"\\udce9" in raw
    s = read_snapshot(_write(tmp_path, "fake_surrogate.json.gz", gzip.compress(raw)))
    assert "\ufffd" in s.frames["filename"].iloc[0] and s.trace["location"].iloc[0].endswith("in.py:12")
    assert check_snapshot(s) == []


def test_snapshot_external_annotations_that_are_not_a_list(tmp_path):
    data = dict(_snapshot(), external_annotations=5)
    s = read_snapshot(_write(tmp_path, "fake_ann.pickle", pickle.dumps(data, protocol=4)))
    assert s.metadata["external_annotations"] == 0


@pytest.mark.parametrize(
    "memo",
    [b"r" + (1 << 28).to_bytes(4, "little"), b"r\xff\xff\xff\x7f", b"p268435456\n", b"p99999999999999999999\n"],
    ids=["LONG_BINPUT 2**28", "LONG_BINPUT 2**31-1", "PUT 2**28", "PUT 10**20"],
)
def test_pickle_memo_index_bomb_is_refused_small(tmp_path, memo):
    """A 6 KB mutated oom snapshot ran 10 s and took 3.5 GiB (found by atheris): the C unpickler sizes its
    memo array by the largest PUT / LONG_BINPUT index. Hand-made: one such opcode after PROTO 4. The memory is
    the outcome checked (its 10 s followed from it; a wall time here would depend on the machine's load)."""
    p = _write(tmp_path, "fake_memo_bomb.pickle", b"\x80\x04N" + memo + b".")
    before = _peak_rss_reset()
    with pytest.raises(InputError, match="fake_memo_bomb.pickle"):
        read_snapshot(p)
    if before is not None:
        assert _peak_rss_mib() - before < 1100  # at most the 1 GiB allowance, never the 4+ GiB it asks for


def _peak_rss_reset():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return _peak_rss_mib()


def _peak_rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))


# --- parsers/events.py and parsers/memory_stats.py -------------------------------------------------------


@pytest.mark.parametrize("step", ["1e30", "9223372036854775808", "-9223372036854775809"])
def test_event_step_beyond_int64_is_an_input_error(tmp_path, step):
    """OverflowError: Python int too large to convert to C long, in conform (bad_numbers on a run's events)."""
    line = '{"kind":"step","rank":0,"step":%s,"t_start_ns":1,"host_ms":1.0,"gpu_ms":1.0}\n' % step
    with pytest.raises(InputError, match=r"fake_step\.jsonl: line 1: step"):
        read_event_tables(_write(tmp_path, "fake_step.jsonl", line.encode()))


def test_user_step_timing_name_with_a_lone_surrogate_is_an_input_error(tmp_path):
    """UnicodeEncodeError from pandas building the steps table (json.loads lets "\\ud800" through)."""
    raw = b'[{"name": "st\\ud800ep", "step": 1, "elapsed_ms": 2.0}]'
    with pytest.raises(InputError, match=r"fake_name\.json: entry 1: name is not valid Unicode"):
        read_event_tables(_write(tmp_path, "fake_name.json", raw))


@pytest.mark.parametrize(
    "record",
    [{"step": 1e400}, {"step": 10**30}, {"rank": -(10**30)}, {"stats": {"allocated_bytes.all.current": 10**400}}],
)
def test_memory_stats_number_beyond_range_is_an_input_error(tmp_path, record):
    base = {
        "kind": "memory_stats",
        "rank": 0,
        "step": 1,
        "t_ns": 1,
        "framework": "torch",
        "stats": {"allocated_bytes.all.current": 1},
    }
    text = json.dumps({**base, **record}) + "\n"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InputError, match=r"fake_stats\.jsonl: line 1"):
            read_memory_stats(_write(tmp_path, "fake_stats.jsonl", text.encode()))


# --- parsers/run_folder.py ------------------------------------------------------------------------------


def test_manifest_with_a_non_utf8_argument_reads_and_the_report_prints(tmp_path):
    """`gpudiag report` stopped with UnicodeEncodeError (a traceback) printing a manifest string with a lone
    surrogate: json.dumps writes "\\udce9" for a command-line argument that was not UTF-8. Hand-made from
    the sync_planted run folder (its artifacts cut to a window, tests/fuzz/seeds.py)."""
    from click.testing import CliRunner

    from diagnose.cli import main
    from parsers.run_folder import read_manifest
    from tests.fuzz.mutations import write_tree
    from tests.fuzz.seeds import run_files

    files = dict(run_files("sync_planted"))
    manifest = json.loads(files["manifest.json"])
    manifest["command"] = ["python", "tr\udce9in.py"]
    manifest["gpus"][0]["name"] = "NVIDIA H200 \ud800"
    files["manifest.json"] = json.dumps(manifest).encode()
    assert b"\\udce9" in files["manifest.json"]
    write_tree(tmp_path / "run", files)
    m = read_manifest(tmp_path / "run" / "manifest.json")
    assert m["command"][1] == "tr\ufffdin.py" and m["gpus"][0]["name"].endswith("\ufffd")
    r = CliRunner().invoke(main, ["report", str(tmp_path / "run"), "-o", str(tmp_path / "r.html")])
    assert r.exception is None and r.exit_code == 0, r.output


# --- parsers/ncu_csv.py ---------------------------------------------------------------------------------------

# found by the encoding mutation on small_grid/raw.csv (bare CR line ends: csv.Error) and by byte_flip on
# runs/ncu_mlp's raw.csv (a latin-1 byte in a row: UnicodeDecodeError); fixed in ncu_csv._csv_bytes
NCU_CRASHES = ["ncu_cr_line_ends.csv", "ncu_latin1_cell.csv"]


def test_ncu_csv_with_cr_or_crlf_line_ends_reads_like_the_original(tmp_path):
    original = SEEDS_NCU_RAW.read_bytes()
    want = ncu_kernels(SEEDS_NCU_RAW)["l2_hit_pct"].tolist()
    for name, data in (("cr", original.replace(b"\n", b"\r")), ("crlf", original.replace(b"\n", b"\r\n"))):
        path = tmp_path / f"fake_{name}.csv"
        path.write_bytes(data)
        assert ncu_kernels(path)["l2_hit_pct"].tolist() == want


def test_ncu_csv_latin1_byte_names_byte_and_line():
    with pytest.raises(InputError, match=r"is not UTF-8 text \(byte \d+, line 3\)"):
        ncu_kernels(REPRO / "ncu_latin1_cell.csv")


@pytest.mark.parametrize("name", NCU_CRASHES)
def test_ncu_csv_reproducer_is_an_input_error_or_reads(name):
    """Hand-made reproducers of the two ncu_csv crashes (tests/fuzz/repro/README.md): one kernel row each."""
    path = REPRO / name
    try:
        df = ncu_kernels(path)
    except InputError as e:
        assert str(path) in str(e)
    else:
        assert len(df) == 1


def test_ncu_csv_record_with_a_swallowed_line_end_is_an_input_error():
    path = REPRO / "ncu_byte_flip_stray_quote.csv"
    with pytest.raises(InputError, match="is not a well-formed CSV"):
        ncu_kernels(path)
