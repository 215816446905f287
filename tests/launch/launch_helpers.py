"""Helpers for the launch tests (imported by the test modules): run `python -m diagnose` the way the GPU machine does (PYTHONPATH=<repo>)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
EXAMPLES = REPO / "examples"


def base_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDIAG_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def gpudiag(*args, env=None, cwd=None, timeout=120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "diagnose", *map(str, args)],
        env=env or base_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def records(run_dir: Path, rank: int = 0) -> list[dict]:
    path = Path(run_dir) / "events" / f"rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def manifest(run_dir: Path) -> dict:
    from parsers.run_folder import read_manifest

    return read_manifest(Path(run_dir) / "manifest.json")
