"""Run the user's command as a child and give back its exit status the way a shell would.

The child gets its own process group; when gpudiag runs in the foreground of a terminal
that group is handed the terminal (as a shell does for a job), so Ctrl-C reaches the
child and its workers directly, exactly once, and the script can still read the tty.
SIGINT, SIGTERM and SIGHUP sent to gpudiag itself are forwarded to the child. On Linux
the child also gets SIGTERM should gpudiag die first. Exit status: the child's code, or
128+N when a signal N killed it. Ending what is left of a process group, with a grace period
per signal, is :func:`end_process_group` (the --ncu stop, its orphans, and a sweep's timed-out run).
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


def exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; ``signal N`` for a number with no name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except Exception:
        pass


def _foreground_tty() -> int | None:
    """A tty fd on which gpudiag is the foreground process group, or None."""
    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _give_terminal(fd: int, pgid: int) -> None:
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(fd, pgid)
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGTTOU, previous)


class Child:
    """The running command: :meth:`wait` returns its exit status."""

    def __init__(
        self,
        command: list[str],
        env: dict[str, str],
        cwd: str | None = None,
        stdout=None,
        stderr=None,
        on_signal=None,
    ):
        """``on_signal(child, signum)``, when given, replaces plain forwarding of a signal to gpudiag (--ncu stops
        the application under ncu instead, so ncu can write what it profiled)."""
        self.command = command
        self._on_signal = on_signal
        self.signals_forwarded: list[int] = []
        tty = _foreground_tty()
        try:
            self.process = subprocess.Popen(
                command,
                env=env,
                cwd=cwd,
                stdout=stdout,
                stderr=stderr,
                process_group=0,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        except FileNotFoundError:
            from parsers.errors import InputError

            raise InputError(None, f"cannot run {command[0]!r}: no such program on PATH") from None
        except PermissionError:
            from parsers.errors import InputError

            raise InputError(None, f"cannot run {command[0]!r}: permission denied (is it executable?)") from None
        self._tty = tty
        if tty is not None:
            _give_terminal(tty, self.process.pid)
        self._previous = {}
        for signum in FORWARDED:
            try:
                self._previous[signum] = signal.signal(signum, self._forward)
            except ValueError:  # not the main thread (e.g. a notebook's worker): nothing to forward from
                break

    def _forward(self, signum, frame) -> None:
        self.signals_forwarded.append(signum)
        if self._on_signal is not None:
            self._on_signal(self, signum)
            return
        try:
            self.process.send_signal(signum)
        except ProcessLookupError:
            pass

    def wait(self) -> int:
        try:
            while True:
                try:
                    returncode = self.process.wait()
                    break
                except KeyboardInterrupt:  # a SIGINT that arrived before our handler was set
                    self._forward(signal.SIGINT, None)
        finally:
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)
            if self._tty is not None:
                _give_terminal(self._tty, os.getpgrp())
        return exit_status(returncode)


def group_members(pgid: int) -> list[int]:
    """Pids of the live processes in process group ``pgid`` (from /proc; empty where there is none)."""
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            members.append(int(entry))
    return members


# SIGTERM, then SIGKILL to what is still there 5 s later
TERM_THEN_KILL = ((signal.SIGTERM, 5.0), (signal.SIGKILL, 1.0))
POLL_S = 0.05


def end_process_group(
    pgid: int, signals: tuple[tuple[int, float], ...] = TERM_THEN_KILL, ended: Callable[[], bool] | None = None
) -> None:
    """Send each ``(signal, wait_s)`` of ``signals`` in turn to process group ``pgid``, going on to the next
    only while the group has not ended ``wait_s`` seconds after the last.

    ``ended()`` says whether it has; by default, when no live process of the group is left (a caller that
    holds the leader may pass ``lambda: popen.poll() is not None`` to wait on it alone). Returns at once when
    the group is gone or not ours to signal.
    """
    ended = ended or functools.partial(_group_gone, pgid)
    for signum, wait_s in signals:
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if ended():
                return
            time.sleep(POLL_S)


def _group_gone(pgid: int) -> bool:
    """No live process is left in the group. A zombie is not live: in a container whose first process does not
    reap orphans, an orphan the signal ended stays a zombie, and the group would seem alive for the whole wait."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return True
    return os.path.isdir("/proc") and not group_members(pgid)
