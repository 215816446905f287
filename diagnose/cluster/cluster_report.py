"""A report whose per-rank work runs on the cluster: the parts each rank gives the trace analyzers, kept per rank.

After the cluster read (:mod:`diagnose.cluster.cluster_read`), :func:`rank_parts_on_cluster` sends one
:func:`~diagnose.cluster.rank_analysis.analyze_rank` task per rank and returns every part; ``analyze(profile,
thresholds, rank_parts=...)`` then puts them together in the parent, which reads no rank's tables for them (the
lowest rank's once, for the sync timeline's step). Each rank's parts are kept in its cache folder, signed
(:mod:`diagnose.cluster.signed_pickle`), under a key of: the rank's source file as it is, the run's context (the
Profile without traces: manifest, step records, sources), the thresholds and gpudiag's version. A second report
on the unchanged folder sends no task at all; a changed rank, or new thresholds, sends that work again.

A rank whose analysis task fails twice is analysed in the parent, from its Parquet tables, as a local read would:
the report is the same, only slower, and ``profile.ingest["cluster"]["analysis"]`` says which.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import uuid
from pathlib import Path
from typing import Any

from diagnose.cluster import signed_pickle
from diagnose.cluster.cluster_read import ClusterSession
from diagnose.cluster.parquet_traces import ParquetTraces
from diagnose.cluster.rank_analysis import StoredRankTimes, analyze_rank, context_of
from diagnose.cluster.rank_cache import LAYOUT, read_summary
from diagnose.ingest.read_progress import Progress

PARTS_FILE = "parts.pickle"


def rank_parts_on_cluster(
    profile, thresholds, session: ClusterSession, quiet: bool = False
) -> dict[tuple[str, int], Any]:
    """Every rank's analysis parts (``Derived.rank_parts``), from its cache or worked out on the cluster."""
    traces = profile.traces
    info: dict[str, Any] = {"ranks": 0, "cached": 0, "on_workers": 0, "in_parent": []}
    if isinstance(profile.ingest.get("cluster"), dict):
        profile.ingest["cluster"]["analysis"] = info
    if not isinstance(traces, ParquetTraces) or not len(traces):
        return {}
    from diagnose.version import __version__

    context = context_of(profile)
    digest = hashlib.sha256(
        pickle.dumps((context, repr(thresholds), __version__, LAYOUT, code_digest()), protocol=pickle.HIGHEST_PROTOCOL)
    ).hexdigest()
    parts: dict[tuple[str, int], Any] = {}
    keys, todo = {}, []
    for rank, folder in traces.folders.items():
        summary = read_summary(folder) or {}
        keys[rank] = f"{digest}:{summary.get('key')}"
        cached = signed_pickle.load(folder / PARTS_FILE, keys[rank])
        if isinstance(cached, dict):
            parts.update(_in_folder(cached, folder))
        else:
            todo.append(rank)
    info.update(ranks=len(traces), cached=len(traces) - len(todo))
    if todo:
        _on_workers(traces, todo, context, thresholds, keys, parts, info, session, quiet)
    return parts


def code_digest() -> str:
    """A digest of gpudiag's analysis code (every module of ``diagnose`` and ``parsers``): parts kept by another
    version of it, an editable install changed since included, are worked out again rather than misread."""
    import diagnose
    import parsers

    h = hashlib.sha256()
    for package in (diagnose, parsers):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root.parent)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _in_folder(parts: dict, folder) -> dict:
    """``parts`` with what they keep on disk (comm's intervals) found in ``folder``, where the rank's cache is now
    (a --cache folder moved since, or a run folder copied with its .gpudiag-cache)."""
    out = {}
    for key, part in parts.items():
        times = part.get("times") if isinstance(part, dict) else None
        if isinstance(times, StoredRankTimes):
            part = dict(part, times=dataclasses.replace(times, folder=str(folder)))
        out[key] = part
    return out


def _on_workers(traces, todo, context, thresholds, keys, parts, info, session: ClusterSession, quiet: bool) -> None:
    from distributed import as_completed

    client = session.client()
    shared = client.scatter(context, broadcast=True)  # sent once to each worker, not once per rank
    with Progress(len(todo), f"analysing {len(todo)} ranks on the cluster", quiet=quiet, unit="ranks") as progress:
        futures = {
            client.submit(
                analyze_rank,
                str(traces.folders[rank]),
                rank,
                shared,
                thresholds,
                retries=1,
                pure=False,
                key=f"gpudiag-analyse-{rank}-{uuid.uuid4().hex[:12]}",
            ): rank
            for rank in todo
        }
        try:
            for future in as_completed(list(futures)):
                rank = futures[future]
                try:
                    done = future.result()
                except Exception:  # noqa: BLE001 - a task that failed twice (or its worker): analysed in the parent
                    info["in_parent"].append(rank)
                else:
                    parts.update(done["parts"])
                    info["on_workers"] += 1
                    signed_pickle.dump(done["parts"], Path(traces.folders[rank]) / PARTS_FILE, keys[rank])
                progress.advance(1)
        except KeyboardInterrupt:
            client.cancel(list(futures), force=True)
            raise


def load_with_parts(path, options, thresholds, quiet: bool = False):
    """``(profile, rank_parts)`` of a run folder or folder of rank traces, its ranks read and their parts worked out
    on ``options.cluster`` (a :class:`diagnose.ingest.loading.ClusterOptions`), one session for both."""
    from diagnose.ingest.loading import load

    with ClusterSession(options.cluster, options.worker_memory) as session:
        profile = load(path, quiet=quiet, cluster=dataclasses.replace(options, session=session))
        return profile, rank_parts_on_cluster(profile, thresholds, session, quiet)


def load_and_analyze(path, options, thresholds=None, quiet: bool = False):
    """``(profile, analysis)`` with the ranks read and analysed on ``options.cluster``: the library's ``gpudiag
    report --cluster``."""
    from diagnose.analysis import analyze
    from diagnose.thresholds import Thresholds

    thresholds = thresholds or Thresholds()
    profile, parts = load_with_parts(path, options, thresholds, quiet)
    return profile, analyze(profile, thresholds, rank_parts=parts)
