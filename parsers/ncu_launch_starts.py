"""``ncu/launch_starts.csv``: when ncu began profiling each launch, on the host's wall clock.

Nsight Compute records no wall-clock time of a launch, so `gpudiag profile --ncu` notes when each
``==PROF== Profiling "<kernel>" - <ID> (...)`` line appeared in ncu's log (read every 20 ms while ncu
runs). ``launch_id`` is ncu's ID, the kernels table's ``launch_id``; ``t_start_ns`` is unix ns, the clock
of the allocator history (``t_us``), so profiled launches and the allocator's cudaMalloc/cudaFree can be
drawn on one timeline. Under kernel replay the application waits while ncu profiles a launch: the
times say in which order launches and allocations happened, not how long a launch takes unprofiled.
"""

from __future__ import annotations

import csv
import io
import os

import pandas as pd

from parsers.errors import InputError
from parsers.limits import read_input
from parsers.reader import LAUNCH_STARTS, TEXT, Reader, first_line, is_json
from parsers.schema import I64, STR, Schema, conform

HEADER = ["launch_id", "kernel", "t_start_ns"]
LAUNCH_STARTS_SCHEMA = Schema(
    "ncu.launch_starts",
    {"launch_id": I64, "kernel": STR, "t_start_ns": I64},
    {
        "launch_id": "ncu's ID of the launch (the kernels table's launch_id)",
        "kernel": "the kernel's name as ncu's log prints it (cut at 30 characters by ncu)",
        "t_start_ns": "unix ns when the follower first read the launch's Profiling line (to ~20 ms)",
    },
)


def is_launch_starts(head: bytes) -> bool:
    return not is_json(head) and first_line(head).strip() == ",".join(HEADER)


def read_launch_starts(path: str | os.PathLike) -> pd.DataFrame:
    try:
        text = read_input(path, lines=True).decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(path, "is not UTF-8 text; expected gpudiag's ncu/launch_starts.csv") from None
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or rows[0] != HEADER:
        raise InputError(path, f"expected the header {','.join(HEADER)}, found {rows[0] if rows else 'nothing'}")
    body = [r for r in rows[1:] if r]
    try:
        records = [(int(r[0]), r[1], int(r[2])) for r in body]
    except (ValueError, IndexError) as e:
        raise InputError(path, f"a row is not launch_id,kernel,t_start_ns ({e})") from None
    return conform(pd.DataFrame(records, columns=HEADER), LAUNCH_STARTS_SCHEMA)


def format_launch_starts(starts: list[tuple[int, str, int]]) -> str:
    """The CSV text of ``(launch_id, kernel, t_start_ns)`` rows, as the launcher writes it."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows(starts)
    return out.getvalue()


READERS = (
    Reader(
        "ncu-launch-starts",
        LAUNCH_STARTS,
        is_launch_starts,
        read_launch_starts,
        "gpudiag's ncu/launch_starts.csv",
        (TEXT,),
    ),
)
