"""tools/layering.py, the in-repo check of DESIGN.md's import rules that CI runs: silent on this tree, and one line
naming the module and the rule for each break planted in a copy of it (a clone has no ../shared to run instead)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO
from tools.layering import PACKAGES, breaks, imported, modules

PLANTED = {  # rule: ({file to append to or create: source}, the line the check must print)
    "parsers stand alone (a lazy import)": (
        {"parsers/events.py": "\n\ndef _planted():\n    import reports.html\n"},
        "parsers.events imports reports.html (parsers stand alone)",
    ),
    "reports take public names only": (
        {"reports/markdown.py": "\nfrom diagnose.findings import _planted\n"},
        "reports.markdown imports diagnose.findings._planted (reports take only diagnose.findings' public names)",
    ),
    "reports take nothing else from diagnose": (
        {"reports/markdown.py": "\nimport diagnose.ingest.profile_data\n"},
        "reports.markdown imports diagnose.ingest.profile_data (reports take only diagnose.findings' public names)",
    ),
    "analyzers never import the launcher": (
        {"diagnose/analyzers/launch.py": "\n\ndef _planted():\n    from diagnose.launch import api\n"},
        "diagnose.analyzers.launch imports diagnose.launch.api (analyzers read tables, not the launcher)",
    ),
    "analyzers never import one another": (
        {"diagnose/analyzers/launch.py": "\nfrom . import sync\n"},
        "diagnose.analyzers.launch imports diagnose.analyzers.sync"
        " (analyzers never import one another: shared tables belong in diagnose/derive)",
    ),
    "no import circles": (
        {
            "parsers/planted_circle.py": "from parsers import planted_circle_back\n",
            "parsers/planted_circle_back.py": "from . import planted_circle\n",
        },
        "import circle: parsers.planted_circle -> parsers.planted_circle_back",
    ),
}


@pytest.fixture
def tree_copy(tmp_path):
    """The three checked packages copied, sources only (what the check reads)."""
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_tree_keeps_the_import_rules():
    """No break: the tables analyzers share (the step table, the per-kernel memory access, the occupancy limiter, a
    step's GPU busy and idle, the sync calls and sites, the trace window) are in diagnose/derive, not read from
    another analyzer (at 73f5234 six imports broke this rule: utilization, ncu_rules and step_budget took them from
    steps, memory_access, occupancy, idle and sync)."""
    assert breaks(REPO) == []


def analyzers_imported_by_derive(root) -> list[str]:
    """``module imports target`` for each import of diagnose/derive that reaches diagnose.analyzers: DESIGN.md's
    "diagnose/derive ... imports parsers and never analyzers" (the hook's rules do not name diagnose/derive)."""
    found = []
    for module, path in modules(str(root)).items():
        if module == "diagnose.derive" or module.startswith("diagnose.derive."):
            tree = ast.parse(Path(path).read_text(encoding="utf-8"))
            for target, _ in imported(module, path, tree):
                if target == "diagnose.analyzers" or target.startswith("diagnose.analyzers."):
                    found.append(f"{module} imports {target}")
    return found


def test_derive_never_imports_an_analyzer(tree_copy):
    assert analyzers_imported_by_derive(REPO) == []
    with open(tree_copy / "diagnose" / "derive" / "step_table.py", "a", encoding="utf-8") as f:
        f.write("\n\ndef _planted():\n    from diagnose.analyzers import steps\n")
    assert analyzers_imported_by_derive(tree_copy) == ["diagnose.derive.step_table imports diagnose.analyzers.steps"]


@pytest.mark.parametrize("rule", PLANTED)
def test_a_planted_break_is_printed_and_fails_the_command(tree_copy, rule):
    sources, line = PLANTED[rule]
    before = breaks(tree_copy)
    for path, source in sources.items():
        with open(tree_copy / path, "a", encoding="utf-8") as f:
            f.write(source)
    assert set(breaks(tree_copy)) - set(before) == {line}
    # CI runs the script: the line on stdout, and a non-zero exit
    r = subprocess.run(
        [sys.executable, str(REPO / "tools" / "layering.py"), str(tree_copy)], capture_output=True, text=True
    )
    assert r.returncode == 1 and line in r.stdout.splitlines(), (r.returncode, r.stdout, r.stderr)
