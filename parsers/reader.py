"""How an input format declares itself: its kind, how to recognise it, how to read it, what it fills.

Each reader module ends with ``READERS``, a tuple of :class:`Reader`; :mod:`parsers.registry` lists
those modules in the order their formats are tried. A format is recognised from the first
:data:`SNIFF_BYTES` of its content (gunzipped when it is gzip), never from its extension.

``table`` says which table of a run the result fills (``diagnose.ingest.profile_data.Profile`` puts it
there), so a new format of a kind gpudiag already analyses (another trace format read into
:class:`parsers.trace.Trace`) needs no change outside its own module and its one line in the registry.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SNIFF_BYTES = 64 * 1024

# The tables a reader can fill, and the type of what its ``read`` returns for each.
KERNELS = "kernels"  # (kernels, rules) frames of ncu (parsers.ncu_kernels KERNELS_SCHEMA, RULES_SCHEMA); appended
TRACES = "traces"  # parsers.trace.Trace, one per rank (its own ``rank`` when it knows it)
SNAPSHOTS = "snapshots"  # parsers.snapshot.MemorySnapshot, one per rank
MEMORY_STATS = "memory_stats"  # pandas frame of allocator stats (parsers.memory_stats), one per rank
EVENTS = "events"  # (steps, syncs, work) frames of parsers.events (EventTables), one per rank
NVML = "nvml"  # pandas frame of NVML samples (parsers.nvml), one per run
FINDINGS = "findings"  # a findings JSON (parsers.findings_json): what `gpudiag check` reads back, not a run's table
LAUNCH_STARTS = "launch_starts"  # pandas frame: when ncu began profiling each launch (parsers.ncu_launch_starts)
TABLES = (KERNELS, TRACES, SNAPSHOTS, MEMORY_STATS, EVENTS, NVML, FINDINGS, LAUNCH_STARTS)

# what a format's bytes look like, for the message when no reader recognises a file
JSON = "json"
TEXT = "text"
BINARY = "binary"


@dataclass(frozen=True)
class Reader:
    """One input format. ``sniff(head)`` is True when the first bytes are this format (it must be cheap
    and must not raise); ``read(path)`` returns what ``table`` holds, or raises ``InputError``."""

    kind: str  # stable name: "trace", "ncu-csv", "nsys-sqlite", ...
    table: str  # one of TABLES
    sniff: Callable[[bytes], bool]
    read: Callable[[str | os.PathLike], Any]
    what: str  # for messages: "a PyTorch profiler (Kineto) or JAX perfetto trace"
    forms: tuple[str, ...]  # JSON, TEXT and/or BINARY

    def __post_init__(self) -> None:
        if self.table not in TABLES:
            raise ValueError(f"reader {self.kind!r}: table must be one of {', '.join(TABLES)}, not {self.table!r}")
        if not self.forms or set(self.forms) - {JSON, TEXT, BINARY}:
            raise ValueError(f"reader {self.kind!r}: forms must be among json, text, binary, not {self.forms!r}")


def head_text(head: bytes) -> str:
    """The head as text, without a BOM or leading whitespace (undecodable bytes replaced)."""
    return head.decode("utf-8", errors="replace").lstrip("\ufeff").lstrip()


def is_json(head: bytes) -> bool:
    text = head_text(head)
    return text.startswith("{") or text.startswith("[")


@functools.lru_cache(maxsize=4)
def compact_json(head: bytes) -> str | None:
    """The head of a JSON input with all whitespace removed (so ``'"kind":"step"'`` matches however it
    was indented), or None when the input is not JSON. Cached: every JSON reader's sniff asks for it."""
    if not is_json(head):
        return None
    return re.sub(r"\s+", "", head_text(head)[:SNIFF_BYTES])


def first_line(head: bytes) -> str:
    text = head_text(head)
    return text.splitlines()[0] if text else ""
