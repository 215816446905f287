"""torchrun: each worker writes rank-suffixed artifacts into one folder; the launcher writes nothing."""

from __future__ import annotations

import shutil

import pytest

from tests.launch.launch_helpers import EXAMPLES, gpudiag, manifest, records


def test_torchrun_two_workers_give_two_ranks(tmp_path):
    torchrun = shutil.which("torchrun") or pytest.skip("no torchrun")
    run = tmp_path / "r"
    r = gpudiag(
        "profile",
        "-q",
        "--no-nvml",
        "--trace-start",
        "2",
        "--trace-steps",
        "2",
        "-o",
        run,
        "--",
        torchrun,
        "--nproc-per-node",
        "2",
        "--standalone",  # a free port of torchrun's choosing: a fixed one collides with any other job that holds it
        EXAMPLES / "train_mlp.py",
        "--steps",
        "6",
        "--width",
        "16",
        "--device",
        "cpu",
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    m = manifest(run)
    assert m["ranks"] == [0, 1] and m["missing"] == []
    assert sorted(m["artifacts"]) == [
        "events/rank0.jsonl",
        "events/rank1.jsonl",
        "trace/rank0.json.gz",
        "trace/rank1.json.gz",
    ]
    for rank in (0, 1):
        recs = records(run, rank)
        assert recs[0]["event"] == "start" and recs[0]["rank"] == rank and recs[0]["world_size"] == 2
        assert [x["step"] for x in recs if x["kind"] == "step"] == list(range(5))
    assert records(run, 0)[0]["pid"] != records(run, 1)[0]["pid"]
