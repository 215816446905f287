"""What goes wrong inside the runtime: each kind logged once, reported to the parent, the runtime switched off.

Three cases. An internal error (a bug, or torch doing what we did not expect) switches the
instrumentation off for the rest of the run; the window's trace is still exported. A full
disk (or a file-size limit) stops all writing in this process at once. A whole-file artifact
(trace, snapshot) that could not be written is logged and reported, and the run goes on.
Training always goes on. The parent learns of each fault through fault_reports' socket.
"""

from __future__ import annotations

import os
import sys
import time

from diagnose.launch.fault_reports import describe_error, disk_probe, is_disk_full, send


def log(message: str) -> None:
    """One line on stderr; never raises."""
    try:
        sys.stderr.write(f"gpudiag: {message}\n")
        sys.stderr.flush()
    except Exception:
        pass


class Faults:
    """The faults of one Runtime: what was logged, what was reported, whether writing is over."""

    def __init__(self, runtime):
        self._runtime = runtime
        self.writes_off = False  # a full disk: nothing more is written by this process
        self.reported: list[dict] = []  # what could not be written and why (also sent to the parent)
        self._logged = set()

    def log_once(self, key: str, message: str) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log(message)

    def internal_error(self, where: str, error: BaseException) -> None:
        if is_disk_full(error):
            self.disk_full(error)
            return
        self.log_once(
            "internal-error",
            f"internal error in the bootstrap ({where}: {type(error).__name__}: {error}); "
            "instrumentation is off for the rest of this run, training goes on",
        )
        self._runtime.switch_off(write_nothing=False)

    def disk_full(self, error: OSError) -> None:
        """A full disk (or a file-size limit): say it once, write nothing more, let the training go on."""
        if self.writes_off:
            return
        self.writes_off = True
        runtime = self._runtime
        runtime.disabled = True
        artifact = self._relative(error.filename)
        reason = describe_error(error)
        step = runtime.steps.current_step
        at = f" at step {step}" if step is not None else ""
        self.log_once(
            "disk-full",
            f"{reason} writing {artifact or 'the run folder'}{at}; gpudiag writes nothing "
            f"more in this process (rank {runtime.rank}), training goes on",
        )
        self._report("disk-full", artifact, reason)
        runtime.switch_off(write_nothing=True)

    def artifact_failed(self, relative: str, what: str, error: BaseException) -> None:
        """A whole-file artifact (trace, snapshot) was not written: a full disk stops all writing, else log once."""
        if is_disk_full(error):
            error.filename = error.filename or self._runtime.in_run_dir(relative)
            self.disk_full(error)
            return
        probe = disk_probe(self._runtime.config.run_dir)
        reason = (
            f"{what} not written, probably disk full: {probe} (the export said {type(error).__name__}: {error})"
            if probe
            else f"{what} not written ({type(error).__name__}: {error})"
        )
        self.log_once(relative, reason)
        self._report("write-failed", relative, reason)

    def _report(self, kind: str, artifact: str | None, error: str) -> None:
        runtime = self._runtime
        fault = {
            "kind": kind,
            "rank": runtime.rank,
            "pid": runtime.pid,
            "artifact": artifact,
            "error": error,
            "step": runtime.steps.current_step,
            "t_ns": time.time_ns(),
        }
        self.reported.append(fault)
        send(fault)

    def _relative(self, path) -> str | None:
        if not path:
            return None
        try:
            return os.path.relpath(os.fspath(path), self._runtime.config.run_dir).replace(os.sep, "/")
        except (TypeError, ValueError):
            return str(path)
