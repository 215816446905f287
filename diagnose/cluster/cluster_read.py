"""Read a run's rank traces as tasks on a Dask cluster, one rank per task, reusing what an earlier read kept.

``--cluster local:N`` starts a ``LocalCluster`` of N worker processes (one thread each; ``--worker-memory``
caps each, and Dask's nanny restarts a worker past 95 % of its cap); any other value is a scheduler's address
(``tcp://scheduler:8786``), whose workers must have gpudiag installed and see the same paths (shared storage).

A rank whose cache (:mod:`diagnose.cluster.rank_cache`) was written for its file as it is now is not sent at
all. Each other rank is :func:`diagnose.cluster.rank_job.read_rank` on a worker:

- a task that raises is retried once (``retries=1``); a worker that dies under a task (killed for memory, lost)
  makes the scheduler run it again on another worker once (``allowed-failures`` of a LocalCluster we start is
  set to 1; a scheduler of your own keeps its setting); after that the rank is left out and named;
- a rank its reader rejects (a damaged or foreign file) comes back with the same error text as a local read;
- Ctrl-C cancels every task not yet done and closes what this read started, then stops as a local read does.

Progress on stderr: ranks done out of the total and the bytes of their files (:mod:`diagnose.ingest.read_progress`).
"""

from __future__ import annotations

import logging
import os
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from diagnose.cluster.rank_cache import cache_folder, fresh_summary
from diagnose.ingest.read_progress import Progress
from parsers.errors import InputError

LOCAL = "local"


@dataclass
class ClusterRead:
    """What the cluster read gives the parent: each source's summary (None where it was left out), in order."""

    summaries: list[dict[str, Any] | None]
    problems: dict[int, str] = field(default_factory=dict)  # source index → why it has no summary (no path)
    ingest: dict[str, Any] = field(default_factory=dict)


def read_ranks(
    sources: Sequence[str | os.PathLike],
    kinds: Sequence[str | None] | None = None,
    *,
    cluster: str,
    cache_dir: str | os.PathLike | None = None,
    worker_memory: str | None = None,
    quiet: bool = False,
    session: ClusterSession | None = None,
) -> ClusterRead:
    """Every source's rank summary, reading on ``cluster`` only the ranks whose cache is missing or stale."""
    sources = [os.fspath(s) for s in sources]
    kinds = list(kinds) if kinds is not None else [None] * len(sources)
    folders = [str(cache_folder(s, cache_dir)) for s in sources]
    summaries: list[dict[str, Any] | None] = [fresh_summary(s, f) for s, f in zip(sources, folders)]
    for s, folder in zip(summaries, folders):
        if s is not None:
            s["cached"] = True
            s["folder"] = folder  # where the cache is now (a --cache folder may have moved since)
    todo = [i for i, s in enumerate(summaries) if s is None]
    out = ClusterRead(summaries)
    out.ingest = {"cluster": cluster, "ranks": len(sources), "cached": len(sources) - len(todo), "files": []}
    if todo:
        own = session is None
        session = session or ClusterSession(cluster, worker_memory)
        try:
            _on_cluster(sources, kinds, folders, todo, out, session, quiet)
        finally:
            if own:
                session.close()
    out.ingest["files"] = [
        {k: s.get(k) for k in ("path", "rank", "read_s", "write_s", "job_s", "peak_rss_bytes", "pid", "host", "cached")}
        for s in summaries
        if s is not None
    ]
    return out


def _on_cluster(sources, kinds, folders, todo, out: ClusterRead, session: ClusterSession, quiet: bool) -> None:
    from distributed import as_completed

    from diagnose.cluster.rank_job import read_rank

    sizes = {i: _size(sources[i]) for i in todo}
    client = session.client()
    out.ingest["workers"] = len(client.scheduler_info(n_workers=-1).get("workers", {}))
    what = f"reading {len(todo)} ranks on the cluster"
    with Progress(sum(sizes.values()), what, quiet=quiet) as progress:
        futures = {
            client.submit(
                read_rank,
                sources[i],
                folders[i],
                kinds[i],
                retries=1,
                pure=False,
                key=f"gpudiag-read-{i}-{uuid.uuid4().hex[:12]}",
            ): i
            for i in todo
        }
        done = 0
        try:
            for future in as_completed(list(futures)):
                i = futures[future]
                summary, problem = _outcome(future)
                if summary is not None and summary.get("error"):
                    problem, summary = summary["error"], None  # the reader's own words, as a local read
                out.summaries[i] = summary
                if problem:
                    out.problems[i] = problem
                done += 1
                progress.what = f"{what}: {done} of {len(todo)} ranks"
                progress.advance(sizes[i])
        except KeyboardInterrupt:
            client.cancel(list(futures), force=True)
            raise


def _outcome(future) -> tuple[dict | None, str | None]:
    """The task's summary, or why there is none in words a user can act on."""
    from distributed import KilledWorker

    try:
        return future.result(), None
    except KilledWorker:
        return None, (
            "left out: the worker reading it died twice (killed for memory past its cap, or lost); "
            "read it with more memory per worker (--worker-memory) or fewer workers per machine"
        )
    except Exception as e:  # noqa: BLE001 - a task's failure on a worker, after its retry: named, the rest go on
        return None, f"left out: its task failed twice on the cluster ({type(e).__name__}: {e})"


class ClusterSession:
    """A Dask client of ``spec``, started when first asked for and kept until :meth:`close`: a LocalCluster we
    start (and close), or a scheduler's address. One report's reads and analyses share it."""

    def __init__(self, spec: str, worker_memory: str | None = None):
        self.spec, self.worker_memory = spec, worker_memory
        self.cluster = self._client = None

    def client(self):
        if self._client is None:
            self._client = self._start()
        return self._client

    def _start(self):
        import dask
        from distributed import Client, LocalCluster

        local, workers = parse_cluster(self.spec)
        if not local:
            try:
                return Client(self.spec, timeout="20s")
            except (OSError, TimeoutError) as e:
                raise InputError(None, f"--cluster {self.spec}: cannot reach the Dask scheduler there ({e})") from None
        with dask.config.set({"distributed.scheduler.allowed-failures": 1}), warnings.catch_warnings():
            # its scheduler's HTTP endpoints take another port when 8787 is in use (another cluster): not the user's
            warnings.filterwarnings("ignore", message="Port .* is already in use")
            self.cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                memory_limit=self.worker_memory or "auto",
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
        return Client(self.cluster)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    def __enter__(self) -> ClusterSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def parse_cluster(spec: str) -> tuple[bool, int | None]:
    """``local`` / ``local:N`` → (True, N or the cores); a scheduler's address → (False, None)."""
    if spec == LOCAL or spec.startswith(LOCAL + ":"):
        n = spec[len(LOCAL) + 1 :]
        if not n:
            return True, max(1, len(os.sched_getaffinity(0)))
        if not n.isdigit() or int(n) < 1:
            raise InputError(None, f"--cluster {spec}: expected local:N with N a number of workers (1 or more)")
        return True, int(n)
    if "://" not in spec and ":" not in spec:
        raise InputError(None, f"--cluster {spec}: expected local:N or a Dask scheduler's address (tcp://host:8786)")
    return False, None


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
