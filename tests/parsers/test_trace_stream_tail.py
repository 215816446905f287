"""The end of ``traceEvents`` is found in one scan (issue 21), on real traces and their key orders.

``parsers.trace_stream`` used to parse the last piece at each ``]`` from the end of the file until
one parsed; the HTA NCCL trace holds 11 of them after its events, in its log lines (~0.4 s of a report).
These tests hold it to one parse of the last piece and no whole-file fallback, wherever
``traceEvents`` sits among the keys and whatever the strings and nested arrays hold. Traces marked
"derived" are real ones re-serialised or with one event appended; "fake" ones are hand-made bad input.
"""

from __future__ import annotations

import gzip
import os

import orjson
import pytest

from parsers import trace_stream
from parsers.errors import InputError
from parsers.trace import read_trace
from parsers.trace_events import decode_events
from tests.paths import FIXTURES

NCCL = FIXTURES / "comm" / "hta" / "nccl_parser_config_nccl_data.json.gz"  # keys follow traceEvents
SAMPLED_RANK0 = FIXTURES / "trace" / "hta" / "trace_filter_sampled_rank-0.json.gz"  # traceEvents last
JAX = FIXTURES / "trace" / "jax" / "perfetto_trace.json.gz"  # displayTimeUnit first, then traceEvents
NCCL_EVENTS, RANK0_EVENTS, JAX_EVENTS = 40_573, 4_855, 441
NCCL_TAIL_KEYS = ["INFO", "traceName", "displayTimeUnit", "baseTimeNanoseconds"]
DECODERS = {"orjson": None, "msgspec": decode_events}


def _real(path) -> dict:
    return orjson.loads(gzip.decompress(path.read_bytes()))


def _streamed(path, monkeypatch, decode=None, piece_bytes=None) -> tuple[dict, list, int]:
    """(header, events, how many times a piece was parsed), failing on the whole-file fallback."""
    if piece_bytes is not None:
        monkeypatch.setattr(trace_stream, "PIECE_BYTES", piece_bytes)
    parses = []
    parse_view = trace_stream._parse_view

    def counted(pending, stop, parse):
        parses.append(stop)
        return parse_view(pending, stop, parse)

    def no_fallback(path):
        raise AssertionError("the whole-file fallback ran")

    monkeypatch.setattr(trace_stream, "_parse_view", counted)
    monkeypatch.setattr(trace_stream, "_whole", no_fallback)
    events = []
    header = trace_stream.read_chunks(os.fspath(path), events.extend, events.clear, decode=decode)
    return header, events, len(parses)


def _names_and_times(events) -> list:
    return [(e["name"], e.get("ts")) if isinstance(e, dict) else (e.name, e.ts) for e in events]


@pytest.mark.parametrize("decoder", DECODERS)
def test_nccl_trace_brackets_in_the_log_lines_after_the_events_cost_no_extra_parse(decoder, monkeypatch):
    real = _real(NCCL)
    assert sum(line.count("]") for line in real["INFO"]) == 10  # with INFO's own "]": 11 wrong cuts, each parsed
    header, events, parses = _streamed(NCCL, monkeypatch, DECODERS[decoder])
    assert parses == 1  # 9.8 MB, one piece: parsed once, up to the right "]"
    assert len(events) == NCCL_EVENTS
    assert list(header)[-4:] == NCCL_TAIL_KEYS and header["baseTimeNanoseconds"] == 1711964646000000000
    assert header == {k: v for k, v in real.items() if k != "traceEvents"}
    assert _names_and_times(events[-2:]) == [
        ("Iteration Start: PyTorch Profiler", 4458676388068.751),
        ("Record Window End", 4458677117099.727),
    ]


ORDERS = {
    "events first": lambda keys: ["traceEvents", *keys],
    "events last": lambda keys: [*keys, "traceEvents"],
    "events between deviceProperties and the rest": lambda keys: [keys[0], keys[1], "traceEvents", *keys[2:]],
    "events before deviceProperties": lambda keys: [keys[0], "traceEvents", *keys[1:]],
}


@pytest.mark.parametrize("indent", [False, True], ids=["compact", "indented"])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("piece_bytes", [None, 4096], ids=["one piece", "4 KiB pieces"])
def test_derived_nccl_trace_in_every_key_order(order, indent, piece_bytes, tmp_path, monkeypatch):
    """The real NCCL trace re-serialised with traceEvents first, last, before or after an array key."""
    real = _real(NCCL)
    others = [k for k in real if k != "traceEvents"]
    assert others[1] == "deviceProperties"
    keys = ORDERS[order](others)
    p = tmp_path / "derived_nccl.json"
    p.write_bytes(orjson.dumps({k: real[k] for k in keys}, option=orjson.OPT_INDENT_2 if indent else 0))
    header, events, parses = _streamed(p, monkeypatch, decode_events, piece_bytes)
    assert len(events) == NCCL_EVENTS and _names_and_times(events) == _names_and_times(real["traceEvents"])
    assert list(header) == others and header["deviceProperties"] == real["deviceProperties"]
    if piece_bytes is None:
        assert parses == 1


@pytest.mark.parametrize("path, count", [(SAMPLED_RANK0, RANK0_EVENTS), (JAX, JAX_EVENTS)], ids=["kineto", "jax"])
def test_real_traces_with_events_last_take_one_parse(path, count, monkeypatch):
    header, events, parses = _streamed(path, monkeypatch, decode_events)
    assert parses == 1 and len(events) == count
    assert header == {k: v for k, v in _real(path).items() if k != "traceEvents"}


def test_derived_bare_event_array(tmp_path, monkeypatch):
    p = tmp_path / "derived_rank0_events.json"
    p.write_bytes(orjson.dumps(_real(SAMPLED_RANK0)["traceEvents"]) + b"\n")
    header, events, parses = _streamed(p, monkeypatch, decode_events)
    assert header == {} and len(events) == RANK0_EVENTS and parses == 1


TRICKY_LAST_EVENT = {
    "ph": "X",
    "cat": "cpu_op",
    "name": 'aten::index_put_ "]" [x]}, {',
    "ts": 1682725900000000,
    "dur": 5.0,
    "args": {
        "Input Dims": [[4, 4], [], [[2]]],
        "Input type": ["float", "]", '\\"]', "\\\\"],
        "Concrete Inputs": ["", "]}]", "\\", "[{"],
    },
}


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("piece_bytes", [None, 4096], ids=["one piece", "4 KiB pieces"])
def test_brackets_quotes_and_escapes_in_the_last_event(decoder, piece_bytes, tmp_path, monkeypatch):
    """The real rank-0 trace with one event appended whose strings and args hold "]", "\\"", "\\\\" and nests."""
    real = _real(SAMPLED_RANK0)
    real["traceEvents"].append(TRICKY_LAST_EVENT)
    real["after"] = ["]", {"k": "]}"}, [[]]]
    p = tmp_path / "derived_rank0_tricky_tail.json"
    p.write_bytes(orjson.dumps(real))
    header, events, parses = _streamed(p, monkeypatch, DECODERS[decoder], piece_bytes)
    assert len(events) == RANK0_EVENTS + 1 and header["after"] == ["]", {"k": "]}"}, [[]]]
    assert _names_and_times(events[-1:]) == [(TRICKY_LAST_EVENT["name"], 1682725900000000)]
    if decoder == "orjson":
        assert events[-1]["args"] == TRICKY_LAST_EVENT["args"]
    if piece_bytes is None:
        assert parses == 1


@pytest.mark.parametrize(
    "text, close",
    [
        (b"[]", 1),
        (b'[{"a": "]"}, {"b": [1, [2]]}], "k": "]"}', 28),
        (b'[{"a": "\\"]"}]', 13),  # an escaped quote: the "]" after it is still text
        (b'[{"a": "\\\\"}]', 12),  # an escaped backslash: the quote after it ends the string
        (b'[{"a": "\\\\\\""}] ]', 14),
        (b'[{"a": 1}], "b": [[]]}', 9),
        (b'[{"a": 1}], "b": "' + b"]" * 300 + b'"}', 9),  # more "]" after the close than rfind walks
        (b'[{"a": 1}', None),  # never closed
        (b'[{"a": 1}}]', None),  # a "}" closes the array: not JSON
    ],
)
@pytest.mark.parametrize("scan_marks", [trace_stream._SCAN_MARKS, 3], ids=["one chunk", "3-mark chunks"])
def test_array_close_on_small_fakes(text, close, scan_marks, monkeypatch):
    monkeypatch.setattr(trace_stream, "_SCAN_MARKS", scan_marks)  # depth and string state carried across chunks
    assert trace_stream._array_close(bytearray(text), len(text)) == close
    if close is not None:
        assert orjson.loads(text[: close + 1]) is not None


@pytest.mark.parametrize(
    "name, text, expect",
    [
        ("fake_events_never_closed.json", b'{"traceEvents": [{"ph": "X", "name": "]"}, {"ph": "X"}', "truncated"),
        ("fake_brace_closes_events.json", b'{"traceEvents": [{"ph": "X", "name": "k"}}], "a": "]"}', "invalid JSON"),
        ("fake_garbage_after_events.json", b'{"traceEvents": [{"ph": "X", "name": "k"}], "a": ]]}', "invalid JSON"),
        ("fake_unclosed_string_tail.json", b'{"traceEvents": [{"ph": "X", "name": "k]}]', "truncated"),
    ],
)
def test_bad_tails_are_input_errors(name, text, expect, tmp_path):
    p = tmp_path / name
    p.write_bytes(text)
    with pytest.raises(InputError, match=expect) as e:
        read_trace(p)
    assert name in str(e.value)


def test_deep_nesting_in_the_last_piece_is_still_refused(tmp_path):
    """A fake last event nested 1,000 deep after real events: the scan must not skip the depth cap."""
    real = gzip.decompress(SAMPLED_RANK0.read_bytes())
    deep = b"[" * 1000 + b"]" * 1000
    p = tmp_path / "fake_deep_last_event.json"
    p.write_bytes(real[: real.rindex(b"]")] + b', {"ph": "X", "name": "k", "args": {"a": ' + deep + b"}}]}")
    with pytest.raises(InputError, match="MAX_NESTING_DEPTH"):
        read_trace(p)
