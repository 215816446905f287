"""Input wait (issue 18): each step record's ``input_ms`` is the time the loop blocked in a torch DataLoader."""

from __future__ import annotations

import json
import math
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset, IterableDataset  # noqa: E402
from torch.utils.data.dataloader import _BaseDataLoaderIter  # noqa: E402

import diagnose  # noqa: E402
from diagnose.launch.runtime.input_wait import InputWait  # noqa: E402
from parsers.events import read_event_tables  # noqa: E402
from parsers.run_records import step_line  # noqa: E402
from tests.launch.launch_helpers import EXAMPLES, gpudiag  # noqa: E402

ORIGINAL_NEXT = _BaseDataLoaderIter.__next__


class SleepyItems(Dataset):
    """Each item sleeps ``item_s`` in __getitem__: a loader with a known cost per batch."""

    def __init__(self, length, item_s, fail_at=None):
        self.length, self.item_s, self.fail_at = length, item_s, fail_at

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        if index == self.fail_at:
            raise ValueError(f"bad sample {index}")
        time.sleep(self.item_s)
        return torch.tensor([float(index)])


class LoaderOfLoader(IterableDataset):
    """An iterable dataset that reads its items from an inner DataLoader: __next__ inside __next__."""

    def __init__(self, inner):
        self.inner = inner

    def __iter__(self):
        for batch in self.inner:
            yield batch.sum()


@pytest.fixture
def wait():
    wait = InputWait(threading.get_ident())
    assert wait.hook(torch)
    yield wait
    wait.unhook()
    assert _BaseDataLoaderIter.__next__ is ORIGINAL_NEXT


def test_the_wait_is_the_time_inside_next_and_the_batches_are_untouched(wait):
    loader = DataLoader(SleepyItems(8, 0.01), batch_size=4)
    start_ns = time.perf_counter_ns()
    batches = list(loader)
    elapsed_ns = time.perf_counter_ns() - start_ns
    assert [b.flatten().tolist() for b in batches] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    # 8 sleeps of 10 ms are inside __next__, and the wait cannot exceed the loop's own time
    assert 80e6 <= wait.total_ns <= elapsed_ns


def test_nested_loaders_are_counted_once(wait):
    outer = DataLoader(LoaderOfLoader(DataLoader(SleepyItems(6, 0.01), batch_size=2)), batch_size=None)
    start_ns = time.perf_counter_ns()
    sums = [float(s) for s in outer]
    elapsed_ns = time.perf_counter_ns() - start_ns
    assert sums == [1.0, 5.0, 9.0]
    assert 60e6 <= wait.total_ns <= elapsed_ns  # counted twice it would be ≥ 120 ms


def test_exceptions_pass_through_and_the_next_wait_still_counts(wait):
    iterator = iter(DataLoader(SleepyItems(4, 0.01, fail_at=2), batch_size=1))
    assert next(iterator).item() == 0.0
    next(iterator)
    with pytest.raises(ValueError, match="bad sample 2"):
        next(iterator)
    before_ns = wait.total_ns
    assert next(iterator).item() == 3.0  # the depth was reset: this call is counted
    assert wait.total_ns - before_ns >= 10e6
    with pytest.raises(StopIteration):
        next(iterator)


def test_other_threads_are_not_counted(wait):
    thread = threading.Thread(target=lambda: list(DataLoader(SleepyItems(4, 0.01), batch_size=2)))
    thread.start()
    thread.join()
    assert wait.total_ns == 0


@pytest.mark.parametrize("source", ["optimizer", 'odd "source"'])  # the %-format and the encoder
def test_step_line_carries_input_ms_rounded_to_ns(source):
    line = step_line(0, 7, 1796239003581976984, 50.25, None, source, False, 12.5, 41.1234567)
    record = json.loads(line)
    assert record["input_ms"] == 41.123457 and list(record)[-1] == "input_ms"
    assert "input_ms" not in json.loads(step_line(0, 7, 1, 50.25, None, source, False, 12.5))
    from_loop = json.loads(step_line(0, 7, 1, 50.25, None, source, False, 12.5, 3.5, "loop"))
    assert from_loop["input_ms"] == 3.5 and from_loop["input_from"] == "loop"


def test_in_process_steps_record_the_loader_wait_and_unhook(tmp_path):
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with diagnose.profile(out=tmp_path / "r", trace_steps=0, nvml=False, quiet=True) as run:
        for x in DataLoader(SleepyItems(12, 0.005), batch_size=2):  # 6 batches of 2 × 5 ms
            model(x).sum().backward()
            opt.step()
    assert _BaseDataLoaderIter.__next__ is ORIGINAL_NEXT
    steps = read_event_tables(run.path / "events" / "rank0.jsonl").steps
    assert len(steps) == 5  # 6 boundaries; each later step fetched one batch: ≥ 10 ms of input wait
    assert (steps["input_ms"] >= 10).all() and (steps["input_ms"] <= steps["host_ms"]).all()


def _light_run(tmp_path, script, *args):
    out = tmp_path / "run"
    r = gpudiag("profile", "-q", "-o", out, "--trace-steps", "0", "--", "python", EXAMPLES / script, *args, timeout=300)
    assert r.returncode == 0, r.stderr
    steps = read_event_tables(out / "events" / "rank0.jsonl").steps
    return steps


def test_input_bound_example_waits_on_its_loader_most_of_each_step(tmp_path):
    """examples/input_bound.py on CPU without workers: the decoding runs inside __next__, ~100 ms a batch."""
    steps = _light_run(tmp_path, "input_bound.py", "--device", "cpu", "--steps", "12", "--workers", "0")
    assert len(steps) == 11
    measured = steps["input_ms"].notna()
    assert measured.mean() >= 0.9
    share = (steps["input_ms"] / steps["host_ms"])[measured]
    assert share.median() > 0.5, steps[["host_ms", "input_ms"]]
    assert (share <= 1.0).all()


def test_loop_without_a_loader_waits_for_no_input(tmp_path):
    steps = _light_run(tmp_path, "sync_heavy.py", "--device", "cpu", "--steps", "8", "--width", "128")
    assert len(steps) == 7
    # not measured (NaN) before Python 3.12; from 3.12 the loop's for over range() is timed: next to nothing
    assert all(math.isnan(v) or v < 0.5 for v in steps["input_ms"])
