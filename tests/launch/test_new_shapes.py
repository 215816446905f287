"""Light mode's new-shape records (issue 18): the first DataLoader batch of each shape, with its step."""

from __future__ import annotations

import json
import threading

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from diagnose.launch.runtime.input_wait import InputWait  # noqa: E402
from diagnose.launch.runtime.new_shapes import MAX_SHAPES, NewShapes, shape_words, signature_key  # noqa: E402
from parsers.run_records import format_record  # noqa: E402
from tests.launch.launch_helpers import EXAMPLES, gpudiag, records  # noqa: E402


def words(batch) -> str | None:
    key = signature_key(batch, torch.Tensor)
    return None if key is None else shape_words(key)


def test_the_example_writes_one_record_for_the_first_short_batch_with_its_step(tmp_path):
    """200 images in batches of 64: 3 full batches and one of 8 per epoch. The 8-image batch of the first epoch is
    iteration 3, fetched after the boundary that ended step 1: it names step 2, the step that trains on it (its
    time is in step 2's record). The second epoch's 8-image batch is not new: no record."""
    run = tmp_path / "run"
    done = gpudiag(
        "profile", "-q", "--trace-steps", "0", "-o", run, "--", "python3", EXAMPLES / "cudnn_new_shape.py",
        "--device", "cpu", "--epochs", "2", "--samples", "200", "--batch", "64", "--size", "16", "--channels", "8",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "last batch 8" in done.stdout
    found = [r for r in records(run) if r["kind"] == "work" and r["what"] == "new-shape"]
    assert [(r["what"], r["step"], r["rank"], r["name"], r["cudnn_benchmark"]) for r in found] == [
        ("new-shape", 2, 0, "(8, 3, 16, 16), (8,)", True)
    ]
    assert found[0]["ms"] == 0 and found[0]["location"] is None
    steps = {r["step"]: r for r in records(run) if r["kind"] == "step"}
    assert steps[2]["t_start_ns"] <= found[0]["t_ns"] <= steps[3]["t_start_ns"]
    assert sorted(steps) == list(range(7))  # 8 iterations, 8 boundaries: step 7 began at the last one, no record


def test_signatures_read_shapes_two_containers_deep_and_nothing_else():
    x, y = torch.zeros(4, 3), torch.zeros(4, dtype=torch.long)
    assert words((x, y)) == "(4, 3), (4,)"
    assert words([x, y]) == "(4, 3), (4,)"
    assert words(x) == "(4, 3)"
    assert words({"input": x, "label": y, "id": "a"}) == "input: (4, 3), label: (4,)"
    assert words(((x, x), y)) == "((4, 3), (4, 3)), (4,)"
    assert words([{"a": x}, [y]]) == "{a: (4, 3)}, [(4,)]"
    assert words(((([x],),), y)) == "(4,)"  # a tensor three containers deep is not looked at
    assert words(("text", 3, None)) is None and words(7) is None
    assert signature_key((x, y), torch.Tensor) == signature_key((x + 1, y), torch.Tensor)  # shapes, not data
    assert signature_key((x, y), torch.Tensor) != signature_key([x, y], torch.Tensor)


class FakeRuntime:
    """Fake: just what NewShapes reads of a Runtime, with an events file that keeps what is appended."""

    def __init__(self):
        self.disabled = False
        self.rank = 0
        self.lock = threading.RLock()
        self.steps = type("Steps", (), {"current_step": 5})()
        self.events = self
        self.opened = True
        self.appended: list[dict] = []
        self.faults = self
        self.writes_off = False
        self.errors: list = []

    def append_line(self, line: bytes):
        self.appended.append(json.loads(line))

    def write_record(self, kind, **fields):
        self.append_line(format_record(kind, rank=self.rank, **fields))

    def internal_error(self, where, error):
        self.errors.append((where, error))


class RaisingBatch(tuple):
    """Fake: a batch whose items cannot be read."""

    def __getitem__(self, index):
        raise RuntimeError("no items here")


def test_a_batch_that_cannot_be_read_gives_no_record_and_no_error():
    runtime = FakeRuntime()
    shapes = NewShapes(runtime, torch)
    shapes.on_batch(RaisingBatch((torch.zeros(2),)))
    shapes.on_batch(("no", "tensors"))
    assert runtime.appended == [] and runtime.errors == []
    shapes.on_batch((torch.zeros(2),))
    assert [(r["step"], r["name"]) for r in runtime.appended] == [(5, "(2,)")]


def test_past_the_bound_nothing_more_is_recorded():
    runtime = FakeRuntime()
    shapes = NewShapes(runtime, torch)
    for n in range(1, MAX_SHAPES + 10):
        shapes.on_batch((torch.zeros(n),))
    shapes.on_batch((torch.zeros(1),))  # seen before the bound: not new either way
    assert [r["name"] for r in runtime.appended] == [f"({n},)" for n in range(1, MAX_SHAPES + 1)]


def test_the_wrapper_hands_each_outermost_batch_over_and_returns_it_unchanged():
    seen = []
    wait = InputWait(threading.get_ident(), on_batch=seen.append)
    assert wait.hook(torch)
    try:
        loader = DataLoader(TensorDataset(torch.arange(10.0)), batch_size=4)
        batches = list(loader)
    finally:
        wait.unhook()
    assert [b[0].tolist() for b in batches] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [8.0, 9.0]]
    assert [id(b) for b in seen] == [id(b) for b in batches] and wait.calls == 4  # the 4th call: StopIteration
