"""Pieces of a trace built in the helper process (parsers/piece_helper.py) give the tables one process gives.

Small real traces are cut into 4 KiB pieces so that every one of them spans many pieces, half of which go
to the helper. The odd inputs (a cut inside a string, a piece msgspec declines, a helper that dies) are
made from the same real traces and named as such.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os

import pandas as pd
import pytest

import parsers.trace as trace_module
from parsers import piece_helper, trace_stream
from parsers.trace import read_trace
from tests.paths import FIXTURES
from tests.trace.helpers import SAMPLED_RANK0, SYNC_PLANTED

TABLES = ("gpu", "runtime", "cuda_sync", "cpu_ops", "python", "annotations", "flows", "other", "collectives")
NCCL = FIXTURES / "comm" / "hta" / "nccl_parser_config_nccl_data.json.gz"
JAX = FIXTURES / "trace" / "jax" / "perfetto_trace.json.gz"


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(trace_stream, "PIECE_BYTES", 4096)
    monkeypatch.delenv("GPUDIAG_PIECE_HELPER", raising=False)
    sent = {"pieces": 0}
    submit = piece_helper.PieceHelper.submit

    def counting_submit(self, raw):
        sent["pieces"] += 1
        submit(self, raw)

    monkeypatch.setattr(piece_helper.PieceHelper, "submit", counting_submit)
    return sent


def _serial(path, monkeypatch):
    monkeypatch.setenv("GPUDIAG_PIECE_HELPER", "0")
    try:
        return read_trace(path)
    finally:
        monkeypatch.delenv("GPUDIAG_PIECE_HELPER")


def _assert_same(a, b):
    for table in TABLES:
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table), check_exact=True, obj=table)
    assert (a.rank, a.format, a.warnings, a.metadata) == (b.rank, b.format, b.warnings, b.metadata)


@pytest.mark.parametrize("path", [SAMPLED_RANK0, SYNC_PLANTED, NCCL, JAX], ids=lambda p: p.parent.name)
@pytest.mark.parametrize("through", ["shared slot", "pipe"])
def test_helper_builds_half_the_pieces_into_the_same_tables(path, through, small_pieces, monkeypatch):
    if through == "pipe":  # a piece larger than the shared slot (one event over 16 MiB) goes through the pipe
        init = piece_helper.PieceHelper.__init__
        monkeypatch.setattr(piece_helper.PieceHelper, "__init__", lambda self, build, slot_bytes: init(self, build, 64))
    with_helper = read_trace(path)
    pieces_sent = small_pieces["pieces"]
    assert pieces_sent >= 2
    assert multiprocessing.active_children() == []  # the helper is gone once the trace is read
    serial = _serial(path, monkeypatch)
    assert small_pieces["pieces"] == pieces_sent  # the serial read sent none
    _assert_same(with_helper, serial)
    assert len(with_helper.gpu) > 0 or len(with_helper.other) > 0


def test_a_trace_within_one_piece_starts_no_helper(monkeypatch):
    started = []
    monkeypatch.setattr(piece_helper.PieceHelper, "__init__", lambda self, build: started.append(build))
    t = read_trace(SAMPLED_RANK0)
    assert started == [] and len(t.gpu) == 1204


def _renamed_copy(tmp_path, name: str, rename) -> str:
    """A real trace with each event's name changed by ``rename`` (fake, for odd input), one event per line."""
    with gzip.open(SAMPLED_RANK0) as f:
        doc = json.load(f)
    for e in doc["traceEvents"]:
        if "name" in e:
            e["name"] = rename(e)
    out = tmp_path / name
    out.write_text('{"traceEvents": [\n' + ",\n".join(json.dumps(e) for e in doc["traceEvents"]) + "\n]}")
    return str(out)


def test_a_cut_inside_a_string_is_read_again_in_one_process(tmp_path, small_pieces, monkeypatch):
    # every name ends in '}, {': the last '}, {' of a piece is inside a string, which the helper's unchecked
    # cut cannot tell, so its piece does not parse and the whole trace is read again without the helper
    path = _renamed_copy(tmp_path, "names_with_braces.json", lambda e: f"{e['name']} }}, {{")
    streams = []
    stream = trace_stream._stream
    monkeypatch.setattr(trace_stream, "_stream", lambda *a: streams.append(a[3]) or stream(*a))
    with_helper = read_trace(path)
    assert small_pieces["pieces"] >= 1
    assert len(streams) == 2 and streams[0] is not None and streams[1] is None  # read again, without the helper
    serial = _serial(path, monkeypatch)
    _assert_same(with_helper, serial)
    assert with_helper.gpu["name"].astype(str).str.endswith("}, {").all()
    assert len(with_helper.gpu) == 1204


def test_a_piece_msgspec_declines_is_read_here_with_orjson(tmp_path, small_pieces, monkeypatch):
    # names that are JSON arrays (fake, odd input): msgspec takes no piece with one, orjson reads them as before
    path = _renamed_copy(tmp_path, "array_names.json", lambda e: [e["name"]] if e.get("cat") == "cpu_op" else e["name"])
    with_helper = read_trace(path)
    assert small_pieces["pieces"] >= 2
    serial = _serial(path, monkeypatch)
    _assert_same(with_helper, serial)
    assert len(with_helper.cpu_ops) > 0


def test_a_helper_that_dies_leaves_its_piece_to_this_process(small_pieces, monkeypatch):
    parent = os.getpid()
    build = trace_module._build_piece

    def dying_build(raw):
        if os.getpid() != parent:
            os._exit(9)  # the helper is killed (as for memory) while it builds its first piece
        return build(raw)

    monkeypatch.setattr(trace_module, "_build_piece", dying_build)
    with_helper = read_trace(NCCL)
    assert small_pieces["pieces"] == 1  # after its loss no piece is sent again
    _assert_same(with_helper, _serial(NCCL, monkeypatch))


def _allowed_in_child(queue):
    queue.put(piece_helper.helper_allowed())


def test_no_helper_inside_a_multiprocessing_worker(monkeypatch):
    monkeypatch.delenv("GPUDIAG_PIECE_HELPER", raising=False)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_allowed_in_child, args=(queue,))
    proc.start()
    in_child = queue.get(timeout=30)
    proc.join()
    assert in_child is False
    assert piece_helper.helper_allowed() is (len(os.sched_getaffinity(0)) >= 2)
    monkeypatch.setenv("GPUDIAG_PIECE_HELPER", "0")
    assert piece_helper.helper_allowed() is False


def test_no_helper_to_be_had_reads_alone(small_pieces, monkeypatch):
    def cannot_fork(self, build, slot_bytes):
        raise OSError(11, "Resource temporarily unavailable")  # fake: fork refused by a process limit

    monkeypatch.setattr(piece_helper.PieceHelper, "__init__", cannot_fork)
    alone = read_trace(NCCL)
    assert small_pieces["pieces"] == 0
    _assert_same(alone, _serial(NCCL, monkeypatch))
