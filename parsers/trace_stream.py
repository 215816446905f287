"""Read a chrome-trace JSON (plain or gzip) as a header dict plus chunks of its ``traceEvents``.

Loading a 1 GB trace with one ``orjson.loads`` costs several GB of Python objects at once.
Instead the decompressed bytes are read in pieces and cut at event boundaries (``}, {``);
each piece is parsed on its own and handed to the caller, then dropped. A cut is accepted
only if the piece parses, so a ``}, {`` inside a string or a nested ``args`` list merely moves
the cut to an earlier boundary. Anything unexpected falls back to one whole-file parse,
whose error (if any) becomes the :class:`InputError`.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator

try:  # orjson is a dependency; the stdlib fallback keeps gpudiag working where it is missing
    import orjson as _json_impl

    _loads = _json_impl.loads  # bytes in, like the fallback
    JSONDecodeError = _json_impl.JSONDecodeError
except ImportError:  # pragma: no cover - exercised on machines without orjson
    import json as _json_impl

    def _loads(raw):
        return _json_impl.loads(raw.decode("utf-8") if isinstance(raw, (bytes, bytearray, memoryview)) else raw)

    JSONDecodeError = ValueError

from parsers.errors import InputError
from parsers.limits import open_input

PIECE_BYTES = 16 * 2**20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_MAX_TAIL_TRIES = 64


class _Fallback(Exception):
    """The streaming cut failed; parse the whole file instead."""


def read_chunks(path: str, on_events: Callable[[list], None], reset: Callable[[], None]) -> dict:
    """Call ``on_events(list_of_event_dicts)`` for successive pieces; return the other top-level keys.

    ``reset()`` is called before the whole-file fallback re-delivers every event.
    """
    try:
        return _stream(path, on_events)
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


def _open(path: str):
    try:
        return open_input(path, json=True)  # regular files only; gzip and nesting caps (parsers/limits.py)
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


def _stream(path: str, on_events: Callable[[list], None]) -> dict:
    with _open(path) as f:
        buf = _read(path, f, PIECE_BYTES)
        start = len(buf) - len(buf.lstrip())
        if buf[start : start + 1] == b"[":
            header, pos = b"", start + 1
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
        pending = buf[pos:]
        del buf
        eof = False
        while True:
            if not eof:
                more = _read(path, f, PIECE_BYTES)
                eof = not more
                pending += more
            if eof:
                tail = _finish(pending, on_events)
                break
            cut = _cut(pending)
            if cut is None:
                continue
            events, rest_at = cut
            on_events(events)
            pending = pending[rest_at:]
    if not header:
        return {}
    try:
        top = _loads(header + b'"traceEvents":[]' + tail)
    except JSONDecodeError:
        raise _Fallback from None
    top.pop("traceEvents", None)
    return top


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


def _cut(pending: bytes):
    for tries, (close, open_) in enumerate(_boundaries(pending, len(pending))):
        if tries >= 8:
            return None
        try:
            return _loads(b"[" + pending[: close + 1] + b"]"), open_
        except JSONDecodeError:
            continue
    return None


def _finish(pending: bytes, on_events: Callable[[list], None]) -> bytes:
    """Parse the last events up to the array's closing ``]``; return what follows it."""
    end = len(pending)
    for _ in range(_MAX_TAIL_TRIES):
        j = pending.rfind(b"]", 0, end)
        if j < 0:
            break
        try:
            events = _loads(b"[" + pending[:j] + b"]")
        except JSONDecodeError:
            end = j
            continue
        if isinstance(events, list):
            on_events(events)
            return pending[j + 1 :]
        end = j
    raise _Fallback
