"""The median step's parts that are findings of their own: ``step_budget.input``, ``.sync``, ``.launch_bound`` and
``.allocator`` when a part holds ``cause_min_share`` of a rank's median step, ``step_budget.unexplained`` when what
no measured cause explains holds ``unexplained_share`` of it (info: it says what to measure, not what to fix)."""

from __future__ import annotations

import pandas as pd

from diagnose.derive import jax_dispatch
from diagnose.derive.host_cpu_wait import cpu_wait_by_rank
from diagnose.derive.host_phases import graph_prediction, with_phases
from diagnose.derive.untraced_cost import BUSY_PARTS
from diagnose.findings import Evidence, Finding, Severity, Subject, within
from diagnose.formatting import ms_human
from diagnose.ingest.profile_data import Profile
from diagnose.judges.step_budget.common import NAME, SECTION, severity_of
from diagnose.judges.step_budget.sync_cause import sync_words
from diagnose.judges.step_budget.unexplained import unexplained_advice
from diagnose.thresholds import Thresholds

CAUSES = ("input", "sync", "launch_bound", "allocator")  # the parts that are findings of their own
ADVICE = {
    "input": "Feed the GPU faster: DataLoader(num_workers=N) with more workers, pin_memory=True, "
    "persistent_workers=True and a larger prefetch_factor; move augmentation onto the GPU (torchvision.transforms.v2 "
    "on CUDA tensors, DALI) so workers only decode.",
    "launch_bound": "The GPU waits for the host to launch work: capture the step in a CUDA graph "
    "(torch.cuda.graphs, torch.compile(mode='reduce-overhead')), fuse small kernels with torch.compile, or use "
    "larger batches so each launch carries more work.",
    "launch_bound_jax": "The GPU waits for the host to dispatch work: each jitted call is dispatched from Python, "
    f"and the Python between steps runs while the GPU waits. {jax_dispatch.FIX}",
    "allocator": "Segments are created and freed inside steps, and each cudaMalloc/cudaFree stalls: set "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, do not call torch.cuda.empty_cache() in the loop, and keep "
    "tensor shapes steady so cached blocks are reused.",
    "input_iterator": "Build batches ahead of the loop instead of in its own thread: wrap the same code in an "
    "IterableDataset and a DataLoader(num_workers=N, pin_memory=True), or fill a queue from a background thread; "
    "move augmentation onto the GPU so the host only decodes.",
}


def basis_evidence(measured_in: str, rank_meta: dict) -> tuple[Evidence, ...]:
    """The step figures a part's ``measured_in`` names, as evidence: how many steady steps measured it ("measured
    in 92 steady steps"), or how many traced steps and the first and last of them ("traced steps 10–12"), so a
    title that says where a part was measured carries its numbers (issue 28: every number a title shows is in its
    evidence)."""
    out: list[Evidence] = []
    if "steady steps" in measured_in:
        out.append(Evidence("step_budget_input_steps", float(rank_meta.get("input_measured_steps", 0)), "steps"))
    named = rank_meta.get("traced_named_steps") or []
    if "traced steps" in measured_in and named:
        out += [
            Evidence("step_budget_traced_steps", float(len(named)), "steps"),
            Evidence("step_budget_traced_first_step", float(named[0]), "step"),
            Evidence("step_budget_traced_last_step", float(named[-1]), "step"),
        ]
    return tuple(out)


def cause_findings(
    profile: Profile,
    budget: pd.DataFrame,
    meta: dict,
    calls_by_rank: dict,
    traced_by_rank: dict,
    th: Thresholds,
) -> list[Finding]:
    """A finding per cause of CAUSES (and ``unexplained``) that holds ``cause_min_share`` (``unexplained_share``)
    of some rank's median step, titled after the rank where it holds most; cost share: that share.
    ``calls_by_rank`` and ``traced_by_rank``: each rank's sync calls and traced steps (StepBudget's)."""
    median = budget[budget["column"] == "median step"]
    findings = []
    # which rows each part keeps, on arrays: a frame is cut only for a part that has some (~3 ms of filters before)
    part_of, share_of = median["part"].to_numpy(), median["share"].to_numpy()
    for part in (*CAUSES, "unexplained"):
        limit = th.step_budget.unexplained_share if part == "unexplained" else th.step_budget.cause_min_share
        keep = (part_of == part) & pd.notna(share_of) & (share_of >= limit)
        if not keep.any():
            continue
        rows = median[keep]
        top = rows.sort_values("share", ascending=False).iloc[0]
        rank, share, ms, wall = int(top["rank"]), float(top["share"]), float(top["ms"]), float(top["wall_ms"])
        subjects = [
            Subject(
                "rank",
                str(int(r.rank)),
                severity=severity_of(r.share, th),
                figures={"ms": float(r.ms), "step_ms": float(r.wall_ms), "share": float(r.share)},
            )
            for r in rows.itertuples()
        ]
        what = f"{ms_human(ms)} of the {ms_human(wall)} median step ({100 * share:.1f} %)"
        measured_in = str(top["measured_in"])
        if measured_in.startswith("inferred: "):  # "…, inferred: the step's GPU idle left after …"
            where = f", {measured_in}"
        else:
            where = f", measured in {measured_in}" if measured_in != "the remainder" else ""
        rank_words = f" on rank {rank}" if budget["rank"].nunique() > 1 else ""
        recommendation = ADVICE.get(part, "")
        if part == "unexplained":
            recommendation = unexplained_advice(profile, meta.get(rank, {}), traced_by_rank.get(rank, pd.DataFrame()))
        severity = severity_of(share, th)
        evidence = (
            Evidence(f"step_budget_{part}_ms", ms, "ms"),
            Evidence("step_budget_step_ms", wall, "ms"),
            Evidence(f"step_budget_{part}_share", share, "share", limit),
            *basis_evidence(str(top["measured_in"]), meta.get(rank, {})),
            *((Evidence("step_budget_fit_factor", float(top["fit_factor"]), "x"),) if top["fit_factor"] < 1 else ()),
        )

        def make(
            id: str,
            title: str,
            severity=severity,
            recommendation=recommendation,
            extra=(),
            subjects=tuple(subjects),
            evidence=evidence,
            share=share,
        ) -> Finding:
            return Finding(
                id=id,
                analyzer=NAME,
                severity=severity,
                title=title,
                subjects=within((*subjects, *extra), severity),
                evidence=evidence,
                cost_share=share,
                recommendation=recommendation,
                section=SECTION,
            )

        if part == "sync":
            traced = budget[(budget["rank"] == rank) & (budget["column"] == "traced steps")]["steps"]
            n_traced = int(traced.iloc[0]) if len(traced) else None  # every traced step, not only those with syncs
            title, fix, extra = sync_words(calls_by_rank.get(rank), what, where, rank_words, ms, n_traced)
            findings.append(make(id="step_budget.sync", title=title, recommendation=fix, extra=tuple(extra)))
        elif part == "input":
            iterator = meta.get(rank, {}).get("input_iterator")
            if meta.get(rank, {}).get("input_from_loop"):  # every step timed at the loop's for (Python 3.12+)
                name = iterator if iterator.startswith("its iterator") else f"its iterator {iterator}"
                title = f"The GPU waits for input {what}{rank_words}: the loop waits for {name}{where}"
                findings.append(make(id="step_budget.input", title=title, recommendation=ADVICE["input_iterator"]))
            elif iterator and "steady steps" not in where:
                title = f"The GPU waits for input {what}{rank_words}: the loop waits for its iterator{where}"
                findings.append(make(id="step_budget.input", title=title, recommendation=ADVICE["input_iterator"]))
            else:
                title = f"The GPU waits for input {what}{rank_words}: the loop blocks in the DataLoader{where}"
                findings.append(make(id="step_budget.input", title=title))
        elif part == "launch_bound":
            title = f"The GPU waits for the host to launch work {what}{rank_words}{where}"
            if meta.get(rank, {}).get("trace_format") == "perfetto":  # XLA's trace: dispatch, not torch launches
                recommendation = ADVICE["launch_bound_jax"]
            else:
                busy = median[(median["rank"] == rank) & median["part"].isin(BUSY_PARTS)]["ms"]
                graphed = graph_prediction(meta.get(rank, {}).get("host_phases"), float(busy.sum()), wall)
                recommendation = f"{recommendation} {graphed}" if graphed else recommendation
            findings.append(
                make(
                    id="step_budget.launch_bound",
                    title=title,
                    recommendation=with_phases(recommendation, meta.get(rank, {}).get("host_phases")),
                )
            )
        elif part == "allocator":
            title = f"The allocator's cudaMalloc/cudaFree hold the GPU idle {what}{rank_words}{where}"
            findings.append(make(id="step_budget.allocator", title=title))
        else:
            missing = [n for n in meta.get(rank, {}).get("notes", ()) if "not measured" in n]
            title = f"{what[0].upper()}{what[1:]}{rank_words} is not explained by any measured cause"
            if missing:
                title += " (" + "; ".join(n.split(":")[0] for n in missing) + ")"
            waited, waited_evidence = cpu_wait_words(profile, rank, th)
            if waited:
                title += f"; {waited}"
            findings.append(
                make(
                    id="step_budget.unexplained",
                    title=title,
                    severity=Severity.INFO,
                    evidence=(*evidence, *waited_evidence),
                    recommendation=with_phases(recommendation, meta.get(rank, {}).get("host_phases")),
                )
            )
    return findings


def cpu_wait_words(profile: Profile, rank: int, th: Thresholds) -> tuple[str | None, tuple[Evidence, ...]]:
    """What the unexplained part holds that no step clock measures: the loop's thread waiting for a CPU, when it
    waited ``steps.cpu_wait_min_pct`` of the run (steps.cpu_wait's figure), and the evidence of its numbers; (None,
    ()) below it or unread. Without it the page said "100 % of the median step is not explained" beside a 39.8 %
    CPU wait (HF Trainer on a busy host)."""
    wait = cpu_wait_by_rank(profile).get(rank)
    if wait is None or wait[1] <= 0:
        return None, ()
    pct = 100.0 * wait[0] / wait[1]
    if pct < th.steps.cpu_wait_min_pct:
        return None, ()
    words = (
        f"the loop's thread waited for a CPU {pct:.1f} % of the run ({ms_human(wait[0])} of {ms_human(wait[1])}, "
        "Linux's run queue), a cause no step clock measures, and part of this remainder"
    )
    evidence = (
        Evidence("cpu_wait_pct", pct, "%", th.steps.cpu_wait_min_pct),
        Evidence("cpu_wait_ms", wait[0], "ms"),
        Evidence("cpu_wait_span_ms", wait[1], "ms"),
    )
    return words, evidence
