"""diagnose.derive.trace_input_wait on real traces: the DataLoader ``__next__`` ranges per step, checked against the JSON.

No trace in fixtures/ (fixtures/shared included) has DataLoader ranges, so two are captured here on the CPU: one the
way a user captures it (torch.profiler with a schedule, ProfilerStep ranges, a single-process loader), one by
``gpudiag profile`` running examples/input_bound.py (2 loader workers, steps inferred from Optimizer.step).
The expected numbers are recomputed from the raw JSON with a few lines that share no code with the module.
"""

from __future__ import annotations

import gzip
import json
import time

import pytest

torch = pytest.importorskip("torch")

from diagnose.derive.trace_input_wait import input_wait_per_step  # noqa: E402
from diagnose.derive.trace_timeline import steps as step_windows  # noqa: E402
from parsers.trace import read_trace  # noqa: E402
from tests.launch.launch_helpers import EXAMPLES, gpudiag  # noqa: E402
from tests.paths import shared  # noqa: E402

ITEM_S = 0.01  # each sample sleeps 10 ms in __getitem__
BATCH = 2


class SleepyItems(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, index):
        time.sleep(ITEM_S)
        return torch.full((4,), float(index))


def _events(path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _by_hand_ms(events, windows_us) -> list[float]:
    """Overlap of every DataLoader __next__ range with each (start_us, end_us) window, in ms."""
    fetches = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e["name"].startswith("enumerate(DataLoader)#") and e["name"].endswith(".__next__")
    ]
    return [sum(max(0.0, min(end, hi) - max(start, lo)) for start, end in fetches) / 1e3 for lo, hi in windows_us]


def test_user_captured_trace_with_profiler_steps(tmp_path):
    path = tmp_path / "user_trace.json"
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(SleepyItems(), batch_size=BATCH)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=4, repeat=1)
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(
        activities=activities, schedule=schedule, on_trace_ready=lambda p: p.export_chrome_trace(str(path))
    ) as prof:
        for x in loader:
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    trace = read_trace(path)
    steps = step_windows(trace)
    assert steps.attrs["source"] == "ProfilerStep annotations" and steps["step"].tolist() == [2, 3, 4, 5]
    wait = input_wait_per_step(trace, steps)

    events = _events(path)
    windows = {
        int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e["name"].startswith("ProfilerStep#")
    }
    expected = _by_hand_ms(events, [windows[s] for s in wait.index])
    assert wait.tolist() == pytest.approx(expected, abs=1e-5)
    assert wait.index.tolist() == [2, 3, 4, 5]
    # each step fetched one batch of 2 samples that sleep 10 ms each, inside the single-process __next__
    assert (wait >= BATCH * ITEM_S * 1e3).all()
    assert {e["name"] for e in events if "DataLoader" in e["name"]} == {
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    }


def test_light_mode_trace_of_the_input_bound_example(tmp_path):
    out = tmp_path / "run"
    r = gpudiag(
        "profile", "-q", "-o", out, "--trace-start", "3", "--trace-steps", "4", "--",
        "python", EXAMPLES / "input_bound.py", "--device", "cpu", "--steps", "10",
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    path = out / "trace" / "rank0.json.gz"
    trace = read_trace(path)
    steps = step_windows(trace)
    assert steps.attrs["source"].startswith("Optimizer.step")
    wait = input_wait_per_step(trace, steps)
    windows_us = list(zip(steps["cpu_start_ns"] / 1e3, steps["cpu_end_ns"] / 1e3))
    events = _events(path)
    assert wait.tolist() == pytest.approx(_by_hand_ms(events, windows_us), abs=1e-5)
    assert any("_MultiProcessingDataLoaderIter.__next__" in e["name"] for e in events)
    # the steps after the first begin at an Optimizer.step's end and hold one whole fetch of 64 decoded samples
    assert (wait.iloc[1:] > 0).all()


def test_trace_without_a_dataloader_waits_for_nothing():
    trace = read_trace(shared("torch", "convnet.trace.json.gz"))
    steps = step_windows(trace)
    wait = input_wait_per_step(trace, steps)
    assert len(wait) == 12 and wait.index.tolist() == steps["step"].tolist() and (wait == 0.0).all()
