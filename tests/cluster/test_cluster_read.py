"""Rank traces read on a Dask LocalCluster give the report a local read gives (findings, summary, tables,
notes), keep their tables for the next report, re-read only a changed rank, and say a rank that cannot be read
as a local read says it. The default path never imports the cluster's packages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

pytest.importorskip("distributed")
pytest.importorskip("pyarrow")

from diagnose.analysis import analyze  # noqa: E402
from diagnose.cluster.parquet_traces import ParquetTraces  # noqa: E402
from diagnose.cluster.rank_cache import NEXT_TO_TRACES  # noqa: E402
from diagnose.ingest.loading import ClusterOptions, load  # noqa: E402
from tests.cli_run import gpudiag  # noqa: E402
from tests.paths import FIXTURES, REPO  # noqa: E402

HTA = FIXTURES / "comm" / "hta"
GLOO = FIXTURES / "comm" / "gloo_straggler"
TRUNCATED = FIXTURES / "bad" / "trace_truncated.json.gz"
LOCAL = ClusterOptions("local:2")


@pytest.fixture
def rank_folder(tmp_path):
    """HTA's two sampled NCCL ranks (real A100 traces) as a folder of rank traces, without a manifest."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in (0, 1):
        shutil.copy(HTA / f"trace_filter_sampled_rank-{rank}.json.gz", folder / f"rank{rank}.json.gz")
    return folder


def assert_same_analysis(a, b):
    key = lambda f: (f.id, f.severity, f.title, f.subjects, f.evidence, f.cost_share, f.recommendation)  # noqa: E731
    assert [repr(key(f)) for f in a.findings] == [repr(key(f)) for f in b.findings]  # repr: NaN equals NaN
    assert repr(a.summary) == repr(b.summary)
    assert a.warnings == b.warnings
    assert repr(a.verdict) == repr(b.verdict)
    for name, result in a.results.items():
        assert list(result.tables) == list(b.results[name].tables), name
        for table, frame in result.tables.items():
            pd.testing.assert_frame_equal(frame, b.results[name].tables[table], check_exact=True, obj=f"{name}.{table}")


def test_findings_equal_a_local_read_and_the_parent_holds_one_rank(rank_folder):
    local = analyze(load(rank_folder, quiet=True))
    profile = load(rank_folder, quiet=True, cluster=LOCAL)
    assert isinstance(profile.traces, ParquetTraces) and sorted(profile.traces) == [0, 1]
    on_cluster = analyze(profile)
    assert_same_analysis(local, on_cluster)
    assert {f.id for f in local.findings} >= {"comm.low_overlap", "idle.gpu_idle"}  # it judged something
    assert len(profile.traces._held) == 1  # one rank's tables in the parent at the end
    assert profile.traces.reads >= 4  # ranks were read again rather than kept: idle, sync, launch, comm ...
    ingest = profile.ingest["cluster"]
    assert ingest["ranks"] == 2 and ingest["cached"] == 0 and ingest["workers"] == 2
    assert all((rank_folder / NEXT_TO_TRACES / f"rank{r}.json.gz" / "rank.json").exists() for r in (0, 1))


def test_a_run_folder_with_a_bad_rank_says_it_as_a_local_read(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(GLOO, run)
    shutil.copy(TRUNCATED, run / "trace" / "rank2.json.gz")
    local = load(run, quiet=True)
    profile = load(run, quiet=True, cluster=ClusterOptions("local:1", cache_dir=str(tmp_path / "cache")))
    assert sorted(profile.traces) == sorted(local.traces) == [0, 1]
    assert profile.warnings == local.warnings
    assert any("rank2.json.gz: gzip stream ends early" in w for w in profile.warnings)
    assert_same_analysis(analyze(local), analyze(profile))
    assert not (run / "trace" / NEXT_TO_TRACES).exists()  # --cache: nothing next to the traces
    assert len(list((tmp_path / "cache").iterdir())) == 2  # the bad rank left no cache


def test_a_second_read_reuses_the_cache_and_rereads_only_a_changed_rank(rank_folder):
    first = load(rank_folder, quiet=True, cluster=LOCAL)
    second = load(rank_folder, quiet=True, cluster=LOCAL)
    assert second.ingest["cluster"]["cached"] == 2
    assert "workers" not in second.ingest["cluster"]  # nothing to read: no cluster was started
    assert_same_analysis(analyze(first), analyze(second))
    st = os.stat(rank_folder / "rank1.json.gz")
    os.utime(rank_folder / "rank1.json.gz", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # copied over again
    third = load(rank_folder, quiet=True, cluster=LOCAL)
    cached = {f["path"]: f["cached"] for f in third.ingest["cluster"]["files"]}
    assert cached == {str(rank_folder / "rank0.json.gz"): True, str(rank_folder / "rank1.json.gz"): None}


def test_a_damaged_cache_is_read_again(rank_folder):
    load(rank_folder, quiet=True, cluster=LOCAL)
    (rank_folder / NEXT_TO_TRACES / "rank0.json.gz" / "rank.json").write_text("{not json")
    again = load(rank_folder, quiet=True, cluster=LOCAL)
    assert again.ingest["cluster"]["cached"] == 1


def test_the_cli_report_equals_a_local_one(rank_folder, tmp_path):
    out = gpudiag("report", rank_folder, "--no-html", "--json", tmp_path / "local.json", "-q")
    assert out.returncode == 0, out.stderr
    out = gpudiag(
        "report",
        rank_folder,
        "--no-html",
        "--json",
        tmp_path / "c.json",
        "-q",
        "--cluster",
        "local:2",
        "--worker-memory",
        "1GiB",
    )
    assert out.returncode == 0, out.stderr
    local, cluster = (json.loads((tmp_path / n).read_text()) for n in ("local.json", "c.json"))
    assert cluster == local


@pytest.mark.parametrize(
    "args, said",
    [
        (["--cache", "somewhere"], "--cache is an option of --cluster"),
        (["--worker-memory", "1GiB"], "--worker-memory is an option of --cluster"),
        (["--cluster", "local:zero"], "expected local:N with N a number of workers"),
        (["--cluster", "nowhere"], "expected local:N or a Dask scheduler's address"),
        (["--cluster", "local:1", "--worker-memory", "lots"], "expected a size such as 1GiB"),
    ],
)
def test_bad_cluster_options_exit_2_without_a_traceback(rank_folder, args, said):
    out = gpudiag("report", rank_folder, "--no-html", "-q", *args)
    assert out.returncode == 2
    assert said in out.stderr and "Traceback" not in out.stderr


def test_the_default_path_imports_no_cluster_package(rank_folder):
    code = (
        "import sys; from diagnose.ingest.loading import load; from diagnose.analysis import analyze; "
        f"analyze(load({str(rank_folder)!r}, quiet=True)); "
        "print(sorted(m for m in ('dask', 'distributed', 'duckdb', 'diagnose.cluster') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


# ---- the per-rank analysis on the workers (diagnose.cluster.cluster_report) ---------------------------------------


def test_parts_worked_out_on_the_workers_give_the_local_report_and_are_kept(rank_folder, tmp_path, monkeypatch):
    from diagnose.cluster import parquet_traces
    from diagnose.cluster.cluster_report import load_and_analyze

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))  # this test's own signing key
    local = analyze(load(rank_folder, quiet=True))
    profile, first = load_and_analyze(rank_folder, LOCAL, quiet=True)
    assert_same_analysis(local, first)
    parts = profile.ingest["cluster"]["analysis"]
    assert parts == {"ranks": 2, "cached": 0, "on_workers": 2, "in_parent": []}
    assert profile.traces.reads == 1  # the lowest rank's tables, for the sync timeline's step; nothing else

    profile, second = load_and_analyze(rank_folder, LOCAL, quiet=True)
    assert_same_analysis(local, second)
    assert isinstance(profile.traces, parquet_traces.ParquetTraces) and profile.traces.reads == 1
    assert profile.ingest["cluster"]["cached"] == 2 and "workers" not in profile.ingest["cluster"]
    assert profile.ingest["cluster"]["analysis"] == {"ranks": 2, "cached": 2, "on_workers": 0, "in_parent": []}


def test_new_thresholds_or_a_foreign_parts_file_are_worked_out_again(rank_folder, tmp_path, monkeypatch):
    from diagnose.cluster.cluster_report import PARTS_FILE, load_and_analyze
    from diagnose.thresholds import Thresholds

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    load_and_analyze(rank_folder, LOCAL, quiet=True)
    stricter = Thresholds().with_overrides({"sync": {"warning_idle_share": 0.01}})
    local = analyze(load(rank_folder, quiet=True), stricter)
    profile, again = load_and_analyze(rank_folder, LOCAL, stricter, quiet=True)
    assert profile.ingest["cluster"]["analysis"]["on_workers"] == 2  # the thresholds are in the parts' key
    assert_same_analysis(local, again)
    # a parts file not signed by this user's key (copied in with the traces) is never unpickled: worked out again
    planted = rank_folder / NEXT_TO_TRACES / "rank0.json.gz" / PARTS_FILE
    planted.write_bytes(planted.read_bytes()[:-1] + b"!")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "someone-else"))
    profile, _ = load_and_analyze(rank_folder, LOCAL, stricter, quiet=True)
    assert profile.ingest["cluster"]["analysis"]["cached"] == 0


class _Failed:
    """A finished task's future as distributed gives it (fake: the exception it raises, nothing run)."""

    def __init__(self, error: BaseException):
        self.error = error

    def result(self):
        raise self.error


def test_a_rank_whose_worker_died_twice_or_whose_task_failed_twice_is_named():
    from distributed import KilledWorker

    from diagnose.cluster.cluster_read import _outcome

    summary, problem = _outcome(_Failed(KilledWorker("gpudiag-read-3", "tcp://10.0.0.7:4001", 1)))
    assert summary is None and problem.startswith("left out: the worker reading it died twice")
    assert "--worker-memory" in problem
    summary, problem = _outcome(_Failed(MemoryError("cannot allocate")))
    assert problem == "left out: its task failed twice on the cluster (MemoryError: cannot allocate)"


def test_a_moved_cache_folder_is_still_used(rank_folder, tmp_path, monkeypatch):
    from diagnose.cluster.cluster_report import load_and_analyze

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    load_and_analyze(rank_folder, ClusterOptions("local:1", cache_dir=str(tmp_path / "a")), quiet=True)
    shutil.move(tmp_path / "a", tmp_path / "b")
    profile, moved = load_and_analyze(rank_folder, ClusterOptions("local:1", cache_dir=str(tmp_path / "b")), quiet=True)
    assert profile.ingest["cluster"]["cached"] == 2
    assert profile.ingest["cluster"]["analysis"]["cached"] == 2  # comm's intervals found where the cache is now
    assert_same_analysis(analyze(load(rank_folder, quiet=True)), moved)
