"""Run `python -m diagnose` as a user does (a child process, PYTHONPATH=<repo>), optionally under a umask."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.paths import REPO


def gpudiag(*args, umask: int | None = None, env: dict | None = None, cwd=None, timeout: float = 300):
    """The finished child: ``returncode``, ``stdout``, ``stderr`` (text); stdout is a pipe, never a terminal."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDIAG_")}
    child_env["PYTHONPATH"] = str(REPO)
    child_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "diagnose", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=child_env,
        timeout=timeout,
        preexec_fn=None if umask is None else (lambda: os.umask(umask)),
    )
