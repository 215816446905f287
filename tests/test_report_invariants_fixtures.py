"""The report invariants (diagnose/checks/report_invariants.py) on the analysis of every real input under fixtures/.

One test per input, so a failure names it: every run folder (a folder with a manifest.json, fixtures/runs/
and fixtures/comm/), every folder of per-rank traces (files named ``rank<N>`` / ``rank-<N>``), and every file
under fixtures/trace, ncu, memory, comm, events and shared that gpudiag recognises by its content. The captures'
notes and logs (``*.md``, ``*.txt``, ``*.log``, ``*.py``, ``LICENSE``) are left out: their sniff can look like a
CSV, but they are what PROVENANCE.md describes, not inputs. A recognised file that turns out unreadable
(an InputError) has no analysis to check and is skipped with the error as the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import diagnose
from diagnose.checks.report_invariants import by_invariant, check_analysis
from parsers import registry
from parsers.errors import InputError
from parsers.reader import FINDINGS
from tests.paths import FIXTURES, REPO

ARTIFACT_FOLDERS = ("trace", "ncu", "memory", "comm", "events", "shared")
NOT_INPUTS = re.compile(r"\.(md|txt|log|py|cu)$|^LICENSE$|^PROVENANCE")
RANK_FILE = re.compile(r"rank-?\d+")


def _recognised(path: Path) -> bool:
    if NOT_INPUTS.search(path.name):
        return False
    try:
        reader = registry.detect(path)
    except InputError:
        return False
    return reader is not None and reader.table != FINDINGS


def every_input() -> list[Path]:
    inputs = sorted(p.parent for p in FIXTURES.rglob("manifest.json") if "bad" not in p.parts)
    for folder in ARTIFACT_FOLDERS:
        root = FIXTURES / folder
        files = sorted(p for p in root.rglob("*") if p.is_file() and _recognised(p)) if root.is_dir() else []
        files = [p for p in files if not any(run in p.parents for run in inputs)]  # a run's files: read as a run
        inputs += files
        by_folder: dict[Path, int] = {}
        for p in files:
            if RANK_FILE.search(p.name):
                by_folder[p.parent] = by_folder.get(p.parent, 0) + 1
        inputs += sorted(d for d, n in by_folder.items() if n >= 2)
    return inputs


INPUTS = every_input()


def test_every_kind_of_input_is_collected():
    names = {p.relative_to(FIXTURES).as_posix() for p in INPUTS}
    assert {"runs/sync_heavy", "comm/gloo_straggler", "comm/hta", "trace/jax/perfetto_trace.json.gz"} <= names
    assert {"ncu/small_grid/report.ncu-rep.gz", "memory/oom/snapshot.pickle.gz", "events/nvml_capture1.csv"} <= names
    assert not any(p.name.endswith((".md", ".log")) for p in INPUTS)


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_report_invariants_hold(path):
    try:
        analysis = diagnose.analyze(diagnose.load(path, quiet=True, workers=1))
    except InputError as e:
        pytest.skip(f"no analysis to check: {e}")
    violations = check_analysis(analysis)
    lines = [f"{path.relative_to(REPO)}: {len(violations)} violation(s) of the report invariants"]
    for invariant, found in by_invariant(violations).items():
        lines.append(f"  {invariant}:")
        lines += [f"    {v.finding_id}: {v.detail} — {v.text[:240]}" for v in found]
    assert not violations, "\n".join(lines)
