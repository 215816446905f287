"""Where the run's wall time went, process start to exit: the run budget judged.

The budget (diagnose.derive.run_budget_table, worked out once per report by ``Derived.run_budget()``) cuts the run
into interpreter start, imports, setup, compilation, warm-up, steady steps, input wait, slow steps' excess,
evaluation, checkpoints, gpudiag's own cost and teardown. The step budget explains the median step; this says what
the seconds outside it cost. A finding per part that holds a material share of the run: named work (evaluation,
checkpoints) from ``named_work_min_share``, periodic or not, with its period when there is one; compilation from
``compile_min_share``; the time before the first step from ``startup_min_share`` (docs/run-budget.md).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose.derive import capture_advice
from diagnose.derive.derived import Derived
from diagnose.derive.run_budget_table import (
    BEFORE_FIRST_STEP,
    OTHER_IMPORTS,
    RUN_PARTS,
    RankRunBudget,
)
from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.formatting import ms_human, n_things
from diagnose.ingest.profile_data import Profile
from diagnose.judges.step_budget.common import short_location
from diagnose.judges.step_budget.periodic import (
    CHECKPOINT_ADVICE,
    EVALUATION_ADVICE,
    HOST_CODE_ADVICE,
    function_call,
    host_code_words,
)
from diagnose.metrics import LOWER, NEUTRAL, Metric, rank_key
from diagnose.thresholds import Thresholds
from parsers.run_records import EVENTS

NAME = "run_budget"
ORDER = 44  # before the step budget: the whole run, then its median step
SECTION = "section-run_budget"
TITLE = "Run budget"
JUDGES = "the run's wall time"
COST_BASIS = "the run's wall time"  # every finding's cost_share is a share of the run, process start to exit
COST_BASIS_BY_ID: dict[str, str] = {}
THRESHOLDS = ("run_budget", "step_budget")
SUMMARY_METRICS = (
    Metric("run_wall_ms", "Run wall time, process start to exit", "ms", LOWER, 1.0),
    Metric("run_{part}_ms", "Run budget: {part}", "ms", NEUTRAL, 1.0),
)
FINDING_IDS = (
    "run_budget.checkpoint",
    "run_budget.compilation",
    "run_budget.evaluation",
    "run_budget.host_code",
    "run_budget.not_measured",
    "run_budget.startup",
)
CAUSE_FINDING_IDS = (
    "run_budget.evaluation",
    "run_budget.checkpoint",
    "run_budget.compilation",
    "run_budget.host_code",
)

WORK_WORDS = {"evaluation": ("Evaluation", "model.eval()"), "checkpoint": ("Checkpoint saving", "the save")}
COMPILE_ADVICE_TORCH = (
    "Compiling is paid again in every run: keep torch.compile's caches between runs (TORCHINDUCTOR_CACHE_DIR on "
    "local disk, torch.compiler.save_cache_artifacts / load_cache_artifacts), compile only the model's hot module, "
    "avoid a second graph for evaluation (compile the training step only, or evaluate with the same shapes), and "
    "mark dynamic dimensions (torch._dynamo.mark_dynamic) so new shapes do not recompile."
)
COMPILE_ADVICE_JAX = (
    "Compiling is paid again in every run: turn on JAX's persistent compilation cache "
    "(jax.config.update('jax_compilation_cache_dir', ...) on local disk), keep shapes and static arguments fixed so "
    "the step compiles once (pad the last batch; set JAX_LOG_COMPILES=1 in the environment to list what compiles), "
    "and put evaluation under jax.jit with the training batch's shapes instead of running jnp operations one by one."
)
# the advice by the frameworks the run used (the manifest's); both where it used both or does not say
COMPILE_ADVICE = {"torch": COMPILE_ADVICE_TORCH, "jax": COMPILE_ADVICE_JAX}
STARTUP_ADVICE = (
    "This time is paid before any training: for short runs it dominates. Import only what the script uses (a "
    "top-level `import transformers` loads much of the library), build the dataset once and cache it to disk, and "
    "run many steps per process rather than many short processes."
)


def analyze(profile: Profile, derived: Derived, th: Thresholds = Thresholds()) -> Result:
    result = Result(NAME)
    budgets = derived.run_budget()
    if not budgets:
        under_ncu = capture_advice.steps_under_ncu(profile)
        if under_ncu:
            why = under_ncu
        else:
            why = capture_advice.advice(
                profile,
                "It needs a run folder made by `gpudiag profile`: the process's start and exit, and its step records.",
                "It needs the process's start and exit (the manifest) and step records: this run folder has "
                "no step records with their start times, or no finished manifest.",
                EVENTS.prefix,
            )
        result.findings.append(not_measured(NAME, "The run budget", why, SECTION))
        return result
    lowest = min(budgets)
    for rank, b in budgets.items():
        result.summary[rank_key(rank, lowest, "run_wall_ms")] = b.wall_ms
        for r in b.parts.itertuples():
            result.summary[rank_key(rank, lowest, f"run_{r.part}_ms")] = float(r.ms)
    result.tables["parts"] = _concat([b.parts for b in budgets.values()])
    work = _concat([b.work.assign(rank=rank) for rank, b in budgets.items() if len(b.work)])
    if work is not None:
        result.tables["work"] = work
    result.meta["ranks"] = {rank: b.meta for rank, b in budgets.items()}
    result.meta["parts"] = [part for part, _ in RUN_PARTS]
    b = budgets[lowest]  # the findings speak of the lowest rank (rank 0): the others ran the same script
    result.findings.extend(named_work_findings(b, th, multi=len(budgets) > 1))
    result.findings.extend(host_code_findings(b, th, multi=len(budgets) > 1))
    result.findings.extend(compile_findings(b, th, compile_advice(profile)))
    result.findings.extend(startup_findings(b, th))
    return result


def _concat(frames):
    import pandas as pd

    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else None


def severity(share: float, minimum: float, th: Thresholds) -> Severity | None:
    """None under ``minimum``; a warning from it, critical from ``critical_share`` of the run."""
    return Severity.of(share, warning=minimum, critical=th.run_budget.critical_share, otherwise=None)


def of_run(b: RankRunBudget, ms: float) -> str:
    """``5.62 s, 27.3 % of the run's 20.6 s``."""
    return f"{ms_human(ms)}, {100 * ms / b.wall_ms:.1f} % of the run's {ms_human(b.wall_ms)}"


def period_words(steps: list[int]) -> tuple[str, int | None]:
    """``, about every 200 steps`` when the records' steps keep to one gap within a step, else ''."""
    steps = sorted(s for s in steps if s is not None)
    if len(steps) < 3:
        return "", None
    gaps = np.diff(steps)
    if gaps.min() <= 0 or gaps.max() - gaps.min() > 1:
        return "", None
    period = int(round(float(np.median(gaps))))
    return f", {'every' if gaps.max() == gaps.min() else 'about every'} {period} steps", period


def where_words(location: str | None, library: str | None, call: str) -> str:
    """``model.eval() at train.py:88``, or with a library frame ``model.eval() in trainer.py:3120, called from
    train.py:88``."""
    if library:
        return f"{call} in {short_location(library)}, called from {short_location(location)}"
    return f"{call} at {short_location(location)}"


def counted_work(b: RankRunBudget, part: str) -> pd.DataFrame:
    """The timed work of ``part`` (a run budget part: "evaluation", "compilation", ...) that counted time in it."""
    return b.work[(b.work["part"] == part) & (b.work["counted_ms"] > 0)]


def work_call(part: str, work: pd.DataFrame) -> str:
    """What the title calls the work: model.eval(), or the save function checkpoints went through most."""
    if part != "checkpoint":
        return WORK_WORDS[part][1]
    names = work["name"].dropna()
    return str(names.mode().iloc[0]) if len(names) else "torch.save"


def named_work_findings(b: RankRunBudget, th: Thresholds, multi: bool = False) -> list[Finding]:
    """``run_budget.evaluation`` / ``.checkpoint`` when that work holds ``named_work_min_share`` of the run."""
    findings = []
    for part in ("evaluation", "checkpoint"):
        ms = b.part_ms(part)
        level = severity(ms / b.wall_ms, th.run_budget.named_work_min_share, th)
        if level is None:
            continue
        work = counted_work(b, part)
        by_line = work.groupby([work["location"].fillna(""), work["library_location"].fillna("")], sort=False)
        lines = by_line["counted_ms"].agg(["sum", "size"]).sort_values("sum", ascending=False)
        (top_loc, top_lib), _ = next(lines.iterrows())
        every, period = period_words([int(s) for s in work.loc[work["phase"] != BEFORE_FIRST_STEP, "step"]])
        noun = WORK_WORDS[part][0]
        at = where_words(top_loc or None, top_lib or None, work_call(part, work))
        times = n_things(len(work), "time")
        title = f"{noun} ({at}) takes {of_run(b, ms)}: {times}{every}"
        other = "checkpoint" if part == "evaluation" else "evaluation"
        other_work = counted_work(b, other)
        other_ms = b.part_ms(other)
        if len(other_work) and severity(other_ms / b.wall_ms, th.run_budget.named_work_min_share, th) is None:
            # the other named work is below its own finding's share: say it here, so the page names both
            top = other_work.groupby(other_work["location"].fillna(""))["counted_ms"].sum().sort_values().index[-1]
            other_at = where_words(top or None, None, work_call(other, other_work))
            title += (
                f"; {WORK_WORDS[other][0].lower()} ({other_at}) adds {ms_human(other_ms)}, "
                f"{n_things(len(other_work), 'time')}"
            )
            companion = [
                Evidence(f"run_{other}_ms", other_ms, "ms"),
                Evidence(f"run_{other}_count", float(len(other_work)), "count"),
            ]
        else:
            companion = []
        if multi:
            title += f" on rank {b.rank}"
        advice = (CHECKPOINT_ADVICE if part == "checkpoint" else EVALUATION_ADVICE).format(
            where=short_location(top_loc or top_lib or None)
        )
        before = work[work["phase"] == BEFORE_FIRST_STEP]
        evidence = [
            Evidence(f"run_{part}_ms", ms, "ms"),
            Evidence("run_wall_ms", b.wall_ms, "ms"),
            Evidence(f"run_{part}_share", ms / b.wall_ms, "share", th.run_budget.named_work_min_share),
            Evidence(f"run_{part}_count", float(len(work)), "count"),
            Evidence(f"run_{part}_median_ms", float(work["counted_ms"].median()), "ms"),
        ]
        evidence += companion
        if period:
            evidence.append(Evidence(f"run_{part}_period_steps", float(period), "steps"))
        if len(before):
            evidence.append(Evidence(f"run_{part}_before_first_step_ms", float(before["counted_ms"].sum()), "ms"))
        subjects = [
            Subject(
                "location",
                loc or lib,
                figures={
                    "what": part,
                    "calls": int(r["size"]),
                    "ms": float(r["sum"]),
                    **({"library_location": lib} if lib and loc else {}),
                },
            )
            for (loc, lib), r in lines.iterrows()
            if loc or lib
        ]
        subjects += [Subject("step", str(int(s)), figures={"rank": b.rank}) for s in work["step"] if s >= 0][:20]
        finding = Finding(
            id="run_budget.evaluation",
            analyzer=NAME,
            severity=level,
            title=title,
            subjects=tuple(subjects),
            evidence=tuple(evidence),
            cost_share=ms / b.wall_ms,
            recommendation=advice,
            section=SECTION,
        )
        findings.append(finding if part == "evaluation" else dataclasses.replace(finding, id="run_budget.checkpoint"))
    return findings


def host_code_findings(b: RankRunBudget, th: Thresholds, multi: bool = False) -> list[Finding]:
    """``run_budget.host_code`` when the Python sampled in long steps (long_step_code: what no hook timed) holds
    ``named_work_min_share`` of the run: the function most of it ran in, the loop's line that called it."""
    ms = b.part_ms("host_code")
    level = severity(ms / b.wall_ms, th.run_budget.named_work_min_share, th)
    if level is None:
        return []
    work = counted_work(b, "host_code")
    keys = [work[c].fillna("") for c in ("name", "location", "library_location", "caller")]
    by_code = work.groupby(keys, sort=False)["counted_ms"].agg(["sum", "size"]).sort_values("sum", ascending=False)
    (name, location, library, caller), top = next(by_code.iterrows())
    at = host_code_words(name or None, location or None, library or None, caller or None)
    every, period = period_words([int(s) for s in work["step"]])
    title = f"Python code in long steps takes {of_run(b, ms)}: {at}, in {n_things(int(top['size']), 'step')}{every}"
    if multi:
        title += f" on rank {b.rank}"
    evidence = [
        Evidence("run_host_code_ms", ms, "ms"),
        Evidence("run_wall_ms", b.wall_ms, "ms"),
        Evidence("run_host_code_share", ms / b.wall_ms, "share", th.run_budget.named_work_min_share),
        Evidence("run_host_code_steps", float(len(work)), "count"),
        Evidence("run_host_code_top_ms", float(top["sum"]), "ms"),
    ]
    if period:
        evidence.append(Evidence("run_host_code_period_steps", float(period), "steps"))
    subjects = [
        Subject(
            "location",
            loc or lib,
            figures={
                "what": "host-code",
                "function": fn,
                "steps": int(r["size"]),
                "ms": float(r["sum"]),
                **({"library_location": lib} if lib and loc else {}),
                **({"caller": call} if call else {}),
            },
        )
        for (fn, loc, lib, call), r in by_code.iterrows()
        if loc or lib
    ]
    subjects += [Subject("step", str(int(s)), figures={"rank": b.rank}) for s in work["step"] if s >= 0][:20]
    called = f" (called at {short_location(caller)})" if caller else ""
    return [
        Finding(
            id="run_budget.host_code",
            analyzer=NAME,
            severity=level,
            title=title,
            subjects=tuple(subjects),
            evidence=tuple(evidence),
            cost_share=ms / b.wall_ms,
            recommendation=HOST_CODE_ADVICE.format(name=function_call(name or None), caller=called),
            section=SECTION,
        )
    ]


def compile_advice(profile: Profile) -> str:
    """The compile advice for the frameworks the run used (the manifest's ``frameworks``): one of them, or both."""
    used = {str(v) for v in ((getattr(profile, "manifest", None) or {}).get("frameworks") or {}).values()}
    chosen = [COMPILE_ADVICE[f] for f in ("torch", "jax") if f in used] or list(COMPILE_ADVICE.values())
    return " ".join(chosen)


def compile_findings(b: RankRunBudget, th: Thresholds, advice: str) -> list[Finding]:
    """``run_budget.compilation`` when compiling holds ``compile_min_share`` of the run: where (before the first
    step, in warm-up, in the steps), what compiled and from which line."""
    ms = b.part_ms("compilation")
    level = severity(ms / b.wall_ms, th.run_budget.compile_min_share, th)
    if level is None:
        return []
    work = counted_work(b, "compilation")
    phases = work.groupby("phase", sort=False)["counted_ms"].agg(["sum", "size"]).sort_values("sum", ascending=False)
    phase_words = "; ".join(
        f"{ms_human(r['sum'])} {phase} ({n_things(int(r['size']), 'compile')})" for phase, r in phases.iterrows()
    )
    by_name = work.groupby(work["name"].fillna("a compiled function"), sort=False)["counted_ms"].sum()
    top_name = str(by_name.idxmax())
    top = work[work["name"].fillna("a compiled function") == top_name]
    loc = top["location"].dropna()
    lib = top["library_location"].dropna()
    at = where_words(
        str(loc.mode().iloc[0]) if len(loc) else None, str(lib.mode().iloc[0]) if len(lib) else None, top_name
    )
    title = f"Compilation takes {of_run(b, ms)}: {phase_words}; most in {at}"
    before = work[work["phase"] == BEFORE_FIRST_STEP]
    evidence = (
        Evidence("run_compilation_ms", ms, "ms"),
        Evidence("run_wall_ms", b.wall_ms, "ms"),
        Evidence("run_compilation_share", ms / b.wall_ms, "share", th.run_budget.compile_min_share),
        Evidence("run_compilation_count", float(len(work)), "count"),
        Evidence("run_compilation_before_first_step_ms", float(before["counted_ms"].sum()), "ms"),
        *(
            Evidence(f"run_compilation_{_key(phase)}_ms", float(r["sum"]), "ms")
            for phase, r in phases.iterrows()
            if phase != BEFORE_FIRST_STEP
        ),
        # each phase's count, as the title says it ("124 ms in the steps (4 compiles)")
        *(
            Evidence(f"run_compilation_{_key(phase)}_count", float(r["size"]), "count")
            for phase, r in phases.iterrows()
        ),
    )
    subjects = tuple(
        Subject("location", str(location), figures={"what": "compilation", "ms": float(ms_at)})
        for location, ms_at in work.groupby(work["location"].fillna(""))["counted_ms"]
        .sum()
        .sort_values(ascending=False)
        .items()
        if location
    )
    return [
        Finding(
            id="run_budget.compilation",
            analyzer=NAME,
            severity=level,
            title=title,
            subjects=subjects,
            evidence=evidence,
            cost_share=ms / b.wall_ms,
            recommendation=advice,
            section=SECTION,
        )
    ]


def _key(phase: str) -> str:
    return phase.replace("the ", "").replace(" ", "_").replace("-", "_")


def startup_findings(b: RankRunBudget, th: Thresholds) -> list[Finding]:
    """``run_budget.startup`` when the interpreter's start, the imports and the setup before the first step hold
    ``startup_min_share`` of the run (compiling before the first step is compilation's, not counted here)."""
    parts = {p: b.part_ms(p) for p in ("interpreter", "imports", "setup")}
    ms = sum(parts.values())
    share = ms / b.wall_ms
    if not share >= th.run_budget.startup_min_share:
        return []
    words = ", ".join(
        f"{label} {ms_human(parts[p])}"
        for p, label in (("interpreter", "interpreter start"), ("imports", "imports"), ("setup", "setup"))
        if parts[p] > 0
    )
    # an import inside other work (a library's lazy import during a compile before the first step) counts 0 ms here
    imports = b.work[
        (b.work["part"] == "imports") & (b.work["name"] != OTHER_IMPORTS) & (b.work["counted_ms"] > 0)
    ].sort_values("counted_ms", ascending=False)
    title = (
        f"{ms_human(ms)} pass before the first step, {100 * share:.1f} % of the run's {ms_human(b.wall_ms)}: {words}"
    )
    if len(imports):
        top = imports.head(3)
        title += "; the slowest imports: " + ", ".join(
            f"{r['name']} {ms_human(r['counted_ms'])} at {short_location(r['location'])}" for _, r in top.iterrows()
        )
    evidence = (
        Evidence("run_startup_ms", ms, "ms"),
        Evidence("run_wall_ms", b.wall_ms, "ms"),
        Evidence("run_startup_share", share, "share", th.run_budget.startup_min_share),
        *(Evidence(f"run_{p}_ms", v, "ms") for p, v in parts.items() if v > 0),
        *(
            Evidence(f"run_import_{i}_ms", float(r["counted_ms"]), "ms")
            for i, (_, r) in enumerate(imports.head(3).iterrows())
        ),
    )
    subjects = tuple(
        Subject(
            "location",
            str(r["location"]),
            figures={"what": "import", "module": r["name"], "ms": float(r["counted_ms"])},
        )
        for _, r in imports.head(10).iterrows()
        if r["location"]
    )
    return [
        Finding(
            id="run_budget.startup",
            analyzer=NAME,
            severity=Severity.INFO,  # where the time before the first step went: told, never the run's limit
            title=title,
            subjects=subjects,
            evidence=evidence,
            cost_share=None,  # paid once per process, not by each step: nothing a fix of the loop saves
            recommendation=STARTUP_ADVICE,
            section=SECTION,
        )
    ]
