"""A folder of artifacts without a manifest, read as a tree: which files gpudiag reads, and which it leaves out, why.

Such a folder is rank traces copied off a cluster, HTA's trace folder, or the folder ``jax.profiler.trace(dir)``
writes, whose trace lies four folders down: ``dir/plugins/profile/<run>/<host>.trace.json.gz``, with
``<host>.xplane.pb`` beside it and, under ``create_perfetto_trace=True``, ``perfetto_trace.json.gz`` (the same
capture again, which gpudiag's own JAX trace window copies into a run folder). Every file under the folder is
detected by its content (:func:`parsers.registry.detect`); nothing is left out without a reason the report shows.

Left out, each with its reason: hidden files and folders (``.git``), writers' temporary files, links to folders
(never followed: a link loop), a subfolder that is a run folder of its own (it has its own manifest and report),
gpudiag's own findings JSON, files of no format gpudiag reads (an ``.xplane.pb``), files a reader refuses on
sight (empty, a broken gzip), and the second export of one jax.profiler capture. Files nearer the top come
first, then in name order: which trace of a rank is read first is the caller's rule (diagnose/ingest/loading.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from parsers.errors import InputError
from parsers.reader import FINDINGS, TRACES, Reader
from parsers.registry import detect
from parsers.run_folder import MANIFEST, is_temporary

MAX_FILES = 2000  # a folder tree of more files is not a run's artifacts (a home folder, a dataset): refused

JAX_PERFETTO = "perfetto_trace.json.gz"  # jax.profiler's perfetto export, beside <host>.trace.json.gz
JAX_TRACE_SUFFIX = ".trace.json.gz"  # jax.profiler's trace viewer JSON, one per host
XPLANE_SUFFIX = ".xplane.pb"  # XLA's XPlane protobuf, the source of both

NOT_READ = "not a format gpudiag reads"
_UNKNOWN_FORMAT = ("is not a format", "is JSON but not a format", "is a binary file of an unknown format")


@dataclass(frozen=True)
class Skipped:
    """A file or folder left out of the read: its path relative to the folder, and why."""

    path: str
    reason: str
    is_folder: bool = False


@dataclass
class FolderTree:
    """What :func:`scan` found under ``folder``: the files to read with their reader, in order, and the rest."""

    folder: Path
    files: list[tuple[Path, Reader]] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def skipped_notes(self) -> list[str]:
        """One line per reason: ``<folder>: 2 files left out, <reason>: a, b``; at most 10 names a line."""
        by_reason: dict[tuple[str, bool], list[str]] = {}
        for s in self.skipped:
            by_reason.setdefault((s.reason, s.is_folder), []).append(s.path)
        notes = []
        for (reason, is_folder), names in by_reason.items():
            count = f"{len(names)} {'folder' if is_folder else 'file'}{'s' if len(names) != 1 else ''}"
            shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
            notes.append(f"{self.folder}: {count} left out, {reason}: {shown}")
        return notes


# where gpudiag's cluster read keeps each trace's tables, next to the traces (diagnose.cluster.rank_cache)
CACHE_FOLDER = ".gpudiag-cache"


def scan(folder: str | os.PathLike) -> FolderTree:
    """Every file under ``folder`` (subfolders too) that gpudiag reads, with its reader, and what is left out.

    Raises InputError for a tree of more than :data:`MAX_FILES` files."""
    root = Path(folder)
    tree = FolderTree(root)
    candidates = []
    for path, reason in _walk(root):
        if reason is not None:
            tree.skipped.append(Skipped(_relative(path, root), reason, is_folder=path.is_dir()))
            continue
        candidates.append(path)
        if len(candidates) > MAX_FILES:
            raise InputError(
                root,
                f"holds more than {MAX_FILES:,} files in its subfolders; gpudiag reads one run's artifacts: "
                "give the folder that holds them",
            )
    candidates.sort(key=lambda p: (len(p.relative_to(root).parts), p.relative_to(root).as_posix()))
    found: list[tuple[Path, Reader]] = []
    for path in candidates:
        try:
            reader = detect(path)
        except InputError as e:
            tree.skipped.append(Skipped(_relative(path, root), _why_unread(path, e)))
            continue
        if reader.table == FINDINGS:
            tree.skipped.append(
                Skipped(_relative(path, root), "gpudiag's own findings JSON (an output, not a measurement)")
            )
            continue
        found.append((path, reader))
    tree.files = _one_export_per_jax_capture(found, root, tree.skipped)
    return tree


def _walk(root: Path) -> Iterator[tuple[Path, str | None]]:
    """Every file under ``root`` with None, and every entry left out with its reason (folders are not entered)."""
    for here, folders, files in os.walk(root, followlinks=False):
        here_path = Path(here)
        keep = []
        for name in sorted(folders):
            path = here_path / name
            if name == CACHE_FOLDER:
                continue  # gpudiag's own tables of these traces (its cluster read): not an input, not a note
            if name.startswith("."):
                yield path, "hidden"
            elif path.is_symlink():
                yield path, "a link to a folder, not followed"
            elif (path / MANIFEST).exists():
                yield path, "a gpudiag run folder (report each on its own)"
            else:
                keep.append(name)
        folders[:] = keep
        for name in sorted(files):
            path = here_path / name
            if name.startswith("."):
                yield path, "hidden"
            elif is_temporary(path):
                yield path, "a temporary file a writer left (not finished)"
            else:
                yield path, None


def _why_unread(path: Path, error: InputError) -> str:
    """The reason a detected-unreadable file is left out, short: the format's name where gpudiag knows it."""
    if path.name.endswith(XPLANE_SUFFIX):
        beside = any(p.name.endswith(JAX_TRACE_SUFFIX) or p.name == JAX_PERFETTO for p in path.parent.iterdir())
        return "XLA's XPlane protobuf, which gpudiag does not read (" + (
            "the trace jax.profiler wrote beside it holds the same capture)"
            if beside
            else "gpudiag reads the <host>.trace.json.gz jax.profiler writes beside it)"
        )
    problem = error.problem
    if problem.startswith(_UNKNOWN_FORMAT):
        return NOT_READ
    if problem.startswith("is empty"):
        return "empty"
    return f"unreadable ({problem.split('; expected ')[0]})"  # "cannot read: Permission denied", a broken gzip


def _one_export_per_jax_capture(found: list[tuple[Path, Reader]], root: Path, skipped: list[Skipped]) -> list:
    """In a folder holding jax.profiler's ``perfetto_trace.json.gz`` and its ``<host>.trace.json.gz``, both
    traces of one capture, the perfetto export is read (as gpudiag profile does) and the other left out."""
    perfetto_folders = {p.parent for p, r in found if r.table == TRACES and p.name == JAX_PERFETTO}
    kept = []
    for path, reader in found:
        if reader.table == TRACES and path.parent in perfetto_folders and path.name.endswith(JAX_TRACE_SUFFIX):
            twin = _relative(path.parent / JAX_PERFETTO, root)
            skipped.append(Skipped(_relative(path, root), f"the same jax.profiler capture as {twin} (JAX wrote both)"))
            continue
        kept.append((path, reader))
    return kept


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()
