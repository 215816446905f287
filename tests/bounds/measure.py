"""Run the gpudiag CLI in a child process and measure it: exit code, output, wall time, peak RSS.

Peak RSS comes from ``os.wait4`` on that one child, so runs before it do not count. A child
that runs past ``timeout_s`` is killed (and reported with ``timed_out``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    peak_rss_bytes: int
    timed_out: bool


def gpudiag(*args, env: dict | None = None, timeout_s: float = 120.0) -> Run:
    """``python -m diagnose ARGS`` from the repository root, measured."""
    child_env = dict(os.environ)
    child_env.update(env or {})
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "diagnose", *map(str, args)],
            cwd=REPO,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            proc.kill()

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall_s = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # so Popen does not wait for it again
        out.seek(0)
        err.seek(0)
        return Run(
            returncode=proc.returncode,
            stdout=out.read().decode("utf-8", "replace"),
            stderr=err.read().decode("utf-8", "replace"),
            wall_s=wall_s,
            peak_rss_bytes=usage.ru_maxrss * 1024,
            timed_out=killed.is_set(),
        )
