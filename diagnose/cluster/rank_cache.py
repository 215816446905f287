"""Where one rank's parsed tables are kept, and whether they are still those of its source file.

A rank's cache folder holds its trace as Parquet (:mod:`parsers.trace_parquet`), its per-rank reductions, and
``rank.json``, written last: the source's path, size and modification time (ns), the cache layout's version and
gpudiag's. A second report re-reads a rank only when one of those changed (the file was rewritten, copied over,
or gpudiag upgraded); a folder without ``rank.json``, or with a damaged one, is read again.

By default the cache is next to the traces (``<trace folder>/.gpudiag-cache/<file name>/``), so it travels with
the run folder; ``--cache DIR`` puts it under DIR instead (a read-only trace store, a faster local disk), one
folder per source named by the source's absolute path.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from parsers.folder_tree import CACHE_FOLDER

LAYOUT = 1  # bump when what a rank's folder holds changes: every cache written before is read again
SUMMARY = "rank.json"
TRACE_DIR = "trace"  # parsers.trace_parquet's folder inside a rank's folder
NEXT_TO_TRACES = CACHE_FOLDER  # parsers.folder_tree passes over it without a note


def cache_folder(source: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder that holds ``source``'s tables: next to it, or under ``cache_dir``."""
    source = Path(source).resolve()
    if cache_dir is None:
        return source.parent / NEXT_TO_TRACES / source.name
    digest = hashlib.sha1(str(source).encode()).hexdigest()[:12]
    return Path(cache_dir) / f"{source.name}-{digest}"


def source_key(source: str | os.PathLike) -> dict[str, Any]:
    """What says a source file is unchanged: its path, size and modification time, with the layout and version
    of gpudiag that wrote the cache."""
    from diagnose.version import __version__

    st = os.stat(source)
    return {
        "source": str(Path(source).resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "layout": LAYOUT,
        "gpudiag": __version__,
    }


def read_summary(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The summary a rank's job wrote last, or None when there is none or it cannot be read."""
    try:
        summary = json.loads((Path(folder) / SUMMARY).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return summary if isinstance(summary, dict) else None


def fresh_summary(source: str | os.PathLike, folder: str | os.PathLike) -> dict[str, Any] | None:
    """The cached summary of ``source`` when it was written for the file as it is now, else None."""
    summary = read_summary(folder)
    if summary is None or summary.get("error"):
        return None
    try:
        key = source_key(source)
    except OSError:
        return None
    return summary if summary.get("key") == key else None


def write_summary(folder: str | os.PathLike, summary: dict[str, Any]) -> None:
    """Write ``rank.json`` whole or not at all (a worker killed mid-write leaves the old one or none)."""
    from diagnose.outputs.atomic_write import atomic_write_text

    atomic_write_text(Path(folder) / SUMMARY, json.dumps(summary, default=str))
