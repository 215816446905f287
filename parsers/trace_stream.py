"""Read a chrome-trace JSON (plain or gzip) as a header dict plus chunks of its ``traceEvents``.

Loading a 1 GB trace with one ``orjson.loads`` costs several GB of Python objects at once.
Instead the decompressed bytes are read in pieces and cut at event boundaries (``}, {``);
each piece is parsed on its own and handed to the caller, then dropped. A cut is accepted
only if the piece parses, so a ``}, {`` inside a string or a nested ``args`` list merely moves
the cut to an earlier boundary. The last piece ends at the ``]`` that closes ``traceEvents``, found by
one vectorised pass over its brackets and quotes (:func:`_array_close`), not by parsing at every ``]``
of what follows (a trace's log lines are full of them). Anything unexpected falls back to one
whole-file parse, whose error (if any) becomes the :class:`InputError`.

A caller may pass ``decode``, a faster typed decoder for a piece (``parsers.trace_events``, msgspec) that
returns None for what it does not take; orjson reads those pieces. With ``decode`` the bytes are not
scanned for nesting as they are read (``parsers.limits``, ~3 s of a 1 GB trace): what ``decode`` takes
keeps only scalars, and every piece, header and tail that orjson turns into Python objects is checked
against ``MAX_NESTING_DEPTH`` first, so the cap still guards every object built.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

try:  # orjson is a dependency; the stdlib fallback keeps gpudiag working where it is missing
    import orjson as _json_impl

    _loads = _json_impl.loads  # bytes in, like the fallback
    JSONDecodeError = _json_impl.JSONDecodeError
except ImportError:  # pragma: no cover - exercised on machines without orjson
    import json as _json_impl

    def _loads(raw):
        return _json_impl.loads(bytes(raw).decode("utf-8") if isinstance(raw, (bytes, bytearray, memoryview)) else raw)

    JSONDecodeError = ValueError

from parsers.errors import InputError
from parsers.limits import check_json_nesting, limit, nesting_error, open_input
from parsers.piece_helper import HelperLost, PieceHelper, helper_allowed

PIECE_BYTES = 16 * 2**20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_JSON_ESCAPE = re.compile(rb"\\.", re.S)  # a backslash and the byte it escapes
_NOT_STRUCTURAL = bytes(c for c in range(256) if c not in b'[]{}"')
_DEPTH_STEP = np.zeros(256, dtype=np.int8)
_DEPTH_STEP[list(b"[{")] = 1
_DEPTH_STEP[list(b"]}")] = -1
_SCAN_MARKS = 4 << 20  # brackets and quotes walked at a time: bounds the scan's arrays to ~30 MB
_CLOSERS_BY_RFIND = 256  # past this many "]" after the close, locate it with numpy instead


class _Fallback(Exception):
    """The streaming cut failed; parse the whole file instead."""


class _BadCut(Exception):
    """A piece sent to the helper unchecked did not parse: its cut was inside a string. Read again here alone."""


class PieceBuilds:
    """How a reader builds a whole piece into its own result, so that a helper process can build some.

    ``build(raw)``: a piece's JSON array bytes to a picklable result, or None when it does not take them
    (it runs in the forked helper, :mod:`parsers.piece_helper`); ``of_events(events)``: the same result
    from events parsed here; ``take(result)``: merge one into the reader's tables, called in file order.
    """

    def __init__(self, build: Callable[[bytes], Any], of_events: Callable[[list], Any], take: Callable[[Any], None]):
        self.build, self.of_events, self.take = build, of_events, take


def read_chunks(
    path: str,
    on_events: Callable[[list], None],
    reset: Callable[[], None],
    decode: Callable[[bytes], list | None] | None = None,
    pieces: PieceBuilds | None = None,
) -> dict:
    """Call ``on_events(list_of_events)`` for successive pieces; return the other top-level keys.

    The events are orjson's dicts, or what ``decode(json_array_bytes)`` returned for the pieces it took.
    With ``pieces``, a trace larger than one piece has every other piece built in a helper process
    (:class:`PieceBuilds`); those reach the caller through ``pieces.take``, the rest through ``on_events``,
    all in file order. ``reset()`` is called before the events are delivered again from the start: after
    a helper's piece was cut inside a string (read again in this process alone), and before the
    whole-file fallback re-delivers every event (as dicts).
    """
    try:
        try:
            return _stream(path, on_events, _Parser(path, decode), pieces)
        except _BadCut:
            reset()
            return _stream(path, on_events, _Parser(path, decode), None)
    except _Fallback:
        reset()
    data = _whole(path)
    if isinstance(data, list):
        events, header = data, {}
    elif isinstance(data, dict):
        events = data.get("traceEvents")
        if not isinstance(events, list):
            found = ", ".join(sorted(map(str, data))[:8]) or "nothing"
            raise InputError(
                path, f"expected a chrome trace (a JSON object with a 'traceEvents' list); found keys: {found}"
            )
        header = {k: v for k, v in data.items() if k != "traceEvents"}
    else:
        raise InputError(path, f"expected a chrome trace JSON object or array; found a JSON {type(data).__name__}")
    step = 200_000
    for i in range(0, len(events), step):
        on_events(events[i : i + step])
    return header


class _Parser:
    """Parses one piece (a JSON array of events): ``decode`` first, else orjson after the nesting check."""

    def __init__(self, path: str, decode: Callable[[bytes], list | None] | None):
        self.path, self.decode = path, decode
        self.levels_above = 1  # how deep a piece's array sits in the file: 1 inside {"traceEvents": [...]}
        self.start = 0  # file offset of the piece's first event, for the error

    def __call__(self, raw: memoryview):
        if self.decode is not None:
            events = self.decode(raw)
            if events is not None:
                return events
            self.check(raw, self.levels_above, f"an event after byte {self.start:,}")
        return _loads(raw)

    def check(self, raw, levels_above: int, where: str) -> None:
        """Without ``decode`` the whole file was checked as it was read; with it, each piece orjson builds."""
        if self.decode is None:
            return
        try:
            check_json_nesting(b"[" * levels_above + bytes(raw), self.path)
        except InputError:
            raise nesting_error(self.path, limit("MAX_NESTING_DEPTH"), where) from None


def _open(path: str, json: bool = True):
    try:
        return open_input(path, json=json)  # regular files only; gzip and nesting caps (parsers/limits.py)
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from None


def _read(path: str, f, n: int) -> bytes:
    try:
        return f.read(n)
    except EOFError:
        raise InputError(
            path, "gzip stream ends early: the file is truncated (was the run killed while writing?)"
        ) from None
    except (OSError, zlib.error) as e:
        raise InputError(path, f"cannot decompress: {e}") from None


def _whole(path: str):
    with _open(path) as f:
        raw = _read(path, f, -1)
    if not raw.strip():
        raise InputError(path, "is empty; expected a PyTorch profiler or JAX perfetto trace (JSON)")
    try:
        return _loads(raw)
    except JSONDecodeError as e:
        where = f"byte {e.pos:,} of {len(raw):,}"
        if e.pos >= len(raw.rstrip()) - 1:
            raise InputError(path, f"JSON ends early at {where}: the trace is truncated") from None
        raise InputError(path, f"expected a chrome trace in JSON; invalid JSON at {where}: {e.msg}") from None


def _stream(path: str, on_events: Callable[[list], None], parse: _Parser, pieces: PieceBuilds | None = None) -> dict:
    with _open(path, json=parse.decode is None) as f:
        buf = _read(path, f, PIECE_BYTES)
        start = len(buf) - len(buf.lstrip())
        if buf[start : start + 1] == b"[":
            header, pos = b"", start + 1
            parse.levels_above = 0
        elif buf[start : start + 1] == b"{":
            m = _EVENTS_KEY.search(buf)
            while m is None:
                more = _read(path, f, PIECE_BYTES)
                if not more or len(buf) > 8 * PIECE_BYTES:
                    raise _Fallback
                buf += more
                m = _EVENTS_KEY.search(buf)
            header, pos = buf[: m.start()], m.end()
        else:
            raise _Fallback
        pending = _Pending()
        pending.put(memoryview(buf)[pos:])
        parse.start = pos
        del buf
        eof = False
        order = _InOrder(on_events, pieces, parse) if pieces is not None and helper_allowed() else None
        try:
            while True:
                if not eof:
                    eof = not pending.fill(path, f)
                if eof:
                    if order is not None:
                        order.drain()
                    tail = _finish(pending, on_events, parse)
                    break
                if order is not None and order.helper_idle() and _send(pending, order, parse):
                    continue
                cut = _cut(pending, parse)
                if cut is None:
                    continue
                events, rest_at = cut
                if order is not None:
                    order.built_here(events)
                else:
                    on_events(events)
                del events
                pending.drop(rest_at)
                parse.start += rest_at - 1
        finally:
            if order is not None:
                order.close()
    if not header:
        return {}
    parse.check(header, 0, "the trace's header")
    parse.check(tail, 1, "what follows the trace's events")
    try:
        top = _loads(header + b'"traceEvents":[]' + tail)
    except JSONDecodeError:
        raise _Fallback from None
    top.pop("traceEvents", None)
    return top


class _Pending:
    """ "[" and the events read but not parsed yet, in one buffer kept for the whole file.

    A piece is parsed in place, its closing "]" written over the comma after its last event, and the
    rest moved to the front: each byte is copied once, from the read into the buffer. Growing and
    shrinking a buffer per piece instead cost ~500 k page faults (2 s of system time) on a 1 GB trace;
    reads of at most 1 MiB keep the read buffers in the allocator's reused memory for the same reason.
    """

    def __init__(self):
        self.buf = bytearray(b"[")
        self.end = 1  # bytes of buf in use

    def put(self, data) -> None:
        need = self.end + len(data)
        if need > len(self.buf):
            self.buf.extend(bytes(max(need - len(self.buf), len(self.buf))))
        self.buf[self.end : need] = data
        self.end = need

    def fill(self, path: str, f) -> bool:
        """Read up to PIECE_BYTES more; False at the end of the file."""
        got = 0
        while got < PIECE_BYTES:
            more = _read(path, f, min(PIECE_BYTES - got, 2**20))
            if not more:
                break
            self.put(more)
            got += len(more)
        return got > 0

    def drop(self, upto: int) -> None:
        """Forget the events before ``upto`` (what was parsed)."""
        rest = self.buf[upto : self.end]
        self.buf[1 : 1 + len(rest)] = rest
        self.end = 1 + len(rest)

    def view(self, stop: int) -> memoryview:
        return memoryview(self.buf)[:stop]


class _InOrder:
    """Pieces on their way to the caller, in file order: at most one at the helper, then those built here.

    The helper is forked at the first piece of a trace that has a second one (smaller traces never start
    it). It is sent the next piece as soon as it has answered the last one, and this process builds pieces
    meanwhile, so neither waits on the other. A gzip's inflating falls on this process, which is then the
    slower one: the helper waits (the 1 GB trace gzipped reads in ~9 s, plain in ~7 s).
    A piece it does not take (msgspec declined it) is read here as a serial read would, with orjson; one
    that orjson refuses too was cut inside a string (:class:`_BadCut`).
    """

    MAX_BUILT_AHEAD = 8  # pieces built here while the helper still builds an earlier one (~5 MB each)

    def __init__(self, on_events: Callable[[list], None], pieces: PieceBuilds, parse: _Parser):
        self.on_events, self.pieces, self.parse = on_events, pieces, parse
        self.helper: PieceHelper | None = None
        self.helper_lost = False
        self.at_helper: int | None = None  # file offset of the piece the helper builds
        self.built: list = []  # results built here after it, waiting for it

    def helper_idle(self) -> bool:
        if self.helper_lost:
            return False
        if self.helper is None:
            try:
                self.helper = PieceHelper(self.pieces.build, slot_bytes=2 * PIECE_BYTES + 2**20)
            except OSError:  # no process or shared memory to be had (a limit, a sandbox): read alone
                self.helper_lost = True
                return False
        if self.at_helper is not None and self.helper.answered():
            self.drain()
        return self.at_helper is None

    def send(self, piece: memoryview, start: int) -> None:
        self.helper.submit(piece)
        self.at_helper = start

    def built_here(self, events: list) -> None:
        if self.at_helper is None:
            self.on_events(events)
            return
        self.built.append(self.pieces.of_events(events))
        if len(self.built) >= self.MAX_BUILT_AHEAD:
            self.drain()

    def drain(self) -> None:
        """Wait for the helper's piece; merge it, then what was built here meanwhile."""
        if self.at_helper is not None:
            start = self.at_helper
            try:
                result = self.helper.result()
            except HelperLost:
                self.helper_lost = True
                result = self.pieces.build(self.helper.sent())
            self.at_helper = None
            if result is None:
                result = self._read_here(self.helper.sent(), start)
            self.pieces.take(result)
        for result in self.built:
            self.pieces.take(result)
        self.built.clear()

    def _read_here(self, raw: bytes, start: int):
        saved, self.parse.start = self.parse.start, start
        try:
            events = self.parse(memoryview(raw))
        except JSONDecodeError:
            raise _BadCut from None
        finally:
            self.parse.start = saved
        return self.pieces.of_events(events)

    def close(self) -> None:
        if self.helper is not None:
            self.helper.close()


def _send(pending: _Pending, order: _InOrder, parse: _Parser) -> bool:
    """Cut the buffer at its last event boundary, unchecked, and send that piece to the helper."""
    buf = pending.buf
    for close, open_ in _boundaries(buf, pending.end):
        saved = buf[close + 1]
        buf[close + 1] = 93  # ']' over the comma (or space) after the piece's last event
        with memoryview(buf) as view, view[: close + 2] as piece:
            order.send(piece, parse.start)
        buf[close + 1] = saved
        pending.drop(open_)
        parse.start += open_ - 1
        return True
    return False


def _boundaries(buf: bytes, end: int) -> Iterator[tuple[int, int]]:
    """(close, open): positions of ``}`` and the next event's ``{`` of ``}\\s*,\\s*{``, last first."""
    while True:
        o = buf.rfind(b"{", 0, end)
        if o <= 0:
            return
        j = o - 1
        while j > 0 and buf[j] in b" \t\r\n":
            j -= 1
        if buf[j] == 44:  # ','
            k = j - 1
            while k > 0 and buf[k] in b" \t\r\n":
                k -= 1
            if buf[k] == 125:  # '}'
                yield k, o
        end = o


def _parse_view(pending: _Pending, stop: int, parse: _Parser):
    piece = pending.view(stop)
    try:
        return parse(piece)
    finally:
        piece.release()  # no view may outlive the call: the buffer may grow next


def _cut(pending: _Pending, parse: _Parser):
    buf = pending.buf
    for tries, (close, open_) in enumerate(_boundaries(buf, pending.end)):
        if tries >= 8:
            return None
        saved = buf[close + 1]
        buf[close + 1] = 93  # ']' over the comma (or space) after the piece's last event
        try:
            return _parse_view(pending, close + 2, parse), open_
        except JSONDecodeError:
            continue
        finally:
            buf[close + 1] = saved
    return None


def _finish(pending: _Pending, on_events: Callable[[list], None], parse: _Parser) -> bytes:
    """Parse the last events up to the array's closing ``]``; return what follows it.

    The parse proves the cut: ``[`` … ``]`` that parses as one array is the whole array, so a wrong
    position from the scan (only possible on invalid JSON) ends in the whole-file fallback, never in
    wrong events.
    """
    close = _array_close(pending.buf, pending.end)
    if close is None:
        raise _Fallback
    try:
        events = _parse_view(pending, close + 1, parse)
    except JSONDecodeError:
        raise _Fallback from None
    if not isinstance(events, list):  # pragma: no cover - "[...]" parses to a list
        raise _Fallback
    on_events(events)
    return bytes(pending.buf[close + 1 : pending.end])


def _array_close(buf: bytearray, stop: int) -> int | None:
    """Index in ``buf`` of the ``]`` that closes the array ``buf[0]`` opens, or None if none before ``stop``.

    ``buf[1:]`` starts at an event (or right after ``traceEvents: [``), so the scan starts one level
    deep and outside a string. Escapes are dropped first (``\\"`` is no quote), then every byte but
    brackets and quotes, then adjacent ``""`` pairs (strings with no bracket in them; removing two
    adjacent quotes leaves every other byte in or out of a string as it was). What is left is ~1/60
    of a Kineto trace, walked with numpy: ~15 ms for the 10 MB HTA NCCL trace, less than one parse of
    it, where parsing at each ``]`` from the end took 12 parses (0.5 s).
    """
    text = buf[1:stop]
    if b"\\" in text:
        text = _JSON_ESCAPE.sub(b"", text)  # "\\]" is not JSON: a "]" lost here only costs the fallback
    marks = np.frombuffer(text.translate(None, _NOT_STRUCTURAL).replace(b'""', b""), dtype=np.uint8)
    del text
    depth, in_string = 1, 0
    for lo in range(0, len(marks), _SCAN_MARKS):
        chunk = marks[lo : lo + _SCAN_MARKS]
        parity = np.bitwise_xor.accumulate((chunk == 34).view(np.uint8))  # 1 inside a string (or on its opening quote)
        parity ^= in_string
        step = _DEPTH_STEP[chunk]
        step[parity.view(bool)] = 0  # brackets inside strings are text
        level = np.cumsum(step, dtype=np.int32)
        level += depth
        if int(level.min()) <= 0:
            at = lo + int(np.argmax(level <= 0))
            if marks[at] != 93:  # a "}" closed the array: not JSON
                return None
            return _nth_last_bracket(buf, int(np.count_nonzero(marks[at:] == 93)), stop)
        depth, in_string = int(level[-1]), int(parity[-1])
    return None


def _nth_last_bracket(buf: bytearray, n: int, stop: int) -> int | None:
    """Index of the ``n``-th ``]`` counted back from ``stop`` in ``buf[1:stop]`` (n ≥ 1), or None."""
    if n <= _CLOSERS_BY_RFIND:  # the usual tail: a few log lines and small arrays
        at = stop
        for _ in range(n):
            at = buf.rfind(b"]", 1, at)
            if at < 0:
                return None
        return at
    where = np.flatnonzero(np.frombuffer(bytes(buf[1:stop]), dtype=np.uint8) == 93)
    return int(where[-n]) + 1 if n <= len(where) else None
