"""--after-window stop: see the ncu window end, then stop the script.

After its window the script would keep running under ncu with every kernel launch intercepted: on the H200 a
char-level GPT's 600 iterations took 150 s under ncu against 20 s plain, and a JAX example was still at step 603
of 4,690 when --ncu-timeout stopped it (issue 32). The window has ended when:

- a step window (``gpudiag.step_<K>``): the step record of step K (or a later one) is in the run folder. A step's
  record is written once its GPU work is done, and under ncu's kernel replay every launch of the step was
  profiled before the launch call returned, so all of the window's launches are in ncu's report by then;
- a launch window with a count (``--launch-count N``): ncu's log shows N launches profiled, or the step window's
  ``--ncu-max-launches`` cap reached.

The stop itself is the one --ncu-timeout uses (ncu_mode.NcuStopper: the application gets SIGTERM, the runtime
flushes what it captured, ncu writes its report). A window whose end gpudiag cannot see (a raw
--ncu-nvtx-include range, a launch window without a count) is not stopped.
"""

from __future__ import annotations

import threading
from pathlib import Path

from diagnose.launch.run_progress import EventsTail

REASON = "the window was profiled (--after-window stop)"
POLL_S = 0.1


class WindowEnd:
    """A thread that calls ``stop()`` once the ncu window of ``options`` has ended."""

    def __init__(self, options, folder: Path, log, stop):
        self._options, self._log, self._stop_run = options, log, stop
        self._tail = EventsTail(folder)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpudiag-ncu-window-end", daemon=True)
        self.ended = False

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self._done.set()

    def window_ended(self) -> bool:
        """Whether the window's launches are all profiled (see the module docstring)."""
        options = self._options
        profiled = self._log.launches if self._log is not None else 0
        if options.window_kind == "launches":
            return options.launch_count is not None and profiled >= options.launch_count
        if options.max_launches and profiled >= options.max_launches:
            return True
        self._tail.poll()
        return any(step >= options.window_step for steps in self._tail.steps.values() for step in steps)

    def _run(self) -> None:
        while not self._done.wait(POLL_S):
            if self.window_ended():
                self.ended = True
                self._stop_run(REASON)
                return
