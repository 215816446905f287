"""When each launch's profiling began, read from ncu's log while it is written (diagnose.launch.ncu_command)."""

from __future__ import annotations

import time

from diagnose.launch.ncu_command import LogFollower, NcuLog
from parsers.ncu_launch_starts import format_launch_starts, read_launch_starts
from parsers.registry import detect

LINES = [
    "==PROF== Connected to process 1398 (/usr/bin/python3.12)\n",
    '==PROF== Profiling "Kernel2" - 0 (1/100): 0%....50%....100% - 11 passes\n',
    '==PROF== Profiling "splitKreduce_kernel" - 1 (2/100): 0%....',
    '50%....100% - 11 passes\n==PROF== Profiling "vectorized_elementwise_kernel" - 2 (3/100): 0%',
    "....50%....100% - 11 passes\n",
    '==PROF== Profiling "init_curand" - 3: 0%....50%....100% - 38 passes\n',  # no launch count: no (i/N)
]


def test_a_launch_is_timed_when_its_line_starts_not_when_it_ends():
    log = NcuLog()
    buffer = ""
    for i, chunk in enumerate(LINES):  # as the follower reads them: the last line unfinished
        buffer += chunk
        log.saw_start(buffer, 1000 + i)
        *done, buffer = buffer.split("\n")
        for line in done:
            log.feed(line)
    assert log.launch_starts == [
        (0, "Kernel2", 1001),
        (1, "splitKreduce_kernel", 1002),
        (2, "vectorized_elementwise_kernel", 1003),
        (3, "init_curand", 1005),
    ]
    assert log.launches == 4


def test_follower_writes_times_the_reader_reads_back(tmp_path):
    path = tmp_path / "ncu.log"
    path.write_text("")
    follower = LogFollower(path, echo=lambda text: None)
    follower.start()
    starts_after = [0, 1, 2, 3, 3, 4]  # launches whose line has begun once each chunk is read
    try:
        for chunk, starts in zip(LINES, starts_after):
            with open(path, "a") as f:
                f.write(chunk)
            size, deadline = path.stat().st_size, time.monotonic() + 60
            # wait for the follower to have read the chunk (however busy the machine), then space the next one
            while follower._offset < size or len(follower.log.launch_starts) < starts:
                assert time.monotonic() < deadline, "the follower did not read the log within 60 s"
                time.sleep(0.005)
            time.sleep(0.06)
    finally:
        log = follower.stop()
    ids = [i for i, _, _ in log.launch_starts]
    assert ids == [0, 1, 2, 3]
    times = [t for _, _, t in log.launch_starts]
    assert times == sorted(times) and times[-1] - times[0] >= 0.1e9  # read while written, ~60 ms apart
    out = tmp_path / "launch_starts.csv"
    out.write_text(format_launch_starts(log.launch_starts))
    assert detect(out).kind == "ncu-launch-starts"
    frame = read_launch_starts(out)
    assert frame["launch_id"].tolist() == [0, 1, 2, 3] and frame["t_start_ns"].tolist() == times
