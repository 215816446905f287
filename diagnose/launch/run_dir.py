"""The launcher's side of the run folder: its default name, its creation, and the clean-up at the end.

The layout itself (file names, what counts as an artifact) is :mod:`parsers.run_records`, shared with the
runtime and the readers; the manifest's reading is :mod:`parsers.run_folder`.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from parsers.errors import InputError

DEFAULT_PARENT = "gpudiag-runs"
_LAUNCHERS = {
    "torchrun",
    "python",
    "python3",
    "accelerate",
    "deepspeed",
    "uv",
    "poetry",
    "pipenv",
    "mpirun",
    "srun",
    "env",
    "launch",
    "run",
    "exec",
}


def script_name(command: list[str]) -> str:
    """A short name for the run from the command: the script's stem, the -m module, or the program."""
    for i, arg in enumerate(command):
        if arg == "-m" and i + 1 < len(command):
            return command[i + 1]
        if arg.endswith(".py") and not arg.startswith("-"):
            return Path(arg).stem
    for arg in command:
        base = os.path.basename(arg)
        if not arg.startswith("-") and not re.fullmatch(r"python[\d.]*", base) and base not in _LAUNCHERS:
            return base
    return os.path.basename(command[0]) if command else "run"


def safe_name(name: str) -> str:
    """``name`` as a file name: runs of other characters than letters, digits, ``._-`` become ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "run"


def new_run_folder(command: list[str], out: str | os.PathLike | None = None, parent: str = DEFAULT_PARENT) -> Path:
    """Create the run folder: ``out`` as given, else gpudiag-runs/<YYYYmmdd-HHMMSS>-<script>/ (suffixed when taken)."""
    if out is not None:
        folder = Path(out)
        if folder.exists() and any(folder.iterdir()):
            raise InputError(folder, "already exists and is not empty; choose a new --out folder")
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(parent) / f"{stamp}-{safe_name(script_name(command))}"
    folder, n = base, 1
    while True:
        try:
            folder.mkdir(parents=True, exist_ok=False)
            return folder
        except FileExistsError:
            n += 1
            folder = base.with_name(f"{base.name}-{n}")


def remove_leftovers(folder: str | os.PathLike) -> list[str]:
    """Delete the ``*.tmp`` files killed writers left (call once the job has ended); their relative paths."""
    folder = Path(folder)
    removed = []
    for path in sorted(folder.rglob("*.tmp")):
        try:
            if path.is_file() and not path.is_symlink():
                path.unlink()
                removed.append(path.relative_to(folder).as_posix())
        except OSError:
            continue
    return removed
