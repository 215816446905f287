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

import json
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


def _profile_args(run, *extra, after_window="continue"):
    """--after-window continue: these tests bound a script that keeps running under ncu after its window."""
    return [
        "profile",
        "--ncu",
        "--ncu-step",
        "2",
        "--after-window",
        after_window,
        "-o",
        run,
        *extra,
        "--",
        sys.executable,
    ]


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


def _marker_loop(run, *ncu_args):
    """gpudiag profile --ncu NCU_ARGS of a 100,000-step loop of 20 ms steps (over half an hour if nothing stops it)."""
    loop = [sys.executable, SCRIPTS / "marker_loop.py", "100000", "0.02"]
    return gpudiag("profile", "--ncu", *ncu_args, "-o", run, "--", *loop, env=_env(), timeout=300)


def test_after_window_stop_ends_the_script_once_its_step_is_profiled_and_the_run_reports_cleanly(tmp_path):
    """The default: the script is stopped once step 2, the window, has its record; gpudiag exits 0, the manifest
    says the run is ok and why it ended, and no fault is recorded."""
    run = tmp_path / "r"
    r = _marker_loop(run, "--ncu-step", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "then the script is stopped (--after-window continue lets it finish under ncu)" in r.stderr
    assert "gpudiag: the window was profiled (--after-window stop): stopping the script under ncu" in r.stderr
    assert "still running 8 s after the stop" not in r.stderr and "Traceback" not in r.stderr
    m = assert_valid_run_folder(run)
    assert m["status"] == "ok" and m["exit_code"] == 0 and m["stopped_after_window"] is True
    assert m["options"]["ncu"]["after_window"] == "stop"
    assert not [f for f in m["faults"] if f["kind"] == "ncu-stopped"]
    (note,) = [n for n in m["notes"] if n.startswith("the script was stopped")]
    assert "as --after-window stop asks: 3 kernel launches profiled" in note
    steps = [int(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("step ")]
    assert 2 <= max(steps) < 99_999  # stopped after the window step, not run to its last step
    assert "ncu/report.ncu-rep" in m["artifacts"]
    # the report reads it as a finished run: no note of a crash or a stop by a fault
    from diagnose import load

    profile = load(run)
    assert not any("crash" in w or "failed" in w for w in profile.warnings), profile.warnings


def test_a_stopped_script_flushes_under_an_ncu_that_takes_its_sigterm(tmp_path):
    """Real ncu 2025.3 ended a script's SIGTERM with exit 0 and never ran its handler (H100, 2026-12-06): every run
    --after-window stop ended lost the end of its step log ("incomplete: events/rank0.jsonl") and its snapshot. The
    FAKE ncu's FAKE_NCU_TAKES_SIGTERM=1 does the same; the runtime's stop signal must still get the flush."""
    run = tmp_path / "r"
    loop = [sys.executable, SCRIPTS / "marker_loop.py", "100000", "0.02"]
    env = {**_env(), "FAKE_NCU_TAKES_SIGTERM": "1"}
    r = gpudiag("profile", "--ncu", "--ncu-step", "2", "-o", run, "--", *loop, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "gpudiag: the window was profiled (--after-window stop): stopping the script under ncu" in r.stderr
    m = assert_valid_run_folder(run)
    assert m["incomplete"] == {} and m["missing"] == [], (m["incomplete"], m["missing"])
    records = [json.loads(line) for line in (run / "events" / "rank0.jsonl").read_text().splitlines()]
    (stop,) = [e for e in records if e.get("event") == "stop-signal"]
    assert stop["signal"] == signal.SIGRTMIN + 8 and stop["pid"] > 0
    (end,) = [e for e in records if e.get("event") == "end"]
    printed = [int(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("step ")]
    steps = [e["step"] for e in records if e["kind"] == "step"]
    # every step the script finished is in the log: the flush wrote the held ones (a step is held until the next
    # one begins; step i's record is written at the boundary that ends it, after which the script prints "step i")
    assert 2 <= max(printed) < 99_999 and steps == list(range(len(steps))) and max(steps) >= max(printed) - 1
    assert end["reason"] == "exit" and end["steps"] == len(steps)


def test_a_window_whose_end_gpudiag_cannot_see_is_not_stopped(tmp_path):
    r = _marker_loop(tmp_path / "r", "--ncu-nvtx-include", "my_range/", "--ncu-timeout", "3")
    assert "then the script runs to its end under ncu (gpudiag cannot see where this window ends)" in r.stderr
    assert "--after-window stop): stopping" not in r.stderr and "--ncu-timeout 3 s: stopping" in r.stderr


def test_a_rank_stopped_after_its_window_is_said_so_not_called_a_crash():
    """On the H100, ncu's SIGTERM after the window left rank 0 without its end record; the run folder's notes said
    "os._exit, a crash in native code, or a kill" for an end gpudiag itself asked for (--after-window stop)."""
    from diagnose.launch.run_manifest import explain

    manifest = {
        "status": "ok",
        "stopped_after_window": True,
        "missing": ["memory/rank0.snapshot.json.gz"],
        "artifacts": {"events/rank0.jsonl": 100},
    }
    missing, incomplete = explain(manifest, [{"kind": "run", "event": "start", "rank": 0}])
    assert missing["memory/rank0.snapshot.json.gz"] == (
        "not written: gpudiag stopped rank 0 once its ncu window was profiled (--after-window stop) before it wrote it"
    )
    assert incomplete["events/rank0.jsonl"].startswith("no end record: gpudiag stopped rank 0 once its ncu window")
    assert "crash" not in " ".join([*missing.values(), *incomplete.values()])


def test_the_stopper_reads_each_ranks_stop_signal_and_skips_what_is_not_one(tmp_path):
    """runtime_stop_signals: one pid per rank's stop-signal record; a cut line, another record, a string pid, a
    missing folder give nothing (bad input, named as such: hand-written lines, not a run's)."""
    from diagnose.launch.ncu_mode import runtime_stop_signals

    events = tmp_path / "events"
    events.mkdir()
    (events / "rank0.jsonl").write_text(
        '{"kind":"run","event":"start","rank":0,"pid":11}\n'
        '{"kind":"run","event":"stop-signal","rank":0,"pid":11,"signal":42,"t_ns":1}\n'
    )
    (events / "rank1.jsonl").write_text('{"kind":"run","event":"stop-signal","rank":1,"pid":"12","signal":42}\n')
    (events / "rank2.jsonl").write_text('{"kind":"run","event":"stop-signal","rank":2,"pid":13,"sig')
    (events / "rank3.jsonl").write_text('{"kind":"run","event":"stop-signal","rank":3,"pid":14,"signal":42}\n')
    assert runtime_stop_signals(tmp_path) == {11: 42, 14: 42}
    assert runtime_stop_signals(tmp_path / "absent") == {} and runtime_stop_signals(None) == {}
