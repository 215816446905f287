"""The verdict: one sentence that says what limits a run and what fixing it could save.

A report opens on it (reports/html.py) and the findings JSON carries it (key ``verdict``), so a
reader learns the answer before any table. It is decided from what the analyzers already
concluded (findings ranked by cost, the idle analyzer's time breakdown), never measured anew.
Three states: ``limited`` (a warning or critical finding names the limit), ``clean`` (something
was judged and nothing crossed a threshold) and ``unjudged`` (no analyzer had data).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any

from diagnose.findings import AnalyzerDescription, Finding, Severity, cause_of, jsonable
from diagnose.formatting import ms_human

LIMITED, CLEAN, UNJUDGED = "limited", "clean", "unjudged"

# What each analyzer judges and what its findings' cost_share is a share of are its own declarations (its module's
# JUDGES, COST_BASIS and COST_BASIS_BY_ID), read from ``analysis.analyzers``: the verdict's saving is the cited
# finding's own figure on the finding's own basis, never one finding's share read against another's whole (issue 28:
# "~99 % of step time" was the idle share of a whole trace, first step included, beside 79.0 % of the median step
# in the step budget). The causes a budget's parts name, their labels and the verdict's words for them are
# diagnose.findings.CAUSES.

# the idle analyzer's breakdown columns, in bar order: (cause, column)
IDLE_BREAKDOWN = (
    ("compute", "compute_ns"),
    ("non_compute", "non_compute_ns"),
    ("sync", "idle_sync_ns"),
    ("host", "idle_host_ns"),
    ("short", "idle_short_ns"),
    ("other", "idle_other_ns"),
    ("unlinked", "idle_unlinked_ns"),
)
# a cause of idle time is named when it holds at least this share of the idle time: the main
# one always, a second one only when it is a real part of the story
NAMED_IDLE_CAUSE_SHARE = 0.25
# the op that synced, as the user wrote it
SYNC_OP_WORDS = {
    "aten::item": ".item()",
    "aten::_local_scalar_dense": ".item()",
    "aten::is_nonzero": "if tensor:",
    "aten::tolist": ".tolist()",
    "aten::to": ".to()/.cpu()",
    "aten::_to_copy": ".to()/.cpu()",
    "aten::copy_": ".copy_()",
    "aten::nonzero": ".nonzero()",
    "aten::index": "boolean-mask indexing",
    "aten::masked_select": "masked_select()",
    "aten::unique": "unique()",
    "cudaDeviceSynchronize": "torch.cuda.synchronize()",
    "cudaStreamSynchronize": "stream synchronize",
}


@dataclass(frozen=True)
class BudgetPart:
    """One slice of the traced time: GPU busy on compute or copies, or GPU idle for one cause."""

    cause: str  # a diagnose.findings.CAUSES id: compute | non_compute | collective | sync | host | input | ...
    label: str
    share: float  # of the traced span, 0..1; the parts of a budget add to 1

    @property
    def busy(self) -> bool:
        """GPU busy (compute, copies, collectives), not idle for a cause."""
        cause = cause_of(self.cause)
        return cause is not None and cause.busy

    def to_json(self) -> dict:
        return {"cause": self.cause, "label": self.label, "share": jsonable(self.share)}


@dataclass(frozen=True)
class StepBudget:
    """Where one rank's traced GPU time went (the idle analyzer's breakdown), for the report's bar."""

    rank: int
    steps: int  # traced steps the span covers (0 when the trace marks none)
    span_ms: float
    parts: tuple[BudgetPart, ...]
    described: str | None = None  # what 100 % is, when it is not the traced GPU time (the median steady step)

    @property
    def idle_share(self) -> float:
        return sum(p.share for p in self.parts if not p.busy)

    def basis(self) -> str:
        """What 100 % is, in words."""
        if self.described:
            return self.described
        steps = f"{self.steps} traced step{'s' if self.steps != 1 else ''}" if self.steps else "the whole trace"
        return f"rank {self.rank}, {steps}, {self.span_ms:,.1f} ms of GPU time"

    def to_json(self) -> dict:
        return {
            "rank": self.rank,
            "steps": self.steps,
            "span_ms": jsonable(self.span_ms),
            "basis": self.basis(),
            "parts": [p.to_json() for p in self.parts],
        }


@dataclass(frozen=True)
class RunPart:
    """One part of the run's wall time (diagnose.derive.run_budget_table.RUN_PARTS), with the line that holds most
    of it and the library frame beside it, when timed work holds it."""

    part: str
    label: str
    ms: float
    share: float  # of the run's wall time
    location: str | None = None
    library_location: str | None = None

    def to_json(self) -> dict:
        return {
            "part": self.part,
            "label": self.label,
            "ms": jsonable(self.ms),
            "share": jsonable(self.share),
            "location": self.location,
            "library_location": self.library_location,
        }


@dataclass(frozen=True)
class RunBudgetBar:
    """The run budget of the lowest rank, process start to exit: its parts add up to ``wall_ms``."""

    rank: int
    wall_ms: float
    wall_of: str  # what the wall time runs from and to, in words
    parts: tuple[RunPart, ...]

    def basis(self) -> str:
        return f"rank {self.rank}, {ms_human(self.wall_ms)}, {self.wall_of}"

    def line(self, most: int = 5) -> str:
        """One line for a terminal: the wall time and its largest parts, gpudiag's own cost always."""
        top = sorted(self.parts, key=lambda p: -p.ms)[:most]
        own = [p for p in self.parts if p.part == "gpudiag" and p not in top]
        words = [f"{p.label} {ms_human(p.ms)} ({percent(p.share, 1)})" for p in (*top, *own)]
        return f"Run {ms_human(self.wall_ms)} ({self.wall_of}): " + ", ".join(words)

    def to_json(self) -> dict:
        return {
            "rank": self.rank,
            "wall_ms": jsonable(self.wall_ms),
            "wall_of": self.wall_of,
            "basis": self.basis(),
            "parts": [p.to_json() for p in self.parts],
        }


def run_budget_bar(result) -> RunBudgetBar | None:
    """The run budget analyzer's parts of the lowest rank as a RunBudgetBar, or None when there is no run budget."""
    parts = result.tables.get("parts") if result is not None else None
    ranks = (result.meta.get("ranks") or {}) if result is not None else {}
    if parts is None or not len(parts) or not ranks:
        return None
    rank = min(ranks)
    rows = parts[parts["rank"] == rank]

    def text(value) -> str | None:
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)

    return RunBudgetBar(
        rank,
        float(ranks[rank]["wall_ms"]),
        str(ranks[rank].get("wall_of") or "the process's start to its exit"),
        tuple(
            RunPart(r.part, r.label, float(r.ms), float(r.share), text(r.location), text(r.library_location))
            for r in rows.itertuples()
        ),
    )


@dataclass(frozen=True)
class Verdict:
    """The report's first sentence and what it rests on."""

    sentence: str
    state: str  # limited | clean | unjudged
    cost_share: float | None  # what fixing the named limit could save, 0..1; None when not estimated
    cost_basis: str | None  # "step time", "traced time", "GPU time" or "run time": what cost_share is a share of
    top_finding_ids: tuple[str, ...]  # the findings the sentence names, most costly first
    budget: StepBudget | None  # None when the input has no trace with GPU activity
    cost_of: str | None = None  # what cost_share is a share of, as the sentence says it ("the median step", ...)
    run: RunBudgetBar | None = None  # the run's wall time in parts (None: no run folder, or a run under ncu)

    def __str__(self) -> str:
        """The sentence: ``print(analysis.verdict)`` shows the answer, not the dataclass."""
        return self.sentence

    def to_json(self) -> dict:
        return {
            "sentence": self.sentence,
            "state": self.state,
            "cost_share": jsonable(self.cost_share),
            "cost_basis": self.cost_basis,
            "cost_of": self.cost_of,
            "top_finding_ids": list(self.top_finding_ids),
            "step_budget": self.budget.to_json() if self.budget else None,
        } | {"run_budget": self.run.to_json() if self.run else None}  # a key of its own: not a list of analyzers


def decide(analysis: Any) -> Verdict:
    """The verdict on an Analysis (its ``results``, ranked ``findings`` and ``summary``), with the run budget's bar
    when there is one."""
    verdict = decide_sentence(analysis)
    bar = run_budget_bar(analysis.results.get("run_budget"))
    return dataclasses.replace(verdict, run=bar) if bar is not None else verdict


def decide_sentence(analysis: Any) -> Verdict:
    """The verdict's sentence, state, cost and step budget."""
    measured = [f for f in analysis.findings if not is_not_measured(f)]
    judged = judged_analyzers(analysis.results)
    described = getattr(analysis, "analyzers", None) or {}
    top_idle = next((f for f in measured if f.id == "idle.gpu_idle"), None)
    budget = step_budget(analysis.results.get("idle"), rank_of(top_idle))
    # ranked (diagnose.analysis): with a run budget, by the run's recoverable seconds on either budget
    limits = [f for f in measured if f.severity >= Severity.WARNING]
    run = run_figures(analysis.results.get("run_budget"))
    if limits:
        lead = described.get(limits[0].analyzer)
        if lead is not None and lead.shows_step_budget:  # the verdict names a cause of the step: show its budget
            budget = median_step_budget(analysis.results.get("step_budget")) or budget
        elif limits[0].cost_basis == MEDIAN_STEP:  # idle or syncs put into the untraced median step: say that step
            budget = median_step_budget(analysis.results.get("step_budget")) or budget
        return limited(limits[0], measured, budget, described, run)
    if judged:
        return Verdict(clean_sentence(analysis.summary, budget, judged, described), CLEAN, None, None, (), budget)
    sentence = "Nothing could be judged: the input holds none of the measurements gpudiag analyses"
    if getattr(analysis, "warnings", None):
        sentence += " (some of it could not be read: see the notes below)"
    return Verdict(sentence + ".", UNJUDGED, None, None, (), budget)


def limited(
    top: Finding,
    measured: list[Finding],
    budget: StepBudget | None,
    described: dict[str, AnalyzerDescription],
    run: RunFigures | None = None,
) -> Verdict:
    """The verdict when ``top`` (the most costly warning or critical finding) limits the run; ``described``: the
    analyzers' descriptions, by name (what each finding's cost is a share of).

    GPU idle time and the host syncs behind it are told together, from the idle breakdown, so the
    sentence gives both the idle share and the line to fix; any other finding speaks through its title.
    """
    named, phrase, what = [top], None, "it"
    if budget is not None and top.id in ("idle.gpu_idle", "sync.host_sync"):
        idle = next((f for f in measured if f.id == "idle.gpu_idle"), None)
        sync = next((f for f in measured if f.id == "sync.host_sync"), None)
        of_step = top.cost_basis == MEDIAN_STEP and budget.described is not None and "median" in budget.described
        phrase, sync_named = idle_phrase(
            budget, sync, sync_first=top is sync, of="the median step" if of_step else "the traced time"
        )
        if top is sync and not sync_named:
            phrase = None  # the syncs hold no GPU idle time in the breakdown: let their own title speak
        else:
            named += [f for f in (idle, sync if sync_named else None) if f is not None and f is not top]
            what = "them" if sync_named else "it"
    if phrase is None:
        phrase = top.title.rstrip(". ")
    cost = top.cost_share if top.cost_share is not None and math.isfinite(top.cost_share) else None
    of = cost_of(top, described)
    basis = "GPU time" if of == "GPU time" else "traced time" if of == "the traced time" else "step time"
    if of == RUN_BASIS:
        basis = "run time"
        if run is not None:
            of = f"the run's {ms_human(run.wall_ms)}"
    sentence = phrase
    if cost is not None and cost > 0:
        # the cited finding's figure as its title shows it (one decimal), on the basis it is a share of
        sentence += f"; fixing {what} could save up to {percent(cost, 1)} of {of}"
    return Verdict(
        sentence + ".",
        LIMITED,
        cost,
        basis if cost is not None else None,
        tuple(f.id for f in named),
        budget,
        of if cost is not None else None,
    )


RUN_BASIS = "the run's wall time"  # the run budget's findings' basis (diagnose/analyzers/run_budget.py)
MEDIAN_STEP = "the median step"  # the basis of idle and sync findings put into the untraced median step


@dataclass(frozen=True)
class RunFigures:
    """What a finding's share converts to seconds of the run with: the run's wall time and its steps' time after
    warm-up (a share of the median step, of the steady steps or of traced time is taken over those steps)."""

    wall_ms: float
    steps_ms: float


def run_figures(result) -> RunFigures | None:
    """The lowest rank's wall time and steps' time from the run budget's result, or None (no run budget)."""
    ranks = (result.meta.get("ranks") or {}) if result is not None else {}
    if not ranks:
        return None
    meta = ranks[min(ranks)]
    return RunFigures(float(meta["wall_ms"]), float(meta.get("steps_after_warmup_ms") or 0.0))


def recoverable_ms(finding: Finding, described: dict[str, AnalyzerDescription], run: RunFigures) -> float:
    """The run's milliseconds a finding's cost share stands for: of the wall time for the run budget's findings,
    of the steps after warm-up for a share of a step (the median step, the steady steps, the traced time), which
    every such step pays. A finding without a share counts 0 (it cannot lead over one with a cost)."""
    share = finding.cost_share
    if share is None or not math.isfinite(share):
        return 0.0
    return share * (run.wall_ms if cost_of(finding, described) == RUN_BASIS else run.steps_ms)


def cost_of(finding: Finding, described: dict[str, AnalyzerDescription]) -> str:
    """What ``finding.cost_share`` is a share of, in words ('the median step', 'the traced time', 'GPU time'): the
    finding's own basis where it has one, else as its analyzer declares it; 'step time' for a finding of an analyzer
    not described."""
    if finding.cost_basis is not None:  # the finding's own, where it differs from its analyzer's
        return finding.cost_basis
    analyzer = described.get(finding.analyzer)
    return analyzer.cost_of(finding.id) if analyzer is not None else "step time"


def idle_phrase(
    budget: StepBudget, sync: Finding | None, sync_first: bool = False, of: str = "the traced time"
) -> tuple[str, bool]:
    """'GPU idle 29 % of the traced time, mostly ...' (``of``: what ``budget`` is the parts of) and whether it named
    the costliest sync.

    The main cause of idle time is named, and a second one holding ``NAMED_IDLE_CAUSE_SHARE`` of it;
    with ``sync_first`` (the syncs are the verdict's top finding) host syncs are named whatever their share.
    """
    idle = budget.idle_share
    words_of = {p.cause: cause_of(p.cause).words for p in budget.parts if cause_of(p.cause) is not None}
    share_of = {p.cause: p.share for p in budget.parts if words_of.get(p.cause) and p.share > 0}
    by_share = sorted(share_of, key=share_of.get, reverse=True)
    causes = [c for i, c in enumerate(by_share) if i == 0 or (idle and share_of[c] / idle >= NAMED_IDLE_CAUSE_SHARE)]
    if sync_first and "sync" in share_of and "sync" not in causes[:2]:
        causes = [causes[0], "sync"]  # the main cause stays first: it is what "mostly" refers to
    words = []
    sync_named = False
    for cause in causes[:2]:
        detail = percent(share_of[cause], 1)
        if cause == "sync" and sync is not None and sync.subjects:
            detail += f", costliest {sync_place(sync.subjects[0])}"
            sync_named = True
        words.append(f"{words_of[cause]} ({detail})")
    phrase = f"GPU idle {percent(idle, 1)} of {of}"
    if words:
        phrase += ", mostly " + " and ".join(words)
    return phrase, sync_named


def sync_place(subject) -> str:
    """Where a sync happens, as a user finds it: ``.item()` at train.py:41``, or its function when the line is not known."""
    fig = subject.figures
    op = fig.get("op") or ""
    what = SYNC_OP_WORDS.get(op, op)
    code = f"`{what}` " if what else ""
    if fig.get("line_exact", True) or not fig.get("function"):
        return f"{code}at {short_location(subject.name)}"
    return f"{code}in {fig['function']}() of {os.path.basename(str(fig.get('file') or subject.name))}"


def short_location(location: str) -> str:
    """``/work/x/train.py:41`` as ``train.py:41``: the file's name is what a reader looks for."""
    path, sep, line = str(location).rpartition(":")
    if not sep or not line.isdigit():
        return os.path.basename(str(location))
    return f"{os.path.basename(path)}:{line}"


def clean_sentence(
    summary: dict, budget: StepBudget | None, judged: list[str], described: dict[str, AnalyzerDescription]
) -> str:
    figures = []
    if budget is not None:
        figures.append(f"GPU idle {percent(budget.idle_share, 1)} of the traced time")
    step_ms = summary.get("step_time_median_ms")
    if step_ms is not None and math.isfinite(step_ms):
        figures.append(f"median step {ms_human(step_ms)}")
    lead = "Nothing crossed a threshold"
    if figures:
        lead += " (" + ", ".join(figures) + ")"
    judges = [described[n].judges if n in described else n.replace("_", " ") for n in judged]
    return f"{lead}: judged {join_words(judges)}."


def judged_analyzers(results: dict) -> list[str]:
    """Analyzers that had data: a non-empty table, or a finding other than 'not measured'."""
    return [name for name, r in results.items() if has_data(r)]


def has_data(result) -> bool:
    return any(len(t) for t in result.tables.values()) or any(not is_not_measured(f) for f in result.findings)


def is_not_measured(finding: Finding) -> bool:
    return finding.id.endswith(".not_measured")


def rank_of(finding: Finding | None) -> int | None:
    if finding is None:
        return None
    rank = next((s.name for s in finding.subjects if s.kind == "rank"), None)
    return int(rank) if rank is not None and str(rank).isdigit() else None


def median_step_budget(result) -> StepBudget | None:
    """The step-time budget analyzer's median steady step of the lowest rank, as bar parts that add to 1: what
    a verdict on one of its causes rests on (a negative unexplained remainder is drawn as 0)."""
    budget = result.tables.get("budget") if result is not None else None
    if budget is None or not len(budget):
        return None
    median = budget[budget["column"] == "median step"]
    if not len(median):
        return None
    rank = int(median["rank"].min())
    rows = median[median["rank"] == rank]
    wall_ms = float(rows["wall_ms"].iloc[0])
    values = [(cause_id(r.part), r.label, float(r.shown_ms)) for r in rows.itertuples()]
    values = [(c, label, v) for c, label, v in values if v > 0 and math.isfinite(v)]
    total = sum(v for _, _, v in values)
    if not total:
        return None
    steps = int(rows["steps"].iloc[0])
    words = f"rank {rank}, the median steady step of {steps:,}, {ms_human(wall_ms)}"
    parts = tuple(BudgetPart(c, label, v / total) for c, label, v in values)
    return StepBudget(rank, steps, wall_ms, parts, described=words)


def step_budget(idle_result, rank: int | None = None) -> StepBudget | None:
    """The idle analyzer's breakdown of one rank (``rank``, else the lowest) as parts that add to 1."""
    if idle_result is None:
        return None
    breakdown = idle_result.tables.get("breakdown")
    if breakdown is None or not len(breakdown):
        return None
    rows = breakdown[breakdown["rank"] == rank] if rank is not None else breakdown.iloc[0:0]
    row = (rows if len(rows) else breakdown.sort_values("rank")).iloc[0]
    values = [(c, cause_of(c).label, float(row.get(column, 0.0) or 0.0)) for c, column in IDLE_BREAKDOWN]
    total = sum(v for _, _, v in values if v > 0 and math.isfinite(v))
    if not total:
        return None
    parts = tuple(BudgetPart(c, label, v / total) for c, label, v in values if v > 0 and math.isfinite(v))
    per_step = idle_result.tables.get("per_step")
    steps = 0
    if per_step is not None and len(per_step):
        mine = per_step[(per_step["rank"] == row["rank"]) & (per_step["step"] >= 0)]
        steps = int(len(mine))
    span = float(row.get("span_ns", total))
    return StepBudget(int(row["rank"]), steps, span / 1e6, parts)


def cause_id(name: str) -> str:
    """The cause id a budget part's name stands for (the step budget's ``launch_bound`` is ``host``), else the name."""
    cause = cause_of(name)
    return cause.id if cause is not None else name


def percent(share: float, decimals: int = 0) -> str:
    """0.288 as '29 %' (or '28.8 %'); under the shown resolution as '<1 %'."""
    value = 100 * share
    floor = 10**-decimals
    if 0 < value < floor:
        return f"<{floor:g} %"
    return f"{value:.{decimals}f} %"


def join_words(words: list[str]) -> str:
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]
