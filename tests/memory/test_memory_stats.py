"""memory_stats JSONL → one row per step, torch and JAX keys under unit names."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from parsers.errors import InputError
from parsers.memory_stats import MEMORY_STATS_SCHEMA, read_memory_stats
from parsers.schema import missing_columns
from tests.memory.conftest import MEMORY, stats_path


def test_torch_stats():
    df = read_memory_stats(stats_path("churn"))
    assert missing_columns(df, MEMORY_STATS_SCHEMA) == []
    assert len(df) == 30 and df["step"].tolist() == list(range(30))
    assert (df["framework"] == "torch").all()
    last = df.iloc[-1]
    assert last["allocated_bytes"] == 2697101312 and last["reserved_bytes"] == 8264876032
    assert last["allocated_peak_bytes"] == 5635085312 and last["reserved_peak_bytes"] == 8264876032
    assert last["requested_bytes"] == 2696839168 and last["segments"] == 42 and last["num_device_alloc"] == 42
    assert last["inactive_split_bytes"] == 1344110592 and last["num_alloc_retries"] == 0
    assert df["num_device_alloc"].tolist()[:4] == [21, 33, 33, 38]
    assert df["largest_free_block_bytes"].isna().all()  # torch does not report it


def test_jax_stats():
    df = read_memory_stats(MEMORY / "jax" / "stats.jsonl.gz")
    assert len(df) == 5 and (df["framework"] == "jax").all()
    row = df.iloc[0]
    assert row["allocated_bytes"] == 33555712 and row["allocated_peak_bytes"] == 243115264
    assert row["pool_bytes"] == 112583507968 and row["limit_bytes"] == 112583507968
    assert row["reserved_bytes"] == 0 and row["largest_free_block_bytes"] == 112533010688
    assert df["requested_bytes"].isna().all() and df["active_bytes"].isna().all()


def _lines(n=3):
    return gzip.decompress(stats_path("oom").read_bytes()).decode().splitlines()[:n]


def test_partial_last_line_is_dropped_with_a_warning(tmp_path):
    lines = _lines()
    path = tmp_path / "fake_rank0.stats.jsonl"
    path.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])
    df = read_memory_stats(path)
    assert len(df) == 2 and len(df.attrs["warnings"]) == 1 and "partial last line 3" in df.attrs["warnings"][0]


def test_bad_line_in_the_middle_is_an_error(tmp_path):
    lines = _lines()
    path = tmp_path / "fake_rank0.stats.jsonl"
    path.write_text(lines[0] + "\n" + lines[1][:40] + "\n" + lines[2] + "\n")
    with pytest.raises(InputError, match="line 2"):
        read_memory_stats(path)


@pytest.mark.parametrize(
    "text,match",
    [
        ("", "empty"),
        ('{"kind": "step", "step": 1}\n', "no memory_stats records"),
        ('{"kind": "memory_stats", "step": 1, "t_ns": 1, "stats": 5}\n', "stats"),
        ('{"kind": "memory_stats", "step": "x", "t_ns": 1, "stats": {}}\n', "step"),
        ('{"kind": "memory_stats", "step": 1, "t_ns": 1, "stats": {"bytes_in_use": "lots"}}\n', "must be a number"),
        ('{"kind": "memory_stats", "step": 1, "t_ns": 1, "framework": "tf", "stats": {}}\n', "framework"),
    ],
)
def test_bad_records(tmp_path, text, match):
    path = tmp_path / "fake.stats.jsonl"
    path.write_text(text)
    with pytest.raises(InputError, match=match):
        read_memory_stats(path)


def test_missing_keys_are_nan(tmp_path):
    path = tmp_path / "fake.stats.jsonl"
    path.write_text(
        '{"kind": "memory_stats", "rank": 1, "step": 4, "t_ns": 10, "framework": "torch", '
        '"stats": {"allocated_bytes.all.current": 512}}\n'
    )
    df = read_memory_stats(path)
    assert (
        df["allocated_bytes"].tolist() == [512.0]
        and np.isnan(df["reserved_bytes"].iloc[0])
        and df["rank"].tolist() == [1]
    )
