"""Every input format gpudiag reads, in the order they are tried, and the one way to detect a file's format.

To add a format: write its reader module (it ends with ``READERS = (Reader(...),)``, see
:mod:`parsers.reader`) and add the module's name to :data:`READER_MODULES`. Order matters
only where two sniffs could both say yes: the first one wins.
"""

from __future__ import annotations

import functools
import gzip
import importlib
import os
import zlib
from pathlib import Path

from parsers.errors import InputError
from parsers.limits import require_regular_file
from parsers.reader import BINARY, JSON, SNIFF_BYTES, Reader, is_json
from parsers.run_folder import is_run_folder

READER_MODULES = (
    "parsers.findings_json",  # before the other JSON formats: it quotes a run's manifest and sources
    "parsers.ncu_rep",
    "parsers.trace",
    "parsers.snapshot",  # after the trace: a trace's metadata may hold snapshot-like keys
    "parsers.ncu_csv",  # before the other text formats: ncu's stdout holds the script's own lines too
    "parsers.nvml",
    "parsers.ncu_launch_starts",
    "parsers.events",
    "parsers.memory_stats",
    "parsers.nsys_sqlite",  # takes any SQLite file (and says when it is not an nsys export)
)


@functools.lru_cache(maxsize=1)
def readers() -> tuple[Reader, ...]:
    """Every registered reader, in the order they are tried."""
    return tuple(r for name in READER_MODULES for r in importlib.import_module(name).READERS)


def reader(kind: str) -> Reader:
    """The reader of one kind ("trace", "ncu-csv", ...)."""
    for r in readers():
        if r.kind == kind:
            return r
    raise KeyError(kind)


def head_of(path: str | os.PathLike) -> bytes:
    """The first SNIFF_BYTES of a file's content, gunzipped when it is gzip."""
    path = Path(path)
    require_regular_file(path)  # a FIFO or /dev/zero would block or never end
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from None
    if not head:
        raise InputError(path, f"is empty; expected {_expected()}")
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as f:
                head = f.read(SNIFF_BYTES)
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(path, f"is gzip-compressed but cannot be decompressed: {e}") from None
        if not head:
            raise InputError(path, "is a gzip file with nothing in it")
    return head


def detect(path: str | os.PathLike) -> Reader | None:
    """The reader of the file at ``path``, from its content; None for a run folder. Raises InputError
    for a folder that is not a run folder and for content no reader recognises."""
    path = Path(path)
    if path.is_dir():
        if is_run_folder(path):
            return None
        raise InputError(path, "is a folder but not a gpudiag run folder (no manifest.json in it)")
    head = head_of(path)
    for r in readers():
        if r.sniff(head):
            return r
    if is_json(head):
        raise InputError(path, "is JSON but not a format gpudiag knows; expected " + _expected(JSON))
    if b"\x00" in head[:4096]:
        raise InputError(
            path, "is a binary file of an unknown format; expected " + _expected(BINARY) + ", or one of those gzipped"
        )
    raise InputError(path, f"is not a format gpudiag reads: expected {_expected()}, or a run folder")


def _expected(form: str | None = None) -> str:
    """The formats gpudiag reads (of one form), as a phrase for an error message."""
    whats = list(dict.fromkeys(r.what for r in readers() if form is None or form in r.forms))
    return ", ".join(whats[:-1]) + (" or " if len(whats) > 1 else "") + whats[-1] if whats else "a format gpudiag reads"
