"""Where the host spends a typical step: input, forward, backward, optimizer and the rest (issue 31).

Light mode's step records carry, per step, the host time the loop waited for its input (``input_ms``), the host time
inside the step's outermost ``nn.Module`` calls (``forward_ms``: the forward pass), inside its outermost
``torch.autograd.backward`` calls (``backward_ms``: issuing the backward pass) and inside its optimizers' ``step()``
(``optimizer_ms``); what is left of the step's host time is the rest (the loss, batch preparation, gradient
clipping, the grad scaler, logging, and a hand-written parameter update: a loop that calls no optimizer's
``step()`` gets no optimizer phase, and the rest's label says the update is in it). Light mode times the forward in
one step of 16 (forward_time's ``TIMED_EVERY``, 8 until 2026-12-06: hooks on a module slow its every call), so the forward's share is
read from the timed steps nearest the median, and the rest is what the other phases leave. Once an optimizer or
``diagnose.step()`` defines the steps, the backward and optimizer timers run in those steps only too (runtime/steps.py,
``_open_phases``): every phase is then read from the timed steps nearest the median of all steady steps, and the
text says so. Records without any ``forward_ms`` (older runs, or
a model inside a compiled function) give "forward, loss and the rest" as one phase. These are untraced steps: the
profiler's window slows the host several-fold (a char-level GPT's traced steps took 49 ms against a 19.85 ms
median step, issue 31), so no share of a step is read from traced durations here.

With gradient accumulation a step holds several forwards and backwards (the records' ``backward_passes``); the
phases hold them all, and the text says how many.

The phases are those of the median step: each phase's share of the host time in the steady steps nearest the
median (a fifth of them, at least 3), applied to the median step's host time, so they add up to the median step the
budget and the steps section show. Means of shares add up, and the slow and fast tails stay out, as in a median. The
input phase is the step budget's own figure (the median input wait over every steady step) where the budget gives
one, and the other phases share what it leaves: the page says one input wait, not two. gpudiag's own work at the
step boundary (the records' ``overhead_us``: its CUDA events, the record writes) is a phase of its own where the
records carry it, so the rest holds the script's work only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.formatting import ms_human, n_things, share_human
from diagnose.verdict import short_location
from parsers.run_records import PHASE_BACKWARD

PHASES = ("input", "forward_and_rest", "backward", "optimizer")  # records without forward_ms
PHASES_WITH_FORWARD = ("input", "forward", "backward", "optimizer", "rest")
LABELS = {
    "input": "waiting for input",
    "forward_and_rest": "forward, loss and the rest",
    "forward": "forward (the model's call)",
    "backward": "backward (issuing it)",
    "optimizer": "optimizer step",
    "rest": "the rest (loss, batch preparation, logging)",
    "gpudiag": "gpudiag's own step-boundary work",
}
NO_OPTIMIZER_LABELS = {  # no optimizer step() in any step: a hand-written update runs among the rest
    "forward_and_rest": "forward, loss, the parameter update and the rest",
    "rest": "the rest (loss, the parameter update, batch preparation, logging)",
}


def host_phases(steady: pd.DataFrame, median_input_ms: float | None = None) -> dict | None:
    """The median steady step's host ms by phase (see the module docstring), or None where the steps carry no
    backward/optimizer times. ``steady``: one rank's steady step rows (host_ms, input_ms, backward_ms,
    optimizer_ms). ``median_input_ms``: the median step's input wait as the step budget gives it (the median over
    every steady step); the input phase is that figure and the other phases share the rest of the median step, so
    one page never gives the input two values (a Lightning run's read 283 µs in step_budget.input and 331 µs, the
    mean of the steps nearest the median, in the phases beside it)."""
    if not {"host_ms", "backward_ms", "optimizer_ms"} <= set(steady.columns):
        return None
    timed = steady[steady["host_ms"].notna()]
    rows = timed[timed["backward_ms"].notna() & timed["optimizer_ms"].notna()]
    if not len(rows):
        return None
    # the median of every steady step: where light mode timed the phases in some steps only (one in 16, with the
    # forward), those steps are not the typical step, only the ones nearest it
    median_ms = float(timed["host_ms"].astype(float).median())
    host = rows["host_ms"].astype(float)
    nearest = max(3, len(rows) // 5)
    middle = rows.loc[(host - median_ms).abs().sort_values(kind="stable").index[:nearest]]
    input_ms = pd.to_numeric(middle["input_ms"], errors="coerce") if "input_ms" in middle else None
    input_measured = input_ms is not None and bool(input_ms.notna().any())
    sums = {
        "input": float(input_ms.fillna(0.0).sum()) if input_measured else 0.0,
        "backward": float(middle["backward_ms"].astype(float).sum()),
        "optimizer": float(middle["optimizer_ms"].astype(float).sum()),
    }
    total = float(middle["host_ms"].astype(float).sum())
    # gpudiag's own boundary work is in each step's host time: a phase of its own, not the script's rest (on the
    # H100 its CUDA events, about 58 µs each, made char_gpt's rest read 16 % above a hand clock's, 2026-12-06)
    own = pd.to_numeric(middle["overhead_us"], errors="coerce") if "overhead_us" in middle else None
    own_ms = float(own.fillna(0.0).sum()) / 1000.0 if own is not None and bool(own.notna().any()) else 0.0
    if own_ms > 0:
        sums["gpudiag"] = min(own_ms, max(0.0, total - sum(sums.values())))
    forward_share, forward_steps = _forward_share(rows, median_ms, nearest)
    with_forward = forward_share is not None
    if with_forward:
        sums["forward"] = min(forward_share * total, max(0.0, total - sum(sums.values())))
    sums["rest" if with_forward else "forward_and_rest"] = max(0.0, total - sum(sums.values()))
    # a loop that updates its parameters by hand (p -= lr * p.grad) calls no optimizer's step(): no phase of 0 s
    # then, and the rest's label says the update is in it
    optimizer_seen = bool((rows["optimizer_ms"].astype(float) > 0).any())
    phases = [p for p in (PHASES_WITH_FORWARD if with_forward else PHASES) if optimizer_seen or p != "optimizer"]
    if "gpudiag" in sums:
        phases.append("gpudiag")
    # gradient accumulation: the step's micro-batches, each a forward and a backward (records say where more than one)
    passes = pd.to_numeric(middle["backward_passes"], errors="coerce") if "backward_passes" in middle else None
    backward_passes = int(passes.fillna(1).median()) if passes is not None else 1
    out = {
        "steps": int(len(middle)),
        "sampled": len(rows) < len(timed),  # the phases were timed in some steps only (see phases_text)
        "host_ms": median_ms,
        "input_measured": input_measured,
        "optimizer_seen": optimizer_seen,
        "backward_passes": backward_passes,
        "phases": phases,
    }
    if out["sampled"]:
        out["sampled_every"] = _timed_every(rows)
    if with_forward:
        out["forward_steps"] = forward_steps  # the timed steps the forward's share is read from
        out["forward_every"] = _timed_every(rows[pd.to_numeric(rows["forward_ms"], errors="coerce").notna()])
    budget_input = (
        median_input_ms
        if input_measured and median_input_ms is not None and 0.0 <= median_input_ms <= median_ms
        else None
    )
    others_total = total - sums["input"]
    for p in phases:
        if budget_input is None or others_total <= 0:
            share = sums[p] / total if total > 0 else np.nan
        elif p == "input":
            share = budget_input / median_ms if median_ms > 0 else np.nan
        else:  # the others split what the budget's input leaves of the median step, in their own proportions
            share = sums[p] / others_total * (1.0 - budget_input / median_ms) if median_ms > 0 else np.nan
        out[f"{p}_share"] = share
        out[f"{p}_ms"] = share * median_ms
    return out


FORWARD_MIN_STEPS = 5  # timed steps the forward's share is read from, where that many were timed


def _timed_every(timed: pd.DataFrame) -> int | None:
    """One step in how many light mode timed: the commonest gap between the step numbers of ``timed`` past the
    consecutive ones (the forward timer's learning steps, the phases' steps before an optimizer took over): 8 for
    the forward until 2026-12-06, 16 since, with the backward and optimizer phases. Read from the records, so that
    older runs say theirs; None where no such gap is seen."""
    if "step" not in timed or len(timed) < 2:
        return None
    gaps = np.diff(np.sort(pd.to_numeric(timed["step"], errors="coerce").dropna().to_numpy()))
    gaps = gaps[gaps > 1]
    if not len(gaps):
        return None
    values, counts = np.unique(gaps, return_counts=True)
    return int(values[np.argmax(counts)])


def _forward_share(rows: pd.DataFrame, median_ms: float, nearest: int) -> tuple[float | None, int]:
    """The forward's share of the host time in the timed steps (``forward_ms`` set) nearest the median, and how many:
    a fifth of them, at least ``FORWARD_MIN_STEPS`` (all where fewer were timed), at most the phases' own
    ``nearest``; (None, 0) where fewer than 3 were timed or their forward is 0 ms throughout (the model ran inside a
    compiled function: no module call outside it)."""
    if "forward_ms" not in rows:
        return None, 0
    forward = pd.to_numeric(rows["forward_ms"], errors="coerce")
    timed = rows[forward.notna()]
    if len(timed) < 3:
        return None, 0
    host = timed["host_ms"].astype(float)
    take = min(nearest, len(timed), max(FORWARD_MIN_STEPS, len(timed) // 5))
    near = (host - median_ms).abs().sort_values(kind="stable").index[:take]
    forward_ms, host_ms = float(forward.loc[near].sum()), float(host.loc[near].sum())
    if not forward_ms > 0 or not host_ms > 0:
        return None, 0
    return forward_ms / host_ms, len(near)


def phases_text(phases: dict) -> str:
    """``of the median step's 19.9 ms on the host (phases of the 5 untraced steps nearest it): backward (issuing it)
    8.1 ms (41 %), …``, the largest phase first."""
    order = sorted(phases.get("phases", PHASES), key=lambda p: -phases[f"{p}_ms"])
    labels = LABELS if phases.get("optimizer_seen", True) else {**LABELS, **NO_OPTIMIZER_LABELS}
    passes = phases.get("backward_passes", 1)
    if passes > 1:
        labels = {**labels, "backward": f"backward (issuing {passes} passes)", "forward": "forward (the model's calls)"}
    parts = [
        f"{labels[p]} {ms_human(phases[f'{p}_ms'])} ({share_human(phases[f'{p}_share'], 0)})"
        for p in order
        if p != "input" or phases["input_measured"]
    ]
    note = "" if phases["input_measured"] else "; input wait not measured (in the rest)"
    if not phases.get("optimizer_seen", True):
        note += "; no optimizer step() was called, so the parameter update is timed with the rest"
    if passes > 1:
        lines = phases.get("backward_lines") or []
        # one line called again and again is gradient accumulation; backward() called from several lines (a GAN's
        # two losses, each with its optimizer) is not
        why = f"called from {len(lines)} lines: {', '.join(lines)}" if len(lines) > 1 else "gradient accumulation"
        note += f"; each step makes {passes} backward passes ({why}), and the forward and backward phases hold them all"
    forward_steps = phases.get("forward_steps")
    if forward_steps is not None and forward_steps < phases["steps"]:
        note += (
            f"; the forward's share from {forward_steps} of them"
            if phases.get("sampled")
            else f"; the forward's share from the {n_things(forward_steps, 'step')} nearest it that light mode timed"
            + _one_in(phases.get("forward_every"), " (one in {})")
        )
    which = ""
    if phases.get("sampled"):
        which = " among those light mode timed" + _one_in(phases.get("sampled_every"), ", one in {}")
    return (
        f"of the median step's {ms_human(phases['host_ms'])} on the host (phases of the "
        f"{n_things(phases['steps'], 'untraced step')} nearest it{which}): {', '.join(parts)}{note}"
    )


def backward_lines(phase_sites) -> list[str]:
    """The distinct lines light mode saw call backward() (its phase-site records, parsers.events.RunMarks), as
    ``train.py:88``, in the order seen."""
    lines = []
    for phase, location, _, _ in phase_sites or ():
        line = short_location(location)
        if phase == PHASE_BACKWARD and line not in lines:
            lines.append(line)
    return lines


def _one_in(every: int | None, form: str) -> str:
    return form.format(every) if every and every > 1 else ""


OPTIMIZER_DOMINANT_SHARE = 0.2  # an optimizer step holding this share of the host's step is worth fusing


def phase_advice(phases: dict) -> str | None:
    """What the phases point to, where one stands out: an optimizer step that holds ``OPTIMIZER_DOMINANT_SHARE`` of
    the host's step issues its update parameter by parameter (torch's for-loop implementation) or tensor list by
    tensor list: a fused optimizer issues a few kernels for all of them."""
    if phases.get("optimizer_share", 0.0) >= OPTIMIZER_DOMINANT_SHARE:
        return (
            f"The optimizer step holds {share_human(phases['optimizer_share'], 0)} of the host's step "
            f"({ms_human(phases['optimizer_ms'])}): unless it is fused already, use a fused optimizer "
            "(torch.optim.AdamW(..., fused=True), or foreach=True where fused is not offered), which updates all "
            "parameters in a few kernels instead of several per parameter."
        )
    return None


GRAPH_WORTH = 0.9  # a predicted graphed step under this share of the step is worth saying


def graph_prediction(phases: dict | None, busy_ms: float, step_ms: float) -> str | None:
    """What a CUDA graph of the step would leave: the forward, backward and optimizer launches replayed as one graph,
    the step takes about max(GPU busy, the host work a graph cannot hold: the input wait and the rest) (issue 31). Only
    where the forward was timed apart (the rest is known) and the prediction is under ``GRAPH_WORTH`` of the step."""
    if not phases or "rest_ms" not in phases or not busy_ms > 0 or not step_ms > 0:
        return None
    outside = (
        phases["rest_ms"] + (phases["input_ms"] if phases["input_measured"] else 0.0) + phases.get("gpudiag_ms", 0.0)
    )
    predicted = max(busy_ms, outside)
    if predicted >= GRAPH_WORTH * step_ms:
        return None
    held = "GPU busy" if busy_ms >= outside else "the host work a graph cannot hold (input and the rest)"
    return (
        f'Captured whole in a CUDA graph (torch.compile(mode="reduce-overhead") over the forward, backward and '
        f"optimizer, or torch.cuda.graphs), the step would take about {ms_human(predicted)} instead of "
        f"{ms_human(step_ms)}: the larger of its GPU busy ({ms_human(busy_ms)}) and the host work outside the graph "
        f"({ms_human(outside)}), here {held}."
    )


def with_phases(recommendation: str, phases: dict | None) -> str:
    """``recommendation`` after where the host's median step goes by phase and what a standing-out phase points to:
    the host work a launch-bound, unexplained or host-caused idle finding is made of (None: not measured)."""
    if not phases:
        return recommendation
    advice = phase_advice(phases)
    return f"Where the host's time goes, {phases_text(phases)}. {advice + ' ' if advice else ''}{recommendation}"
