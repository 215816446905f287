"""Append-only JSONL files: whole lines, each write at once.

A kill loses at most the write in progress (one record, or one batch of step records)
and what the writer still held: every earlier line is on disk. (The bootstrap writes step
records in batches at most 100 ms apart, and at every exit through Python.) A write that
fails (a full disk: ENOSPC, or EFBIG past a file-size limit) is cut
back to the last whole line and the file takes no more records, so the file never holds
a broken line in its middle. The file is created exclusively, so two processes that think
they are the same rank cannot interleave into one file. Standard library only (runs in the child).
"""

from __future__ import annotations

import os

# in the child, runtime/__init__.py registers these modules before this one: no import of the diagnose package
from diagnose.launch.fault_injection import armed as _fault_armed
from diagnose.launch.fault_injection import due as _fault_due
from diagnose.launch.fault_injection import write_half_and_die as _die_mid_write
from parsers.run_records import json_line


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a short write is retried; its error raised)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class LineAppender:
    """Whole lines appended to ``path``, created exclusively on the first write (also nvml.csv's writer)."""

    def __init__(self, path: str):
        self.path = path
        self._fd = None
        self._size = 0  # bytes of whole lines in the file
        self.failed: OSError | None = None  # the write error that stopped this file

    def _open(self) -> int:
        if self._fd is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        return self._fd

    def write(self, data: bytes) -> None:
        """Append ``data`` (whole lines); on an error keep the whole lines that made it, cut the rest, stop, raise."""
        if self.failed is not None:
            return
        fd = self._open()
        try:
            write_all(fd, data)
        except OSError as e:
            try:  # keep the whole lines of a batch that fit (this process is the file's only writer)
                written = min(max(os.fstat(fd).st_size - self._size, 0), len(data))
            except OSError:
                written = 0
            self._size += data.rfind(b"\n", 0, written) + 1
            try:
                os.ftruncate(fd, self._size)
            except OSError:
                pass
            if e.filename is None:
                e.filename = self.path
            self.failed = e
            self.close()
            raise
        self._size += len(data)

    @property
    def opened(self) -> bool:
        return self._fd is not None

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None


class JsonlAppender(LineAppender):
    """One JSON object per line, NaN/inf as null (parsers.run_records.json_line)."""

    def append(self, record: dict) -> None:
        if self.failed is None:
            self.append_line(json_line(record))

    def append_line(self, data: bytes) -> None:
        """Append one already-encoded JSON line (parsers.run_records.step_line, format_record)."""
        if self.failed is not None:
            return
        if _fault_due("jsonl-line"):
            _die_mid_write(self._open(), data)
        self.write(data)

    def append_lines(self, lines: list[bytes]) -> None:
        """Append already-encoded JSON lines in one write (a failed write keeps the whole lines that fitted)."""
        if _fault_armed():  # the kill test counts lines: write them one by one
            for data in lines:
                self.append_line(data)
            return
        if self.failed is None:
            self.write(b"".join(lines))
