"""Reading a run's ranks in worker processes gives what reading them in-process gives: the same tables, the
same comm numbers and findings, the same note for a rank that cannot be read, and no hang when a worker dies."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil

import numpy as np
import pandas as pd
import pytest

from diagnose.analysis import analyze, run_analyzer
from diagnose.analyzers import comm
from diagnose.ingest import parallel as parallel_ingest
from diagnose.ingest.loading import load
from tests.cli_run import gpudiag
from tests.paths import FIXTURES, shared

COMM = FIXTURES / "comm"
GLOO = COMM / "gloo_straggler"
HTA = COMM / "hta"
SAMPLED = [HTA / "trace_filter_sampled_rank-0.json.gz", HTA / "trace_filter_sampled_rank-1.json.gz"]
TRUNCATED = FIXTURES / "bad" / "trace_truncated.json.gz"


def assert_same(a, b, where="profile"):
    """Equal tables (dtypes included), equal values elsewhere; NaN equals NaN."""
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b, obj=where)
    elif isinstance(a, pd.Series):
        pd.testing.assert_series_equal(a, b, obj=where)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            if f.name != "ingest":  # how it was read (workers, pids) is what differs
                assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == b, (where, a, b)


def serial_and_parallel(path):
    serial = load(path, workers=1, quiet=True)
    parallel = load(path, workers=2, quiet=True)
    assert serial.ingest["workers"] == 1 and parallel.ingest["workers"] == 2
    assert {f["pid"] for f in serial.ingest["files"]} == {os.getpid()}
    assert os.getpid() not in {f["pid"] for f in parallel.ingest["files"]}  # read in worker processes
    return serial, parallel


def sampled_folder(tmp_path):
    """The two HTA sampled ranks alone in a folder without a manifest (as copied off a cluster)."""
    folder = tmp_path / "sampled"
    folder.mkdir()
    for p in SAMPLED:
        shutil.copy(p, folder / p.name)
    return folder


@pytest.mark.parametrize("name", ["gloo_straggler", "hta", "sampled", "torchrun_mlp"])
def test_parallel_ingest_gives_the_serial_tables_and_analysis(name, tmp_path):
    path = {"gloo_straggler": GLOO, "hta": HTA, "sampled": None, "torchrun_mlp": FIXTURES / "runs" / "torchrun_mlp"}[
        name
    ] or sampled_folder(tmp_path)
    serial, parallel = serial_and_parallel(path)
    assert_same(serial, parallel)
    a, b = analyze(serial), analyze(parallel)
    assert_same(a.summary, b.summary, "summary")
    assert repr(a.findings) == repr(b.findings)
    assert a.findings and a.summary


def test_gloo_straggler_numbers_read_in_workers():
    _, parallel = serial_and_parallel(GLOO)
    r = run_analyzer(comm, parallel)
    assert sorted(parallel.traces) == [0, 1]
    assert r.summary["comm_collectives_matched"] == 10
    assert r.summary["rank0.comm_wait_ms_per_step"] == pytest.approx(71.7933638)
    assert r.summary["rank1.comm_wait_ms_per_step"] == 0.0
    assert {f.id for f in r.findings} == {"comm.straggler", "comm.wait_dominates"}


def test_a_folder_of_rank_traces_is_read_as_the_ranks(tmp_path):
    """HTA's overlap on its own sampled traces (tests/comm/test_comm_hta.py), from a folder without a manifest."""
    _, parallel = serial_and_parallel(sampled_folder(tmp_path))
    r = run_analyzer(comm, parallel)
    assert r.summary["rank0.comm_overlap_pct"] == pytest.approx(11.81, abs=0.01)
    assert r.summary["rank1.comm_overlap_pct"] == pytest.approx(20.05, abs=0.01)
    assert parallel.warnings == []


def test_hta_folder_keeps_the_first_trace_of_a_rank_and_says_what_it_left_out():
    profile = load(HTA, workers=2, quiet=True)
    assert sorted(profile.traces) == [0, 1]
    assert profile.traces[0].path.endswith("nccl_parser_config_nccl_data.json.gz")  # first in name order
    assert profile.warnings == [
        f"{HTA / SAMPLED[0].name}: left out, a trace of rank 0 was read already "
        f"({HTA / 'nccl_parser_config_nccl_data.json.gz'}); each rank's trace is read once",
        f"{HTA}: 1 file left out, not a format gpudiag reads: LICENSE",
    ]


def corrupt_rank_run(tmp_path):
    """The gloo run folder with rank 1's trace replaced by a real trace cut short."""
    run = tmp_path / "run"
    shutil.copytree(GLOO, run)
    shutil.copy(TRUNCATED, run / "trace" / "rank1.json.gz")
    return run


def test_a_corrupt_rank_is_the_same_note_serial_or_parallel(tmp_path):
    run = corrupt_rank_run(tmp_path)
    serial, parallel = serial_and_parallel(run)
    assert_same(serial, parallel)
    assert sorted(parallel.traces) == [0]
    (note,) = parallel.warnings
    assert note.startswith(f"{run / 'trace' / 'rank1.json.gz'}: ") and "gzip" in note
    findings = {f.id for f in run_analyzer(comm, parallel).findings}
    assert findings == {"comm.single_rank"}


def test_report_exit_codes_with_a_corrupt_rank_read_in_workers(tmp_path):
    run = corrupt_rank_run(tmp_path)
    for workers in ("1", "2"):
        r = gpudiag(
            "report", run, "--no-html", "--json", tmp_path / f"w{workers}.json", env={"GPUDIAG_WORKERS": workers}
        )
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        assert "rank1.json.gz" in r.stdout + (tmp_path / f"w{workers}.json").read_text()
    assert (tmp_path / "w1.json").read_text().replace("w1", "w2") == (tmp_path / "w2.json").read_text().replace(
        "w1", "w2"
    )
    only_bad = tmp_path / "only_bad"
    only_bad.mkdir()
    shutil.copy(TRUNCATED, only_bad / "rank0.json.gz")
    shutil.copy(TRUNCATED, only_bad / "rank1.json.gz")
    for workers in ("1", "2"):
        r = gpudiag("report", only_bad, "--no-html", env={"GPUDIAG_WORKERS": workers})
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.startswith("gpudiag: error:") and "only_bad" in r.stderr


def fake_read_that_dies_on_rank1(path, kind=None):
    """A worker killed mid-read (as the OOM killer does) when it reads rank 1."""
    if "rank1" in os.fspath(path):
        os._exit(137)
    return parallel_ingest.ArtifactRead(os.fspath(path), error="fake: not read")


def test_a_worker_that_dies_is_an_error_of_its_file_not_a_hang(monkeypatch):
    monkeypatch.setattr(parallel_ingest, "read_artifact", fake_read_that_dies_on_rank1)
    paths = sorted((GLOO / "trace").glob("rank*.json.gz")) + [
        FIXTURES / "runs" / "torchrun_mlp" / "trace" / "rank0.json.gz"
    ]
    done = []
    reads = parallel_ingest.read_all(paths, 2, on_done=done.append)
    assert [r.error for r in reads] == [
        "fake: not read",
        "the worker process reading it died (killed by the system, most likely out of memory); "
        "read it with fewer workers (diagnose.load(..., workers=1)) or on a machine with more memory",
        "fake: not read",
    ]
    assert sorted(r.path for r in done) == sorted(map(str, paths))  # progress heard of every file once


def test_worker_count_is_bounded_by_files_cores_and_memory():
    mib = 2**20
    assert parallel_ingest.worker_count([100 * mib] * 8, cores=2, available_bytes=64 * 2**30) == 2
    assert parallel_ingest.worker_count([100 * mib] * 3, cores=64, available_bytes=64 * 2**30) == 3
    # a 1 GiB rank may peak near 6 GiB + 200 MiB: 16 GiB * 0.7 holds 1 of them, whatever the cores
    assert parallel_ingest.worker_count([2**30] * 8, cores=64, available_bytes=16 * 2**30) == 1
    assert parallel_ingest.worker_count([2**30] * 8, cores=64, available_bytes=64 * 2**30) == 7
    assert parallel_ingest.worker_count([], cores=4, available_bytes=2**30) == 1


def test_input_bytes_reads_the_gzip_trailer():
    p = SAMPLED[0]
    import gzip

    assert parallel_ingest.input_bytes(p) == len(gzip.open(p).read())
    assert parallel_ingest.input_bytes(
        FIXTURES / "runs" / "torchrun_mlp" / "events" / "rank0.jsonl"
    ) == os.path.getsize(FIXTURES / "runs" / "torchrun_mlp" / "events" / "rank0.jsonl")


def test_shared_sampled_ranks_parallel_equals_serial(tmp_path):
    folder = tmp_path / "shared_sampled"
    folder.mkdir()
    for rank in (0, 1):
        shutil.copy(shared("hta", f"trace_filter_sampled_rank-{rank}.json.gz"), folder)
    serial, parallel = serial_and_parallel(folder)
    assert_same(serial, parallel)
    assert sorted(parallel.traces) == [0, 1]


def test_rank_of_reads_the_names_other_tools_give():
    from parsers.run_folder import rank_of

    assert [rank_of(p.name) for p in SAMPLED] == [0, 1]
    assert rank_of("rank12.json.gz") == 12 and rank_of("worker_rank_3.pt.trace.json") == 3
    assert rank_of("trace.json", default=5) == 5
