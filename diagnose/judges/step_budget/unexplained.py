"""What ``step_budget.unexplained`` advises: how to measure the part of the step that no measured cause explains."""

from __future__ import annotations

import pandas as pd

from diagnose.derive import capture_advice
from diagnose.ingest.profile_data import Profile
from parsers.run_records import TRACE

ADVICE = (  # what measures it, for an input gpudiag did not capture
    "Part of the step is not explained by anything measured: profile with `gpudiag profile` (it "
    "records input wait and traces some steps), and trace more steps (--trace-steps) to measure GPU busy and idle."
)


def unexplained_advice(profile: Profile, meta: dict, traced: pd.DataFrame) -> str:
    """What would measure the part of the step nothing explains: ``gpudiag profile`` for an input captured
    elsewhere; for a run folder it wrote, what that run lacked (a traced step, input wait) and the option or code
    change that records it (diagnose.derive.capture_advice)."""
    if not capture_advice.from_run_folder(profile):
        return ADVICE
    fixes = []
    if not len(traced):
        trace_steps = capture_advice.options_of(profile).trace_steps
        if trace_steps == 0:
            fixes.append(
                "this run traced no steps (--trace-steps 0; an --ncu run takes no trace): run it in light mode with "
                "--trace-steps 3 or more to measure GPU busy, syncs, launch-bound work and the allocator"
            )
        else:
            why = capture_advice.why_absent(profile, TRACE.prefix)
            fixes.append(
                f"no traced step with GPU activity{f' ({why})' if why else ''}: the trace window must hold steps that "
                "run on the GPU (--trace-start after warm-up, --trace-steps 3 or more)"
            )
    elif traced.attrs.get("by_time"):
        fixes.append(
            "the trace links no GPU work to its launch calls (JAX/XLA traces do not), so the GPU's idle time has no "
            "readable cause: mark each iteration with diagnose.step() and read the step timings and slow steps"
        )
    else:
        fixes.append(
            "the traced parts come from a few steps: trace more steps (--trace-steps, and --trace-start after warm-up) "
            "so they stand for the run"
        )
    if not meta.get("input_measured_steps") and not meta.get("input_iterator"):
        fixes.append(
            "input wait is recorded for batches from a torch DataLoader and, on Python 3.12+, for a for loop over an "
            "iterable; this loop used neither, so making a batch inline (a get_batch() call) counts as step work"
        )
    return "Part of the step is not explained by anything measured: " + "; ".join(fixes) + "."
