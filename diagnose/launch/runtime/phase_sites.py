"""The user's lines that call the phases light mode times (issue 31): where the loop calls backward() and the
optimizer's step().

A trace names a Python frame by its function and the function's first line, and a module-level loop's frame by its
file alone (its frame began before the trace window): "the module-level code of train.py, inside backward() in
torch/_tensor.py" is where the GPU waited, but not which line. The backward wrapper and the optimizer pre hook see
the call itself: the first ``SITE_CALLS`` calls of each phase on the main thread read the innermost user frame and
write one run record per new site (diagnose.derive.host_sites puts the line into the site's words). A loop's lines
do not move, so the first calls are enough, and no later step pays for the walk.
"""

from __future__ import annotations

import time

from diagnose.launch.runtime.sync_capture import library_location, user_stack
from parsers.run_records import PHASE_BACKWARD as BACKWARD
from parsers.run_records import PHASE_OPTIMIZER as OPTIMIZER
from parsers.run_records import PHASE_SITE

SITE_CALLS = 16  # the first calls of each phase read their call site; later calls cost one comparison
MAX_SITES = 8  # sites recorded per phase at most (a loop calls backward() from one or two lines)


class PhaseSites:
    """Reads where the user's code calls each timed phase, for the first calls, and records each new site once."""

    def __init__(self, runtime):
        self._runtime = runtime
        self.backward_left = SITE_CALLS  # calls of each phase still to look: the hooks read these before look()
        self.optimizer_left = SITE_CALLS
        self._seen: dict[str, set] = {BACKWARD: set(), OPTIMIZER: set()}

    def look(self, phase: str, frame) -> None:
        """One call of ``phase`` made from ``frame`` (the wrapper's or the hook's caller): its user line, recorded when
        new. Never raises: a failure is an internal error reported once, and the call goes on."""
        left = f"{phase}_left"
        setattr(self, left, getattr(self, left) - 1)
        try:
            stack = user_stack(frame)
            if not stack:
                return
            file, line, function = stack[0]
            site = (f"{file}:{line}", function, library_location(frame))
            seen = self._seen[phase]
            if site in seen or len(seen) >= MAX_SITES:
                return
            seen.add(site)
            self._runtime.write_record(
                PHASE_SITE,
                phase=phase,
                location=site[0],
                function=function,
                library_location=site[2],
                t_ns=time.time_ns(),
            )
        except Exception as e:  # noqa: BLE001 - the user's step must go on
            setattr(self, left, 0)
            self._runtime.faults.internal_error("phase call site", e)
