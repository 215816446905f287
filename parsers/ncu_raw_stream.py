"""ncu's raw CSV page streamed through pyarrow block by block: every column as a numpy array, with
neither the file's bytes nor a whole arrow table held.

Why: a 100,000-launch page is ~500 MB of text. Reading it whole held the bytes, the arrow table and
the numpy columns at once (1.8 GiB at the peak); streamed, the peak is the numpy columns plus a few
blocks. pyarrow also converts faster when told each column's type than when it infers the type in
every block, so the types are chosen once, from a first block (``PROBE_BYTES``):

- ``number``: pyarrow parses the values as float64 (ints and floats alike: the table is float64);
- ``grouped``: text in the first block that is a number once ncu's thousands separators are removed
  (``"1,234.5"``), or empty there: read as text, converted to float64;
- ``text``: names and enums (and every column of ``TEXT_COLUMNS``): one ``str`` per distinct value,
  None where missing.

A page that fits in the first block is converted from it. Otherwise pyarrow parses block after block
on a thread of its own (its streaming reader parses only when asked) while this thread converts
them, ``FLUSH_VALUES`` at a time. A ``number`` column that meets a separator later (``"999"`` first,
``"1,000"`` further on) becomes ``grouped`` and the stream resumes after the rows already kept (after
``SINGLE_RESUMES`` of those, every number column still below 1,000 is read as ``grouped``); a
``grouped`` column that meets a value that is no number is read again, alone, as text. The result is
the whole-file reader's (:func:`parsers.ncu_csv._raw_columns`). Anything else pyarrow rejects (ncu's
log lines, a quoted line break, a row with a different field count, bytes that are not UTF-8, a row
longer than a block), a damaged gzip, or a file that does not end in a whole record makes
:func:`stream_raw_columns` give None: the caller's whole-file reader then reads it, and says what is
wrong.
"""

from __future__ import annotations

import os
import queue
import re
import threading
import zlib

import numpy as np

from parsers.limits import open_input

NA = ["", "n/a", "N/A", "no data", "nan", "-"]
TEXT_COLUMNS = ("Process Name", "Host Name", "Kernel Name", "CC", "Block Size", "Grid Size")
BLOCK_BYTES = 1 << 21  # per pyarrow block; on the 100,000-launch page 1 MiB cost 1 s more, 8 MiB 280 MB more peak
FLUSH_VALUES = 1 << 21  # blocks are converted together once they hold this many values (~16 MB as float64)
SINGLE_RESUMES = 3  # resumes that each turn one number column into grouped; the last also every one below 1,000
PREFETCH_BLOCKS = 8  # blocks parsed ahead of their conversion
PROBE_BYTES = 1 << 21  # the first block, whose values choose each column's type
TAIL_BYTES = 4096  # the end of the file kept to check that its last record is whole
NUMBER, GROUPED, BOOLEAN, TEXT = "number", "grouped", "boolean", "text"
_FAILED_COLUMN = re.compile(r"In CSV column #(\d+): .*?CSV conversion error to (?:double|bool)")


class NotPlain(Exception):
    """The page is not one pyarrow streams as it is: the whole-file reader takes it."""


def stream_raw_columns(path: str | os.PathLike, header: list[str], skip_units: bool, max_bytes: int):
    """``{column: numpy array}`` of the raw page at ``path`` (float64 for numbers, object for text),
    or None when it is not plain (see the module's docstring) or pyarrow is not installed."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return None
    try:
        return _Stream(path, header, skip_units, max_bytes).columns()
    except (NotPlain, pyarrow.ArrowException, OSError, EOFError, zlib.error):
        return None  # a damaged gzip, a page pyarrow rejects: the whole-file reader says what is wrong


def _prefetched(batches, depth: int = PREFETCH_BLOCKS):
    """``batches`` read on a thread of their own, up to ``depth`` ahead: pyarrow's streaming reader parses a
    block only when asked for it, so without this the parse and the conversion of what was parsed take
    turns on one core. The reader's exception is raised here, in the caller's thread."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for batch in batches:
                if not put(batch):
                    return
            put(end)
        except BaseException as e:  # noqa: BLE001 (handed to the caller's thread, raised there)
            put(_Failed(e))

    worker = threading.Thread(target=run, name="gpudiag-ncu-csv", daemon=True)
    worker.start()
    try:
        while (item := ready.get()) is not end:
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        worker.join()


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


class _Source:
    """The file as pyarrow reads it (gunzipped, held to the input caps by ``open_input``): counts the
    bytes against ``max_bytes`` and keeps the last ``TAIL_BYTES`` for the whole-record check."""

    def __init__(self, path, max_bytes: int):
        self._f = open_input(path, lines=True)
        self._max_bytes = max_bytes
        self.compressed = self._f.compressed
        self.size = 0
        self.tail = b""
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.size += len(data)
        if self.size > self._max_bytes:
            raise NotPlain()  # the whole-file reader names the cap
        if data:
            self.tail = (self.tail + data[-TAIL_BYTES:])[-TAIL_BYTES:]
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._f.close()

    def __enter__(self) -> _Source:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _decoded_size(path) -> int:
    """The page's size once gunzipped (the gzip trailer's, mod 4 GiB): only to size the columns."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return size
        f.seek(-4, os.SEEK_END)
        stated = int.from_bytes(f.read(4), "little")
    return stated if stated >= size else size * 10


class _Stream:
    def __init__(self, path, header: list[str], skip_units: bool, max_bytes: int):
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyarrow import csv as pacsv

        self.pa, self.pc, self.pacsv = pa, pc, pacsv
        self.path, self.names, self.max_bytes = path, header, max_bytes
        self.skip = 1 if skip_units else 0
        self.kinds: dict[str, str] = {}
        self.numbers: dict[str, np.ndarray] = {}  # number, grouped and boolean columns, `capacity` rows each
        self.texts: dict[str, list[np.ndarray]] = {}  # text columns, one piece per block
        self.interned: dict[str, str] = {}
        self.reread: list[str] = []  # grouped columns that met text: read again as text
        self.gzip = False
        self.small_numbers: list[str] = []  # number columns below 1,000 in the first block (no separator seen yet)
        self.done = False  # every row converted (the reread of grouped columns that met text aside)
        self.rows = 0  # rows in `numbers` / `texts`
        self.capacity = 0  # rows each array of `numbers` has room for, as the first block suggests

    def columns(self) -> dict[str, np.ndarray]:
        self._probe()
        if not self.done:
            lane = _Lane(self, self.names, prefetch=True)
            lane.stream_all()
            self.rows = lane.rows
        if self.reread:
            for name in self.reread:
                self.numbers.pop(name)
                self.kinds[name] = TEXT
                self.texts[name] = []
            lane = _Lane(self, list(self.reread), prefetch=False)
            lane.read_text()
            if lane.rows != self.rows:
                raise NotPlain()
        self.pa.default_memory_pool().release_unused()  # the blocks' memory, which pyarrow's pool would keep
        out = {}
        for name in self.names:
            if name in self.numbers:
                out[name] = self.numbers.pop(name)[: self.rows]
            else:
                pieces = self.texts.pop(name)
                out[name] = np.concatenate(pieces) if pieces else np.empty(0, dtype=object)
        return out

    def _options(self, names: list[str], skip: int, block_bytes: int, types: dict | None):
        pacsv = self.pacsv
        return dict(
            read_options=pacsv.ReadOptions(skip_rows_after_names=skip, block_size=block_bytes),
            parse_options=pacsv.ParseOptions(newlines_in_values=False),
            convert_options=pacsv.ConvertOptions(
                null_values=NA,
                strings_can_be_null=True,
                include_columns=names if names is not self.names else None,
                column_types=types,
            ),
        )

    def _probe(self) -> None:
        """Each column's kind from pyarrow's inference on the first block, and the rows to make room for.
        A page that fits in that block (the usual capture of a few hundred launches) is converted from it:
        no second read."""
        pa, pc = self.pa, self.pc
        types = {c: pa.string() for c in TEXT_COLUMNS if c in self.names}
        whole = False
        with _Source(self.path, self.max_bytes) as src:
            self.gzip = src.compressed
            try:
                reader = self.pacsv.open_csv(src, **self._options(self.names, self.skip, PROBE_BYTES, types))
                first = reader.read_next_batch()
            except StopIteration:
                first = None
            except pa.ArrowInvalid:
                raise NotPlain() from None
            try:
                reader.read_next_batch()
            except StopIteration:
                whole = first is not None and src.tail.rstrip(b"\r\n").endswith(b'"')
            except pa.ArrowInvalid:
                pass  # the second block is the stream's business
            reader = None
        probed_types = first.schema.types if first is not None else [pa.null()] * len(self.names)
        grouped = {}  # the first block's values of the grouped columns, as numbers
        for i, (name, t) in enumerate(zip(self.names, probed_types)):
            if name in TEXT_COLUMNS:
                kind = TEXT
                whole = whole and pa.types.is_string(t)
            elif pa.types.is_floating(t) or pa.types.is_integer(t):
                kind = NUMBER
            elif pa.types.is_boolean(t):
                kind = BOOLEAN
            elif pa.types.is_null(t):
                kind = GROUPED
                grouped[name] = None
            elif pa.types.is_string(t) or pa.types.is_large_string(t):
                try:
                    grouped[name] = pc.cast(pc.replace_substring(first.column(i), ",", ""), pa.float64())
                    kind = GROUPED
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    kind = TEXT
            else:  # a type ncu's pages do not hold (a timestamp): its text as written, from the stream
                kind = TEXT
                whole = False
            self.kinds[name] = kind
        probed = first.num_rows if first is not None else 0
        rows_per_byte = probed / PROBE_BYTES if probed else 1 / 1024
        # room for every row at the first block's density, with a margin: pages never written to are
        # not resident, and a column that runs out grows by half (one column copied at a time)
        self.capacity = probed if whole else max(probed, int(_decoded_size(self.path) * rows_per_byte * 1.25)) + 64
        for name, kind in self.kinds.items():
            if kind == TEXT:
                self.texts[name] = []
            else:
                self.numbers[name] = np.empty(self.capacity)
        if whole:
            self._convert_whole(first, grouped)
        elif first is not None:
            # ncu prints a separator from 1,000 up in the columns it groups at all: a column that reached 1,000
            # without one never has one
            for name, col in zip(first.schema.names, first.columns):
                if self.kinds[name] == NUMBER:
                    top = pc.max(pc.abs(col)).as_py()
                    if top is None or top < 1000:
                        self.small_numbers.append(name)

    def _convert_whole(self, first, grouped: dict) -> None:
        """The page, all of it in the first block (read with inferred types), into the columns."""
        pa, pc = self.pa, self.pc
        names = first.schema.names
        numbers = [i for i, name in enumerate(names) if self.kinds[name] == NUMBER]
        if numbers:
            _Lane(self, self.names, prefetch=False).put_numbers(pa.Table.from_batches([first.select(numbers)]), 0)
        for name, col in zip(names, first.columns):
            kind = self.kinds[name]
            if kind == TEXT:
                self.texts[name].append(self._text(col))
            elif kind == BOOLEAN:
                self.numbers[name][:] = pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False)
            elif kind == GROUPED:
                values = grouped[name]
                self.numbers[name][:] = np.nan if values is None else values.to_numpy(zero_copy_only=False)
        self.rows = first.num_rows
        self.done = True

    def _types(self, names: list[str]) -> dict:
        pa = self.pa
        arrow = {NUMBER: pa.float64(), BOOLEAN: pa.bool_(), GROUPED: pa.string(), TEXT: pa.string()}
        return {name: arrow[self.kinds[name]] for name in names}

    def _read(self, names: list[str], skip: int, add, prefetch: bool) -> None:
        options = self._options(names, skip, BLOCK_BYTES, self._types(names))
        ahead = _prefetched if prefetch else iter
        if self.gzip:
            with _Source(self.path, self.max_bytes) as src:
                for batch in ahead(self.pacsv.open_csv(src, **options)):
                    add(batch)
                tail = src.tail
        else:  # pyarrow reads the file itself; open_input's caps were checked on the head, the size here
            if os.path.getsize(self.path) > self.max_bytes:
                raise NotPlain()  # the whole-file reader names the cap
            source = self.pa.input_stream(os.fspath(self.path), compression=None)  # not by the file's name
            for batch in ahead(self.pacsv.open_csv(source, **options)):
                add(batch)
            with open(self.path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.path) - TAIL_BYTES))
                tail = f.read()
        if not tail.rstrip(b"\r\n").endswith(b'"'):
            raise NotPlain()  # cut inside the last field: pyarrow accepts the open quote

    def _failed_number(self, e: Exception) -> str | None:
        """The number column whose conversion failed (pyarrow names it by position), or None."""
        m = _FAILED_COLUMN.match(str(e))
        if not m or int(m.group(1)) >= len(self.names):
            return None
        name = self.names[int(m.group(1))]
        return name if self.kinds[name] in (NUMBER, BOOLEAN) else None

    def _text(self, col) -> np.ndarray:
        """Text (a block or several) → object array: one ``str`` per distinct value over the whole page
        (100,000 launches name a few dozen kernels), None where missing."""
        if isinstance(col, self.pa.ChunkedArray):
            col = col.combine_chunks()
        col = self.pc.dictionary_encode(col)
        words = col.dictionary.to_pylist()
        table = np.empty(len(words) + 1, dtype=object)
        table[:-1] = [self.interned.setdefault(w, w) for w in words]
        codes = self.pc.fill_null(col.indices, -1).to_numpy(zero_copy_only=False)
        return table[codes]  # -1: the last entry, None


class _Lane:
    """One read of some of the page's columns into the stream's arrays (all of them; or, for the second read,
    the grouped columns that met text): its rows, its blocks not yet converted, its resumes."""

    def __init__(self, stream: _Stream, names: list[str], prefetch: bool):
        self.s, self.names, self.prefetch = stream, names, prefetch
        self.pa, self.pc = stream.pa, stream.pc
        self.numbers = stream.numbers
        self.capacity = stream.capacity
        self.rows = 0  # rows converted
        self.pending: list = []  # blocks read, not yet converted
        self.pending_rows = 0
        self.resumes = 0

    def stream_all(self) -> None:
        s = self.s
        while True:
            try:
                s._read(self.names, s.skip + self.rows, self._add, self.prefetch)
                self._flush()
                return
            except self.pa.ArrowInvalid as e:
                column = s._failed_number(e)
                if column is None or column not in self.names:
                    raise NotPlain() from None
                self._flush()  # the whole blocks before the one that failed, at the kinds they were read with
                s.kinds[column] = GROUPED  # its rows so far are kept; it is text from the next block on
                self.resumes += 1
                if self.resumes == SINGLE_RESUMES:
                    # each resume reads the page again up to where it stopped: past a few, every number column
                    # that may still meet a separator is read as text from here on
                    for name in set(s.small_numbers) & set(self.names):
                        if s.kinds[name] == NUMBER:
                            s.kinds[name] = GROUPED

    def read_text(self) -> None:
        """The lane's columns again, from the start, as text (grouped columns that met a value no number)."""
        self.s._read(self.names, self.s.skip, self._add_text_only, self.prefetch)

    def _grow(self, rows: int) -> None:
        """Room for ``rows`` in the lane's own arrays, by half as much again: one column copied at a time."""
        if rows <= self.capacity:
            return
        self.capacity = max(rows, int(self.capacity * 1.5))
        for name in self.names:
            old = self.numbers.get(name)
            if old is not None:
                grown = np.empty(self.capacity)
                grown[: self.rows] = old[: self.rows]
                self.numbers[name] = grown
                del old

    def _add(self, batch) -> None:
        """Keep a block; convert the kept blocks together once they hold ``FLUSH_VALUES`` values (one
        conversion per column for many small blocks: small blocks keep pyarrow's read-ahead small)."""
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        if self.pending_rows * len(self.names) >= FLUSH_VALUES:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        pa, pc, s = self.pa, self.pc, self.s
        table = pa.Table.from_batches(self.pending)
        self.pending, self.pending_rows = [], 0
        start, end = self.rows, self.rows + table.num_rows
        self._grow(end)
        names = table.column_names
        numbers = [i for i, name in enumerate(names) if s.kinds[name] == NUMBER]
        if numbers:
            self.put_numbers(table.select(numbers), start)
        for name, col in zip(names, table.columns):
            kind = s.kinds[name]
            if kind == TEXT:
                s.texts[name].append(s._text(col))
            elif kind == BOOLEAN:
                self.numbers[name][start:end] = pc.cast(col, pa.float64()).to_numpy()
            elif kind == GROUPED and name not in s.reread:
                try:
                    values = pc.cast(pc.replace_substring(col, ",", ""), pa.float64())
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    s.reread.append(name)  # text after all: read again as text
                    continue
                self.numbers[name][start:end] = values.to_numpy()
        table = col = None
        self.rows = end

    def put_numbers(self, table, start: int) -> None:
        """The float64 columns of ``table`` into ``numbers`` from row ``start``: one 2-D array per block, stacked,
        then one copy per column (a conversion per column and block costs ~20 µs of pyarrow each: seconds on a
        wide page)."""
        dests = [self.numbers[name] for name in table.column_names]
        try:  # column-major blocks, transposed: (columns × rows), each column contiguous
            blocks = [b.to_tensor(null_to_nan=True, row_major=False) for b in table.to_batches() if b.num_rows]
            stacked = np.concatenate([np.asarray(b).T for b in blocks], axis=1)
        except (AttributeError, TypeError):  # pyarrow < 15: column by column
            for dest, col in zip(dests, table.columns):
                dest[start : start + table.num_rows] = col.to_numpy()
            return
        end = start + stacked.shape[1]
        for dest, values in zip(dests, stacked):
            dest[start:end] = values

    def _add_text_only(self, batch) -> None:
        for name, col in zip(batch.schema.names, batch.columns):
            self.s.texts[name].append(self.s._text(col))
        self.rows += batch.num_rows
