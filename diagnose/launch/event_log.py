"""Append-only JSONL files: one whole line per record, flushed at once.

A crash or kill loses at most the record being written; every earlier line is on
disk. The file is created exclusively, so two processes that think they are the same
rank cannot interleave into one file. Standard library only (runs in the child).
"""
from __future__ import annotations

import json
import math
import os


def _clean(value):
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class JsonlAppender:
    """Opens ``path`` on the first record (exclusive create) and appends a line per record."""

    def __init__(self, path: str):
        self.path = path
        self._file = None

    def append(self, record: dict) -> None:
        if self._file is None:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._file = open(self.path, "x", encoding="utf-8", buffering=1 << 16)
        line = json.dumps(_clean(record), separators=(",", ":"), default=str) + "\n"
        self._file.write(line)
        self._file.flush()

    @property
    def opened(self) -> bool:
        return self._file is not None

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            finally:
                self._file = None
