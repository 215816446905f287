"""Report invariants: what every analysis must hold, whatever its input (issue 28).

A performance engineer who finds one contradiction in a report stops trusting it: a part larger than its
whole, a budget that adds to 104 %, "per step" on a trace without steps, ``main.py:0``, advice to capture with
``gpudiag profile`` on a folder that ``gpudiag profile`` wrote, a verdict whose figure is not its finding's, a
``1.2e+03`` in a title, a title number that no evidence backs, an info finding with a critical subject. Each of
those is one function here, ``check_<invariant>(doc, analysis) -> list[Violation]``; :func:`check_analysis`
runs them all. Tests run it on every fixture (tests/test_report_invariants.py) and the fuzz oracle on every
fuzzed input that produces an analysis (tests/fuzz/oracle.py); docs/report-invariants.md lists the rules.

Why here: the checks read what ``diagnose`` states (the findings, the verdict, the analyzers' tables) through the
findings' own ``to_json`` (the findings JSON without ``reports``), and a user or a tool can run them on a findings
JSON read back from disk (:func:`check_doc`, the checks that need no tables). It imports ``diagnose.findings``
and the standard library only, and nothing imports it but tests and tools.

How a number shown in a title matches an evidence value (``check_title_numbers_in_evidence``): the title's number
is read with its decimals and the unit written after it; an evidence value matches when, converted to that unit
(ms/µs/ns/s between each other, bytes to KiB/MiB/GiB, a 0-1 share to %), it rounds to the number shown at the
decimals shown (``|value - shown| <= 0.5 * 10**-decimals``); ``<1 %`` matches a value below 1; a number without a
known unit matches any value as it is. The evidence of a finding is its evidence rows (value and threshold), its
``cost_share``, its subjects (their names, figures and the numbers in their text figures) and how many subjects of
each kind it has (``N kernels``, ``N - 1 more``). Names of subjects (kernels, ``file:line``) are taken out of the
title before its numbers are read, so a kernel's ``tilesize64x64x8`` or a line number that a subject carries is
not a figure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from diagnose.findings import jsonable
from parsers.run_records import is_run_manifest

SEVERITY_ORDER = {"info": 0, "warning": 1, "critical": 2}


@dataclass(frozen=True)
class Violation:
    """One broken invariant: which, where (a finding id, ``verdict``, or ``table <analyzer>.<table>``), the
    offending text as a reader sees it, and what is wrong with it."""

    invariant: str
    finding_id: str
    text: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.finding_id}: {self.detail} — {self.text}"


# --- the findings JSON of an Analysis, without reports/ -------------------------------------------------------


def findings_doc(analysis: Any) -> dict:
    """The parts of the findings JSON (docs/findings-json.md) the checks read, built from the Analysis itself."""
    verdict = getattr(analysis, "verdict", None)
    return {
        "verdict": verdict.to_json() if verdict is not None else None,
        "source": jsonable(analysis.source),
        "summary": {k: jsonable(v) for k, v in analysis.summary.items()},
        "findings": [f.to_json() for f in analysis.findings],
        "warnings": list(analysis.warnings),
    }


def check_analysis(analysis: Any) -> list[Violation]:
    """Every invariant on an :class:`diagnose.analysis.Analysis` (its findings, verdict and tables)."""
    doc = findings_doc(analysis)
    return [v for check in INVARIANTS for v in check(doc, analysis)]


def check_doc(doc: dict) -> list[Violation]:
    """The invariants that a findings JSON alone can show (the table checks need the Analysis)."""
    return [v for check in INVARIANTS for v in check(doc, None)]


# --- reading numbers as a reader sees them ----------------------------------------------------------------------

_NUMBER = re.compile(r"(?P<num>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?P<frac>\.\d+)?(?P<exp>[eE][+-]?\d+)?")
_UNIT = re.compile(r"\s?(?P<unit>%|ms\b|µs\b|us\b|ns\b|s\b|GiB\b|MiB\b|KiB\b|GB\b|MB\b|kB\b|KB\b|B\b|bytes\b|×|x\b)")
TIME_TO_MS = {"ms": 1.0, "µs": 1e-3, "us": 1e-3, "ns": 1e-6, "s": 1e3}
BYTES = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "GB": 1e9, "MB": 1e6, "kB": 1e3, "KB": 1e3, "B": 1, "bytes": 1}


@dataclass(frozen=True)
class Shown:
    """A number as a title shows it: its value, decimals, unit kind (time in ms, bytes, pct, plain) and place."""

    value: float  # in the kind's unit: ms for time, bytes, % for pct, as written for plain
    decimals: int
    kind: str  # time | bytes | pct | plain
    unit: str  # as written ('' for none)
    prefix: str  # '<', '~', '+', '-' or ''
    start: int
    end: int  # after the unit
    raw: str

    @property
    def slack(self) -> float:
        """Half a unit of the last decimal shown, in the kind's unit."""
        half = 0.5 * 10**-self.decimals
        if self.kind == "time":
            return half * TIME_TO_MS[self.unit]
        if self.kind == "bytes":
            return half * BYTES[self.unit]
        return half


def numbers_in(text: str) -> list[Shown]:
    """The numbers of ``text`` a reader would read as figures: not the digits inside a name (``sm80``,
    ``x64``, ``p10``), a path or version (``a/b2``, ``v1.2``), nor a word-joined tag (``#3``)."""
    out = []
    for m in _NUMBER.finditer(text):
        before = text[m.start() - 1] if m.start() else ""
        if before and (before.isalnum() or before in "_./#:\\"):
            continue
        if m.group("exp") and not re.match(r"[eE][+-]?\d", m.group("exp")):
            continue
        raw_num = m.group("num").replace(",", "") + (m.group("frac") or "")
        value = float(raw_num + (m.group("exp") or ""))
        decimals = len(m.group("frac") or "") - 1 if m.group("frac") else 0
        prefix = ""
        j = m.start() - 1
        if j >= 1 and text[j] == " " and text[j - 1] in "<>≈":  # "< 0.1 %" as the formatting layer writes it
            j -= 1
        if j >= 0 and text[j] in "<~+≈>":
            prefix = text[j]
        elif j >= 0 and text[j] in "-−" and (j == 0 or not text[j - 1].isalnum()):
            prefix = "-"
            value = -value
        end = m.end()
        unit = ""
        u = _UNIT.match(text, end)
        if u:
            unit = u.group("unit")
            end = u.end()
        if unit in TIME_TO_MS:
            kind, value = "time", value * TIME_TO_MS[unit]
        elif unit in BYTES:
            kind, value = "bytes", value * BYTES[unit]
        elif unit == "%":
            kind = "pct"
        else:
            kind = "plain"
        out.append(Shown(value, max(decimals, 0), kind, unit, prefix, m.start(), end, text[m.start() : end]))
    return out


@dataclass(frozen=True)
class Figure:
    """One value a finding's evidence holds, in a kind's unit (see :class:`Shown`)."""

    value: float
    kind: str
    where: str


def figure_kind(name: str, unit: str = "") -> tuple[str, float]:
    """The kind of a named value and the factor to its kind's unit, from its unit or its key's suffix."""
    unit = (unit or "").strip()
    if unit in TIME_TO_MS:
        return "time", TIME_TO_MS[unit]
    if unit == "bytes":
        return "bytes", 1.0
    if unit == "%":
        return "pct", 1.0
    if unit == "share":
        return "pct", 100.0
    if unit:
        return "plain", 1.0
    key = name.lower()
    for suffix, factor in (("_ms", 1.0), ("_ns", 1e-6), ("_us", 1e-3), ("_s", 1e3)):
        if key.endswith(suffix) or key == suffix[1:] or (suffix + "_per_") in key:
            return "time", factor
    if key.endswith("_bytes") or key == "bytes":
        return "bytes", 1.0
    if key.endswith("_pct") or key == "pct":
        return "pct", 1.0
    if key.endswith("share") or key.startswith("share_of"):
        return "pct", 100.0
    return "plain", 1.0


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def evidence_figures(finding: dict) -> list[Figure]:
    """Every value a finding's evidence holds (see the module docstring)."""
    out: list[Figure] = []

    def add(value, name, unit=""):
        if not _finite(value):
            return
        kind, factor = figure_kind(name, unit)
        out.append(Figure(value * factor, kind, name))
        if kind != "plain":
            out.append(Figure(value, "plain", name))  # as written (a raw share shows as one)

    for e in finding.get("evidence") or ():
        add(e.get("value"), e.get("metric", ""), e.get("unit", ""))
        add(e.get("threshold"), e.get("metric", "") + " threshold", e.get("unit", ""))
    add(finding.get("cost_share"), "cost_share", "share")
    kinds: dict[str, int] = {}
    for s in finding.get("subjects") or ():
        kinds[s.get("kind", "")] = kinds.get(s.get("kind", ""), 0) + 1
        for key, value in s.items():
            if key in ("kind", "severity"):
                continue
            if isinstance(value, str):
                out.extend(Figure(n.value, n.kind, f"subject {key}") for n in numbers_in(value))
                out.extend(Figure(abs(n.value), "plain", f"subject {key}") for n in numbers_in(value))
                if key == "name" and re.fullmatch(r"\d+", value.strip()):
                    out.append(Figure(float(value), "plain", "subject name"))
            else:
                add(value, key)
    for kind, n in kinds.items():
        out += [
            Figure(float(n), "plain", f"{n} {kind} subjects"),
            Figure(float(n - 1), "plain", f"{kind} subjects - 1"),
        ]
        if n < 2:
            continue
        of_kind = [s for s in finding.get("subjects") or () if s.get("kind") == kind]
        for key in {k for s in of_kind for k, v in s.items() if _finite(v)}:
            values = [s.get(key) for s in of_kind]
            if all(_finite(v) for v in values):
                add(sum(values), key)  # "2 kernels (49.8 % of GPU time)": the subjects' figures added
    return out


def matches(shown: Shown, fig: Figure) -> bool:
    """Whether an evidence value reads as the number shown (module docstring)."""
    if shown.kind != "plain" and fig.kind != shown.kind:
        return False
    value = abs(shown.value) if shown.prefix in ("-", "+") and fig.value >= 0 else shown.value
    if shown.prefix == "<":
        return fig.value < value + 1e-12
    if shown.prefix == ">":
        return fig.value > value - 1e-12
    tol = shown.slack * (1 + 1e-9) + 1e-12 * max(1.0, abs(value))
    return abs(fig.value - value) <= tol


def strip_names(text: str, finding: dict) -> str:
    """``text`` with each subject's name (and a location's ``file:line`` as shown) blanked out."""
    names = set()
    for s in finding.get("subjects") or ():
        name = str(s.get("name", ""))
        if not name or re.fullmatch(r"\d+", name):
            continue
        names.add(name)
        if ":" in name:
            path, _, line = name.rpartition(":")
            names.add(f"{path.rsplit('/', 1)[-1]}:{line}")
        for key in ("kernel_name", "file", "function", "op"):
            if isinstance(s.get(key), str) and s[key]:
                names.add(s[key])
    for name in sorted(names, key=len, reverse=True):
        text = text.replace(name, " " * len(name))
    return text


_QUOTED = re.compile(r"(?<=warning: ).*$", re.S)


def figures_text(finding: dict) -> str:
    """A finding's title as its figures are read: subject names blanked, and a message quoted from another tool
    (the text after ``warning: ``, whose numbers are that tool's, say a driver version) left out."""
    text = strip_names(finding.get("title") or "", finding)
    return _QUOTED.sub(lambda m: " " * len(m.group(0)), text)


def finding_texts(finding: dict) -> list[tuple[str, str]]:
    """(where, text) of what a reader reads of a finding: title, recommendation, subject names and text figures."""
    out = [("title", finding.get("title") or ""), ("recommendation", finding.get("recommendation") or "")]
    for s in finding.get("subjects") or ():
        for key, value in s.items():
            if isinstance(value, str) and key not in ("kind", "severity"):
                out.append((f"subject {key}", value))
    return out


# --- 1. a part is never larger than its whole -------------------------------------------------------------------

_PART_OF = re.compile(r"^\s+(?:[a-z]+\s+)?of\s+(?:the\s+|a\s+possible\s+|theoretical\s+)?$")
_SHARE_AFTER = re.compile(r"^[\sA-Za-z-]*\($")

# a mean of the traced steps against a part that is their median (a skewed handful of steps parts them): issue 28's
# case was 9.4 times the part, this allows a quarter
MEAN_SLACK = 1.25
# (finding id prefix, part, whole[, "mean"]): ``e:`` an evidence metric, ``s:`` a figure of each subject that has it,
# ``cost_share``; a subject's part is compared with the whole of the same subject when the whole is ``s:`` too
PART_OF_WHOLE = (
    ("", "s:ms", "s:step_ms"),
    ("", "s:idle_ms", "s:step_ms"),
    ("", "s:wait_ms_per_step", "s:step_ms"),
    ("", "s:short_kernels_per_step", "s:kernels_per_step"),
    ("", "s:short_kernels_in_span", "s:kernels_in_span"),  # the launch analyzer's op figures on a trace without steps
    ("", "s:exposed_comm_ms", "s:comm_ms"),
    ("", "s:largest_free_before_bytes", "s:free_before_bytes"),
    ("", "s:achieved_occupancy_pct", "s:theoretical_occupancy_pct"),
    ("", "s:excess_sectors", "s:sectors"),
    ("step_budget.", "s:median_step_gpu_idle_ms", "e:step_budget_{cause}_ms"),
    # a site's, per traced step: the sync analyzer's mean over the traced steps, where the budget's part is their median
    # (the H200 word LM without stacks: one site, 0.247 ms mean, 0.233 ms part), so it may pass the part by MEAN_SLACK
    ("step_budget.", "s:gpu_idle_ms_per_step", "e:step_budget_{cause}_ms", "mean"),
    ("step_budget.", "e:step_budget_{cause}_ms", "e:step_budget_step_ms"),
    ("step_budget.compilation", "s:compile_ms", "e:step_budget_compile_ms"),
    ("step_budget.compilation", "s:ms", "e:step_budget_compile_ms"),
    ("step_budget.compilation", "e:step_budget_compile_each_ms", "e:step_budget_compile_ms"),
    ("sync.host_sync", "s:count_per_step", "e:sync_count_per_step"),
    ("sync.host_sync", "s:count", "e:sync_count_in_span"),
    ("sync.host_sync", "s:share_of_span", "e:sync_gpu_idle_share"),
    ("launch.launch_bound", "s:kernels_per_step", "e:launch_kernels_per_step"),
    ("launch.launch_bound", "s:kernels_in_span", "e:launch_kernels_in_span"),
    ("l2.low_hit_rate", "s:share", "e:l2_low_hit_gpu_time_share"),
    ("speed_of_light.latency_bound", "s:share", "e:latency_bound_gpu_time_share"),
    ("idle.gpu_idle", "e:idle_sync_pct", "e:gpu_idle_pct"),
    ("idle.gpu_idle", "e:idle_host_pct", "e:gpu_idle_pct"),
    ("idle.gpu_idle", "e:idle_short_pct", "e:gpu_idle_pct"),
    ("idle.gpu_idle", "e:idle_other_pct", "e:gpu_idle_pct"),
    ("idle.gpu_idle", "e:idle_unlinked_pct", "e:gpu_idle_pct"),
    ("idle.gpu_idle", "e:idle_input_pct", "e:gpu_idle_pct"),
    ("fragmentation.", "e:peak_allocated_bytes", "e:peak_reserved_bytes"),
    ("fragmentation.", "e:largest_free_block_before_worst_growth_bytes", "e:free_before_worst_growth_bytes"),
    ("fragmentation.", "e:largest_free_block_at_oom_bytes", "e:reserved_unallocated_at_oom_bytes"),
    ("fragmentation.", "e:reserved_unallocated_at_oom_bytes", "e:reserved_at_oom_bytes"),
    ("fragmentation.", "e:allocated_at_oom_bytes", "e:reserved_at_oom_bytes"),
    ("comm.wait_dominates", "e:comm_wait_step_share", "1"),
)
# percentages that are a share of a whole (at most 100 %): matched in a key or metric name
_PCT_OF_WHOLE = re.compile(r"idle|hit|occupancy|overlap|util|unused|fragmentation|excess_share|last_wave|shorter_than")
_SHARE_KEY = re.compile(r"(^|_)share($|_of)")


def _evidence(finding: dict) -> dict[str, float]:
    return {e.get("metric"): e.get("value") for e in finding.get("evidence") or () if _finite(e.get("value"))}


def check_part_le_whole(doc: dict, analysis: Any = None) -> list[Violation]:
    """Every (part, whole) pair a finding states has part <= whole: in its title ("X ms of the Y ms median step",
    "N of M launches", "P % of" at most 100 %, and the "(P %)" after a part and whole equal to part/whole), among its
    figures (``PART_OF_WHOLE``; a share at most 1; a percentage of a whole at most 100 %), and in the step budget's
    table (no part longer than the step)."""
    out = []
    for f in doc.get("findings") or ():
        fid, title = f.get("id", "?"), f.get("title") or ""
        shown = numbers_in(strip_names(title, f))
        for i, a in enumerate(shown):
            b = shown[i + 1] if i + 1 < len(shown) else None
            after = title[a.end : b.start] if b else title[a.end :]
            if (
                a.kind == "pct"
                and a.prefix not in ("+", "-")
                and re.match(r"^\s+of\b", after)
                and a.value > 100 + a.slack
            ):
                out.append(Violation("part_le_whole", fid, title, f"{a.raw} of a whole is over 100 %"))
            if b is None or not _PART_OF.match(after) or a.prefix in ("+", "-"):
                continue
            if a.kind == b.kind and a.value - a.slack > b.value + b.slack:
                out.append(Violation("part_le_whole", fid, title, f"part {a.raw} is larger than its whole {b.raw}"))
            c = shown[i + 2] if i + 2 < len(shown) else None
            if (
                c is not None
                and a.kind == b.kind != "pct"
                and c.kind == "pct"
                and _SHARE_AFTER.match(title[b.end : c.start])
                and b.value > 0
            ):
                lo = max(a.value - a.slack, 0) / (b.value + b.slack) * 100
                hi = (a.value + a.slack) / max(b.value - b.slack, 1e-300) * 100
                if not (lo - c.slack <= c.value <= hi + c.slack):
                    out.append(
                        Violation(
                            "part_le_whole",
                            fid,
                            title,
                            f"{c.raw} is not {a.raw} / {b.raw} (between {lo:.2f} and {hi:.2f} %)",
                        )
                    )
        out += _figure_pairs(f)
    if analysis is not None:
        out += _budget_table_parts(analysis)
    return out


def _figure_pairs(f: dict) -> list[Violation]:
    fid, title = f.get("id", "?"), f.get("title") or ""
    ev = _evidence(f)
    subjects = f.get("subjects") or ()
    cause = fid.split(".", 1)[1] if "." in fid else ""
    out = []
    for prefix, part, whole, *basis in PART_OF_WHOLE:
        slack = MEAN_SLACK if basis == ["mean"] else 1.0
        if not fid.startswith(prefix):
            continue
        part, whole = part.replace("{cause}", cause), whole.replace("{cause}", cause)
        if part.startswith("s:"):
            for s in subjects:
                p = s.get(part[2:])
                w = s.get(whole[2:]) if whole.startswith("s:") else _whole(whole, ev, f)
                if _finite(p) and _finite(w) and p > w * slack * (1 + 1e-9) + 1e-12:
                    out.append(
                        Violation(
                            "part_le_whole",
                            fid,
                            title,
                            f"subject {s.get('name')!r}: {part[2:]} {p:.6g} is larger than {whole[2:]} {w:.6g}",
                        )
                    )
        else:
            p, w = ev.get(part[2:]), _whole(whole, ev, f)
            if _finite(p) and _finite(w) and p > w * slack * (1 + 1e-9) + 1e-12:
                out.append(
                    Violation("part_le_whole", fid, title, f"{part[2:]} {p:.6g} is larger than {whole[2:]} {w:.6g}")
                )
    named: list[tuple[str, Any, str]] = [
        (e.get("metric", ""), e.get("value"), e.get("unit", "")) for e in f.get("evidence") or ()
    ]
    named.append(("cost_share", f.get("cost_share"), "share"))
    for s in subjects:
        named += [(f"subject {s.get('name')!r} {k}", v, "") for k, v in s.items() if k not in ("kind", "name")]
    for name, value, unit in named:
        if not _finite(value):
            continue
        key = name.rsplit(" ", 1)[-1]
        if (unit == "share" or (not unit and _SHARE_KEY.search(key))) and value > 1 + 1e-9:
            out.append(Violation("part_le_whole", fid, title, f"{name} {value:.6g} is a share over 1"))
        elif (unit == "%" or key.endswith("_pct")) and _PCT_OF_WHOLE.search(key) and value > 100 + 1e-6:
            out.append(Violation("part_le_whole", fid, title, f"{name} {value:.6g} % is over 100 %"))
    return out


def _whole(ref: str, ev: dict, f: dict) -> float | None:
    if ref.startswith("e:"):
        return ev.get(ref[2:])
    if ref == "cost_share":
        return f.get("cost_share")
    return float(ref)


def _budget_table_parts(analysis: Any) -> list[Violation]:
    """In the step budget's table, no part (as drawn) is longer than its step."""
    table = _table(analysis, "step_budget", "budget")
    out = []
    if table is None:
        return out
    for row in table.itertuples():
        shown, wall = getattr(row, "shown_ms", None), getattr(row, "wall_ms", None)
        if _finite(shown) and _finite(wall) and shown > wall * (1 + 1e-9) + 1e-9:
            out.append(
                Violation(
                    "part_le_whole",
                    "table step_budget.budget",
                    f"rank {row.rank}, {row.column}: {row.label} {shown:.4g} ms",
                    f"part {shown:.4g} ms is longer than the {wall:.4g} ms step",
                )
            )
    return out


def _table(analysis: Any, analyzer: str, name: str):
    result = getattr(analysis, "results", {}).get(analyzer)
    table = result.tables.get(name) if result is not None else None
    return table if table is not None and len(table) else None


# --- 2. a budget's shares add to 100 % ------------------------------------------------------------------------

BUDGET_SUM_TOLERANCE_PCT = 0.5


def check_budget_adds_up(doc: dict, analysis: Any = None) -> list[Violation]:
    """A budget's shares add to 100 % +- 0.5: the verdict's bar, the step budget's table (its shares, and the bar its
    drawn parts make against the step), the idle breakdown (busy + idle causes = the span, per rank and per step)
    and the idle finding's evidence (compute + copies + idle = 100 %, the idle causes = idle)."""
    out = []
    tol = BUDGET_SUM_TOLERANCE_PCT
    verdict = doc.get("verdict") or {}
    budget = verdict.get("step_budget")
    if budget:
        total = 100 * sum(p.get("share") or 0 for p in budget.get("parts") or ())
        if abs(total - 100) > tol:
            out.append(
                Violation("budget_adds_up", "verdict", budget.get("basis", ""), f"the bar's parts add to {total:.2f} %")
            )
    for f in doc.get("findings") or ():
        if f.get("id") != "idle.gpu_idle":
            continue
        ev = _evidence(f)
        parts = [ev.get(k) for k in ("gpu_idle_pct", "gpu_compute_pct", "gpu_non_compute_pct")]
        if all(_finite(p) for p in parts) and abs(sum(parts) - 100) > tol:
            out.append(
                Violation("budget_adds_up", f["id"], f["title"], f"idle + compute + copies add to {sum(parts):.2f} %")
            )
        causes = [ev.get(f"idle_{c}_pct") for c in ("input", "sync", "host", "short", "other", "unlinked")]
        if _finite(ev.get("gpu_idle_pct")) and all(_finite(c) for c in causes):
            if abs(sum(causes) - ev["gpu_idle_pct"]) > tol:
                out.append(
                    Violation(
                        "budget_adds_up",
                        f["id"],
                        f["title"],
                        f"the idle causes add to {sum(causes):.2f} %, the idle time is {ev['gpu_idle_pct']:.2f} %",
                    )
                )
    if analysis is not None:
        out += _budget_tables(analysis)
    return out


def _budget_tables(analysis: Any) -> list[Violation]:
    out = []
    tol = BUDGET_SUM_TOLERANCE_PCT
    table = _table(analysis, "step_budget", "budget")
    if table is not None:
        for (rank, column), rows in table.groupby(["rank", "column"], sort=False):
            where = f"rank {rank}, {column} ({float(rows['wall_ms'].iloc[0]):.4g} ms)"
            total = 100 * float(rows["share"].sum())
            if abs(total - 100) > tol:
                out.append(
                    Violation("budget_adds_up", "table step_budget.budget", where, f"shares add to {total:.2f} %")
                )
            wall = float(rows["wall_ms"].iloc[0])
            drawn = 100 * float(rows["shown_ms"].clip(lower=0).sum()) / wall if wall > 0 else float("nan")
            if math.isfinite(drawn) and abs(drawn - 100) > tol:
                out.append(
                    Violation(
                        "budget_adds_up",
                        "table step_budget.budget",
                        where,
                        f"the parts drawn add to {drawn:.2f} % of the step (a part measured elsewhere exceeds it)",
                    )
                )
    breakdown = _table(analysis, "idle", "breakdown")
    if breakdown is not None:
        idle_cols = ["idle_sync_ns", "idle_host_ns", "idle_short_ns", "idle_other_ns", "idle_unlinked_ns"]
        for row in breakdown.itertuples():
            span = float(row.span_ns)
            if not span > 0:
                continue
            parts = float(row.compute_ns) + float(row.non_compute_ns) + sum(float(getattr(row, c)) for c in idle_cols)
            if abs(100 * parts / span - 100) > tol:
                out.append(
                    Violation(
                        "budget_adds_up",
                        "table idle.breakdown",
                        f"rank {row.rank}",
                        f"compute + copies + idle causes add to {100 * parts / span:.2f} % of the span",
                    )
                )
    per_step = _table(analysis, "idle", "per_step")
    if per_step is not None and "step_ms" in per_step:
        cols = ["busy_ms", "idle_sync_ms", "idle_host_ms", "idle_short_ms", "idle_other_ms", "idle_unlinked_ms"]
        if all(c in per_step for c in cols):
            for row in per_step.itertuples():
                step = float(row.step_ms)
                if not step > 0:
                    continue
                parts = sum(float(getattr(row, c)) for c in cols)
                if abs(100 * parts / step - 100) > tol:
                    out.append(
                        Violation(
                            "budget_adds_up",
                            "table idle.per_step",
                            f"rank {row.rank} step {row.step}",
                            f"busy + idle causes add to {100 * parts / step:.2f} % of the step",
                        )
                    )
    return out


# --- 3. "per step" only where there are steps ---------------------------------------------------------------

_PER_STEP = re.compile(r"\bper step\b|\ba step\b|\bper iteration\b|\bthe step is\b", re.I)


def step_counts(analysis: Any) -> dict[str, int]:
    """Steps each analyzer divided by (its own tables), and ``*``: the most any found."""
    counts: dict[str, int] = {}
    results = getattr(analysis, "results", {})
    sync = results.get("sync")
    if sync is not None and isinstance(sync.meta.get("steps"), dict):
        counts["sync"] = max((int(v.get("steps") or 0) for v in sync.meta["steps"].values()), default=0)
    stats = _table(analysis, "launch", "stats")
    if stats is not None:
        counts["launch"] = int(stats["steps"].max())
    elif "launch" in results:
        counts["launch"] = 0
    per_step = _table(analysis, "idle", "per_step")
    counts["idle"] = int((per_step["step"] >= 0).sum()) if per_step is not None else 0
    ranks = _table(analysis, "comm", "ranks")
    counts["comm"] = int(ranks["steps"].max()) if ranks is not None else 0
    steps = _table(analysis, "steps", "steps")
    counts["steps"] = int(len(steps)) if steps is not None else 0
    budget = _table(analysis, "step_budget", "budget")
    counts["step_budget"] = int(budget["steps"].max()) if budget is not None else 0
    frag = _table(analysis, "fragmentation", "per_step")
    counts["fragmentation"] = int(len(frag)) if frag is not None else 0
    marks = _table(analysis, "utilization", "step_marks")
    counts["utilization"] = int(len(marks)) if marks is not None else 0
    counts["*"] = max(counts.values(), default=0)
    return counts


def check_per_step_needs_steps(doc: dict, analysis: Any = None) -> list[Violation]:
    """A finding says "per step" (its text, or a ``*_per_step`` figure) only when its analyzer divided by steps
    (an analyzer whose step count is not known here: when any analyzer found steps). Needs the Analysis."""
    if analysis is None:
        return []
    counts = step_counts(analysis)
    out = []
    for f in doc.get("findings") or ():
        fid = f.get("id", "?")
        n = counts.get(f.get("analyzer", ""), counts["*"])
        if n > 0:
            continue
        said = _PER_STEP.search(f.get("title") or "")
        keys = [e.get("metric", "") for e in f.get("evidence") or () if "per_step" in e.get("metric", "")]
        keys += sorted({k for s in f.get("subjects") or () for k in s if "per_step" in k})
        if said or keys:
            what = [f"says {said.group(0)!r}"] if said else []
            what += [f"has figures {', '.join(keys[:4])}"] if keys else []
            detail = f"{' and '.join(what)}, but {f.get('analyzer')} found no steps"
            out.append(Violation("per_step_needs_steps", fid, f.get("title") or "", detail))
    return out


# --- 4. no line 0 ------------------------------------------------------------------------------------------------

_LINE_ZERO = re.compile(r"[^\s:,;()\[\]`'\"]+:0(?![\w.:])")


def check_no_line_zero(doc: dict, analysis: Any = None) -> list[Violation]:
    """No ``file:0`` in a title, subject, recommendation, the verdict or a table cell; no subject with line 0."""
    out = []
    for f in doc.get("findings") or ():
        fid = f.get("id", "?")
        for where, text in finding_texts(f):
            m = _LINE_ZERO.search(text)
            if m:
                out.append(Violation("no_line_zero", fid, text, f"{m.group(0)} in the {where}"))
        for s in f.get("subjects") or ():
            if s.get("line") == 0 or (s.get("line") in ("0",)):
                out.append(Violation("no_line_zero", fid, str(s.get("name")), "a subject at line 0"))
    sentence = (doc.get("verdict") or {}).get("sentence") or ""
    m = _LINE_ZERO.search(sentence)
    if m:
        out.append(Violation("no_line_zero", "verdict", sentence, f"{m.group(0)} in the verdict"))
    if analysis is not None:
        for name, result in getattr(analysis, "results", {}).items():
            for tname, table in result.tables.items():
                for col in table.columns:
                    if table[col].dtype.kind in "biufcmM":  # numbers, booleans, times: no text
                        continue
                    values = table[col].dropna().astype(str)
                    hits = values[values.str.contains(_LINE_ZERO)]
                    if len(hits):
                        out.append(
                            Violation(
                                "no_line_zero",
                                f"table {name}.{tname}",
                                str(hits.iloc[0]),
                                f"{len(hits)} cell(s) of column {col} at line 0",
                            )
                        )
    return out


# --- 5. no advice to capture with gpudiag profile on what gpudiag profile wrote ---------------------------------

_SELF_ADVICE = re.compile(r"`?gpudiag profile`?(?P<flags>(?:\s+--[\w-]+)*)")


def is_run_folder(doc: dict) -> bool:
    manifest = (doc.get("source") or {}).get("manifest")
    return isinstance(manifest, dict) and is_run_manifest(manifest)


def check_no_self_advice(doc: dict, analysis: Any = None) -> list[Violation]:
    """On a run folder written by ``gpudiag profile``, no text advises capturing with ``gpudiag profile`` (which the
    user did): bare, or with a flag the run already used (``--ncu`` on an ncu-mode run)."""
    if not is_run_folder(doc):
        return []
    manifest = doc["source"]["manifest"]
    used = {"--ncu"} if manifest.get("mode") == "ncu" else set()
    out = []
    texts = [(f.get("id", "?"), where, text) for f in doc.get("findings") or () for where, text in finding_texts(f)]
    texts.append(("verdict", "verdict", (doc.get("verdict") or {}).get("sentence") or ""))
    for fid, where, text in texts:
        for m in _SELF_ADVICE.finditer(text):
            flags = set(m.group("flags").split())
            if not flags or flags & used:
                out.append(
                    Violation(
                        "no_self_advice",
                        fid,
                        text,
                        f"advises {m.group(0).strip()!r} in the {where} of a run folder it wrote",
                    )
                )
                break
    return out


# --- 6. the verdict's figure is its finding's -------------------------------------------------------------------

# the part of the median step's budget (step_budget's table) that a finding's cost is; None: the idle parts together
VERDICT_BUDGET_CAUSE = {
    "idle.gpu_idle": None,
    "sync.host_sync": "sync",
    "launch.launch_bound": "launch_bound",
    "step_budget.input": "input",
    "step_budget.sync": "sync",
    "step_budget.launch_bound": "launch_bound",
    "step_budget.allocator": "allocator",
    "step_budget.unexplained": "unexplained",
}
_SAVING = re.compile(r"could save up to (?P<pct>[~<]?[\d.,]+ %) of (?P<of>[^;]+?)\.?$")
_STEP_BASES = ("step time", "the step time", "the median step", "the median step's time")


def check_verdict_matches_finding(doc: dict, analysis: Any = None) -> list[Violation]:
    """The verdict states its cited findings' figures: its cost share is the top finding's, every number in its
    sentence is a number of a cited finding (its evidence, or its title's own figures, which
    ``check_title_numbers_in_evidence`` holds to the evidence); a clean verdict's are in its bar or the median step.
    A saving said to be "of step time" or "of the median step" is the cause's share of the median step in the step
    budget's table, when the Analysis has one (the verdict and the budget beside it say the same)."""
    verdict = doc.get("verdict") or {}
    sentence = verdict.get("sentence") or ""
    if not sentence:
        return []
    by_id: dict[str, dict] = {}
    for f in doc.get("findings") or ():
        by_id.setdefault(f.get("id"), f)
    cited = [by_id[fid] for fid in verdict.get("top_finding_ids") or () if fid in by_id]
    out = []
    top = cited[0] if cited else None
    text = sentence
    if verdict.get("state") == "limited":
        if top is None:
            return [Violation("verdict_matches_finding", "verdict", sentence, "cites no finding of the report")]
        cost, top_cost = verdict.get("cost_share"), top.get("cost_share")
        if _finite(cost) and not (_finite(top_cost) and abs(cost - top_cost) <= 1e-9):
            out.append(
                Violation(
                    "verdict_matches_finding", "verdict", sentence, f"cost share {cost} is not {top['id']}'s {top_cost}"
                )
            )
        figures = []
        for f in cited:
            figures += evidence_figures(f)
            figures += [Figure(n.value, n.kind, "its title") for n in numbers_in(figures_text(f))]
            text = strip_names(text, f)
    else:
        parts = (verdict.get("step_budget") or {}).get("parts") or ()
        figures = [Figure(100 * p["share"], "pct", p.get("cause", "")) for p in parts if _finite(p.get("share"))]
        idle = sum(p.get("share") or 0 for p in parts if p.get("cause") not in ("compute", "non_compute", "collective"))
        figures.append(Figure(100 * idle, "pct", "idle share"))
        median = (doc.get("summary") or {}).get("step_time_median_ms")
        if _finite(median):
            figures.append(Figure(median, "time", "step_time_median_ms"))
    for n in numbers_in(text):
        if not any(matches(n, g) for g in figures):
            out.append(Violation("verdict_matches_finding", "verdict", sentence, f"{n.raw} is in no cited finding"))
    if analysis is not None and top is not None:
        out += _verdict_against_budget(verdict, top, sentence, analysis)
    return out


def _verdict_against_budget(verdict: dict, top: dict, sentence: str, analysis: Any) -> list[Violation]:
    said = _SAVING.search(sentence)
    fid = top.get("id", "")
    if said is None or said.group("of").strip() not in _STEP_BASES or fid not in VERDICT_BUDGET_CAUSE:
        return []
    table = _table(analysis, "step_budget", "budget")
    if table is None:
        return []
    median = table[table["column"] == "median step"]
    if not len(median):
        return []
    rank = next((s.get("name") for s in top.get("subjects") or () if s.get("kind") == "rank"), None)
    rank = int(rank) if rank is not None and str(rank).isdigit() else int(median["rank"].min())
    rows = median[median["rank"] == rank]
    if not len(rows):
        return []
    cause = VERDICT_BUDGET_CAUSE[fid]
    if cause is None:
        share = float(rows.loc[~rows["gpu_busy"].astype(bool), "share"].clip(lower=0).sum())
    else:
        share = float(rows.loc[rows["part"] == cause, "share"].sum())
    shown = numbers_in(said.group("pct"))[0]
    if not matches(shown, Figure(100 * share, "pct", "budget")):
        return [
            Violation(
                "verdict_matches_finding",
                "verdict",
                sentence,
                f"saves {shown.raw} of {said.group('of').strip()} ({fid}), but the step budget gives that cause "
                f"{100 * share:.1f} % of rank {rank}'s median step",
            )
        ]
    return []


# --- 7. numbers read as numbers ----------------------------------------------------------------------------------

_RAW_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?[eE][+-]?\d+\b|\bnan\b|<NA>|(?<![\w.])-?inf\b|\binfinity\b", re.I)
COUNT_UNITS = frozenset(
    "count steps launches blocks sms kernels segments ranks collectives calls samples times retries syncs".split()
)
COUNT_KEYS = frozenset(
    "launches count ooms allocations distinct_sizes samples grid_blocks block_threads sm_count segments steps rank "
    "step registers_per_thread collectives kernels entries".split()
)
COUNT_COLUMNS = frozenset(
    "launches kernels steps samples entries allocations distinct_sizes segments ooms allocs segment_alloc segment_free "
    "segment_map segment_unmap collectives count grid_size block_size registers_per_thread sm_count outliers "
    "warmup_excluded last_count segment_ops first_step last_step step run_step trace_step rank".split()
)
_RATE = re.compile(r"per_|_per|mean|avg|median|rate|_each|ratio|times_median", re.I)
_COUNT_NOUN = re.compile(
    r"\s?(?:host\s+)?(steps?|kernels?|launch(?:es)?|syncs?|blocks?|segments?|ranks?|rank\(s\)|segment\(s\)|step\(s\)|"
    r"collectives?|times?|time\(s\)|samples?|calls?|allocations?|retries|threads?|SMs?)\b(?P<rest>[^;,.()]{0,40})"
)


def check_clean_numbers(doc: dict, analysis: Any = None) -> list[Violation]:
    """Counts are integers (evidence in a count unit, count figures of subjects, a number before a count noun in a
    title that is not a rate, count columns of the tables) and no title, subject, recommendation or verdict shows
    ``e+``, ``nan``, ``<NA>`` or ``inf``."""
    out = []
    texts = [(f.get("id", "?"), where, t) for f in doc.get("findings") or () for where, t in finding_texts(f)]
    texts.append(("verdict", "verdict", (doc.get("verdict") or {}).get("sentence") or ""))
    for fid, where, text in texts:
        m = _RAW_NUMBER.search(text)
        if m:
            out.append(Violation("clean_numbers", fid, text, f"{m.group(0)!r} in the {where}"))
    for f in doc.get("findings") or ():
        fid, title = f.get("id", "?"), f.get("title") or ""
        for e in f.get("evidence") or ():
            unit, metric, value = str(e.get("unit", "")).lower(), e.get("metric", ""), e.get("value")
            if unit in COUNT_UNITS and not _RATE.search(metric) and _finite(value) and value != round(value):
                out.append(Violation("clean_numbers", fid, title, f"count {metric} = {value} is not an integer"))
        for s in f.get("subjects") or ():
            for key, value in s.items():
                if key in COUNT_KEYS and _finite(value) and value != round(value):
                    out.append(
                        Violation(
                            "clean_numbers",
                            fid,
                            title,
                            f"subject {s.get('name')!r}: count {key} = {value} is not an integer",
                        )
                    )
        stripped = figures_text(f)
        for n in numbers_in(stripped):
            if n.decimals == 0 or n.unit:
                continue
            noun = _COUNT_NOUN.match(stripped, n.end)
            if noun and not re.search(r"\bper\b|\beach\b|\ba step\b|\bon average\b", noun.group(0)):
                out.append(Violation("clean_numbers", fid, title, f"count {n.raw} {noun.group(1)} is not an integer"))
    if analysis is not None:
        for name, result in getattr(analysis, "results", {}).items():
            for tname, table in result.tables.items():
                for col in table.columns:
                    if col not in COUNT_COLUMNS or table[col].dtype.kind not in "f":
                        continue
                    values = table[col].dropna()
                    values = values[values.map(math.isfinite)]
                    bad = values[values != values.round()]
                    if len(bad):
                        out.append(
                            Violation(
                                "clean_numbers",
                                f"table {name}.{tname}",
                                f"{col} = {bad.iloc[0]}",
                                f"{len(bad)} non-integer count(s) in column {col}",
                            )
                        )
    return out


# --- 8. every number in a title is in its finding's evidence -----------------------------------------------------


def check_title_numbers_in_evidence(doc: dict, analysis: Any = None) -> list[Violation]:
    """Every number a title shows matches a value of that finding's evidence (the module docstring says how)."""
    out = []
    for f in doc.get("findings") or ():
        fid, title = f.get("id", "?"), f.get("title") or ""
        figures = evidence_figures(f)
        for n in numbers_in(figures_text(f)):
            if not any(matches(n, g) for g in figures):
                out.append(Violation("title_numbers_in_evidence", fid, title, f"{n.raw!r} is in none of its evidence"))
    return out


# --- 9. a subject is never more severe than its finding ---------------------------------------------------------


def check_subject_severity(doc: dict, analysis: Any = None) -> list[Violation]:
    """No subject's severity exceeds its finding's (an info finding with a critical subject contradicts itself)."""
    out = []
    for f in doc.get("findings") or ():
        level = SEVERITY_ORDER.get(f.get("severity"), 2)
        for s in f.get("subjects") or ():
            if SEVERITY_ORDER.get(s.get("severity"), -1) > level:
                out.append(
                    Violation(
                        "subject_severity",
                        f.get("id", "?"),
                        f"{s.get('kind')} {s.get('name')}",
                        f"subject is {s['severity']}, its finding {f.get('severity')}",
                    )
                )
    return out


INVARIANTS: tuple[Callable[[dict, Any], list[Violation]], ...] = (
    check_part_le_whole,
    check_budget_adds_up,
    check_per_step_needs_steps,
    check_no_line_zero,
    check_no_self_advice,
    check_verdict_matches_finding,
    check_clean_numbers,
    check_title_numbers_in_evidence,
    check_subject_severity,
)


def by_invariant(violations: Iterable[Violation]) -> dict[str, list[Violation]]:
    out: dict[str, list[Violation]] = {}
    for v in violations:
        out.setdefault(v.invariant, []).append(v)
    return out
