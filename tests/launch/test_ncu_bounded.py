"""Bounded --ncu runs (issue 17): a wall-time budget, and SIGINT/SIGTERM that end ncu and the script within 10 s.

A FAKE `ncu` (tests/launch/fake_ncu/ncu with FAKE_NCU_WAIT_FOR_APP=1) ignores SIGINT/SIGTERM and waits for the
application however long it runs, as real ncu did on the H200 with a JAX script; it writes its report when the
application ends. gpudiag must stop the application (so ncu writes what it profiled), and kill what is still
alive 8 s later.

The outcomes are asserted, not the seconds a busy machine takes: which way the run ended (stopped: exit 143 and
the stop's note; killed after the grace: 137 and its message) and that no stop came early (a run stopped at
--ncu-timeout T lasted at least T). The script would run for over half an hour otherwise; the subprocess
timeouts are hang guards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.launch.fault_helpers import assert_valid_run_folder
from tests.launch.launch_helpers import REPO, SCRIPTS, base_env, gpudiag

FAKE_NCU = REPO / "tests" / "launch" / "fake_ncu"


def _env():
    return base_env(PATH=f"{FAKE_NCU}{os.pathsep}{os.environ['PATH']}", FAKE_NCU_WAIT_FOR_APP="1")


def _profile_args(run, *extra):
    return ["profile", "--ncu", "--ncu-step", "2", "-o", run, *extra, "--", sys.executable]


def test_ncu_timeout_stops_the_script_and_keeps_the_report(tmp_path):
    run = tmp_path / "r"
    started = time.monotonic()
    r = gpudiag(
        *_profile_args(run, "--ncu-timeout", "3"), SCRIPTS / "marker_loop.py", "100000", "0.02", env=_env(), timeout=300
    )
    assert time.monotonic() - started >= 3  # not stopped before the timeout
    assert "still running 8 s after the stop" not in r.stderr  # the stop ended it, no kill after the grace
    assert r.returncode == 143 and "Traceback" not in r.stderr  # the script ended by SIGTERM, ncu passed it on
    assert "gpudiag: --ncu-timeout 3 s: stopping the script under ncu" in r.stderr
    m = assert_valid_run_folder(run)
    assert "ncu/report.ncu-rep" in m["artifacts"]
    (note,) = [n for n in m["notes"] if n.startswith("the run was stopped")]
    assert "--ncu-timeout 3 s" in note and "3 kernel launches had been profiled" in note
    assert [f for f in m["faults"] if f["kind"] == "ncu-stopped"][0]["reason"] == "--ncu-timeout 3 s"


def test_sigterm_to_gpudiag_ends_ncu_and_the_script_within_10_s(tmp_path):
    run = tmp_path / "r"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "diagnose",
            *map(str, _profile_args(run)),
            str(SCRIPTS / "marker_loop.py"),
            "100000",
            "0.02",
        ],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = run / "ncu" / "ncu.log"
    deadline = time.monotonic() + 120  # until ncu has profiled (the script runs under it): no fixed sleep
    while proc.poll() is None and not (log.exists() and log.read_text().count("==PROF== Profiling") == 3):
        assert time.monotonic() < deadline, "ncu profiled nothing within 120 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, (proc.returncode, err[-2000:])  # the script ended by the stop
    assert "gpudiag: SIGTERM to gpudiag: stopping the script under ncu" in err and "Traceback" not in err
    assert "still running 8 s after the stop" not in err  # within the 8 s grace: nothing had to be killed
    m = assert_valid_run_folder(run)
    assert any(n.startswith("the run was stopped (SIGTERM to gpudiag)") for n in m["notes"])
    assert "ncu/report.ncu-rep" in m["artifacts"]


def test_a_script_that_ignores_the_stop_is_killed_with_ncu_after_the_grace(tmp_path):
    run = tmp_path / "r"
    started = time.monotonic()
    r = gpudiag(
        *_profile_args(run, "--ncu-timeout", "2"),
        SCRIPTS / "ignores_sigterm.py",
        "100000",
        "0.02",
        env=_env(),
        timeout=300,
    )
    assert time.monotonic() - started >= 2 + 8  # the timeout, then the whole grace
    assert r.returncode == 137
    assert "still running 8 s after the stop: killing ncu and the script" in r.stderr
    m = assert_valid_run_folder(run)
    assert (m["status"], m["signal"]) == ("signal", "SIGKILL")
    (note,) = [n for n in m["notes"] if n.startswith("the run was stopped")]
    assert "ncu was killed too" in note
