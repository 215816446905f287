"""tools/layering.py, the in-repo check of DESIGN.md's import rules that CI runs: silent on this tree, and one line
naming the module and the rule for each break planted in a copy of it (a clone has no ../shared to run instead)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.paths import REPO
from tools.layering import PACKAGES, breaks

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
        {"reports/markdown.py": "\nimport diagnose.profile_data\n"},
        "reports.markdown imports diagnose.profile_data (reports take only diagnose.findings' public names)",
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


# Breaks of "analyzers never import one another" already in the tree at 73f5234, before the check came into the
# repository: CI (.ci/run) fails on them until the tables they share move to diagnose/derive (DESIGN.md). Listed
# so that this test catches any other break, and fails when one of these is mended (then delete its line).
KNOWN_BREAKS = [
    f"diagnose.analyzers.{a} imports diagnose.analyzers.{b} (analyzers never import one another: shared tables belong"
    " in diagnose/derive)"
    for a, b in [
        ("utilization", "steps"),
        ("ncu_rules", "memory_access"),
        ("ncu_rules", "occupancy"),
        ("step_budget", "idle"),
        ("step_budget", "sync"),
        ("step_budget", "steps"),
    ]
]


def test_the_tree_keeps_the_import_rules():
    assert sorted(breaks(REPO)) == sorted(KNOWN_BREAKS)


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
