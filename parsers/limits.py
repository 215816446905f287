"""What one input may cost: the caps, and the one way readers open a file within them.

Every reader opens its file with :func:`open_input` (a file object) or :func:`read_input`
(the bytes). Both accept only a regular file (a FIFO would block, ``/dev/zero`` never
ends), gunzip it when it is gzip, and raise :class:`~parsers.errors.InputError`, naming the
file and the cap, as soon as the input goes past one:

- a gzip that has inflated more than ``MAX_GZIP_RATIO`` × the compressed bytes read so far,
  once past ``GZIP_ALLOWANCE_BYTES``, or past ``MAX_DECOMPRESSED_BYTES`` at all: a gzip bomb,
  refused after inflating ~``GZIP_ALLOWANCE_BYTES`` however large it is on disk;
- with ``lines=True`` (CSV, JSON lines): a line longer than ``MAX_LINE_BYTES``;
- with ``json=True`` (or :func:`check_json_nesting`): brackets nested deeper than
  ``MAX_NESTING_DEPTH`` (Python's ``json`` and ``repr`` recurse once per level).

:func:`check_rows` holds a pickle to ``MIN_INPUT_BYTES_PER_ROW`` (a pickle can reference one
object a million times). Each cap can be changed by an environment variable of the same name
with ``GPUDIAG_`` in front, e.g. ``GPUDIAG_MAX_GZIP_RATIO=1000``. Values and their reasons:
docs/input-limits.md. Errors from the file system or a broken gzip stream pass through
:func:`open_input` unchanged, so each reader keeps its own wording for them.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import zlib

import numpy as np

from parsers.errors import InputError

MAX_GZIP_RATIO = 100  # inflated bytes per compressed byte read so far; real captures 5-43, bombs ~1000
GZIP_ALLOWANCE_BYTES = 64 * 2**20  # a gzip may inflate this far whatever its ratio
MAX_DECOMPRESSED_BYTES = 4 * 2**30  # and never further than this
MAX_LINE_BYTES = 16 * 2**20  # longest line (neither \n nor \r) of a CSV or JSON-lines input
MAX_NESTING_DEPTH = 64  # deepest [ / { nesting of a JSON input or pickle; real ones nest 7 levels at most
MIN_INPUT_BYTES_PER_ROW = 4  # a pickle must spend this much per table row; real ones spend 75-165
MAX_CSV_COLUMNS = 20_000  # widest ncu CSV page; 4 sections give ~570, --set full a few thousand

ENV_PREFIX = "GPUDIAG_"
PIECE_BYTES = 1 << 20  # how much is read (and checked) at a time
_DEFAULTS = {
    "MAX_GZIP_RATIO": MAX_GZIP_RATIO,
    "GZIP_ALLOWANCE_BYTES": GZIP_ALLOWANCE_BYTES,
    "MAX_DECOMPRESSED_BYTES": MAX_DECOMPRESSED_BYTES,
    "MAX_LINE_BYTES": MAX_LINE_BYTES,
    "MAX_NESTING_DEPTH": MAX_NESTING_DEPTH,
    "MIN_INPUT_BYTES_PER_ROW": MIN_INPUT_BYTES_PER_ROW,
    "MAX_CSV_COLUMNS": MAX_CSV_COLUMNS,
}
_GZIP_ERRORS = (OSError, EOFError, zlib.error)


def limit(name: str) -> int:
    """The cap ``name`` ("MAX_LINE_BYTES", …): ``GPUDIAG_<name>`` from the environment, else the default."""
    text = os.environ.get(ENV_PREFIX + name)
    if text is None or not text.strip():
        return _DEFAULTS[name]
    digits = text.strip().replace("_", "")
    lowest = 0 if name.startswith("MIN_") else 1  # a minimum of 0 turns its check off
    if not digits.isascii() or not digits.isdigit() or int(digits) < lowest:
        raise InputError(None, f"{ENV_PREFIX}{name} should be a whole number ≥ {lowest}, found {text!r}")
    return int(digits)


def human_bytes(n: float) -> str:
    """``16777216`` → ``16 MiB``; ``1059875`` → ``1.0 MiB``."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" or float(n).is_integer() else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} GiB"  # pragma: no cover


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _not_regular(path: str, mode: int) -> InputError:
    return InputError(
        path,
        f"is {_kind(mode)}; expected a regular file (gpudiag reads files, not pipes or "
        "devices, which can block or never end)",
    )


def require_regular_file(path: str | os.PathLike) -> None:
    """Raise InputError unless ``path`` is a regular file (after symlinks); for code that opens it itself."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(os.fspath(path), st.st_mode)


_TRACKED: dict[str, int] = {}  # path -> bytes of it read from disk so far in this process, for a progress display


def track_reads(paths) -> None:
    """Count the bytes read from disk of these files (by any reader, in this process) from now on."""
    for p in paths:
        _TRACKED[os.fspath(p)] = 0


def bytes_read_on_disk(path) -> int:
    """What :func:`track_reads` counted for ``path``: its bytes on disk read so far (compressed, for a gzip)."""
    return _TRACKED.get(os.fspath(path), 0)


def untrack_reads(paths) -> None:
    for p in paths:
        _TRACKED.pop(os.fspath(p), None)


class InputFile:
    """A regular file opened for reading bytes, gunzipped when it is gzip, held to the caps.

    ``read(n)`` returns up to ``n`` bytes (all that is left when ``n`` is omitted or < 0), like a
    binary file. ``compressed`` tells whether the file is gzip, ``disk_bytes`` its size on disk.
    A gzip is inflated a piece at a time and its ratio checked after each piece, against the
    compressed bytes read so far: a bomb is refused after ``GZIP_ALLOWANCE_BYTES`` or so, however
    large it is on disk.
    """

    def __init__(self, path: str | os.PathLike, lines: bool = False, json: bool = False, gunzip: bool = True):
        self.path = os.fspath(path)
        self._ratio, self._allowance = limit("MAX_GZIP_RATIO"), limit("GZIP_ALLOWANCE_BYTES")
        self._max_bytes = limit("MAX_DECOMPRESSED_BYTES")
        self._max_line = limit("MAX_LINE_BYTES") if lines else None
        self._nesting = _Nesting(limit("MAX_NESTING_DEPTH")) if json else None
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below)
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _not_regular(self.path, st.st_mode)
            if hasattr(os, "set_blocking"):
                os.set_blocking(fd, True)
            self._raw = os.fdopen(fd, "rb", buffering=0)  # unbuffered: read() of a plain file is one copy
        except BaseException:
            os.close(fd)
            raise
        self.disk_bytes = st.st_size
        self.compressed = self._raw.read(2) == b"\x1f\x8b"
        self._raw.seek(0)
        if self.compressed and not gunzip:
            self._raw.close()
            raise InputError(
                self.path, "is gzip-compressed, but this kind of file is read as plain text; gunzip it first"
            )
        self._f = gzip.GzipFile(fileobj=self._raw, mode="rb") if self.compressed else self._raw
        self._offset = 0  # (decompressed) bytes handed out so far
        self._line = 1  # line number at self._offset
        self._run = 0  # bytes since the last line break

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            n = None
        if self.compressed:
            out = io.BytesIO()  # its getvalue() does not copy: one copy of the content at the peak
            while n is None or n > 0:
                piece = self._f.read(PIECE_BYTES if n is None else min(PIECE_BYTES, n))
                if not piece:
                    break
                self._check_ratio(len(piece))
                self._checked(piece)
                out.write(piece)
                if n is not None:
                    n -= len(piece)
            self._count_read()
            return out.getvalue()
        if n is None:
            data = self._checked(self._f.read())
            self._count_read()
            return data
        parts = []  # a raw read returns at most ~2 GiB, or less: read until n or the end
        while n > 0:
            part = self._f.read(n)
            if not part:
                break
            parts.append(part)
            n -= len(part)
        self._count_read()
        return self._checked(parts[0] if len(parts) == 1 else b"".join(parts))

    def _count_read(self) -> None:
        if self.path in _TRACKED:
            _TRACKED[self.path] = self._raw.tell()

    def _check_ratio(self, more: int) -> None:
        inflated = self._offset + more
        if inflated > self._max_bytes:
            raise InputError(
                self.path,
                (
                    f"is a gzip that inflates past {human_bytes(self._max_bytes)} (MAX_DECOMPRESSED_BYTES), more than "
                    f"gpudiag reads from one file. If it is real, raise {ENV_PREFIX}MAX_DECOMPRESSED_BYTES "
                    "(docs/input-limits.md)"
                ),
            )
        consumed = max(1, self._raw.tell())
        if inflated > self._allowance and inflated > self._ratio * consumed:
            raise InputError(
                self.path,
                (
                    f"is a gzip that inflates more than {self._ratio}× (MAX_GZIP_RATIO): its first "
                    f"{human_bytes(consumed)} on disk already gave {human_bytes(inflated)}, past the "
                    f"{human_bytes(self._allowance)} any gzip may give (GZIP_ALLOWANCE_BYTES); refused as a likely "
                    f"gzip bomb (real captures compress 5-45×). If it is real, raise {ENV_PREFIX}MAX_GZIP_RATIO "
                    "(docs/input-limits.md)"
                ),
            )

    def _checked(self, data: bytes) -> bytes:
        if self._max_line is not None:
            self._check_lines(data)
        if self._nesting is not None:
            at = self._nesting.feed(data)
            if at is not None:
                raise nesting_error(self.path, self._nesting.limit, f"at byte {self._offset + at:,} it")
        self._offset += len(data)
        return data

    def _check_lines(self, data: bytes) -> None:
        cap, n = self._max_line, len(data)
        window = min(PIECE_BYTES, cap)  # a window no longer than the cap: a line over it spans windows
        for start in range(0, n, window):
            end = min(start + window, n)
            first = _first_break(data, start, end)
            if first < 0:
                self._run += end - start
                at = end
            else:
                self._run += first - start
                at = first
            if self._run > cap:
                line = self._line + data.count(b"\n", 0, at)
                raise InputError(
                    self.path,
                    (
                        f"line {line:,} is longer than {human_bytes(cap)} (MAX_LINE_BYTES) with no line break; expected "
                        f"a line-oriented file (CSV or JSON lines) of shorter lines. If it is real, raise "
                        f"{ENV_PREFIX}MAX_LINE_BYTES (docs/input-limits.md)"
                    ),
                )
            if first >= 0:
                self._run = end - 1 - max(data.rfind(b"\n", start, end), data.rfind(b"\r", start, end))
        self._line += data.count(b"\n")

    def close(self) -> None:
        try:
            if self._f is not self._raw:
                self._f.close()
        finally:
            self._raw.close()

    def __enter__(self) -> InputFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _first_break(data: bytes, start: int, end: int) -> int:
    nl, cr = data.find(b"\n", start, end), data.find(b"\r", start, end)
    return cr if nl < 0 else nl if cr < 0 else min(nl, cr)


def open_input(path: str | os.PathLike, *, lines: bool = False, json: bool = False, gunzip: bool = True) -> InputFile:
    """``path`` opened for reading within the caps (see the module doc).

    ``lines``: the input is line-oriented, hold its lines to ``MAX_LINE_BYTES``. ``json``: it is
    JSON (or JSON lines), hold its nesting to ``MAX_NESTING_DEPTH``. ``gunzip=False``: the reader
    takes no gzip, so a gzip is refused (InputError) without inflating it. OSError from opening the
    file and errors of a broken gzip stream pass through; a cap exceeded is an InputError.
    """
    return InputFile(path, lines=lines, json=json, gunzip=gunzip)


def read_input(path: str | os.PathLike, *, lines: bool = False, json: bool = False, gunzip: bool = True) -> bytes:
    """All of ``path`` (gunzipped), within the caps. A broken gzip stream is an InputError here."""
    with open_input(path, lines=lines, json=json, gunzip=gunzip) as f:
        try:
            return f.read()
        except _GZIP_ERRORS as e:
            if isinstance(e, EOFError):
                problem = "the gzip stream ends early: the file is truncated (was the run killed while writing?)"
            else:
                problem = f"the gzip stream is broken ({e})"
            raise InputError(path, f"is gzip-compressed but cannot be decompressed: {problem}") from None


def check_rows(path: str | os.PathLike | None, rows: int, input_bytes: int) -> None:
    """Refuse an input whose tables would get more rows than its bytes can spell out.

    A pickle can reference one object any number of times for two bytes a reference (the memo),
    so 4 KB can claim a million blocks: a "billion laughs". Each row of a real pickle is its own
    object of 75-165 bytes; ``MIN_INPUT_BYTES_PER_ROW`` asks for far less.
    """
    per_row = limit("MIN_INPUT_BYTES_PER_ROW")
    if per_row and rows * per_row > input_bytes:
        raise InputError(
            path,
            (
                f"its {human_bytes(input_bytes)} would make {rows:,} table rows, fewer than {per_row} bytes a row "
                f'(MIN_INPUT_BYTES_PER_ROW): it references the same objects over and over (a pickle "billion laughs"), '
                f"which no real capture does. If it is real, set {ENV_PREFIX}MIN_INPUT_BYTES_PER_ROW=0 (docs/input-limits.md)"
            ),
        )


# --- JSON nesting --------------------------------------------------------------------------------


def check_json_nesting(data: bytes, path: str | os.PathLike | None) -> None:
    """Raise InputError if the JSON text ``data`` nests ``[`` / ``{`` deeper than ``MAX_NESTING_DEPTH``."""
    scan = _Nesting(limit("MAX_NESTING_DEPTH"))
    at = scan.feed(data)
    if at is not None:
        raise nesting_error(path, scan.limit, f"at byte {at:,} it")


def nesting_error(path, max_depth: int, where: str = "it") -> InputError:
    """The error for input nested deeper than ``max_depth``; ``where`` starts the sentence."""
    return InputError(
        path,
        f"{where} nests deeper than {max_depth} levels (MAX_NESTING_DEPTH); gpudiag's inputs "
        f"nest 7 levels at most. If it is real, raise {ENV_PREFIX}MAX_NESTING_DEPTH "
        "(docs/input-limits.md)",
    )


_KEEP = b'[]{}"\\'  # the only bytes that matter to nesting
_DROP = bytes(c for c in range(256) if c not in _KEEP)
_INTERESTING = np.zeros(256, dtype=bool)
_INTERESTING[list(_KEEP)] = True
_DELTA = np.zeros(256, dtype=np.int8)
_DELTA[list(b"[{")] = 1
_DELTA[list(b"]}")] = -1
_SCAN_BYTES = 4 << 20


class _Nesting:
    """Depth of ``[``/``{`` outside strings, fed piece by piece, at numpy speed (~300 MB/s).

    Only brackets, quotes and backslashes are looked at: a quote preceded by an odd run of
    backslashes is escaped; a bracket between an opening and a closing quote is text. A closing
    bracket with nothing open is ignored (the depth never goes below 0), so stray ``]`` cannot hide
    a deep nest that follows.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.depth = 0  # running sum of +1/-1 so far
        self.floor = 0  # its lowest value so far (depth - floor is the nesting)
        self.in_string = 0
        self.escape_next = False  # the last piece ended with an odd run of backslashes

    def feed(self, data: bytes) -> int | None:
        """Offset in ``data`` where the nesting first passes the limit, or None."""
        for start in range(0, len(data), _SCAN_BYTES):
            piece = data[start : start + _SCAN_BYTES]
            skip = 1 if self.escape_next else 0  # the escaped byte is text: leave it out
            self.escape_next = False
            if b"\\" in piece:
                a = np.frombuffer(piece, dtype=np.uint8)
                idx = np.flatnonzero(_INTERESTING[a[skip:]]) + skip
                c = a[idx]
                quote = c == 34
                backslash = c == 92
                if len(idx):
                    escaped, last_run_odd = _after_odd_backslashes(backslash, idx)
                    quote &= ~escaped
                    self.escape_next = last_run_odd and idx[-1] == len(a) - 1
            else:  # the usual case: no escapes, every quote counts, no positions needed
                idx = None
                c = np.frombuffer(piece[skip:].translate(None, _DROP), dtype=np.uint8)
                quote = c == 34
            k = self._advance(c, quote)
            if k is not None:
                if idx is None:
                    idx = np.flatnonzero(_INTERESTING[np.frombuffer(piece, dtype=np.uint8)[skip:]]) + skip
                return start + int(idx[k])
        return None

    def _advance(self, c: np.ndarray, quote: np.ndarray) -> int | None:
        """Walk the interesting bytes ``c``; the index of the first one past the limit, or None."""
        if not len(c):
            return None
        parity = np.bitwise_xor.accumulate(quote.view(np.uint8)) ^ self.in_string
        delta = _DELTA[c]
        delta[parity.view(bool)] = 0  # brackets inside strings are text
        local = np.cumsum(delta, dtype=np.int32)  # |local| ≤ 4 Mi: the depth relative to this piece's start
        low = self.floor - self.depth  # the floor, relative to this piece's start (≤ 0)
        if int(local.min()) >= low:  # never below the floor: the nesting is local - low
            if int(local.max()) - low > self.limit:
                return int(np.argmax(local - low > self.limit))
        else:
            floor = np.minimum.accumulate(np.minimum(local, low))
            over = local - floor > self.limit
            if over.any():
                return int(np.argmax(over))
            low = int(floor[-1])
        self.floor = self.depth + low
        self.depth += int(local[-1])
        self.in_string = int(parity[-1])
        return None


def _after_odd_backslashes(backslash: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, bool]:
    """For each interesting byte, whether it is escaped (right after an odd run of adjacent
    backslashes); and whether the last byte ends such a run (then it escapes the next piece's first byte)."""
    n = len(idx)
    k = np.arange(n)
    adjacent = np.zeros(n, dtype=bool)
    adjacent[1:] = idx[1:] == idx[:-1] + 1
    continues = np.zeros(n, dtype=bool)
    continues[1:] = backslash[1:] & backslash[:-1] & adjacent[1:]
    run_start = np.maximum.accumulate(np.where(continues, 0, k))
    run_length = np.where(backslash, k - run_start + 1, 0)
    escaped = np.zeros(n, dtype=bool)
    escaped[1:] = adjacent[1:] & (run_length[:-1] % 2 == 1)
    return escaped, bool(run_length[-1] % 2 == 1)
