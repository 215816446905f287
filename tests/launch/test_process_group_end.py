"""supervisor.end_process_group, the one routine that ends a process group: the --ncu stop's SIGKILL, the
orphans a dead ncu leaves (SIGTERM, SIGKILL 5 s later) and a sweep's timed-out run (SIGTERM, SIGKILL 10 s
later, waiting on the run's own process). Each signal in turn; the next only while the group lives on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from diagnose.comparison.sweep import run_logged
from diagnose.launch.ncu_mode import KILL_AT_ONCE
from diagnose.launch.supervisor import end_process_group, group_members

# a process that starts a second one in its group, says its pid, and sleeps; SIG_IGN is inherited
GROUP = """
import signal, subprocess, sys, time
if {ignore_term}:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
{then}
"""


def start_group(ignore_term: bool, leader_exits: bool = False) -> tuple[subprocess.Popen, int]:
    """(the group's leader, its second process); ``leader_exits``: the leader ends at once and is reaped, so
    the second process is an orphan of the group, as the script's processes are when ncu dies."""
    code = GROUP.format(ignore_term=ignore_term, then="" if leader_exits else "time.sleep(60)")
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    second = int(leader.stdout.readline())
    if leader_exits:
        leader.wait(timeout=10)
    leader.stdout.close()
    return leader, second


@pytest.fixture
def sent(monkeypatch) -> list[int]:
    """The signals sent to process groups, in order (and sent on): what each case asserts instead of how long it
    took, which a busy CI machine stretches."""
    signals: list[int] = []
    real = os.killpg

    def killpg(pgid: int, signum: int) -> None:
        if signum:  # 0 only asks whether the group is there
            signals.append(signum)
        real(pgid, signum)

    monkeypatch.setattr(os, "killpg", killpg)
    return signals


def gone(pgid: int, within_s: float = 30.0) -> bool:
    """Whether no live process is left in group ``pgid`` within ``within_s`` (a zombie is not live: an orphan's
    new parent in a container may never reap it)."""
    deadline = time.monotonic() + within_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not group_members(pgid)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def test_orphans_that_ignore_sigterm_are_killed_after_the_grace_period(sent):
    leader, orphan = start_group(ignore_term=True, leader_exits=True)
    assert group_members(leader.pid) == [orphan]
    t0 = time.monotonic()
    end_process_group(leader.pid, ((signal.SIGTERM, 0.5), (signal.SIGKILL, 30.0)))
    assert time.monotonic() - t0 >= 0.5  # SIGTERM did nothing: the grace period passed, then SIGKILL
    assert sent[:2] == [signal.SIGTERM, signal.SIGKILL]
    assert gone(leader.pid)


def test_orphans_that_end_on_sigterm_end_the_wait(sent):
    """The wait ends when the last orphan does, even where nothing reaps it: no SIGKILL follows (had the wait run
    out instead, 30 s on, SIGKILL would have been sent)."""
    leader, _ = start_group(ignore_term=False, leader_exits=True)
    end_process_group(leader.pid, ((signal.SIGTERM, 30.0), (signal.SIGKILL, 1.0)))
    assert sent == [signal.SIGTERM]
    assert gone(leader.pid, within_s=0)


def test_a_run_that_ends_on_sigterm_gets_no_sigkill(sent):
    """A sweep's run, waited on through its own process (``ended``): it ends on SIGTERM, its group with it."""
    leader, second = start_group(ignore_term=False)
    end_process_group(
        leader.pid, ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)), ended=lambda: leader.poll() is not None
    )
    assert sent == [signal.SIGTERM] and leader.returncode == -signal.SIGTERM
    assert gone(leader.pid)


def test_a_run_that_ignores_sigterm_is_killed(sent):
    leader, _ = start_group(ignore_term=True)
    end_process_group(
        leader.pid, ((signal.SIGTERM, 0.3), (signal.SIGKILL, 10.0)), ended=lambda: leader.poll() is not None
    )
    assert leader.returncode == -signal.SIGKILL and sent == [signal.SIGTERM, signal.SIGKILL]
    assert gone(leader.pid)


def test_kill_at_once_does_not_wait(sent):
    """The --ncu stop's second signal, or its grace period over: SIGKILL and return (no grace to wait out)."""
    leader, _ = start_group(ignore_term=True)
    assert KILL_AT_ONCE == ((signal.SIGKILL, 0.0),)
    end_process_group(leader.pid, KILL_AT_ONCE)
    assert sent == [signal.SIGKILL]
    assert leader.wait(timeout=30) == -signal.SIGKILL
    assert gone(leader.pid)


def test_a_group_already_gone_returns_at_once(sent):
    leader, _ = start_group(ignore_term=False)
    end_process_group(leader.pid, KILL_AT_ONCE)
    leader.wait(timeout=30)
    assert gone(leader.pid)
    end_process_group(leader.pid)  # the default: SIGTERM, SIGKILL 5 s later
    assert sent == [signal.SIGKILL, signal.SIGTERM]  # the SIGTERM found no group: nothing more was sent


def test_sweep_timeout_ends_the_runs_whole_group(tmp_path, sent):
    code = GROUP.format(ignore_term=False, then="time.sleep(60)")
    attempt = run_logged([sys.executable, "-c", code], tmp_path / "out.txt", tmp_path / "err.txt", timeout_s=1.0)
    assert attempt.exit_code is None and sent == [signal.SIGTERM]  # the run ended on SIGTERM: no SIGKILL
    second = int((tmp_path / "out.txt").read_text())
    deadline = time.monotonic() + 30
    while alive(second) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(second)
