"""The fast trace ingest (issue 21) gives exactly what the general path gives, on real traces.

msgspec's typed structs (parsers.trace_events) against orjson's dicts, the vectorised per-step
clipping and correlation join against the loops and pandas joins they replace, the memoised gaps.
"""

from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest

import parsers.trace as trace_module
from diagnose.derive import trace_timeline as tl
from parsers import trace_stream
from parsers.errors import InputError
from parsers.trace import first_row_of, read_trace
from parsers.trace_events import EventPiece, decode_events
from tests.paths import FIXTURES
from tests.trace.helpers import EVENT_SYNC, SAMPLED_RANK0, SYNC_PLANTED

NCCL = FIXTURES / "comm" / "hta" / "nccl_parser_config_nccl_data.json.gz"
JAX = FIXTURES / "trace" / "jax" / "perfetto_trace.json.gz"
TABLES = ("gpu", "runtime", "cuda_sync", "cpu_ops", "python", "annotations", "flows", "other", "collectives")


def _counting_decoder(monkeypatch) -> dict:
    monkeypatch.setenv("GPUDIAG_PIECE_HELPER", "0")  # counted here: no piece may be decoded in the helper process
    seen = {"structs": 0, "pieces": 0}

    def decode(raw):
        out = decode_events(raw)
        if out is not None:
            seen["pieces"] += 1
            seen["structs"] += len(out)
        return out

    monkeypatch.setattr(trace_module, "decode_events", decode)
    return seen


@pytest.mark.parametrize("path", [SAMPLED_RANK0, SYNC_PLANTED, EVENT_SYNC, NCCL, JAX], ids=lambda p: p.parent.name)
@pytest.mark.parametrize("piece_bytes", [trace_stream.PIECE_BYTES, 4096])
def test_structs_read_the_same_tables_as_dicts(path, piece_bytes, monkeypatch):
    monkeypatch.setattr(trace_stream, "PIECE_BYTES", piece_bytes)
    seen = _counting_decoder(monkeypatch)
    fast = read_trace(path)
    assert seen["structs"] == fast.metadata["events"]  # every event took the typed path
    monkeypatch.setattr(trace_module, "decode_events", lambda raw: None)
    general = read_trace(path)
    for table in TABLES:
        pd.testing.assert_frame_equal(getattr(fast, table), getattr(general, table), obj=table)
    assert (fast.rank, fast.format, fast.warnings, fast.metadata) == (
        general.rank,
        general.format,
        general.warnings,
        general.metadata,
    )


def test_collective_args_come_through_the_structs(monkeypatch):
    seen = _counting_decoder(monkeypatch)
    t = read_trace(NCCL)
    assert seen["pieces"] >= 1
    kernels = t.collectives[t.collectives["source"] == "kernel"]
    assert len(t.collectives) == 48 and len(kernels) == 21
    assert kernels["collective"].iloc[0] == "allreduce" and kernels["pg_ranks"].iloc[0] == "[0, 1]"
    assert kernels["msg_bytes"].iloc[0] == 6_637_568 * 4  # In msg nelems of Float


def test_ill_typed_pieces_are_left_to_orjson():
    assert isinstance(decode_events(b'[{"ph": "X", "ts": 1, "dur": 2, "pid": "Spans"}]'), EventPiece)
    for fake_piece in (
        b'[{"ph": "X", "ts": true}]',  # a bool time
        b'[{"ph": "X", "name": ["k"]}]',  # an array name
        b'[{"ph": "X", "args": [1]}]',  # args not an object
        b"[1, 2]",  # events that are not objects
        b'[{"ph": "X", "ts": 1e400}]',  # beyond a double
        b'[{"ph": "X"',  # cut short
    ):
        assert decode_events(fake_piece) is None, fake_piece


def test_a_piece_orjson_reads_is_still_held_to_the_nesting_cap(tmp_path):
    deep = b"[" * 100_000 + b"]" * 100_000
    for name, args in (("fake_deep_unread_arg.json", b'{"Input Dims": ' + deep + b"}"), ("fake_deep_args.json", deep)):
        p = tmp_path / name
        p.write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": ' + args)
        p.write_bytes(p.read_bytes() + b"}]}")
        with pytest.raises(InputError, match="MAX_NESTING_DEPTH"):
            read_trace(p)


def test_gzip_and_a_bare_event_array_stream_the_same(tmp_path):
    raw = gzip.decompress(SYNC_PLANTED.read_bytes())
    events_at = raw.index(b"[", raw.index(b'"traceEvents"'))
    end = raw.rindex(b"]")
    bare = tmp_path / "bare.json"
    bare.write_bytes(raw[events_at : end + 1])
    a, b = read_trace(SYNC_PLANTED), read_trace(bare)
    pd.testing.assert_frame_equal(a.gpu, b.gpu)
    pd.testing.assert_frame_equal(a.runtime, b.runtime)
    assert len(a.gpu) == 195 and b.rank is None


def test_clip_sums_equal_the_per_window_sums():
    trace = tl.analysed(read_trace(SYNC_PLANTED))
    s, e = tl.merge(trace.gpu["ts_ns"].to_numpy(), trace.gpu["end_ns"].to_numpy())
    gaps = tl.gaps(trace, 2_000.0)
    win = tl.gpu_step_windows(trace, tl.steps(trace))
    lo = np.r_[win["gpu_start_ns"].to_numpy(), s[0] - 10, s[3] + 1, e[-1], s[5], e[2] - 7]
    hi = np.r_[win["gpu_end_ns"].to_numpy(), s[0] + 50, s[3] + 2, e[-1] + 100, s[5] - 3, s[9] + 1]
    for starts, ends in ((s, e), (gaps["start_ns"].to_numpy(), gaps["end_ns"].to_numpy())):
        got = tl.clip_sums(starts, ends, lo, hi)
        want = [tl.clip_sum(starts, ends, int(a), int(b)) for a, b in zip(lo, hi)]
        assert got.tolist() == want
    assert len(win) == 4 and tl.clip_sums(s[:0], e[:0], lo, hi).tolist() == [0] * len(lo)


def test_first_row_of_is_the_first_match_like_a_pandas_join():
    t = read_trace(SYNC_PLANTED)
    corr, gpu_corr = t.runtime["correlation"].to_numpy(), t.gpu["correlation"].to_numpy()
    keys = np.r_[corr, corr[::7], -1, -5]  # ids repeated further on, and no-ids
    queries = np.r_[gpu_corr, -1, corr.max() + 1]
    valid = keys >= 0
    first = pd.Series(np.flatnonzero(valid), index=keys[valid])
    want = first[~first.index.duplicated()].reindex(queries).fillna(-1).astype(np.int64).to_numpy()
    got = first_row_of(keys, queries)
    np.testing.assert_array_equal(got, want)
    assert (got[: len(gpu_corr)] >= 0).sum() == 195  # every GPU row of this trace has its launch call
    assert first_row_of(np.array([-1, -1]), np.array([3, -1])).tolist() == [-1, -1]


def test_gaps_are_worked_out_once_and_each_caller_gets_a_copy():
    trace = tl.analysed(read_trace(SYNC_PLANTED))
    a = tl.gaps(trace, 5_000.0, 2_000.0)
    a.loc[:, "cause"] = "changed"
    b = tl.gaps(trace, 5_000.0, 2_000.0)
    assert (b["cause"] != "changed").all() and len(b) == len(a) == 155
    assert b["cause"].value_counts().to_dict() == tl._gaps(trace, 5_000.0, 2_000.0)["cause"].value_counts().to_dict()
    trace.gpu = trace.gpu.iloc[:100].reset_index(drop=True)  # another table: worked out again
    assert len(tl.gaps(trace, 5_000.0, 2_000.0)) < len(b)


def test_names_at_looks_up_through_the_categories():
    ops = read_trace(SAMPLED_RANK0).cpu_ops
    rows = np.r_[np.arange(0, len(ops), 3), len(ops) - 1]
    got = tl.names_at(ops["name"], rows)
    want = ops["name"].astype(object).to_numpy()[rows]
    assert got.tolist() == want.tolist() and got[0] == want[0]
