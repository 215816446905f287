"""Fault: ncu itself is killed mid-run (issue 8, faults in `gpudiag profile`).

A FAKE `ncu` (tests/launch/fake_ncu/ncu, first on PATH) writes real ncu's progress lines,
the first bytes of a report, then SIGKILLs itself with the application still running under it.
`gpudiag profile --ncu` must end that orphaned application, exit non-zero with one clear message,
keep the partial report out of the way (never read as a report, never exported to CSV) and
leave a manifest that says ncu was killed and why the report and CSV are missing.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.launch.fault_helpers import assert_valid_run_folder, report_no_html
from tests.launch.launch_helpers import REPO, SCRIPTS, base_env, gpudiag

FAKE_NCU = REPO / "tests" / "launch" / "fake_ncu"


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # a zombie waiting for init is gone too
    except FileNotFoundError:
        return True


def _profile_marker_loop(run, env, *more):
    """`gpudiag profile --ncu` (step 2) of a long marker loop, under the FAKE ncu that ``env`` puts on PATH."""
    return gpudiag(
        "profile",
        *more,
        "--ncu",
        "--ncu-step",
        "2",
        "-o",
        run,
        "--",
        sys.executable,
        SCRIPTS / "marker_loop.py",
        "100000",
        "0.02",
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize("partial", [True, False], ids=["partial-report", "no-report"])
def test_ncu_killed_mid_run(tmp_path, partial):
    run = tmp_path / "r"
    env = base_env(PATH=f"{FAKE_NCU}{os.pathsep}{os.environ['PATH']}", FAKE_NCU_PARTIAL_REPORT=str(int(partial)))
    r = _profile_marker_loop(run, env)
    assert r.returncode == 137 and "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("gpudiag: error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "gpudiag: error: ncu was killed (SIGKILL) after profiling 3 kernel launches: there is no complete ncu report "
        "and no CSV"
    )
    m = assert_valid_run_folder(run)
    assert (m["mode"], m["status"], m["signal"], m["exit_code"]) == ("ncu", "signal", "SIGKILL", 137)
    assert m["missing"] == ["ncu/raw.csv", "ncu/report.ncu-rep"] and list(m["artifacts"]) == ["events/rank0.jsonl"]
    (fault,) = m["faults"]
    assert fault["kind"] == "ncu-killed" and fault["launches"] == 3
    assert (
        m["missing_reasons"]["ncu/raw.csv"] == "not exported: ncu was killed (SIGKILL) after profiling 3 kernel "
        "launches"
    )
    assert not (run / "ncu" / "raw.csv").exists() and not (run / "ncu" / "fake_ncu_import_was_called").exists()
    assert not (run / "ncu" / "report.ncu-rep").exists()
    if partial:
        assert fault["partial_report"] == "ncu/report.partial.ncu-rep"
        assert (run / "ncu" / "report.partial.ncu-rep").read_bytes().startswith(b"NVR\x00")
        assert "kept as ncu/report.partial.ncu-rep, not read as a report" in m["missing_reasons"]["ncu/report.ncu-rep"]
    else:
        assert fault["partial_report"] is None and m["missing_reasons"]["ncu/report.ncu-rep"].endswith("no report")
    recs = [json.loads(line) for line in (run / "events" / "rank0.jsonl").read_text().splitlines()]
    assert _gone(recs[0]["pid"])  # the application ncu left behind was stopped,
    assert recs[-1]["event"] == "end"  # by SIGTERM: it flushed its events

    rep, notes = report_no_html(run, "--json", tmp_path / "f.json")
    assert rep.returncode == 0, rep.stderr
    assert (
        notes[0] == "ncu was killed by SIGKILL (exit code 137); what was not finished by then is missing or cut short"
    )
    assert notes[1].startswith("ncu/raw.csv is missing: not exported") and notes[2].startswith(
        "ncu/report.ncu-rep is missing: ncu was killed (SIGKILL)"
    )
    source = json.loads((tmp_path / "f.json").read_text())["source"]
    assert source["artifacts"]["ncu_kernel_launches"] == 0  # nothing partial is shown as kernels


def test_ncu_that_crashes_leaves_no_script_running(tmp_path):
    """On the H200 ncu's wrapper printed "Segmentation fault" and exited 139 under a JAX script, which then ran on,
    orphaned, for minutes. A FAKE ncu that exits 139 at step 2 without ending the application plays that here."""
    run = tmp_path / "r"
    env = base_env(PATH=f"{FAKE_NCU}{os.pathsep}{os.environ['PATH']}", FAKE_NCU_CRASH_EXIT="139")
    # the script would loop for over half an hour: the timeout is a hang guard. The crash comes at step 2, as the
    # window ends: --after-window continue keeps the window's stop from racing it (in 1 of 14 runs alone on the CPU
    # host, and in one full-suite CI run, the stop came first and the crash was then no fault)
    r = _profile_marker_loop(run, env, "--after-window", "continue")
    assert "Traceback" not in r.stderr and r.returncode == 139
    m = assert_valid_run_folder(run)
    (killed,) = [f for f in m["faults"] if f["kind"] == "ncu-killed"]
    assert killed["signal"] == "exit code 139, with the script still running"
    assert killed["partial_report"] == "ncu/report.partial.ncu-rep"
    assert any(n.startswith("ncu ended (exit code 139) while the script under it still ran") for n in m["notes"])
    recs = [json.loads(line) for line in (run / "events" / "rank0.jsonl").read_text().splitlines()]
    assert _gone(recs[0]["pid"])  # the script was stopped with ncu
