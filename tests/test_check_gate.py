"""The CI gate's rule as a library call (diagnose/checks/gate.py): what `gpudiag check` decides, from Python."""

from __future__ import annotations

import pytest

import diagnose
from diagnose.checks.gate import gate, known_finding_ids
from diagnose.findings import Finding, Severity
from parsers.errors import InputError
from tests.paths import FIXTURES

SYNC_PLANTED = FIXTURES / "runs" / "sync_planted"


def fake_finding(fid: str, severity: Severity) -> Finding:
    return Finding(id=fid, analyzer=fid.split(".")[0], severity=severity, title=f"fake {fid}")


FAKE = [
    fake_finding("l2.low_hit_rate", Severity.CRITICAL),
    fake_finding("sync.host_sync", Severity.WARNING),
    fake_finding("idle.gpu_idle", Severity.WARNING),
    fake_finding("steps.not_measured", Severity.INFO),
]


def test_fail_on_cuts_at_the_severity():
    critical = gate(FAKE)
    assert not critical.passed and critical.exit_code == 1
    assert [f.id for f in critical.hits] == ["l2.low_hit_rate"]
    assert critical.line == "FAIL: 1 finding at or above critical: l2.low_hit_rate"
    warning = gate(FAKE, "warning")
    assert [f.id for f in warning.hits] == ["l2.low_hit_rate", "sync.host_sync", "idle.gpu_idle"]
    assert len(gate(FAKE, Severity.INFO).hits) == 4
    assert gate(FAKE[1:]).line == "OK: no finding at or above critical" and gate(FAKE[1:]).exit_code == 0


def test_ignore_takes_ids_and_globs_and_says_what_it_left_out():
    result = gate(FAKE, "warning", ignore=["l2.*", "idle.gpu_idle"])
    assert [f.id for f in result.hits] == ["sync.host_sync"]
    assert result.ignored_ids == ("idle.gpu_idle", "l2.low_hit_rate")
    assert gate(FAKE, "info", ignore=["*.not_measured", "l2.*", "sync.*", "idle.*"]).passed


def test_an_ignore_value_no_analyzer_declares_is_an_error():
    with pytest.raises(InputError, match=r"--ignore l2.low_hit: no finding has this id \(did you mean l2.low_hit_rate"):
        gate(FAKE, ignore=["l2.low_hit"])
    # ids a findings JSON holds count as known, as `gpudiag check` reads one back
    assert gate(FAKE, ignore=["nccl.x"], known_ids=[*known_finding_ids(), "nccl.x"]).passed is False


def test_gate_on_a_real_run_agrees_with_the_cli():
    """tests/test_cli_check.py: `gpudiag check runs/sync_planted --fail-on warning` fails on the syncs (the idle is
    info: 8.9 % of the untraced median step)."""
    analysis = diagnose.analyze(diagnose.load(SYNC_PLANTED, quiet=True))
    assert gate(analysis.findings, "critical").passed
    result = gate(analysis.findings, "warning")
    assert result.line == "FAIL: 1 finding at or above warning: sync.host_sync"
