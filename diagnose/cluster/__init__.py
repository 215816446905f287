"""Reading and analysing a run's rank traces on a Dask cluster (``gpudiag report FOLDER --cluster ...``;
docs/scaling.md).

The optional extra ``gpudiag[cluster]`` (dask[distributed], pyarrow). Nothing here is imported on the
default path: ``diagnose.load`` imports this package only when a cluster is asked for.

- :mod:`~diagnose.cluster.rank_cache`: where a rank's Parquet tables live and whether they are still those of
  its source file;
- :mod:`~diagnose.cluster.rank_job`: the per-rank task a worker runs (parse, write Parquet, return a summary);
- :mod:`~diagnose.cluster.cluster_read`: the tasks on a cluster, with retries, progress and Ctrl-C;
- :mod:`~diagnose.cluster.cluster_profile`: the run folder's reads, traces on the cluster and the rest here;
- :mod:`~diagnose.cluster.parquet_traces`: the parent's view of every rank's trace, one rank in memory at a time;
- :mod:`~diagnose.cluster.rank_analysis`: the second per-rank task, the trace analyzers' per-rank parts;
- :mod:`~diagnose.cluster.cluster_report`: those parts for every rank, kept per rank, and the report from them;
- :mod:`~diagnose.cluster.signed_pickle`: the kept parts, loaded only when this user's gpudiag wrote them.
"""
