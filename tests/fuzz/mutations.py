"""Mutations of real input bytes, by the structure of their format.

Each mutation kind takes a :class:`~tests.fuzz.seeds.Seed` (real bytes) and a *chooser* that makes
every choice (which boundary, which column, which value). The chooser is either hypothesis'
``draw`` (:class:`DrawChooser`, so failures shrink and replay) or a seeded :class:`random.Random`
(:class:`RandomChooser`, for the campaign in tools/fuzz_campaign.py): one mutation code for both.

Kinds (``KINDS``):

=================  ===========================================================================
truncate           cut at a structural boundary: CSV row/field, JSON object/array/string edge
gzip_cut           cut (or corrupt, or extend) the gzip stream itself
pickle_cut         cut a pickle at an opcode boundary, or drop / repeat one opcode
swap_columns       swap two CSV columns (header only, or every row), two JSON keys, two dict values
wrong_units        swap unit tokens ("usecond"/"nsecond", "%"/"Kbyte"), unit suffixes (_ns/_us)
bad_numbers        NaN, ±inf, negative durations, 1e400, 2**64, "" and text where numbers were
duplicate_ids      repeat rows / lines / list items, copy one id's value onto others
unknown_enum       unknown event categories, ph values, allocator actions, record kinds
encoding           UTF-16 with BOM, latin-1 bytes, UTF-8 BOM, CRLF or CR line ends, NUL bytes,
                   invalid UTF-8, a lone surrogate escape (``\\udce9``) in a JSON string
byte_flip          1-8 random bit flips, byte overwrites, insertions, deletions
magic_garbage      the format's first bytes (gzip, NVR, pickle, '{') followed by random bytes
=================  ===========================================================================

Text kinds work on the uncompressed payload and gzip it again when the seed was gzipped, so
the gzip path of every reader is taken too. Pickle seeds get the value-level kinds on the
unpickled (plain) object, then are pickled again with a chosen protocol.
"""

from __future__ import annotations

import copy
import csv
import gzip
import io
import math
import pickle
import pickletools
import random
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from parsers.restricted_pickle import loads_plain
from tests.fuzz.seeds import Seed

KINDS = (
    "truncate",
    "gzip_cut",
    "pickle_cut",
    "swap_columns",
    "wrong_units",
    "bad_numbers",
    "duplicate_ids",
    "unknown_enum",
    "encoding",
    "byte_flip",
    "magic_garbage",
)


def kinds_for(seed: Seed) -> tuple[str, ...]:
    """The kinds that make sense for a seed (pickle_cut for pickles, no value kinds for binary)."""
    if seed.fmt == "binary":
        return ("truncate", "gzip_cut", "encoding", "byte_flip", "magic_garbage")
    return tuple(k for k in KINDS if k != "pickle_cut" or seed.fmt == "pickle")


# --- choosers -----------------------------------------------------------------------------------------


class RandomChooser:
    """Choices from a seeded ``random.Random``."""

    def __init__(self, rnd: random.Random):
        self.rnd = rnd

    def int(self, lo: int, hi: int) -> int:
        return self.rnd.randint(lo, hi)

    def choice(self, seq: Sequence):
        return seq[self.int(0, len(seq) - 1)]

    def bytes(self, n: int) -> bytes:
        return bytes(self.rnd.getrandbits(8) for _ in range(n))


class DrawChooser(RandomChooser):
    """Choices drawn by hypothesis (``draw`` of ``st.composite``), so they shrink and replay."""

    def __init__(self, draw):
        from hypothesis import strategies as st

        self._st = st
        self.draw = draw

    def int(self, lo: int, hi: int) -> int:
        return self.draw(self._st.integers(lo, hi))

    def bytes(self, n: int) -> bytes:
        return self.draw(self._st.binary(min_size=n, max_size=n))


# --- the entry point ------------------------------------------------------------------------------------


def mutate(seed: Seed, kind: str, ch: RandomChooser) -> bytes:
    """The bytes of ``seed`` mutated by ``kind`` (as they go to disk)."""
    if kind == "gzip_cut":
        return _gzip_cut(seed.data if seed.gz else _gz(seed.payload), ch)
    if kind == "magic_garbage":
        return seed.data[: ch.int(1, 4)] + ch.bytes(ch.int(0, 600))
    payload = seed.payload
    if seed.fmt == "pickle" and kind in _OBJECT_KINDS:
        out = _mutate_pickle_object(payload, kind, ch)
    else:
        out = _TEXT_KINDS[kind](payload, seed.fmt, ch)
    return _gz(out) if seed.gz else out


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=1, mtime=0)


# --- truncation -----------------------------------------------------------------------------------------

_CSV_EDGES = re.compile(rb'\n|,|"')
_JSON_EDGES = re.compile(rb'[{}\[\],:"\n]')


@lru_cache(maxsize=32)
def boundaries(payload: bytes, fmt: str) -> tuple[int, ...]:
    """Offsets where a cut leaves a structurally meaningful prefix (before and after each edge)."""
    if fmt == "pickle":
        try:
            return tuple(pos for _, _, pos in pickletools.genops(payload)) + (len(payload),)
        except Exception:  # a seed is always a whole pickle; be safe for mutated ones
            return tuple(range(0, len(payload) + 1, 64))
    if fmt == "binary":
        return tuple(range(0, len(payload) + 1, 97))
    edges = _CSV_EDGES if fmt == "csv" else _JSON_EDGES
    out = {0, len(payload)}
    for m in edges.finditer(payload):
        out.add(m.start())
        out.add(m.end())
    return tuple(sorted(out))


def _truncate(payload: bytes, fmt: str, ch) -> bytes:
    edges = boundaries(payload, fmt)
    cut = edges[ch.int(0, len(edges) - 1)]
    if ch.int(0, 3) == 0:
        cut = max(0, cut - ch.int(1, 3))  # a few bytes before the edge: the middle of a token
    return payload[:cut]


def _pickle_cut(payload: bytes, fmt: str, ch) -> bytes:
    ops = boundaries(payload, "pickle")
    i = ch.int(0, len(ops) - 2)
    how = ch.int(0, 2)
    if how == 0:  # cut before opcode i
        return payload[: ops[i]]
    if how == 1:  # drop opcode i
        return payload[: ops[i]] + payload[ops[i + 1] :]
    return payload[: ops[i + 1]] + payload[ops[i] :]  # opcode i twice


def _gzip_cut(compressed: bytes, ch) -> bytes:
    how = ch.int(0, 3)
    n = len(compressed)
    if how == 0:  # cut anywhere: header, deflate body, trailer (CRC and size)
        return compressed[: ch.int(1, n - 1)]
    if how == 1:  # lose the 8-byte trailer only
        return compressed[: n - ch.int(1, 8)]
    if how == 2:  # one corrupted byte in the deflate body (CRC mismatch or invalid block)
        i = ch.int(10, max(10, n - 9))
        return compressed[:i] + bytes([compressed[i % n] ^ (1 << ch.int(0, 7))]) + compressed[i + 1 :]
    return compressed + ch.choice([b"\x00" * 16, b"garbage after the stream", compressed[: ch.int(1, n)]])


# --- columns and keys -------------------------------------------------------------------------------------

_KEY = re.compile(rb'"([A-Za-z_][\w .#:-]{0,40})"\s*:')


def _text(payload: bytes) -> str:
    return payload.decode("utf-8", errors="surrogateescape")


def _bytes_of(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogateescape")


def _csv_lines(payload: bytes) -> tuple[list[str], int]:
    """Lines with their ends, and the index of the header (ncu stdout has ==PROF== lines first)."""
    lines = _text(payload).splitlines(keepends=True)
    for i, line in enumerate(lines):
        if "," in line and not line.startswith("=="):
            return lines, i
    return lines, 0


def _cells(line: str) -> list[str]:
    try:
        return next(csv.reader([line.rstrip("\r\n")]), [])
    except csv.Error:
        return []


def _join(cells: list[str], like: str) -> str:
    buf = io.StringIO()
    quoting = csv.QUOTE_ALL if like.startswith('"') else csv.QUOTE_MINIMAL
    csv.writer(buf, quoting=quoting, lineterminator="").writerow(cells)
    end = like[len(like.rstrip("\r\n")) :]
    return buf.getvalue() + end


def _swap_columns(payload: bytes, fmt: str, ch) -> bytes:
    if fmt == "csv":
        lines, h = _csv_lines(payload)
        header = _cells(lines[h]) if lines else []
        if len(header) < 2:
            return _byte_flip(payload, fmt, ch)
        i = ch.int(0, len(header) - 1)
        j = ch.int(0, len(header) - 1)
        j = j if j != i else (i + 1) % len(header)
        every_row = ch.int(0, 1) == 1
        out = lines[:h]
        for k, line in enumerate(lines[h:]):
            cells = _cells(line)
            if (k == 0 or every_row) and len(cells) == len(header):
                cells[i], cells[j] = cells[j], cells[i]
                line = _join(cells, line)
            out.append(line)
        return _bytes_of("".join(out))
    keys = sorted({m.group(1) for m in _KEY.finditer(payload)})
    if len(keys) < 2:
        return _byte_flip(payload, fmt, ch)
    a = ch.choice(keys)
    b = ch.choice(keys)
    if a == b:
        b = keys[(keys.index(a) + 1) % len(keys)]
    swap = {a: b, b: a}

    def rename(m: re.Match) -> bytes:  # the key between its quotes, whatever space follows before the colon
        key = m.group(1)
        return b'"' + swap.get(key, key) + m.group(0)[len(key) + 1 :]

    return _KEY.sub(rename, payload)


# --- units ------------------------------------------------------------------------------------------------

UNIT_TOKENS = (
    "usecond",
    "nsecond",
    "msecond",
    "second",
    "%",
    "Kbyte",
    "Mbyte",
    "Gbyte",
    "byte",
    "Kbyte/second",
    "Gbyte/second",
    "byte/second",
    "cycle",
    "cycle/nsecond",
    "Mhz",
    "Ghz",
    "hz",
    "register/thread",
    "warp",
    "inst",
    "block",
    "sector",
    "%/Kbyte",
    "%/register",
    "fortnight",
)
_UNIT_CELL = re.compile(
    rb'"(' + b"|".join(re.escape(t.encode()) for t in sorted(UNIT_TOKENS, key=len, reverse=True)) + rb')"'
)
SUFFIXES = ("_ns", "_us", "_ms", "_s", "_bytes", "_kib", "_mb", "_pct", "_frac", "_mhz", "_w", "_c")
_SUFFIX = re.compile(rb"(?<=[a-z])(_ns|_us|_ms|_bytes|_pct|_mhz|_w|_c)(?=[\",:\n\r])")
_TIME_UNIT = re.compile(rb'("displayTimeUnit"\s*:\s*")(\w*)(")')


def _wrong_units(payload: bytes, fmt: str, ch) -> bytes:
    spots = [(m.start(1), m.end(1), "unit") for m in _UNIT_CELL.finditer(payload)]
    spots += [(m.start(1), m.end(1), "suffix") for m in _SUFFIX.finditer(payload)]
    spots += [(m.start(2), m.end(2), "time") for m in _TIME_UNIT.finditer(payload)]
    if not spots:
        return _bad_numbers(payload, fmt, ch)  # a format without unit tokens: scale a number instead
    start, end, what = ch.choice(spots)
    family = {"unit": UNIT_TOKENS, "suffix": SUFFIXES, "time": ("ns", "us", "ms", "s", "fortnight", "")}[what]
    new = ch.choice(family).encode()
    old = payload[start:end]
    if ch.int(0, 1):  # every occurrence of that token, e.g. a whole units row in usecond
        pattern = {
            "unit": rb'"' + re.escape(old) + rb'"',
            "suffix": rb"(?<=[a-z])" + re.escape(old) + rb'(?=[",:\n\r])',
            "time": None,
        }[what]
        if pattern is not None:
            repl = b'"' + new + b'"' if what == "unit" else new
            return re.sub(pattern, lambda m: repl, payload)
    return payload[:start] + new + payload[end:]


# --- numbers ----------------------------------------------------------------------------------------------

BAD_NUMBERS = (
    b"NaN",
    b"nan",
    b"inf",
    b"-inf",
    b"Infinity",
    b"-Infinity",
    b"-1",
    b"-0.001",
    b"-1e300",
    b"1e400",
    b"-0.0",
    b"0",
    b"18446744073709551616",
    b"9" * 40,
    b"-9223372036854775809",
    b"1e-320",
    b'""',
    b"null",
    b"true",
    b'"12"',
    b"1_000",
    b"0x10",
    b"1,5",
    b" ",
    b"[]",
    b"{}",
    b'"n/a"',
)
_NUMBER = re.compile(rb"(?<![\w.])-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")
# keys whose values are durations, times, sizes or counters: the targeted half of bad_numbers
_NUMERIC_KEY = re.compile(
    rb'"(dur|ts|host_ms|gpu_ms|dur_ns|t_ns|t_start_ns|elapsed_ms|start_ms|end_ms|size|time_us|'
    rb"total_size|allocated_size|requested_size|addr|address|step|rank|line|exit_code|device|"
    rb'stream|correlation|bytes|[a-z_.]+\.current|[a-z_.]+\.peak|bytes_in_use)"\s*:\s*'
    rb"(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
)


def _bad_numbers(payload: bytes, fmt: str, ch) -> bytes:
    keyed = list(_NUMERIC_KEY.finditer(payload)) if fmt != "csv" else []
    if keyed and ch.int(0, 1):
        m = ch.choice(keyed)
        bad = ch.choice(BAD_NUMBERS)
        if ch.int(0, 1):  # every value of that key (all durations negative, every step NaN)
            key = m.group(1)
            return re.sub(
                rb'("' + re.escape(key) + rb'"\s*:\s*)(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)',
                lambda k: k.group(1) + bad,
                payload,
            )
        return payload[: m.start(2)] + bad + payload[m.end(2) :]
    spans = [(m.start(), m.end()) for m in _NUMBER.finditer(payload)]
    if not spans:
        return _byte_flip(payload, fmt, ch)
    out = payload
    for _ in range(ch.int(1, 3)):
        start, end = ch.choice(spans)
        bad = ch.choice(BAD_NUMBERS)
        if fmt == "csv" and bad.startswith(b'"'):
            bad = bad.strip(b'"')
        out = out[:start] + bad + out[end:]
        spans = [(m.start(), m.end()) for m in _NUMBER.finditer(out)] or [(0, 0)]
    return out


# --- duplicate ids ----------------------------------------------------------------------------------------

_ID_KEY = re.compile(
    rb'"(correlation|External id|id|Python id|Python parent id|step|rank|addr|address|tid|pid|seq|'
    rb'device|stream|launch_id)"\s*:\s*(-?\d+)'
)


def _duplicate_ids(payload: bytes, fmt: str, ch) -> bytes:
    if fmt in ("csv", "jsonl") or ch.int(0, 3) == 0:
        lines = payload.splitlines(keepends=True)
        first = _csv_lines(payload)[1] + 2 if fmt == "csv" else 0  # keep header (and ncu's units row) in place
        if len(lines) > first:
            k = ch.int(first, len(lines) - 1)
            row = lines[k] if lines[k].endswith((b"\n", b"\r")) else lines[k] + b"\n"
            at = ch.int(first, len(lines))
            if at == len(lines) and lines and not lines[-1].endswith(b"\n"):
                lines[-1] += b"\n"
            lines.insert(at, row)
            return b"".join(lines)
    hits = list(_ID_KEY.finditer(payload))
    if len(hits) < 2:
        return _byte_flip(payload, fmt, ch)
    a = ch.choice(hits)
    same_key = [h for h in hits if h.group(1) == a.group(1)]
    value = ch.choice(same_key).group(2)
    if ch.int(0, 1):  # every id of that key the same
        return re.sub(rb'("' + re.escape(a.group(1)) + rb'"\s*:\s*)-?\d+', lambda m: m.group(1) + value, payload)
    return payload[: a.start(2)] + value + payload[a.end(2) :]


# --- enums ------------------------------------------------------------------------------------------------

ENUM_KEYS = (
    "cat",
    "ph",
    "action",
    "kind",
    "framework",
    "state",
    "segment_type",
    "event",
    "source",
    "op",
    "s",
    "cuda_sync_kind",
    "schema",
    "name",
)
_ENUM = re.compile(rb'"(' + b"|".join(k.encode() for k in ENUM_KEYS) + rb')"(\s*:\s*)("(?:[^"\\]|\\.){0,80}")')
ODD_VALUES = (
    b'""',
    b'"X"',
    b'"B"',
    b'"E"',
    b'"i"',
    b'"Q"',
    b'"M"',
    b'"f"',
    b'"s"',
    b'"kernel_v2"',
    b'"Kernel"',
    b'"gpu_memcpy"',
    b'"python_function"',
    b'"cuda_runtime"',
    b'"cpu_op"',
    b'"defragment"',
    b'"segment_map"',
    b'"oom"',
    b'"free_completed"',
    b'"stepx"',
    b'"sync"',
    b'"run"',
    b'"memory_stats"',
    b'"tensorflow"',
    b'"jax"',
    b'"gpudiag.snapshot/2"',
    b'"gpudiag.run/9"',
    b'"\\u00e9\\u2603"',
    b'"\\ud800"',
    b"null",
    b"7",
    b"-1",
    b"true",
    b'["X"]',
    b'{"a": 1}',
    b"1e400",
)


def _unknown_enum(payload: bytes, fmt: str, ch) -> bytes:
    if fmt == "csv":
        lines, h = _csv_lines(payload)
        rows = [k for k in range(h + 1, len(lines)) if _cells(lines[k])]
        if not rows:
            return _byte_flip(payload, fmt, ch)
        k = ch.choice(rows)
        cells = _cells(lines[k])
        words = [i for i, c in enumerate(cells) if c and not _NUMBER.fullmatch(c.encode("utf-8", "surrogateescape"))]
        i = ch.choice(words) if words else ch.int(0, len(cells) - 1)
        cells[i] = ch.choice(ODD_VALUES).decode().strip('"')
        lines[k] = _join(cells, lines[k])
        return _bytes_of("".join(lines))
    hits = list(_ENUM.finditer(payload))
    if not hits:
        return _byte_flip(payload, fmt, ch)
    value = ch.choice(ODD_VALUES)
    m = ch.choice(hits)
    if ch.int(0, 2) == 0:  # every value of that key, e.g. every ph
        key = re.escape(m.group(1))
        return re.sub(rb'("' + key + rb'"\s*:\s*)"(?:[^"\\]|\\.){0,80}"', lambda k: k.group(1) + value, payload)
    return payload[: m.start(3)] + value + payload[m.end(3) :]


# --- encodings ----------------------------------------------------------------------------------------------

_STRING_VALUE = re.compile(rb'(?<=:)\s*"')


def _encoding(payload: bytes, fmt: str, ch) -> bytes:
    how = ch.int(0, 9)
    if how == 9:  # a lone surrogate escape in a JSON string: what json.dumps writes for a non-UTF-8 path or argv
        starts = [m.end() for m in _STRING_VALUE.finditer(payload)]
        if starts:
            i = ch.choice(starts)
            return payload[:i] + ch.choice([b"\\udce9", b"\\ud800", b"\\udfff"]) + payload[i:]
        how = ch.int(0, 8)
    text = _text(payload)
    if how == 0:
        return b"\xff\xfe" + text.encode("utf-16-le", errors="surrogatepass")
    if how == 1:
        return b"\xfe\xff" + text.encode("utf-16-be", errors="surrogatepass")
    if how == 2:
        return b"\xef\xbb\xbf" + payload
    if how == 3:
        return payload.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    if how == 4:
        return payload.replace(b"\n", b"\r")
    if not payload:
        return b"\xe9"
    i = ch.int(0, len(payload) - 1)
    if how == 5:  # a latin-1 é / µ where UTF-8 was (e.g. in a kernel name or a path)
        return payload[:i] + ch.choice([b"\xe9", b"\xb5", b"\xff", b"caf\xe9"]) + payload[i:]
    if how == 6:  # the whole file as latin-1 after a non-ASCII character was put in
        return (text[:i] + "é" + text[i:]).encode("latin-1", errors="replace")
    if how == 7:
        return payload[:i] + b"\x00" + payload[i:]
    return payload[:i] + ch.choice([b"\xed\xa0\x80", b"\xc0\xaf", b"\xf8\x88\x80\x80\x80"]) + payload[i:]


# --- bytes --------------------------------------------------------------------------------------------------


def _byte_flip(payload: bytes, fmt: str, ch) -> bytes:
    out = bytearray(payload)
    for _ in range(ch.int(1, 8)):
        if not out:
            out += ch.bytes(1)
            continue
        i = ch.int(0, len(out) - 1)
        how = ch.int(0, 3)
        if how == 0:
            out[i] ^= 1 << ch.int(0, 7)
        elif how == 1:
            out[i] = ch.int(0, 255)
        elif how == 2:
            del out[i]
        else:
            out[i:i] = ch.bytes(1)
    return bytes(out)


_TEXT_KINDS = {
    "truncate": _truncate,
    "pickle_cut": _pickle_cut,
    "swap_columns": _swap_columns,
    "wrong_units": _wrong_units,
    "bad_numbers": _bad_numbers,
    "duplicate_ids": _duplicate_ids,
    "unknown_enum": _unknown_enum,
    "encoding": _encoding,
    "byte_flip": _byte_flip,
}


# --- pickles: mutate the plain object, pickle it again -------------------------------------------------------

_OBJECT_KINDS = ("swap_columns", "wrong_units", "bad_numbers", "duplicate_ids", "unknown_enum")
BAD_VALUES: tuple[Any, ...] = (
    math.nan,
    math.inf,
    -math.inf,
    -1,
    -(2**63) - 1,
    2**64,
    10**30,
    1.5,
    -0.0,
    True,
    None,
    "12",
    "",
    [],
    {},
    b"\x00",
)
ODD_ENUMS: tuple[Any, ...] = (
    "",
    "defragment",
    "segment_map",
    "oom",
    "ALLOC",
    "free",
    "active_awaiting_free",
    "small ",
    "huge",
    None,
    7,
    ["alloc"],
    "\u2603",
)


def _slots(obj, limit: int = 20000) -> list[tuple[Any, Any, Any]]:
    """(container, key or index, value) of every value in a plain object, breadth first."""
    out, todo = [], [obj]
    while todo and len(out) < limit:
        node = todo.pop(0)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append((node, k, v))
            if isinstance(v, (dict, list)):
                todo.append(v)
    return out


def _mutate_pickle_object(payload: bytes, kind: str, ch) -> bytes:
    obj = _unpickled(payload)
    slots = _slots(obj)
    is_num = [s for s in slots if isinstance(s[2], (int, float)) and not isinstance(s[2], bool)]
    if kind == "bad_numbers" and is_num:
        for _ in range(ch.int(1, 3)):
            node, k, _v = ch.choice(is_num)
            node[k] = ch.choice(BAD_VALUES)
    elif kind == "wrong_units" and is_num:
        node, k, v = ch.choice(is_num)
        node[k] = ch.choice([v * 1000, v / 1000, v * 1024, -v, float(v) + 0.5])
    elif kind == "unknown_enum":
        enums = [s for s in slots if s[1] in ("action", "state", "segment_type", "schema")] or slots
        for _ in range(ch.int(1, 3)):
            node, k, _v = ch.choice(enums)
            node[k] = ch.choice(ODD_ENUMS)
    elif kind == "duplicate_ids":
        lists = [s[2] for s in slots if isinstance(s[2], list) and s[2]]
        if lists and ch.int(0, 1):
            lst = ch.choice(lists)
            item = lst[ch.int(0, len(lst) - 1)]
            lst.insert(
                ch.int(0, len(lst)), copy.deepcopy(item) if ch.int(0, 1) else item
            )  # a copy, or the same object twice
        else:
            ids = [s for s in slots if s[1] in ("addr", "address", "device", "stream", "line")] or is_num or slots
            node, k, _v = ch.choice(ids)
            node[k] = ch.choice(ids)[2]
    elif kind == "swap_columns":
        dicts = [s[2] for s in slots if isinstance(s[2], dict) and len(s[2]) >= 2] or (
            [obj] if isinstance(obj, dict) else []
        )
        if dicts:
            d = ch.choice(dicts)
            keys = list(d)
            a, b = ch.choice(keys), ch.choice(keys)
            d[a], d[b] = d[b], d[a]
    protocol = ch.choice([0, 2, 4, 5])
    try:
        return pickle.dumps(obj, protocol=protocol)
    except (RecursionError, ValueError):  # protocol 0 cannot pickle some bytes; keep the mutated value
        return pickle.dumps(obj, protocol=4)


@lru_cache(maxsize=8)
def _pristine(payload: bytes):
    return loads_plain(payload, "seed")


def _unpickled(payload: bytes):
    return copy.deepcopy(_pristine(payload))


# --- hostile pickles ------------------------------------------------------------------------------------------


class _Reduce:
    """Pickles as ``func(*args)``: what an attacker's ``__reduce__`` writes (GLOBAL/STACK_GLOBAL + REDUCE)."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def hostile_pickles(marker: str) -> dict[str, bytes]:
    """Hand-made pickles that each try to create the file ``marker``, each through another opcode path.

    Those named in ``RUN_BY_STOCK_PICKLE`` do create it under the stock ``pickle.loads`` (the tests
    check that in a child process); the others (EXT1, a persistent id) need a loader that helps.
    gpudiag must refuse every one with an InputError and nothing run.
    """
    import os
    import subprocess

    cmd = f"touch {marker}"
    c = cmd.encode()
    code = f"open({str(marker)!r}, 'w').close()"

    def unicode(b: bytes) -> bytes:  # BINUNICODE (4-byte length)
        return b"X" + len(b).to_bytes(4, "little") + b

    snapshot = {
        "segments": [
            {
                "device": 0,
                "address": 0,
                "total_size": 2097152,
                "blocks": [{"size": 512, "state": "active_allocated", "frames": [_Reduce(os.system, cmd)]}],
            }
        ],
        "device_traces": [[]],
    }
    return {
        # GLOBAL + REDUCE, protocol 0 text opcodes: os.system(cmd)
        "global_reduce_os_system": b"cos\nsystem\n(V" + c + b"\ntR.",
        # what pickle.dumps writes for os.system on Linux (GLOBAL posix.system), protocol 2
        "global_reduce_posix_system": pickle.dumps(_Reduce(os.system, cmd), protocol=2),
        # STACK_GLOBAL + REDUCE, protocol 4/5: builtins.eval(code)
        "stack_global_builtins_eval": pickle.dumps(_Reduce(eval, code), protocol=5),
        # STACK_GLOBAL + REDUCE: subprocess.call(["sh", "-c", cmd])
        "stack_global_subprocess_call": pickle.dumps(_Reduce(subprocess.call, ["sh", "-c", cmd]), protocol=4),
        # INST: MARK, args, then INST module/name: subprocess.check_call(["sh", "-c", cmd])
        "inst_subprocess": b"(](Vsh\nV-c\nV" + c + b"\neisubprocess\ncheck_call\n.",
        # OBJ: MARK, GLOBAL builtins.exec, its argument, OBJ
        "obj_builtins_exec": b"\x80\x02(cbuiltins\nexec\n" + unicode(code.encode()) + b"o.",
        # NEWOBJ + BUILD twice: set an instance's __setstate__ to os.system, then BUILD calls it with cmd
        "newobj_build_setstate": (
            b"\x80\x02cargparse\nNamespace\n)\x81N}V__setstate__\ncos\nsystem\ns\x86b" + unicode(c) + b"b."
        ),
        # the attack inside a real-looking snapshot: a block's frame is os.system(cmd)
        "nested_in_snapshot": pickle.dumps(snapshot, protocol=2),
        # EXT1: a code from copyreg's extension registry, then REDUCE
        "ext1_reduce": b"\x80\x02\x82\x01" + unicode(c) + b"\x85R.",
        # a persistent id: the loader's persistent_load would be asked for an external object
        "persistent_id": b"\x80\x02P" + c + b"\n.",
    }


RUN_BY_STOCK_PICKLE = (
    "global_reduce_os_system",
    "global_reduce_posix_system",
    "stack_global_builtins_eval",
    "stack_global_subprocess_call",
    "inst_subprocess",
    "obj_builtins_exec",
    "newobj_build_setstate",
    "nested_in_snapshot",
)


def inject_global(payload: bytes, marker: str, ch) -> bytes:
    """A real pickle with a GLOBAL os.system + REDUCE put in at one of its opcode boundaries."""
    ops = boundaries(payload, "pickle")
    i = ops[ch.int(1, len(ops) - 2)] if len(ops) > 2 else len(payload)
    evil = b"cos\nsystem\n(V" + f"touch {marker}".encode() + b"\ntR0"  # ... and POP the result: the stack is as before
    return payload[:i] + evil + payload[i:]


# --- run folders ----------------------------------------------------------------------------------------------

DIRECTORY = object()  # a path that becomes a folder where a file was expected


def mutate_run_folder(files: dict[str, bytes], kind: str, ch) -> dict[str, Any]:
    """A run folder (relative path → bytes) with one file mutated by ``kind``, or its layout broken.

    About a quarter of the cases change the layout instead of one file's bytes: a file deleted,
    emptied or made a folder, a second artifact claiming the same rank, a leftover ``.tmp``.
    """
    from tests.fuzz.seeds import fmt_of

    out: dict[str, Any] = dict(files)
    names = sorted(files)
    rel = ch.choice(names)
    if ch.int(0, 3) == 0:
        how = ch.int(0, 4)
        if how == 0:
            del out[rel]
        elif how == 1:
            out[rel] = b""
        elif how == 2:
            out[rel] = DIRECTORY
        elif how == 3:  # the same rank twice (rank0 and rank00 both read as rank 0), or a rank never declared
            parent, _, name = rel.rpartition("/")
            twin = name.replace("rank0", ch.choice(["rank00", "rank1", "rank0.copy"]), 1)
            if twin != name:
                out[f"{parent}/{twin}" if parent else twin] = files[rel]
        else:  # what a killed writer leaves: a temporary name, half written
            out[rel + ".tmp"] = files[rel][: len(files[rel]) // 2]
        return out
    fmt, gz = fmt_of(rel)
    out[rel] = mutate(Seed(rel, files[rel], fmt, "", gz=gz), kind, ch)
    return out


def write_tree(root, files: dict[str, Any]) -> None:
    """Write a run folder made by :func:`mutate_run_folder` under ``root`` (which must not exist yet)."""
    from pathlib import Path

    root = Path(root)
    root.mkdir(parents=True)
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if data is DIRECTORY:
            p.mkdir(exist_ok=True)
        else:
            p.write_bytes(data)


def case_seeds(reader: str, full: bool = False) -> tuple[Seed, ...]:
    """The seeds a reader is fuzzed from; ``load`` (one artifact through diagnose.load) takes every reader's."""
    from tests.fuzz.seeds import READERS, seeds

    if reader == "load":
        return tuple(s for r in READERS if r not in ("manifest", "run_folder") for s in seeds(r, full))
    return seeds(reader, full)


def build_case(reader: str, kind: str, ch, dest, full: bool = False) -> tuple[str, str]:
    """Write one mutated input for ``reader`` under the (new) folder ``dest``; return (its path, the seed's name)."""
    from pathlib import Path

    from tests.fuzz.seeds import RUNS, run_files

    dest = Path(dest)
    if reader == "run_folder":
        run = ch.choice(RUNS)
        write_tree(dest / run, mutate_run_folder(run_files(run), kind, ch))
        return str(dest / run), f"runs/{run}"
    pool = case_seeds(reader, full)
    seed = ch.choice(pool)
    if kind not in kinds_for(seed):
        kind = "byte_flip"
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / ("fake_fuzzed" + seed.suffix)
    path.write_bytes(mutate(seed, kind, ch))
    return str(path), seed.name


def reader_kinds(reader: str) -> tuple[str, ...]:
    """The mutation kinds that apply to at least one of a reader's seeds, in ``KINDS`` order."""
    if reader == "run_folder":
        return tuple(k for k in KINDS if k != "pickle_cut")
    usable = {k for s in case_seeds(reader) for k in kinds_for(s)}
    return tuple(k for k in KINDS if k in usable)
