"""``step_budget.periodic``: slow steady steps that recur every N steps, or run the same checkpoint save or
evaluation (diagnose.derive.periodic_work finds them), named with what light mode saw run in them, with the
input they waited for, or with a sync the trace saw block the host there."""

from __future__ import annotations

from diagnose.derive.periodic_work import CHECKPOINT, EVALUATION, HOST_CODE
from diagnose.derive.step_budget_table import step_ranges
from diagnose.derive.sync_sites import where_words
from diagnose.findings import Evidence, Finding, Severity, Subject
from diagnose.formatting import ms_human
from diagnose.judges.step_budget.common import NAME, SECTION, short_location
from diagnose.thresholds import Thresholds

PERIOD_CANDIDATES = "evaluation, checkpoint saving or logging every N steps"
CHECKPOINT_ADVICE = (
    "The checkpoint at {where} blocks training while it is written: save less often; save asynchronously "
    "(torch.distributed.checkpoint.async_save, or copy the state to CPU and write it from a background thread); "
    "write to fast local storage and copy it elsewhere afterwards."
)
EVALUATION_ADVICE = (
    "The evaluation that starts at {where} stops training while it runs: evaluate less often or on fewer batches, "
    "or in a separate process on a saved checkpoint; make sure it runs under torch.no_grad() or "
    "torch.inference_mode()."
)


def function_call(name: str | None) -> str:
    """``evaluate()``; ``This code`` for a module's or a loop's own lines (``<module>``)."""
    return f"{name}()" if name and not name.startswith("<") else "This code"


HOST_CODE_ADVICE = (
    "{name} runs in the training loop's own thread and stops training while it runs{caller}. Run it less often, "
    "on less data, or off the loop (a background thread, a separate process on a saved checkpoint). If it is an "
    "evaluation or a metric: compile it as the step is (jax.jit of the evaluation step, torch.no_grad() with "
    "larger batches), keep its results on the device and read them once (one float() or .item() at the end, not "
    "one per batch)."
)


def host_code_words(name: str | None, location: str | None, library: str | None, caller: str | None) -> str:
    """``evaluate() at train.py:51, called at train.py:70``; a library's function ``Trainer._maybe_log_save_evaluate()
    in trainer.py:3120, called at trainer.py:2540 (your line train.py:88)``."""
    call = function_call(name) if name and not name.startswith("<") else "the loop's own line"
    called = f", called at {short_location(caller)}" if caller else ""
    if library and caller:  # the loop called into a library: the loop's line is the user's
        return f"{call} in {short_location(library)}{called}"
    if library:
        return f"{call} in {short_location(library)} (your line {short_location(location)})"
    return f"{call} at {short_location(location)}{called}"


def work_words(work: list[dict]) -> tuple[str, str, list[Subject]]:
    """The title's words, the advice and the location subjects for the work that runs in a period's slow steps."""
    words, advice, subjects = [], [], []
    for w in work:
        top = w["locations"][0][0] if w["locations"] else None
        where = short_location(top)
        if w["what"] == CHECKPOINT:
            words.append(f"checkpoint saving, torch.save at {where} takes {ms_human(w['ms'])}")
            advice.append(CHECKPOINT_ADVICE.format(where=where))
        elif w["what"] == EVALUATION:
            words.append(f"evaluation (model.eval() at {where}) takes {ms_human(w['ms'])}")
            advice.append(EVALUATION_ADVICE.format(where=where))
        elif w["what"] == HOST_CODE:
            code = w.get("code") or {}
            at = host_code_words(code.get("name"), top, code.get("library_location"), code.get("caller"))
            words.append(f"the host runs {at} ({ms_human(w['ms'])} sampled there)")
            called = f" (called at {short_location(code['caller'])})" if code.get("caller") else ""
            advice.append(HOST_CODE_ADVICE.format(name=function_call(code.get("name")), caller=called))
        else:
            words.append(f"{w['what']} at {where} takes {ms_human(w['ms'])}")
            advice.append(f"{w['what']} at {where} runs in these steps: make it less frequent or asynchronous.")
        subjects += [
            Subject("location", location, figures={"what": w["what"], "calls": calls, "ms": total_ms})
            for location, calls, total_ms in w["locations"]
            if location
        ]
    return "; ".join(words), " ".join(advice), subjects


def periodic_findings(
    meta: dict, calls_by_rank: dict, th: Thresholds, named_in_run: dict[int, set[str]] | None = None
) -> list[Finding]:
    """``step_budget.periodic`` per rank whose slow steps recur (``meta[rank]["period"]``); cost share: their time
    over the median / the steady steps' time. ``calls_by_rank``: the sync calls of each rank's traced steps;
    ``named_in_run``: per rank, the work (evaluation, checkpoint) the run budget's findings already name, with
    their share of the whole run: a period whose work is all among them is not named twice."""
    findings = []
    for rank, m in sorted(meta.items()):
        p = m.get("period")
        if not p:
            continue
        named = (named_in_run or {}).get(rank, set())
        if p.get("work") and all(w["what"] in named for w in p["work"]):
            continue
        n, k, median = p["period"], p["offset"], m["median_step_ms"]
        steps_words = f"step {k} + {n}i" if k else f"step {n}i"
        slow_words = f"{step_ranges(p['steps'][:6])}{', …' if len(p['steps']) > 6 else ''}"
        not_slow = p.get("not_slow") or []
        if p.get("by_work"):  # the same work in each, on no exact period (a loop's last iteration, say)
            every = f", about every {n} steps" if n else ""
            title = (
                f"Steps {slow_words} ({len(p['steps'])} steps{every}) are {ms_human(p['excess_ms'])} slower than "
                f"the median {ms_human(median)}"
            )
        elif not_slow:  # some steady steps on the period were not slow: say which, never "every N steps" then
            title = (
                f"{len(p['steps'])} of the {len(p['steps']) + len(not_slow)} steps at {steps_words} from step "
                f"{p['steps'][0]} (steps {slow_words}; not {'step' if len(not_slow) == 1 else 'steps'} "
                f"{step_ranges(not_slow[:6])}{', …' if len(not_slow) > 6 else ''}) are {ms_human(p['excess_ms'])} "
                f"slower than the median {ms_human(median)}"
            )
        elif p.get("quiet_before"):  # the work started later than the period's first steady step
            title = (
                f"Every {n} steps from step {p['steps'][0]} (steps {slow_words}) a step is "
                f"{ms_human(p['excess_ms'])} slower than the median {ms_human(median)}"
            )
        else:
            title = (
                f"Every {n} steps ({steps_words}: steps {slow_words}) a step is {ms_human(p['excess_ms'])} slower "
                f"than the median {ms_human(median)}"
            )
        largest = p.get("largest")
        if largest:  # a much slower first occurrence, say
            title += f" (step {largest[0]}: {ms_human(largest[1])} slower)"
        title += f" on rank {rank}" if len(meta) > 1 else ""
        work = p.get("work") or []
        work_subjects: list[Subject] = []
        if work and (not p.get("input_wait") or work[0]["ms"] >= (p.get("input_ms") or 0.0)):
            words, fix, work_subjects = work_words(work)
            title += f": {words}"
        elif p.get("input_wait") and m.get("input_from_loop"):
            title += f", waiting {ms_human(p['input_ms'])} for input"
            fix = (
                "These steps wait for the loop's iterator: a new one at each epoch boundary is slow to give its first "
                "item (a file or shard opened, a buffer filled). Build the next epoch's iterator ahead, in a "
                "background thread or a DataLoader with persistent workers, or keep one iterator across epochs."
            )
        elif p.get("input_wait"):
            title += f", waiting {ms_human(p['input_ms'])} for input"
            fix = (
                "These steps wait on the data loader: a new DataLoader iterator at an epoch boundary (workers "
                "restart). Use DataLoader(persistent_workers=True) and a prefetch_factor that covers the restart; "
                "keep the epoch's first batches prefetched."
            )
        else:
            fix = (
                f"Something runs every {n} steps: {PERIOD_CANDIDATES}. Make it asynchronous or less frequent"
                if n
                else f"Something runs in these steps: {PERIOD_CANDIDATES}. Make it asynchronous or less frequent"
            )
            calls = calls_by_rank.get(rank)
            seen = (
                calls[calls["run_step"].isin(p.get("traced_steps", []))] if calls is not None and len(calls) else None
            )
            if seen is not None and len(seen):
                worst = seen.sort_values("blocked_ns", ascending=False).iloc[0]
                at = where_words(worst["location"], worst["function"], worst["file"], bool(worst["line_exact"]))
                fix += f"; the trace saw {worst['op']} at {at} block the host in such a step"
            fix += "."
            if p.get("input_ms") is None:
                fix += " Input wait was not measured in these steps."
        # the share of the steady run's time the recurring stalls cost (their time over the median)
        total = m.get("steady_total_ms") or 0.0
        share = min(1.0, p["excess_ms"] * p["occurrences"] / total) if total > 0 else None
        findings.append(
            Finding(
                id="step_budget.periodic",
                analyzer=NAME,
                severity=Severity.of(share, critical=th.step_budget.cause_critical_share, otherwise=Severity.WARNING),
                title=title,
                subjects=(
                    *work_subjects,
                    *(Subject("step", str(s), figures={"rank": rank}) for s in p["steps"][:20]),
                    # the steady steps on the period that were not slow, as the title names them
                    *(Subject("step", str(s), figures={"rank": rank, "slow": False}) for s in not_slow[:6]),
                ),
                evidence=(
                    *((Evidence("step_budget_period_steps", float(n), "count"),) if n else ()),
                    Evidence("step_budget_period_excess_ms", p["excess_ms"], "ms"),
                    *((Evidence("step_budget_period_largest_excess_ms", largest[1], "ms"),) if largest else ()),
                    Evidence("step_budget_period_occurrences", float(p["occurrences"]), "count"),
                    *(
                        (Evidence("step_budget_period_slots", float(len(p["steps"]) + len(not_slow)), "count"),)
                        if not_slow
                        else ()
                    ),
                    Evidence("step_budget_step_ms", median, "ms"),  # the median the title compares with
                    *(
                        (Evidence("step_budget_period_input_ms", p["input_ms"], "ms"),)
                        if p.get("input_ms") is not None
                        else ()
                    ),
                    *(
                        Evidence(f"step_budget_period_{w['what']}_ms", w["ms"], "ms")
                        for w in (work if work_subjects else ())
                    ),
                ),
                cost_share=share,
                recommendation=fix,
                section=SECTION,
            )
        )
    return findings
