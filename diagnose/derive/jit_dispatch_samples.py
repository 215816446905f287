"""A JAX step's host dispatch and device time in untraced steps, from light mode's sampled step records (issue 34).

Light mode samples one JAX step in 128 (diagnose/launch/runtime/jit_dispatch.py): ``dispatch_ms``, the host time
inside jax's call of the step function; ``ready_ms``, the time from the call's start until its outputs were ready,
the device's earlier work waited for first; ``queued_ms``, that wait for the previous step's outputs. The device's
work for a step is at most ``ready_ms``, so a ``ready_ms`` far below the median step says the device waits for the
host in the steps the script runs, not only in the few the profiler traced (and slowed).

Medians over the steady steps' samples; the median step is the steady steps' median host time, as the budget's.
"""

from __future__ import annotations

import pandas as pd

from diagnose.formatting import ms_human, share_human

SAMPLED_EVERY = 128  # jit_dispatch.EVERY, for the words (derive does not import the runtime)


def jit_dispatch_samples(steady: pd.DataFrame) -> dict | None:
    """The sampled dispatch and readiness of one rank's steady steps, or None where none was sampled.

    Keys: samples; dispatch_ms, ready_ms, queued_ms (medians; None where not measured); ready_samples;
    queued_samples (samples whose previous step was still on the device at the call); median_step_ms;
    dispatch_share and device_at_most_share (of the median step; the latter None where the readiness is not below
    the median step)."""
    if "dispatch_ms" not in steady.columns or "host_ms" not in steady.columns:
        return None
    dispatch = pd.to_numeric(steady["dispatch_ms"], errors="coerce")
    sampled = steady[dispatch.notna()]
    if not len(sampled):
        return None

    def column(name: str) -> pd.Series:
        return pd.to_numeric(sampled[name], errors="coerce").dropna() if name in sampled else pd.Series(dtype=float)

    ready, queued = column("ready_ms"), column("queued_ms")
    median_step_ms = float(pd.to_numeric(steady["host_ms"], errors="coerce").median())
    dispatch_ms = float(dispatch.dropna().median())
    ready_ms = float(ready.median()) if len(ready) else None
    return {
        "samples": int(len(sampled)),
        "dispatch_ms": dispatch_ms,
        "ready_ms": ready_ms,
        "queued_ms": float(queued.median()) if len(queued) else None,
        "ready_samples": int(len(ready)),
        "queued_samples": int((queued > 0).sum()),
        "median_step_ms": median_step_ms,
        "dispatch_share": dispatch_ms / median_step_ms if median_step_ms > 0 else None,
        # a share of the step only where the readiness is below it (see sentence): else it bounds nothing
        "device_at_most_share": (
            ready_ms / median_step_ms if ready_ms is not None and 0 < ready_ms < median_step_ms else None
        ),
    }


def sentence(samples: dict, step_name: str | None = None) -> str:
    """What the samples say, in one sentence for a finding. A readiness below the median step bounds the device's
    work; one at or above it (steps run back to back overlap the host's dispatch with the device's work of the step
    before, so a step waited for alone takes longer) bounds nothing, and the sentence says so."""
    call = f"jax's call of {step_name}" if step_name else "jax's call of the step function"
    step = ms_human(samples["median_step_ms"])
    head = (
        f"In {samples['samples']} untraced steps light mode sampled (one in {SAMPLED_EVERY}), {call} took "
        f"{ms_human(samples['dispatch_ms'])} of host dispatch"
    )
    if samples["ready_ms"] is None:
        return f"{head} of the {step} median step."
    ready = f"its outputs were ready {ms_human(samples['ready_ms'])} after the call began with the device idle"
    if samples["ready_ms"] < samples["median_step_ms"]:
        return (
            f"{head}, and {ready} (median of {samples['ready_samples']}): the device's work is at most that, "
            f"{share_human(samples['device_at_most_share'])} of the {step} median step."
        )
    queued = (
        f"; in {samples['queued_samples']} of them the step before was still on the device when the call began"
        if samples["queued_samples"]
        else ""
    )
    return (
        f"{head}, and {ready} (median of {samples['ready_samples']}), no less than the {step} median step: run back "
        f"to back, the steps overlap the host's dispatch with the device's work{queued}."
    )
