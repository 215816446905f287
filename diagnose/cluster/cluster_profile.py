"""A run folder's files read with its rank traces on a cluster: the reads ``diagnose.load`` puts into a Profile.

The traces go to :func:`diagnose.cluster.cluster_read.read_ranks`; every other file (step records, snapshots,
NVML samples, an ncu report) is read here as a local read does, in worker processes when there is enough.
Each trace comes back as a :class:`RankOnDisk` (where its Parquet tables are), in the files' order, so the
Profile gets the same ranks, notes and sources in the same order as a local read; :func:`finish` then makes
``Profile.traces`` a :class:`~diagnose.cluster.parquet_traces.ParquetTraces` over those folders.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from diagnose.cluster.cluster_read import read_ranks
from diagnose.ingest.parallel import ArtifactRead
from parsers import registry
from parsers.errors import InputError
from parsers.reader import TRACES


@dataclass
class RankOnDisk:
    """A trace read on the cluster: its source, its rank (None: the file's name says it), its tables' folder."""

    path: str
    rank: int | None
    folder: str


def read_with_cluster(
    paths: Sequence[str | os.PathLike],
    kinds: Sequence[str | None] | None,
    cluster: str,
    *,
    cache_dir: str | os.PathLike | None,
    worker_memory: str | None,
    read_many: Callable,
    session=None,
    workers: int | None,
    quiet: bool,
) -> tuple[list[ArtifactRead], dict]:
    """Every file's read in ``paths`` order (traces on ``cluster``, the rest through ``read_many``), and how."""
    paths = [os.fspath(p) for p in paths]
    kinds = list(kinds) if kinds is not None else [_kind(p) for p in paths]
    is_trace = [k is not None and registry.reader(k).table == TRACES for k in kinds]
    traces = [i for i, t in enumerate(is_trace) if t]
    others = [i for i, t in enumerate(is_trace) if not t]
    reads: list[ArtifactRead | None] = [None] * len(paths)
    ingest: dict = {"workers": 0, "files": []}
    if others:
        local, ingest = read_many(
            [paths[i] for i in others], [kinds[i] for i in others], workers, quiet, what=f"reading {len(others)} files"
        )
        for i, read in zip(others, local):
            reads[i] = read
    if traces:
        got = read_ranks(
            [paths[i] for i in traces],
            [kinds[i] for i in traces],
            cluster=cluster,
            cache_dir=cache_dir,
            worker_memory=worker_memory,
            quiet=quiet,
            session=session,
        )
        for k, (i, summary) in enumerate(zip(traces, got.summaries)):
            if summary is None:
                reads[i] = ArtifactRead(paths[i], error=got.problems.get(k, "left out of the cluster read"))
                continue
            rank = summary["rank"] if summary.get("rank_in_trace") else None
            reads[i] = ArtifactRead(
                paths[i],
                table=TRACES,
                value=RankOnDisk(paths[i], rank, summary["folder"]),
                warnings=list(summary.get("warnings") or []),
                read_s=float(summary.get("job_s") or 0.0),
                peak_rss_bytes=int(summary.get("peak_rss_bytes") or 0),
                pid=int(summary.get("pid") or 0),
            )
        ingest = dict(ingest, cluster=got.ingest)
    return reads, ingest


def finish(profile) -> None:
    """``profile.traces`` (rank → RankOnDisk, as the reads were put) as a mapping that reads each rank's
    Parquet tables when an analyzer asks for it."""
    from diagnose.cluster.parquet_traces import ParquetTraces

    profile.traces = ParquetTraces({rank: on_disk.folder for rank, on_disk in profile.traces.items()})


def _kind(path: str) -> str | None:
    try:
        reader = registry.detect(path)
    except InputError:
        return None  # read locally, where the same error is said of it
    return reader.kind if reader is not None else None
