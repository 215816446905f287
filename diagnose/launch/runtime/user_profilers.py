"""The script's own torch.profiler: light mode's trace window gives way to it.

One process runs one Kineto session at a time. A script that profiles itself with a schedule
(``torch.profiler.profile(schedule=schedule(wait=10, warmup=2, active=...))``, examples/gan_loader.py) holds a
profiler that starts tracing only at its own step 10; a window gpudiag opened before that made the script's
``prof.step()`` fail with "Profiler is already enabled on this thread", and the script died. So
``torch.profiler.profile.start`` and ``stop`` are wrapped: while a profiler of the script's is started, the window
does not open, and a window already open closes (its trace written) before the script's profiler starts. The
script's own trace is the one to read then (``gpudiag report trace.json``).
"""

from __future__ import annotations

import functools

OWN_MARK = "_gpudiag_own"  # set on the window's own torch.profiler.profile: not the script's


class UserProfilers:
    """The script's torch.profiler.profile objects started and not yet stopped (``active``, their ids)."""

    def __init__(self, runtime):
        self._runtime = runtime
        self.active: set[int] = set()
        self._profile_class = None
        self._originals = None

    def hook(self, torch) -> None:
        profile = getattr(getattr(torch, "profiler", None), "profile", None)
        if profile is None or self._originals is not None:
            return
        start, stop = profile.start, profile.stop
        users = self

        @functools.wraps(start)
        def started(prof, *args, **kwargs):
            if not getattr(prof, OWN_MARK, False):
                users.active.add(id(prof))
                users._make_way()
            return start(prof, *args, **kwargs)

        @functools.wraps(stop)
        def stopped(prof, *args, **kwargs):
            try:
                return stop(prof, *args, **kwargs)
            finally:
                users.active.discard(id(prof))

        self._profile_class, self._originals = profile, (start, stop)
        profile.start, profile.stop = started, stopped

    def unhook(self) -> None:
        profile, originals = self._profile_class, self._originals
        self._profile_class = self._originals = None
        if profile is not None and originals is not None:
            profile.start, profile.stop = originals

    def _make_way(self) -> None:
        """The script starts a profiler: gpudiag's window, if open, closes first (its trace written). Never raises."""
        runtime = self._runtime
        window = runtime.window
        if window is None or window.profiler is None:
            return
        try:
            window.close()
            runtime.steps.window = None  # one window a run: it is over
            runtime.faults.log_once("trace", "the trace window closed early: the script started its own torch.profiler")
        except Exception as e:  # noqa: BLE001 - the script's profiler must start
            runtime.faults.internal_error("closing the trace window for the script's profiler", e)
