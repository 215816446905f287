"""Progress on stderr: a bar on a terminal (a real pty), a line at most every interval in a log, nothing for
short work or under -q."""

from __future__ import annotations

import io
import os
import re
import select
import time

from diagnose.ingest.read_progress import Progress
from tests.cli_run import gpudiag
from tests.paths import FIXTURES


def read_pty(master: int) -> str:
    out = b""
    while select.select([master], [], [], 0.2)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out.decode()


def read_pty_until(master: int, text: str, timeout_s: float = 60.0) -> str:
    """What the terminal shows until ``text`` is among it (read as it comes, so the pty never fills)."""
    out, deadline = b"", time.monotonic() + timeout_s
    while text.encode() not in out:
        assert time.monotonic() < deadline, f"{text!r} not drawn within {timeout_s:g} s: {out[-300:]!r}"
        if select.select([master], [], [], 0.05)[0]:
            out += os.read(master, 65536)
    return out.decode()


def wait_for(predicate, what: str, timeout_s: float = 60.0) -> None:
    """Poll ``predicate`` with a generous deadline: the redrawing thread's ticks, however loaded the machine."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g} s"
        time.sleep(0.01)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class CountingProgress(Progress):
    """Progress that counts the redrawing thread's ticks, so a test can wait for them instead of sleeping."""

    ticks = 0

    def tick(self, now: float | None = None) -> None:
        super().tick(now)
        self.ticks += 1


def test_bar_is_drawn_on_a_terminal():
    master, slave = os.openpty()
    clock = FakeClock()
    half = "reading 8 files [" + "#" * 15 + "." * 15 + "]  50%  100 of 200 MiB  0 s"
    with os.fdopen(slave, "w") as tty:
        assert tty.isatty()
        with Progress(
            200 * 2**20, "reading 8 files", stream=tty, clock=clock, show_after_s=0.05, redraw_every_s=0.02
        ) as p:
            p.advance(100 * 2**20)
            clock.now = 0.3  # past show_after_s: the thread draws the bar at its next tick
            drawn = read_pty_until(master, half)
            p.advance(100 * 2**20)
        drawn += read_pty(master)
    os.close(master)
    bars = drawn.split("\r")
    assert half in bars
    assert bars[-2:] == ["reading 8 files [" + "#" * 30 + "] 100%  200 of 200 MiB  0 s", "\n"]  # finished, new line


def test_nothing_on_a_terminal_for_short_work():
    master, slave = os.openpty()
    clock = FakeClock()  # stays at 0 s: the work is always shorter than the default 2 s
    with os.fdopen(slave, "w") as tty:
        with CountingProgress(100, "reading 2 files", stream=tty, clock=clock, redraw_every_s=0.02) as p:
            p.advance(100)
            wait_for(lambda: p.ticks >= 5, "5 ticks of the redrawing thread")
        drawn = read_pty(master)
    os.close(master)
    assert drawn == ""


def test_lines_without_a_terminal_at_most_every_interval():
    log, clock = io.StringIO(), FakeClock()
    p = Progress(1000, "reading 4 files", stream=log, clock=clock, line_every_s=10.0)
    for step in range(71):  # 35 s of work, ticked every 0.5 s
        clock.now = step * 0.5
        p.advance(1000 / 71)
        p.tick()
    lines = log.getvalue().splitlines()
    # without a terminal the first line waits a whole interval: a failure a few seconds in is all the log says
    assert [re.search(r"after (\d+) s", line).group(1) for line in lines] == ["10", "20", "30"]
    assert lines[0] == "gpudiag: reading 4 files: 30% (0 of 0 MiB) after 10 s"
    assert "\r" not in log.getvalue()


def test_lines_from_the_thread_with_a_short_interval():
    log, clock = io.StringIO(), FakeClock()
    with CountingProgress(
        3, "reading 3 files", stream=log, clock=clock, unit="files", show_after_s=0.0, line_every_s=0.25
    ) as p:
        p.advance()
        clock.now = 0.3  # one interval has passed: the thread writes a line at its next tick
        wait_for(lambda: log.getvalue().count("\n") == 1, "the first line")
        ticks = p.ticks
        wait_for(lambda: p.ticks >= ticks + 3, "3 more ticks")
        assert log.getvalue().count("\n") == 1  # the clock has not moved: one line per interval at most
        p.advance()
        clock.now = 0.6
        wait_for(lambda: log.getvalue().count("\n") == 2, "the second line")
        p.advance()
    assert log.getvalue().splitlines() == [
        "gpudiag: reading 3 files: 33% (1 of 3 files) after 0 s",
        "gpudiag: reading 3 files: 67% (2 of 3 files) after 1 s",
        "gpudiag: reading 3 files: 100% (3 of 3 files) after 1 s",  # the final one
    ]


def test_nothing_for_short_work_or_when_quiet():
    log, clock = io.StringIO(), FakeClock()
    p = Progress(10, "reading", stream=log, clock=clock, terminal=False)
    for step in range(4):  # 1.5 s of work
        clock.now = step * 0.5
        p.tick()
    p.__exit__(None, None, None)
    assert log.getvalue() == ""
    quiet = Progress(10, "reading", stream=log, clock=clock, quiet=True, terminal=True)
    for step in range(100):
        clock.now = step
        quiet.tick()
    quiet.__exit__(None, None, None)
    assert log.getvalue() == ""


def test_report_takes_quiet(tmp_path):
    r = gpudiag("report", "-q", FIXTURES / "comm" / "gloo_straggler", "--no-html", "--json", tmp_path / "r.json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "comm.straggler" in (tmp_path / "r.json").read_text()


def test_a_failed_read_ends_without_a_100_percent_line():
    log, clock = io.StringIO(), FakeClock()
    try:
        with Progress(
            10, "reading x", stream=log, clock=clock, terminal=False, show_after_s=0.0, line_every_s=1.0
        ) as p:
            clock.now = 1.5
            p.advance(3)
            p.tick()
            raise ValueError("refused")
    except ValueError:
        pass
    assert log.getvalue().splitlines() == ["gpudiag: reading x: 30% (0 of 0 MiB) after 2 s"]


def test_one_file_shows_the_bytes_read_so_far(monkeypatch):
    # a single 1 GB trace is one file: without the bytes read so far, its progress said 0 % until it was done
    import importlib

    from parsers import limits

    load_module = importlib.import_module("diagnose.ingest.loading")
    trace = FIXTURES / "trace" / "hta" / "trace_filter_sampled_rank-0.json.gz"
    size = os.path.getsize(trace)
    shown, progresses = [], []

    class Recording(Progress):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            progresses.append(self)

    read = limits.InputFile.read

    def read_and_look(self, n=-1):
        data = read(self, n)
        shown.append(progresses[0]._so_far())
        return data

    monkeypatch.setattr(load_module, "Progress", Recording)
    monkeypatch.setattr(limits.InputFile, "read", read_and_look)
    monkeypatch.setattr("parsers.trace_stream.PIECE_BYTES", 16 * 1024)  # read in pieces, as a large file is
    profile = load_module.load(str(trace), quiet=True)
    assert len(profile.traces[0].gpu) == 1204
    assert len(shown) > 3 and shown == sorted(shown)  # it grows with each piece read
    assert 0 < shown[0] < size  # part of the compressed bytes, while the file is read
    assert progresses[0]._so_far() == size  # done: the file's whole size, counted once
    assert limits.bytes_read_on_disk(trace) == 0  # no longer counted
