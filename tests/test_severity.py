"""One home for severity cut-offs (issue 29): ``Severity.of`` and ``band`` (diagnose/findings.py) give every
analyzer and judge its "critical from X, warning from Y". Each form the analyzers use is pinned at its boundary
(a value equal to the cut-off, the next float above and below it, NaN, None), and no analyzer or judge module
spells a cut-off inline any more: an AST check, which fails on planted code of each old spelling."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from diagnose.findings import Severity, band
from tests.paths import REPO

C, W, INFO = Severity.CRITICAL, Severity.WARNING, Severity.INFO
NAN = float("nan")


def above(x: float) -> float:
    return math.nextafter(x, math.inf)


def below(x: float) -> float:
    return math.nextafter(x, -math.inf)


# form: (call, [(value, expected severity)]), the cut-offs 0.25 (warning) and 0.5 (critical) unless named
FORMS = {
    # comm's exposed / wait shares, steps' host-bound ratio and spread, step_budget.periodic (a None share: warning)
    "critical from X (>=), else warning": (
        lambda v: Severity.of(v, critical=0.5, otherwise=W),
        [(0.5, C), (above(0.5), C), (below(0.5), W), (NAN, W), (None, W)],
    ),
    # speed_of_light's latency-bound kernels (l2's L1-path kernels too)
    "warning from X (>=), else info": (
        lambda v: Severity.of(v, warning=0.25),
        [(0.25, W), (above(0.25), W), (below(0.25), INFO), (NAN, INFO), (None, INFO)],
    ),
    # idle, sync (finding and location), steps' rank subjects, memory_access, step_budget.common.severity_of
    "critical from X, warning from Y (>=), else info": (
        lambda v: Severity.of(v, warning=0.25, critical=0.5),
        [
            (0.5, C),
            (above(0.5), C),
            (below(0.5), W),
            (0.25, W),
            (above(0.25), W),
            (below(0.25), INFO),
            (NAN, INFO),
            (None, INFO),
        ],
    ),
    # utilization's low GPU utilisation: critical under X, a value at X is a warning
    "critical under X (<), else warning": (
        lambda v: Severity.of(v, critical=10.0, lower_is_worse=True, strict=True, otherwise=W),
        [(10.0, W), (above(10.0), W), (below(10.0), C), (NAN, W), (None, W)],
    ),
    # occupancy's gap: critical beyond X points, a gap at X is a warning
    "critical beyond X (>), else warning": (
        lambda v: Severity.of(v, critical=20.0, strict=True, otherwise=W),
        [(20.0, W), (above(20.0), C), (below(20.0), W), (NAN, W), (None, W)],
    ),
    # a lower-is-worse cut-off reached at it (no analyzer uses it today; the direction and inclusion are separate)
    "critical at or under X (<=), else info": (
        lambda v: Severity.of(v, critical=10.0, lower_is_worse=True),
        [(10.0, C), (above(10.0), INFO), (below(10.0), C), (NAN, INFO), (None, INFO)],
    ),
    # l2's hit-rate bands (85 / 62 %): strictly under a band is in it, passing both is no severity
    "band, lower is worse (<), else None": (
        lambda v: band(v, 85.0, 62.0),
        [
            (62.0, W),
            (below(62.0), C),
            (above(62.0), W),
            (85.0, None),
            (below(85.0), W),
            (above(85.0), None),
            (NAN, None),
            (None, None),
        ],
    ),
    "band, higher is worse (>), else None": (
        lambda v: band(v, 10.0, 20.0, lower_is_worse=False),
        [
            (20.0, W),
            (above(20.0), C),
            (below(20.0), W),
            (10.0, None),
            (above(10.0), W),
            (below(10.0), None),
            (NAN, None),
        ],
    ),
}


@pytest.mark.parametrize("form", FORMS)
def test_each_form_at_its_boundaries(form):
    call, cases = FORMS[form]
    got = [(value, call(value)) for value, _ in cases]
    assert got == cases
    assert all(s is None or type(s) is Severity for _, s in got)  # a member, never the bare int of the default


def test_numpy_values_and_the_member_returned():
    np = pytest.importorskip("numpy")
    assert Severity.of(np.float64(0.5), warning=0.25, critical=0.5) is C
    assert Severity.of(np.float64("nan"), critical=0.5, otherwise=W) is W
    assert Severity.of(0.1, warning=0.25) is INFO  # the default, INFO, comes back as the member
    assert Severity.of(0.1) is INFO  # no cut-off: never reached


@pytest.mark.parametrize(
    "a, b, expected",
    [((0.5, 0.5), (0.5, 0.5), C), ((0.5, 0.5), (below(0.5), 0.5), W), ((below(0.5), 0.5), (0.5, 0.5), W)],
)
def test_both_must_reach_theirs(a, b, expected):
    """launch_config's small grids and occupancy's gap are critical only when both figures reach their cut-off
    (launch's launch-bound warning likewise): the lesser of the two severities."""
    got = min(Severity.of(a[0], critical=a[1], otherwise=W), Severity.of(b[0], critical=b[1], otherwise=W))
    assert got is expected


# ---- no analyzer or judge spells a cut-off inline -------------------------------------------------------------

NOT_YET: set[str] = set()  # analyzer files whose cut-offs are still inline: none


def _is_member(node: ast.AST) -> bool:
    """``Severity.X``"""
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Severity"


def _gives_member(stmt: ast.stmt) -> bool:
    """``sev = Severity.X`` or ``return Severity.X``"""
    if isinstance(stmt, ast.Return | ast.Assign | ast.AnnAssign):
        return stmt.value is not None and _is_member(stmt.value)
    return False


def _ladder(stmts: list[ast.stmt]) -> bool:
    """Statements that end in a Severity member on every path through comparisons: ``if a: sev = CRITICAL``
    ``elif b: ... else: sev = INFO``, or ``if a: return CRITICAL`` ... ``return INFO``."""
    if not stmts:
        return False
    first = stmts[0]
    if _gives_member(first):
        return True
    if isinstance(first, ast.If) and len(first.body) == 1 and _gives_member(first.body[0]):
        return _ladder(first.orelse) if first.orelse else _ladder(stmts[1:])
    return False


def inline_cutoffs(source: str) -> list[int]:
    """Lines where a condition picks a Severity member: a conditional expression with a member for a branch, or
    an if-ladder whose every branch gives one. ``Severity.of`` is where that choice lives."""
    lines, rungs = [], set()  # rungs: the ifs of a ladder (or a nested ternary) already named by its first
    for node in ast.walk(ast.parse(source)):  # breadth first: a ladder's first if comes before its elifs
        if isinstance(node, ast.IfExp) and node not in rungs and (_is_member(node.body) or _is_member(node.orelse)):
            lines.append(node.lineno)
            rungs.update(n for n in ast.walk(node) if isinstance(n, ast.IfExp))
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if not isinstance(block, list):
                continue
            for i, stmt in enumerate(block):
                if isinstance(stmt, ast.If) and stmt not in rungs and _ladder(block[i:]):
                    lines.append(stmt.lineno)
                    rungs.update(n for n in ast.walk(stmt) if isinstance(n, ast.If))
                    rungs.update(s for s in block[i + 1 :] if isinstance(s, ast.If))
    return sorted(lines)


JUDGING = sorted(
    p
    for p in [*(REPO / "diagnose/analyzers").glob("*.py"), *(REPO / "diagnose/judges").rglob("*.py")]
    if p.name not in NOT_YET or p.parent.name != "analyzers"
)


def test_the_check_reads_every_analyzer_and_judge():
    names = {p.relative_to(REPO).as_posix() for p in JUDGING}
    assert {"diagnose/analyzers/sync.py", "diagnose/judges/step_budget/common.py"} <= names
    assert len(names) >= 20  # every analyzer module and judge, but the three named in NOT_YET


@pytest.mark.parametrize("path", JUDGING, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_inline_cutoff(path: Path):
    assert inline_cutoffs(path.read_text()) == [], f"{path.relative_to(REPO)}: use Severity.of (diagnose/findings.py)"


PLANTED = {  # each spelling the analyzers used before Severity.of, and the line the check must name
    "ternary": ("sev = Severity.CRITICAL if share >= t.critical else Severity.WARNING\n", [1]),
    "nested ternary": (
        "worst = max([Severity.CRITICAL if x >= a else Severity.WARNING if x >= b else Severity.INFO])\n",
        [1],
    ),
    "one member branch": ("s = severity_of(share, th) if share is not None else Severity.INFO\n", [1]),
    "a boolean": ("sev = Severity.WARNING if bound else Severity.INFO\n", [1]),
    "if / elif / else": (
        "def f(x):\n"
        "    if x >= a:\n"
        "        sev = Severity.CRITICAL\n"
        "    elif x >= b:\n"
        "        sev = Severity.WARNING\n"
        "    else:\n"
        "        sev = Severity.INFO\n"
        "    return sev\n",
        [2],
    ),
    "returns falling through": (
        "def f(x):\n"
        "    if x >= a:\n"
        "        return Severity.CRITICAL\n"
        "    if x >= b:\n"
        "        return Severity.WARNING\n"
        "    return Severity.INFO\n",
        [2],
    ),
    "inside a loop": (
        "for r in rows:\n"
        "    if r.x >= a:\n"
        "        sev = Severity.INFO\n"
        "    elif r.y > b:\n"
        "        sev = Severity.CRITICAL\n"
        "    else:\n"
        "        sev = Severity.WARNING\n",
        [2],
    ),
}


@pytest.mark.parametrize("name", PLANTED)
def test_the_check_finds_planted_cutoffs(name):
    source, lines = PLANTED[name]
    assert inline_cutoffs(source) == lines


def test_the_check_passes_what_the_analyzers_write_now():
    source = (
        "sev = Severity.of(share, critical=t.critical, otherwise=Severity.WARNING)\n"
        "for r in rows:\n"
        "    if r.saturated >= t.saturated:\n"  # a gate before grading (occupancy): not every branch a member
        "        sev = Severity.INFO\n"
        "    else:\n"
        "        sev = min(Severity.of(r.gap, critical=a, strict=True, otherwise=Severity.WARNING), Severity.WARNING)\n"
        "subjects.append(Subject('kernel', name, Severity.WARNING, f))\n"
        "if not rows:\n"
        "    return None\n"
    )
    assert inline_cutoffs(source) == []
