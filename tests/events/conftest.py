"""Shared paths and small builders for the step-timing and NVML tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from diagnose.ingest.profile_data import Profile
from parsers.events import STEPS_SCHEMA
from parsers.schema import conform

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "events"
BAD = ROOT / "fixtures" / "bad"
NVML_CAPTURE = FIXTURES / "nvml_capture1.csv"
RUN_ONLY_EVENTS = FIXTURES / "rank0_capture1_run_only.jsonl"


def fake_profile(**tables) -> Profile:
    """A Profile of the given tables, with an empty kernels table (no ncu input)."""
    tables.setdefault("kernels", pd.DataFrame())
    return Profile(**tables)


def fake_steps(host_ms, gpu_ms, rank=0, t0_ns=1.7e18, name="step") -> pd.DataFrame:
    """Hand-made step rows, one per value, starting ``t0_ns`` and laid end to end by host time."""
    host = np.asarray(host_ms, dtype=float)
    starts = t0_ns + np.concatenate([[0.0], np.cumsum(np.nan_to_num(host[:-1]))]) * 1e6
    return conform(
        pd.DataFrame(
            {
                "rank": rank,
                "step": np.arange(len(host)),
                "name": name,
                "t_start_ns": starts,
                "host_ms": host,
                "gpu_ms": np.asarray(gpu_ms, dtype=float),
            }
        ),
        STEPS_SCHEMA,
    )


@pytest.fixture
def tmp_file(tmp_path):
    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
