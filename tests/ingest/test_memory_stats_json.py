"""A ``memory_stats()`` saved by hand is read as one memory-stats sample (issue 28 item 10). Before, such a file gave
``line 1: expected "stats" to be an object, found NoneType`` (exit 2).

Real stats: fixtures/memory/stats_json/ (the last per-step sample of two H200 runs, json.dump'ed as users do) and the
shared convnet run's ``convnet.stats.json`` (its final stats under "memory_stats", beside its losses).
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from parsers import registry
from parsers.errors import InputError
from parsers.memory_stats import read_memory_stats
from tests.cli_run import gpudiag
from tests.paths import FIXTURES, shared

STATS_JSON = FIXTURES / "memory" / "stats_json"
TORCH = STATS_JSON / "torch_memory_stats.json"
JAX = STATS_JSON / "jax_memory_stats.json"
CHURN_LOG = FIXTURES / "runs" / "mem_churn" / "memory" / "rank0.stats.jsonl"

TORCH_PEAKS = {"reserved_peak_bytes": 6_679_429_120.0, "allocated_peak_bytes": 4_847_604_736.0}


def one_sample(path) -> dict:
    with pytest.warns(UserWarning, match="read as one"):
        df = read_memory_stats(path)
    assert len(df) == 1
    return df.iloc[0].to_dict()


def test_convnet_stats_json_holds_the_stats_one_level_down():
    path = shared("torch", "convnet.stats.json")
    assert registry.detect(path).kind == "memory-stats"
    row = one_sample(path)
    assert (row["rank"], row["step"], row["framework"]) == (0, 0, "torch")
    assert row["reserved_peak_bytes"] == 895_483_904.0 and row["allocated_peak_bytes"] == 325_091_840.0
    assert row["segments"] == 20.0 and row["num_alloc_retries"] == 0.0
    r = gpudiag("report", path, "--no-html")
    assert r.returncode == 0, r.stderr
    assert "[fragmentation.at_peak]" in r.stdout and "64 % of the 854 MiB reserved" in r.stdout
    assert f"  note: {path}: read as one torch.cuda.memory_stats() sample (under the key 'memory_stats')" in r.stdout


def test_a_plain_json_dump_of_torch_memory_stats():
    row = one_sample(TORCH)
    assert {k: row[k] for k in TORCH_PEAKS} == TORCH_PEAKS
    assert (row["reserved_bytes"], row["allocated_bytes"], row["num_device_alloc"]) == (
        6_679_429_120.0,
        1_605_402_624.0,
        39.0,
    )
    r = gpudiag("check", TORCH, "--fail-on", "warning")
    assert r.returncode == 1, r.stderr
    assert "FAIL: 1 finding at or above warning: fragmentation.at_peak" in r.stdout
    assert "27 % of the 6.22 GiB reserved was never allocated even at the peak" in r.stdout


def test_a_plain_json_dump_of_jax_memory_stats():
    row = one_sample(JAX)
    assert row["framework"] == "jax"
    assert (row["allocated_peak_bytes"], row["pool_bytes"], row["reserved_bytes"]) == (
        142_114_304.0,
        112_583_507_968.0,
        0.0,
    )
    r = gpudiag("report", JAX, "--no-html")
    assert r.returncode == 0 and "[fragmentation.jax_unreported]" in r.stdout


def test_pretty_printed_and_nested_forms_read_the_same(tmp_path):
    """The same real stats as `json.dump(..., indent=2)` writes them and as torch's memory_stats_as_nested_dict()."""
    stats = json.loads(TORCH.read_text())
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(stats, indent=2))
    nested: dict = {}
    for key, value in stats.items():
        *parents, leaf = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    nested_path = tmp_path / "nested.json"
    nested_path.write_text(json.dumps(nested))
    expected = pd.Series(one_sample(TORCH))
    pd.testing.assert_series_equal(pd.Series(one_sample(pretty)), expected)
    pd.testing.assert_series_equal(pd.Series(one_sample(nested_path)), expected)


def test_a_log_of_bare_memory_stats_lines_is_one_sample_a_line(tmp_path):
    """A user's own log: `f.write(json.dumps(torch.cuda.memory_stats()) + "\\n")` each step (mem_churn's 3 samples)."""
    records = [json.loads(line) for line in CHURN_LOG.read_text().splitlines()]
    log = tmp_path / "my_stats.jsonl"
    log.write_text("".join(json.dumps(r["stats"]) + "\n" for r in records))
    df = read_memory_stats(log)
    assert df["step"].tolist() == [0, 1, 2]
    assert df["reserved_peak_bytes"].tolist() == [r["stats"]["reserved_bytes.all.peak"] for r in records]


def test_fake_object_without_stats_keys_says_what_gpudiag_expects(tmp_path):
    """Hand-made bad input: it mentions a stats key only as a value, so it is sniffed as memory stats."""
    fake = tmp_path / "fake_not_stats.json"
    fake.write_text(json.dumps({"run": "a", "watched": "allocated_bytes.all.current", "losses": [2.3]}))
    with pytest.raises(InputError, match="is a JSON object without memory_stats\\(\\) keys"):
        read_memory_stats(fake)
    r = gpudiag("report", fake, "--no-html")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert (
        r.stderr.startswith(f"gpudiag: error: {fake}: is a JSON object without memory_stats() keys")
        and r.stderr.count("\n") == 1
    )
