"""The script's exit code comes back through `gpudiag profile`; SIGINT/SIGTERM reach it and leave a valid run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from diagnose.launch.supervisor import exit_status
from tests.launch.launch_helpers import REPO, SCRIPTS, base_env, gpudiag, manifest, records


@pytest.mark.parametrize("how, code", [("0", 0), ("3", 3), ("raise", 1), ("sigterm", 128 + 15)])
def test_exit_code_is_passed_through(tmp_path, how, code):
    run = tmp_path / "r"
    r = gpudiag("profile", "-q", "--no-nvml", "-o", run, "--", sys.executable, SCRIPTS / "exit_with.py", how)
    assert r.returncode == code
    m = manifest(run)
    assert m["exit_code"] == code
    assert m["status"] == {0: "ok", 3: "failed", 1: "failed", 143: "signal"}[code]
    if code == 143:
        assert m["signal"] == "SIGTERM"
    if how == "raise":
        assert "ValueError: planted failure" in r.stderr


def test_exit_status_maps_signals_like_a_shell():
    assert [exit_status(c) for c in (0, 1, 255, -2, -9, -15)] == [0, 1, 255, 130, 137, 143]


def test_missing_program_is_bad_usage(tmp_path):
    r = gpudiag("profile", "-o", tmp_path / "r", "--", "no-such-program-gpudiag")
    assert r.returncode == 2 and "no such program" in r.stderr and "Traceback" not in r.stderr
    r = gpudiag("profile")
    assert r.returncode == 2 and "no command to profile" in r.stderr


def _wait_for_steps(run, n, proc, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if sum(1 for rec in records(run) if rec["kind"] == "step") >= n:
                return
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        if proc.poll() is not None:
            raise AssertionError(f"gpudiag ended early: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError("no steps appeared")


def _sigint_as_at_a_terminal() -> None:
    """SIGINT at its default in gpudiag, as when it is started from a terminal. A job that a shell starts in the
    background without job control (``cmd &`` in a script) has SIGINT ignored; gpudiag's script inherits that and
    goes on running when the forwarded SIGINT arrives, as it would without gpudiag. The test must not depend on how
    pytest itself was started (it hung 30 s when .ci/run ran in such a job)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_gpudiag_is_forwarded_and_the_run_stays_valid(tmp_path, signum):
    run = tmp_path / "r"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "diagnose",
            "profile",
            "-q",
            "--no-nvml",
            "-o",
            str(run),
            "--",
            sys.executable,
            str(SCRIPTS / "marker_loop.py"),
            "100000",
            "0.02",
        ],
        env=base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_as_at_a_terminal,
    )
    _wait_for_steps(run, 3, proc)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signum
    m = manifest(run)
    assert m["exit_code"] == 128 + signum and m["signal"] == signal.Signals(signum).name
    recs = records(run)
    steps = [rec for rec in recs if rec["kind"] == "step"]
    assert len(steps) >= 3 and [s["step"] for s in steps] == list(range(len(steps)))
    assert recs[-1]["kind"] == "run" and recs[-1]["event"] == "end"  # flushed on the way out
    assert m["missing"] == [] and m["ranks"] == [0]
    if signum == signal.SIGINT:
        assert "KeyboardInterrupt" in err


FLUSH_INTERRUPTED = """
import os, signal, sys, time
sys.path.insert(0, {repo!r})
from diagnose.launch.runtime import exit_hooks

def flush():
    with open({out!r}, "a") as f:
        f.write("start\\n")
    os.kill(os.getpid(), signal.SIGTERM)  # comes while the flush runs
    for _ in range(100):  # the handler runs at the next bytecode boundaries
        time.sleep(0.001)
    with open({out!r}, "a") as f:
        f.write("end\\n")

exit_hooks.install(flush)
if {by_signal!r}:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
"""


@pytest.mark.parametrize("by_signal", [False, True], ids=["during-atexit-flush", "during-first-signal-flush"])
def test_a_signal_during_the_flush_waits_for_its_end(tmp_path, by_signal):
    """SIGTERM that arrives while the exit flush runs (the script's own end, or a first SIGTERM) lets the flush
    finish, then the process dies of it: the snapshot and the step log's end are not cut off."""
    out = tmp_path / "flush.txt"
    script = FLUSH_INTERRUPTED.format(repo=str(REPO), out=str(out), by_signal=by_signal)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.read_text() == "start\nend\n", r.stderr
    assert r.returncode == -signal.SIGTERM


def test_a_script_stuck_after_its_flush_is_said_so_once(tmp_path):
    """The script's own atexit hook outlasts gpudiag's flush (as a hang in CUDA's or a library's teardown would):
    gpudiag says once that the records are safe and the script has not exited, then waits for it as before."""
    run = tmp_path / "r"
    env = base_env(GPUDIAG_EXIT_HANG_NOTE_S="0.5")
    r = gpudiag(
        "profile", "--no-nvml", "-o", run, "--", sys.executable, SCRIPTS / "slow_teardown.py", "6", env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    notes = [line for line in r.stderr.splitlines() if "has not exited" in line]
    assert len(notes) == 1 and notes[0].startswith("gpudiag: the script flushed its records "), r.stderr[-2000:]
    assert "Nothing gpudiag captured is lost" in notes[0]
    m = manifest(run)
    assert m["status"] == "ok" and m["incomplete"] == {}


def test_a_script_that_exits_after_its_flush_gets_no_such_note(tmp_path):
    run = tmp_path / "r"
    env = base_env(GPUDIAG_EXIT_HANG_NOTE_S="0.5")
    r = gpudiag(
        "profile", "--no-nvml", "-o", run, "--", sys.executable, SCRIPTS / "slow_teardown.py", "0", env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "has not exited" not in r.stderr


def test_a_stop_signal_after_the_flush_is_ignored(tmp_path):
    """After the flush a stop is moot; left to its handler (flush done, then SIGTERM) or to the default action Python's
    finalization restores, it killed a script that was ending on its own (exit 214 under the fake ncu in CI)."""
    run = tmp_path / "r"
    r = gpudiag("profile", "-q", "--no-nvml", "-o", run, "--", sys.executable, SCRIPTS / "stop_after_flush.py")
    assert r.returncode == 0 and "survived the late stop" in r.stdout, (r.returncode, r.stderr[-2000:])
    assert manifest(run)["incomplete"] == {}
