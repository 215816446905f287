"""Shared helpers for the diff and sweep tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NCU = ROOT / "fixtures" / "ncu"
RUNS = ROOT / "fixtures" / "runs"
EXAMPLE = ROOT / "examples" / "train_sweep.py"
TRAIN_MLP = ROOT / "examples" / "train_mlp.py"


def gpudiag(*args, timeout=300, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "diagnose", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or ROOT,
    )


def run_fixture(name: str) -> Path:
    p = RUNS / name
    if not (p / "manifest.json").exists():
        pytest.skip(f"real run folder not captured yet: {p} (docs/diff.md says how)")
    return p
