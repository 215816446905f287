"""Faults the instrumented processes tell the parent: an artifact not written, and why.

The parent binds a Unix datagram socket in Linux's abstract namespace (no file: it works
on a full disk) and names it in ``GPUDIAG_FAULT_SOCKET``; every process of the job, torchrun's
workers too, sends one small JSON datagram per fault (never blocking, never raising). After
the job ends the parent reads them into the manifest (``faults``, ``missing_reasons``,
``incomplete``). Without the socket (not Linux, or in-process) the child still logs each
fault on stderr and keeps it in memory; the manifest then falls back to what the exit status says.

Also here, shared by child and parent: what counts as a full disk (ENOSPC, EFBIG from a
file-size limit, EDQUOT) and a probe that names the likely cause when an export failed
without an errno (torch's Kineto export turns a short write into a missing file).
Standard library only (loaded inside the user's training process).
"""

from __future__ import annotations

import errno
import json
import os

ENV = "GPUDIAG_FAULT_SOCKET"
DISK_FULL_ERRNOS = frozenset(e for e in (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", None)) if e)
_LOW_SPACE_BYTES = 16 << 20
_MAX_DATAGRAM = 4000


def is_disk_full(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS


def describe_error(error: BaseException) -> str:
    """``disk full (EFBIG: File too large)`` for a full disk, else ``TypeName: message``."""
    if isinstance(error, OSError) and error.errno is not None:
        name = errno.errorcode.get(error.errno, str(error.errno))
        text = f"{name}: {error.strerror or os.strerror(error.errno)}"
        return f"disk full ({text})" if error.errno in DISK_FULL_ERRNOS else text
    return f"{type(error).__name__}: {error}"


def disk_probe(folder: str) -> str | None:
    """Why writing under ``folder`` may fail: a file-size limit, or (almost) no free space; None when neither."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY:
            return f"the file-size limit (ulimit -f) is {soft} bytes"
    except (ImportError, OSError, ValueError):
        pass
    try:
        st = os.statvfs(folder)
        free = st.f_bavail * st.f_frsize
        if free < _LOW_SPACE_BYTES:
            return f"the disk holding {folder} has {free} bytes free"
    except OSError:
        pass
    return None


def send(record: dict) -> None:
    """Child side: one fault as a datagram to the parent, when it listens. Never blocks, never raises."""
    address = os.environ.get(ENV)
    if not address:
        return
    try:
        import socket  # here, not at the top: the child pays for it only when a fault happens

        data = json.dumps(record, default=str, separators=(",", ":")).encode("utf-8")[:_MAX_DATAGRAM]
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            s.sendto(data, "\0" + address.removeprefix("@"))
    except Exception:
        pass


class Listener:
    """Parent side: the socket the job's processes report faults to."""

    def __init__(self):
        import socket

        self.address = None
        self._socket = None
        if not hasattr(socket, "AF_UNIX") or not os.uname().sysname == "Linux":
            return
        name = f"gpudiag-faults-{os.getpid()}-{os.urandom(6).hex()}"
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.bind("\0" + name)
            s.setblocking(False)
        except OSError:
            return
        self._socket, self.address = s, "@" + name

    def env(self) -> dict[str, str]:
        return {ENV: self.address} if self.address else {}

    def receive(self) -> list[dict]:
        """Every fault reported so far (each once)."""
        found = []
        while self._socket is not None:
            try:
                data = self._socket.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            try:
                record = json.loads(data.decode("utf-8", errors="replace"))
            except ValueError:
                continue
            if isinstance(record, dict):
                found.append(record)
        return found

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
