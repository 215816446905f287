"""A second process that builds pieces of one large trace while this process reads and builds the next.

Reading a 1 GB Kineto trace is ~6 s of per-piece work in one Python process: msgspec decoding and the
structs' fields into columns (``parsers/trace.py``). That work is independent per 16 MiB piece, so on a
machine with a second core the stream (``parsers/trace_stream.py``) hands every other piece's bytes to this
helper and builds the one in between itself; the results are merged in file order, so the tables are the
ones a single process builds.

The helper is forked when a trace turns out to be larger than one piece, so it starts with the readers
imported and shares the (then small) parent's pages; it is not started on one core, nor inside a process
that is itself a multiprocessing worker (``diagnose/ingest/parallel.py`` already reads one trace per
core). A helper that dies (killed for memory) is noticed as the end of its pipe: the stream builds that
piece itself and goes on without it. Nothing here can hang on a dead helper.
"""

from __future__ import annotations

import io
import mmap
import multiprocessing
import os
import pickle
import signal
import sys
from collections.abc import Callable
from typing import Any

from parsers.restricted_pickle import RestrictedUnpickler


class HelperLost(Exception):
    """The helper process exited (killed, or a crash) before it answered."""


def helper_allowed() -> bool:
    """Linux (where a fork of this process is safe: no macOS frameworks), a second core, not a worker already."""
    if not sys.platform.startswith("linux") or os.environ.get("GPUDIAG_PIECE_HELPER") == "0":
        return False
    return len(os.sched_getaffinity(0)) >= 2 and multiprocessing.parent_process() is None


class PieceHelper:
    """Runs ``build(raw_bytes)`` in a forked process on each piece sent, answering one piece at a time.

    ``build`` returns plain data (dicts, lists, tuples, text, numbers, bytearrays; or None for a piece it does
    not take); an exception in it comes back as None too, so the caller builds that piece itself and meets the
    error as a serial read would.
    """

    def __init__(self, build: Callable[[bytes], Any], slot_bytes: int):
        # the pieces pass through memory shared with the helper (an anonymous mapping made before the fork):
        # one copy of 16 MiB instead of a copy, a pickle-free pipe write and the helper's read of it
        self._slot = mmap.mmap(-1, slot_bytes)
        self._sent_bytes = 0
        self._slot_too_small = b""  # the last piece sent, when it did not fit the slot
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(
            target=_serve, args=(child, self._conn, self._slot, build), name="gpudiag-trace-pieces", daemon=True
        )
        self._proc.start()
        child.close()  # only the helper holds its end: its exit is seen here as the end of the pipe

    def submit(self, piece) -> None:
        """Send a piece (bytes or a buffer); it is copied before this returns."""
        n = len(piece)
        self._sent_bytes = n
        self._slot_too_small = b""
        try:
            if n <= len(self._slot):
                self._slot[:n] = piece
                self._conn.send_bytes(n.to_bytes(8, "little"))
            else:  # a piece larger than the slot (one event over 16 MiB): through the pipe
                self._slot_too_small = bytes(piece)
                self._conn.send_bytes(self._slot_too_small)
        except OSError:  # the helper is gone; result() says so
            pass

    def sent(self) -> bytes:
        """The last piece sent (still whole until the next submit), for this process to build instead."""
        n = self._sent_bytes
        return bytes(self._slot[:n]) if n <= len(self._slot) else self._slot_too_small

    def answered(self) -> bool:
        """Whether the result of the piece sent is here (or the helper is gone), without waiting."""
        try:
            return self._conn.poll(0)
        except OSError:
            return True

    def result(self) -> Any:
        """What ``build`` returned for the last piece submitted; :class:`HelperLost` if the helper died."""
        try:
            # plain data only (parsers.trace's to_plain): the restricted unpickler builds nothing by name
            return RestrictedUnpickler(io.BytesIO(self._conn.recv_bytes())).load()
        except (EOFError, OSError):
            raise HelperLost from None

    def close(self) -> None:
        self._conn.close()  # the helper's next read ends: it exits
        self._proc.join(timeout=2)
        if self._proc.is_alive():  # still building a piece nobody will read
            self._proc.kill()
            self._proc.join()
        self._slot.close()


def _serve(conn, parent_end, slot: mmap.mmap, build: Callable[[bytes], Any]) -> None:
    parent_end.close()
    # Ctrl-C reaches the whole process group: the parent stops the read and closes the pipe, which ends this
    # loop; a KeyboardInterrupt here would only print a second traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            if len(message) == 8:
                with memoryview(slot) as whole, whole[: int.from_bytes(message, "little")] as piece:
                    out = build(piece)
            else:
                out = build(message)
            payload = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - the parent builds the piece itself and meets the error there
            payload = pickle.dumps(None)
        del message
        try:
            conn.send_bytes(payload)
        except OSError:
            return
