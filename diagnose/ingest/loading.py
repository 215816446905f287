"""Turn a path into a :class:`Profile`: a run folder, a folder of artifacts (rank traces), or one artifact.

The formats and their detection are :mod:`parsers.registry`'s; the run folder's layout is
:mod:`parsers.run_folder`'s; reading many files at once (a run's ranks) in worker processes is
:mod:`diagnose.ingest.parallel`'s. This module only puts what the readers return into a Profile,
and turns readers' warnings (a cut last line) and unreadable artifacts into the report's notes.
Reading that lasts over 2 s shows its progress on stderr (:mod:`diagnose.ingest.read_progress`) unless ``quiet``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose.ingest import parallel as ingest
from diagnose.ingest.profile_data import Profile
from diagnose.ingest.read_progress import Progress
from parsers import folder_tree, registry, run_folder
from parsers.errors import InputError
from parsers.limits import bytes_read_on_disk, track_reads, untrack_reads
from parsers.reader import TRACES

WORKERS_ENV = "GPUDIAG_WORKERS"  # processes reading a folder's files when the caller does not say; 1: in-process


@dataclass(frozen=True)
class ClusterOptions:
    """Read a folder's rank traces on a Dask cluster (``gpudiag report --cluster``; diagnose.cluster)."""

    cluster: str  # local:N, or a scheduler's address (tcp://host:8786)
    cache_dir: str | None = None  # where each rank's Parquet tables go; None: next to the traces
    worker_memory: str | None = None  # a LocalCluster worker's memory cap ("1GiB"); None: Dask's default
    session: Any = field(default=None, compare=False)  # diagnose.cluster.cluster_read.ClusterSession to share


def load(
    path: str | os.PathLike, *, workers: int | None = None, quiet: bool = False, cluster: ClusterOptions | None = None
) -> Profile:
    """Read a run folder, a folder of artifacts (say, ``rank<N>.json.gz`` traces) or a single artifact.

    ``workers``: processes reading a folder's files (1: in this process); by default ``$GPUDIAG_WORKERS``,
    else as many as the files, cores and memory allow when there is enough to read
    (:func:`diagnose.ingest.parallel.worker_count`). ``cluster``: a folder's rank traces are read on a Dask
    cluster and kept as Parquet, and the Profile reads one rank's tables at a time (docs/scaling.md).
    """
    if Path(path).is_dir() and not run_folder.is_run_folder(path):
        return load_folder(path, workers=workers, quiet=quiet, cluster=cluster)
    reader = registry.detect(path)
    if reader is None:
        return load_run_folder(path, workers=workers, quiet=quiet, cluster=cluster)
    profile = Profile(sources=[os.fspath(path)])
    (read,), profile.ingest = _read_many([path], [reader.kind], 1, quiet, what=f"reading {Path(path).name}")
    _put(profile, read)
    return profile


def load_run_folder(
    folder: str | os.PathLike, *, workers: int | None = None, quiet: bool = False, cluster: ClusterOptions | None = None
) -> Profile:
    """Read every artifact of a run folder that finished writing; one that cannot be read becomes a note."""
    manifest = run_folder.read_manifest(os.path.join(folder, run_folder.MANIFEST))
    profile = Profile(sources=[os.fspath(folder)], manifest=manifest)
    paths = run_folder.artifact_paths(folder)
    reads, profile.ingest = _reads(paths, None, workers, quiet, f"reading {len(paths)} files", cluster)
    for read in reads:
        try:
            _put(profile, read)
        except InputError as e:
            profile.warnings.append(str(e))
    _finish(profile, cluster)
    # how the run ended, and what is missing or cut short with the reason the manifest gives
    profile.warnings.extend(run_folder.report_notes(manifest))
    # what the manifest lists as written but the folder no longer holds, and what was read in its place
    profile.warnings.extend(run_folder.absent_notes(folder, manifest))
    return profile


def load_folder(
    folder: str | os.PathLike, *, workers: int | None = None, quiet: bool = False, cluster: ClusterOptions | None = None
) -> Profile:
    """A folder without a manifest (rank traces copied off a cluster, HTA's trace folder, the folder
    ``jax.profiler.trace`` writes): every file under it whose format gpudiag reads, nearest the top first, then in
    name order (:mod:`parsers.folder_tree`). Two traces of one rank keep the first; each file left out is a note
    that says why."""
    folder = Path(folder)
    tree = folder_tree.scan(folder)
    if not tree.files:
        raise InputError(
            folder,
            "is a folder but not a gpudiag run folder (no manifest.json in it), and no file under it is a format "
            "gpudiag reads"
            + (
                f" ({'; '.join(_without_folder(n, folder) for n in tree.skipped_notes())})"
                if tree.skipped
                else " (it is empty)"
            ),
        )
    paths = [p for p, _ in tree.files]
    kinds = [r.kind for _, r in tree.files]
    profile = Profile(sources=[os.fspath(folder)])
    reads, profile.ingest = _reads(paths, kinds, workers, quiet, f"reading {len(paths)} files", cluster)
    for read in reads:
        if read.table == TRACES and read.value is not None:
            rank = read.value.rank if read.value.rank is not None else run_folder.rank_of(read.path)
            if rank in profile.traces:
                profile.warnings.append(
                    f"{read.path}: left out, a trace of rank {rank} was read already "
                    f"({profile.traces[rank].path}); each rank's trace is read once"
                )
                continue
        try:
            _put(profile, read)
        except InputError as e:
            profile.warnings.append(str(e))
    profile.warnings.extend(tree.skipped_notes())
    _finish(profile, cluster)
    return profile


def _reads(paths, kinds, workers, quiet: bool, what: str, cluster: ClusterOptions | None):
    """Every file's read in order: all in this machine's processes, or the traces on ``cluster``."""
    if cluster is None:
        return _read_many(paths, kinds, workers, quiet, what=what)
    from diagnose.cluster.cluster_profile import read_with_cluster

    return read_with_cluster(
        paths,
        kinds,
        cluster.cluster,
        cache_dir=cluster.cache_dir,
        worker_memory=cluster.worker_memory,
        session=cluster.session,
        read_many=_read_many,
        workers=workers,
        quiet=quiet,
    )


def _finish(profile: Profile, cluster: ClusterOptions | None) -> None:
    if cluster is not None:
        from diagnose.cluster.cluster_profile import finish

        finish(profile)


def _without_folder(note: str, folder: Path) -> str:
    prefix = f"{folder}: "
    return note[len(prefix) :] if note.startswith(prefix) else note


def _read_many(
    paths: Sequence[str | os.PathLike], kinds: Sequence[str | None] | None, workers: int | None, quiet: bool, what: str
) -> tuple[list[ingest.ArtifactRead], dict]:
    """Every file's read, in order, in worker processes when there are enough bytes to pay for them; and how
    (``Profile.ingest``: the workers, each file's seconds, reading process and its peak RSS)."""
    sizes_on_disk = {os.fspath(p): _size(p) for p in paths}
    if workers is None and os.environ.get(WORKERS_ENV, "").strip().isdigit():
        workers = max(1, int(os.environ[WORKERS_ENV]))
    if workers is None:
        parsed = [_input_bytes(p) for p in paths]
        worth_it = len(paths) >= 2 and sum(parsed) >= ingest.PARALLEL_MIN_INPUT_BYTES
        workers = ingest.worker_count(parsed) if worth_it else 1
    reading = set(sizes_on_disk)  # files not read yet: what this process has read of them shows as progress

    def done(read: ingest.ArtifactRead) -> None:
        reading.discard(read.path)
        progress.advance(sizes_on_disk[read.path])

    track_reads(reading)
    try:
        with Progress(
            sum(sizes_on_disk.values()),
            what,
            quiet=quiet,
            autostart=False,
            in_flight=lambda: sum(bytes_read_on_disk(p) for p in list(reading)),
        ) as progress:
            reads = ingest.read_all(
                paths,
                workers,
                kinds,
                on_done=done,
                on_started=progress.start,  # its thread after the workers are forked
            )
    finally:
        untrack_reads(sizes_on_disk)
    return reads, {
        "workers": workers,
        "files": [
            {"path": r.path, "read_s": r.read_s, "peak_rss_bytes": r.peak_rss_bytes, "pid": r.pid} for r in reads
        ],
    }


def _put(profile: Profile, read: ingest.ArtifactRead) -> None:
    """One read into ``profile``'s table, its warnings into the report's notes; its error raised as InputError."""
    if read.error is not None:
        raise InputError(read.path, read.error)
    profile.add(read.table, read.value, run_folder.rank_of(read.path), os.fspath(read.path))
    profile.warnings.extend(read.warnings)
    if read.path not in profile.sources:
        profile.sources.append(read.path)


def _size(path: str | os.PathLike) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _input_bytes(path: str | os.PathLike) -> int:
    try:
        return ingest.input_bytes(path)
    except OSError:
        return 0
