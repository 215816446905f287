"""Hostile and broken snapshots: clear InputError or a warning, never code execution, a crash or a hang."""

from __future__ import annotations

import gzip
import os
import pickle
import pickletools
import subprocess
import sys

import pytest

from diagnose.analysis import run_analyzer
from diagnose.analyzers import fragmentation
from parsers.errors import InputError
from parsers.restricted_pickle import loads_plain
from parsers.snapshot import read_snapshot
from tests.memory.conftest import BAD, ROOT, fake_profile


def fake_os_system_pickles(marker) -> dict[str, bytes]:
    """Pickles that each try to run `touch <marker>` by a different opcode path."""
    cmd = f"touch {marker}".encode()

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    proto0_global = b"cos\nsystem\n(S'" + cmd + b"'\ntR."
    inst = b"(S'" + cmd + b"'\nios\nsystem\n."
    stack_global = (
        b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x94\x8c" + bytes([len(cmd)]) + cmd + b"\x94\x85\x94R\x94."
    )
    posix = b"cposix\nsystem\n(S'" + cmd + b"'\ntR."
    builtins_exec = b"cbuiltins\nexec\n(S'import os; os.system(\"touch " + str(marker).encode() + b"\")'\ntR."
    persistent = b"\x80\x02P0\n."
    return {
        "reduce_protocol2": pickle.dumps(Evil(), protocol=2),
        "reduce_protocol5": pickle.dumps(Evil(), protocol=5),
        "global_reduce": proto0_global,
        "inst": inst,
        "stack_global": stack_global,
        "posix": posix,
        "builtins_exec": builtins_exec,
        "persistent_id": persistent,
        "ext": b"\x80\x02\x82\x01)R.",
    }  # EXT1 code 1 (copyreg registry) then REDUCE


def test_the_hostile_pickles_are_real_attacks(tmp_path):
    """Sanity: the stock unpickler would have run the first one (in a child, so this process stays clean)."""
    marker = tmp_path / "stock_ran"
    data = fake_os_system_pickles(marker)["global_reduce"]
    subprocess.run(
        [sys.executable, "-c", "import pickle,sys; pickle.loads(sys.stdin.buffer.read())"],
        input=data,
        check=True,
        timeout=30,
    )
    assert marker.exists()


@pytest.mark.parametrize("name", list(fake_os_system_pickles("x")))
def test_pickle_that_tries_to_run_code_is_refused_and_nothing_runs(tmp_path, name):
    marker = tmp_path / "pwned"
    data = fake_os_system_pickles(marker)[name]
    for payload in (data, gzip.compress(data)):
        path = tmp_path / f"fake_{name}.pickle"
        path.write_bytes(payload if payload[:1] == b"\x80" or payload[:2] == b"\x1f\x8b" else b"\x80\x02" + payload)
        with pytest.raises(InputError) as err:
            read_snapshot(path)
        assert str(path) in str(err.value)
        assert not marker.exists()
    with pytest.raises(InputError) as err:
        loads_plain(data, "fake.pickle")
    assert "Nothing was run" in str(err.value) or "malformed" in str(err.value)
    assert not marker.exists()


def test_refusal_names_the_global_it_asked_for(tmp_path):
    data = fake_os_system_pickles(tmp_path / "m")["global_reduce"]
    with pytest.raises(InputError, match=r"os\.system"):
        loads_plain(data, "fake.pickle")
    ops = {op.name for op, _, _ in pickletools.genops(data)}
    assert {"GLOBAL", "REDUCE"} <= ops


def test_non_plain_types_are_refused():
    with pytest.raises(InputError, match="set"):
        loads_plain(pickle.dumps({"segments": {1, 2}}, protocol=4), "fake.pickle")
    with pytest.raises(InputError, match="bytearray"):
        loads_plain(pickle.dumps([bytearray(b"x")], protocol=5), "fake.pickle")
    assert loads_plain(pickle.dumps({"a": [1, 2.5, (b"x", None, True)]}), "ok") == {"a": [1, 2.5, (b"x", None, True)]}


def test_truncated_pickle_is_an_input_error():
    path = BAD / "snapshot_truncated.pickle"
    with pytest.raises(InputError, match="ends early|malformed") as err:
        read_snapshot(path)
    assert str(path) in str(err.value)


def test_truncated_gzip_is_an_input_error(tmp_path):
    data = (ROOT / "fixtures" / "memory" / "oom" / "snapshot.pickle.gz").read_bytes()
    path = tmp_path / "fake_cut.pickle.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="gzip"):
        read_snapshot(path)


def test_snapshot_without_trace_warns_and_analyzer_says_not_measured():
    snap = read_snapshot(BAD / "snapshot_no_trace.json")
    assert len(snap.trace) == 0 and len(snap.segments) == 1
    assert any("no allocator history" in w for w in snap.warnings)
    profile = fake_profile()
    profile.snapshots[0] = snap
    result = run_analyzer(fragmentation, profile)
    ids = [f.id for f in result.findings]
    assert "fragmentation.not_measured" in ids
    assert result.summary["snapshot_reserved_bytes"] == 2097152
    assert result.summary["snapshot_allocated_bytes"] == 512


def test_empty_trace_warns():
    snap = read_snapshot(BAD / "snapshot_empty_trace.json")
    assert len(snap.trace) == 0
    assert any("history is empty" in w for w in snap.warnings)
    profile = fake_profile()
    profile.snapshots[0] = snap
    assert "fragmentation.not_measured" in [f.id for f in run_analyzer(fragmentation, profile).findings]


def test_unknown_action_is_kept_with_a_warning_and_replay_goes_on():
    snap = read_snapshot(BAD / "snapshot_unknown_action.json")
    assert snap.trace["action"].tolist() == ["segment_alloc", "defragment", "alloc"]
    assert any("'defragment' ×1" in w for w in snap.warnings)
    assert snap.trace["location"].tolist()[2] == "/home/u/fake_train.py:7"
    profile = fake_profile()
    profile.snapshots[0] = snap
    result = run_analyzer(fragmentation, profile)
    assert result.summary["snapshot_agreement_pct"] == 100.0
    assert result.meta["replay_mismatches"] == 0
    assert any("defragment" in w for w in result.meta["warnings"])


@pytest.mark.parametrize(
    "text,match",
    [
        (b'{"segments": 3}', "'segments' to be a list"),
        (b'{"schema": "gpudiag.snapshot/9", "segments": []}', "newer than this gpudiag"),
        (b'{"schema": "other/1", "segments": []}', "expected schema"),
        (
            b'{"segments": [], "device_traces": [[{"action": "alloc", "addr": "x", "size": 1}]]}',
            r"device_traces\[0\]\[0\]",
        ),
        (b'{"segments": [{"address": 1}]}', "total_size"),
        (b"[1, 2]", "expected a memory snapshot"),
        (b"not json at all", "neither"),
    ],
)
def test_malformed_json_snapshots_are_input_errors(tmp_path, text, match):
    path = tmp_path / "fake_bad.json"
    path.write_bytes(text)
    with pytest.raises(InputError, match=match):
        read_snapshot(path)


def test_empty_file_is_an_input_error(tmp_path):
    path = tmp_path / "fake_empty.pickle"
    path.write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        read_snapshot(path)


@pytest.mark.parametrize("name", ["snapshot_truncated.pickle", "fake_evil"])
def test_cli_exits_2_without_traceback(tmp_path, name):
    if name == "fake_evil":
        marker = tmp_path / "pwned"
        path = tmp_path / "fake_evil.pickle"
        path.write_bytes(fake_os_system_pickles(marker)["reduce_protocol2"])
    else:
        path = BAD / name
    proc = subprocess.run(
        [sys.executable, "-m", "diagnose", "report", str(path), "-o", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert str(path) in proc.stderr + proc.stdout
    if name == "fake_evil":
        assert not marker.exists()


def test_fake_corrupt_history_is_replayed_with_mismatches_not_a_crash():
    """The real churn history with two entries moved by 512 bytes and two dropped (found by mutating it):
    the free-block maps of the replay fell out of step and `gpudiag report` ended in a KeyError."""
    from diagnose.derive.memory_replay import replay
    from diagnose.ingest.profile_data import Profile
    from parsers.snapshot import snapshot_from_dict
    from tests.memory.conftest import snapshot_path

    path = snapshot_path("churn")
    raw = loads_plain(gzip.decompress(path.read_bytes()), path)
    trace = raw["device_traces"][0]
    for op, i in (("addr", 1704), ("del", 1887), ("del", 2084), ("addr", 2348)):  # indexes after the earlier ops
        if op == "del":
            del trace[i]
        else:
            trace[i] = dict(trace[i], addr=trace[i]["addr"] + (-512 if i == 1704 else 512))
    snapshot = snapshot_from_dict(raw, "fake_corrupt_churn")
    replayed = replay(snapshot, 0)
    assert replayed.meta["mismatches"] >= 2
    result = run_analyzer(fragmentation, Profile(snapshots={0: snapshot}))
    assert any(f.id.startswith("fragmentation.") for f in result.findings)
