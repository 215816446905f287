"""Write files whole or not at all: a temporary name in the same folder, then rename.

The temporary file is created with mode 0666 and the process umask applied by the kernel (0644 under
umask 022, 0600 under 077), like any file ``open(path, "w")`` creates: reports and manifests are for
teammates to read. ``tempfile.mkstemp`` would make them 0600 whatever the umask.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

_NEW_FILE_MODE = 0o666  # before the umask, as open() and shells create files


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def check_can_create_in(folder: str | os.PathLike) -> None:
    """Raise the OSError that writing a file into ``folder`` would raise (read-only, no permission, a
    read-only file system such as /sys), by creating and removing an empty temporary file there: the
    same call :func:`atomic_write_bytes` makes, so what passes here is what the write will meet, root
    or not (``os.access`` says yes to root on a read-only mount)."""
    fd, tmp = _create_temporary(Path(folder) / "gpudiag-write-check")
    os.close(fd)
    try:
        os.unlink(tmp)
    except OSError:
        pass


def _create_temporary(path: Path) -> tuple[int, str]:
    """A new, exclusively created ``.<name>.<random>.tmp`` beside ``path``: its descriptor and name."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = str(path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp"))
        try:
            return os.open(tmp, flags, _NEW_FILE_MODE), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name} after 100 tries")
