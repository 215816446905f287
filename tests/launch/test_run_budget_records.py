"""What light mode records for the run budget (issue 30): the work before the first step (step -1, written right after
the run's start record), the imports, the runtime's install time, gpudiag's own cost, every kind of checkpoint, the
library's frame beside the user's line, each DataLoader's configuration, and the child's spawn and exit in the
manifest. Real scripts through `gpudiag profile` on CPU torch; each record's contents asserted."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from diagnose.launch.runtime.coordinator import Runtime  # noqa: E402
from diagnose.launch.runtime.import_times import ImportTimes  # noqa: E402
from diagnose.launch.runtime.memory_capture import MemoryCapture  # noqa: E402
from parsers.events import LOADERS_SCHEMA, read_event_tables  # noqa: E402
from parsers.run_records import EVENTS  # noqa: E402
from tests.launch.launch_helpers import SCRIPTS, gpudiag, manifest, records  # noqa: E402


def line_of(path: Path, marker: str) -> int:
    (number,) = [i for i, text in enumerate(path.read_text().splitlines(), start=1) if marker in text]
    return number


def at(path: Path, marker: str) -> str:
    return f"{path.resolve()}:{line_of(path, marker)}"


@pytest.fixture(scope="module")
def before_run(tmp_path_factory):
    """tests/launch/scripts/before_first_step.py profiled once: (run folder, its records)."""
    tmp = tmp_path_factory.mktemp("before")
    run, out = tmp / "run", tmp / "out"
    out.mkdir()
    done = gpudiag(
        "profile", "-q", "--trace-steps", "0", "-o", run, "--", "python3", SCRIPTS / "before_first_step.py", out,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "done" in done.stdout
    return run, records(run)


def test_work_before_the_first_step_is_written_right_after_the_run_start_in_time_order(before_run):
    run, found = before_run
    script = SCRIPTS / "before_first_step.py"
    assert (found[0]["kind"], found[0]["event"]) == ("run", "start")
    held = [i for i, r in enumerate(found) if r.get("step") == -1]
    assert held == list(range(1, len(held) + 1))  # right after the start record, before the expect record
    assert [found[i]["t_ns"] for i in held] == sorted(found[i]["t_ns"] for i in held)
    work = [found[i] for i in held if found[i]["kind"] == "work"]
    (compiled,) = [r for r in work if r["what"] == "compilation"]  # the first call's; the loop's batches hit its graph
    assert compiled["name"].startswith("torch.compile(") and compiled["location"] == at(script, "# COMPILE-BEFORE")
    named = {(r["what"], r.get("name")): r for r in work if r["what"] not in ("import", "compilation")}
    assert named.keys() == {("checkpoint", "torch.save"), ("evaluation", None)}
    named["compilation"] = compiled
    assert named["checkpoint", "torch.save"]["location"] == at(script, "# SAVE-BEFORE")
    assert named["evaluation", None]["location"] == at(script, "# EVAL-BEFORE")
    assert all(r["ms"] > 0 and "library_location" not in r for r in named.values())
    first_step = next(r for r in found if r["kind"] == "step")
    assert first_step["step"] == 0
    assert all(r["t_ns"] + r["ms"] * 1e6 <= first_step["t_start_ns"] + 1e6 for r in named.values())


def test_imports_before_the_first_step_each_long_one_with_its_line_and_the_rest_summed(before_run):
    run, found = before_run
    script = SCRIPTS / "before_first_step.py"
    imports = [r for r in found if r["kind"] == "work" and r["what"] == "import"]
    assert all(r["step"] == -1 and r["rank"] == 0 for r in imports)
    (slow,) = [r for r in imports if r["name"] == "slow_import_module"]
    assert slow["ms"] >= 50 and slow["location"] == at(script, "# IMPORT-SLOW")
    (torch_import,) = [r for r in imports if r["name"] == "torch"]  # the script's own `import torch`, outermost
    assert torch_import["location"] == at(script, "import torch") and torch_import["ms"] >= 5
    assert all(r["ms"] >= 5 for r in imports if r["name"] != "(other imports)")
    (others,) = [r for r in imports if r["name"] == "(other imports)"]  # `import os`, `import sys`, ...
    assert others["location"] is None and others["ms"] > 0
    assert others["t_ns"] == min(r["t_ns"] for r in imports)  # `import os` comes first, and is short
    (start,) = [r for r in found if r["kind"] == "run" and r["event"] == "start"]
    assert all(start["install_ns"] <= r["t_ns"] for r in imports)


def test_install_time_lies_between_the_child_spawn_and_the_first_step(before_run):
    run, found = before_run
    m = manifest(run)
    (start,) = [r for r in found if r["kind"] == "run" and r["event"] == "start"]
    first_step = next(r for r in found if r["kind"] == "step")
    assert m["start_ns"] <= m["child_start_ns"] <= start["install_ns"] <= first_step["t_start_ns"] <= start["t_ns"]
    assert start["install_ns"] <= m["child_end_ns"] <= m["end_ns"]
    (end,) = [r for r in found if r["kind"] == "run" and r["event"] == "end"]
    assert end["t_ns"] <= m["child_end_ns"]


def test_one_dataloader_record_per_loader_held_from_before_the_first_step(before_run):
    run, found = before_run
    script = SCRIPTS / "before_first_step.py"
    loaders = [r for r in found if r["kind"] == "run" and r["event"] == "dataloader"]
    assert loaders == [  # two epochs, two iterators, one loader: one record
        {
            "kind": "run",
            "event": "dataloader",
            "rank": 0,
            "step": -1,
            "num_workers": 2,
            "prefetch_factor": 2,
            "batch_size": 4,
            "persistent_workers": False,
            "dataset": "Squares",
            "t_ns": loaders[0]["t_ns"],
            "location": at(script, "# LOADER-NEXT"),
        }
    ]
    (start,) = [r for r in found if r["kind"] == "run" and r["event"] == "start"]
    first_step = next(r for r in found if r["kind"] == "step")
    assert start["install_ns"] <= loaders[0]["t_ns"] <= first_step["t_start_ns"]
    assert first_step.get("input_ms") is None or first_step["input_ms"] >= 0  # the batch itself untouched
    steps = [r for r in found if r["kind"] == "step"]
    assert len(steps) == 7  # 8 batches in two epochs: 8 boundaries, the last step never ended


def test_the_loader_table_on_the_profile(before_run):
    import diagnose

    run, _ = before_run
    profile = diagnose.load(run)
    loaders = profile.loaders
    assert list(loaders.columns) == list(LOADERS_SCHEMA.columns)
    assert loaders[["rank", "step", "num_workers", "prefetch_factor", "batch_size", "dataset"]].values.tolist() == [
        [0, -1, 2, 2.0, 4.0, "Squares"]
    ]
    assert loaders["persistent_workers"].tolist() == [False]
    marks = profile.run_marks[0]
    assert marks["install_ns"] <= marks["start_ns"] <= marks["end_ns"]
    work = profile.work_records[0]
    assert {"name", "library_location"} <= set(work.columns) and (work["step"] == -1).any()


def test_a_trace_window_records_its_start_and_its_export_as_gpudiags_own_work(tmp_path):
    run = tmp_path / "run"
    done = gpudiag(
        "profile", "-q", "--trace-start", "3", "--trace-steps", "2", "-o", run, "--",
        "python3", SCRIPTS / "trace_window_loop.py", timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (run / "trace" / "rank0.json.gz").exists()
    found = records(run)
    own = [r for r in found if r["kind"] == "work" and r["what"] == "gpudiag"]
    assert [(r["name"], r["step"], r["location"]) for r in own] == [("trace start", 3, None), ("trace export", 5, None)]
    steps = {r["step"]: r for r in found if r["kind"] == "step"}
    for r in own:  # inside the step whose host time holds it (the boundary that ran it starts that step)
        assert r["ms"] > 0
        assert steps[r["step"]]["t_start_ns"] <= r["t_ns"] <= steps[r["step"] + 1]["t_start_ns"]
        assert r["ms"] <= steps[r["step"]]["host_ms"]
    assert steps[5]["instrumented"] is True  # the export ran in it


def test_the_snapshot_dump_is_recorded_before_the_run_end(tmp_path, monkeypatch):
    """The allocator history needs CUDA, so this CPU test drives the runtime's exit flush with the framework calls
    replaced (fakes: write_snapshot writes a small file, stop_allocator_history does nothing); the GPU test
    tests/gpu/test_run_budget_records_gpu.py runs it for real."""
    from diagnose.launch.event_log import JsonlAppender
    from diagnose.launch.runtime import memory_capture

    dumped = []

    def fake_write_snapshot(torch_module, path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(b"{}")
        dumped.append(path)
        return 2

    monkeypatch.setattr(memory_capture, "write_snapshot", fake_write_snapshot)
    monkeypatch.setattr(memory_capture, "stop_allocator_history", lambda torch_module: None)
    config = SimpleNamespace(
        mode="light", run_dir=str(tmp_path), memory_stats_interval_ms=100.0, snapshot_step=None, history_max_entries=1
    )
    runtime = Runtime(config)
    runtime.rank, runtime.steps.current_step = 0, 7
    runtime.events = JsonlAppender(str(tmp_path / EVENTS.path(0)))
    runtime.events.append_line(b'{"kind":"run","event":"start"}\n')
    runtime.memory = MemoryCapture(runtime)
    runtime.memory.history_on = True
    runtime.flush("exit")
    lines = [json.loads(line) for line in (tmp_path / EVENTS.path(0)).read_text().splitlines()]
    assert [(r["kind"], r.get("what"), r.get("name"), r.get("step")) for r in lines[1:]] == [
        ("work", "gpudiag", "snapshot dump", 7),
        ("run", None, None, None),
    ]
    assert lines[-1]["event"] == "end" and len(dumped) == 1
    assert lines[1]["ms"] >= 0 and lines[1]["t_ns"] <= lines[-1]["t_ns"]


@pytest.mark.parametrize("order", ["torch-first", "safetensors-first"])
def test_every_kind_of_checkpoint_once_as_the_outermost_with_the_librarys_line(tmp_path, order):
    pytest.importorskip("safetensors.torch")
    library = tmp_path / "site-packages"  # a library, by its folder (sync_capture.is_user_file)
    library.mkdir()
    (library / "trainerlib.py").write_text(
        "import torch\n"
        "\n"
        "\n"
        "def evaluate(model):\n"
        "    model.eval()  # LIB-EVAL\n"
        "    with torch.no_grad():\n"
        "        model(torch.ones(2, 8))\n"
        "    model.train()\n"
        "\n"
        "\n"
        "def save(model, path):\n"
        "    torch.save(model.state_dict(), path)  # LIB-SAVE\n"
        "\n"
        "\n"
        "class Sequential(torch.nn.Sequential):  # as transformers' PreTrainedModel: its own train(), calling super()\n"
        "    def train(self, mode=True):\n"
        "        return super().train(mode)  # LIB-TRAIN\n"
    )
    script = SCRIPTS / "checkpoint_kinds.py"
    run, out = tmp_path / "run", tmp_path / "out"
    out.mkdir()
    done = gpudiag(
        "profile", "-q", "--trace-steps", "0", "-o", run, "--", "python3", script, out, library, order, timeout=300
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (out / "m.safetensors").exists() and (out / "model.safetensors").exists() and (out / "dcp").is_dir()
    work = [r for r in records(run) if r["kind"] == "work" and r["what"] in ("checkpoint", "evaluation")]
    lib = library.resolve() / "trainerlib.py"
    assert [(r["what"], r.get("name"), r["step"], r["location"], r.get("library_location")) for r in work] == [
        ("checkpoint", "safetensors", 1, at(script, "# SAFE-FILE"), None),
        ("checkpoint", "safetensors", 2, at(script, "# SAFE-MODEL"), None),  # save_model's own save_file: not again
        ("checkpoint", "torch.distributed.checkpoint", 3, at(script, "# DCP-SAVE"), None),  # its torch.saves: neither
        # the library's model.eval() line, past the model's own train() (LIB-TRAIN), which eval() calls
        ("evaluation", None, 4, at(script, "# USER-EVAL"), f"{lib}:{line_of(lib, '# LIB-EVAL')}"),
        ("checkpoint", "torch.save", 4, at(script, "# USER-SAVE"), f"{lib}:{line_of(lib, '# LIB-SAVE')}"),
    ]
    assert all(r["ms"] > 0 for r in work)
    tables = read_event_tables(run / EVENTS.path(0))
    assert tables.work.loc[tables.work["step"] == 4, "library_location"].tolist() == [
        f"{lib}:{line_of(lib, '# LIB-EVAL')}",
        f"{lib}:{line_of(lib, '# LIB-SAVE')}",
    ]


def _import_line() -> int:
    """The line of this file's own import statement of the slow module."""
    lines = Path(__file__).read_text().splitlines()
    (number,) = [n for n, text in enumerate(lines, 1) if text.strip().startswith("import tests.launch.scripts.slow_")]
    return number


class FakeRuntime:
    """Fake: what ImportTimes hands its records to (write_record of a runtime before its first step)."""

    def __init__(self):
        self.disabled = False
        self.faults = SimpleNamespace(writes_off=False)
        self.written = []

    def write_record(self, kind, **fields):
        self.written.append(fields)


def test_import_timing_counts_the_outermost_import_on_the_main_thread_only_and_lets_errors_through():
    import builtins
    import sys

    slow_name = "tests.launch.scripts.slow_import_module"
    runtime = FakeRuntime()
    times = ImportTimes(runtime, threading.get_ident())
    original = builtins.__import__
    times.install()
    try:
        assert builtins.__import__ is not original
        with pytest.raises(ModuleNotFoundError):
            import gpudiag_no_such_module  # noqa: F401
        sys.modules.pop(slow_name, None)
        worker = threading.Thread(target=lambda: __import__(slow_name))  # 50 ms, on another thread: not timed
        worker.start()
        worker.join()
        sys.modules.pop(slow_name, None)
        import tests.launch.scripts.slow_import_module  # noqa: F401
    finally:
        times.finish()
    assert builtins.__import__ is original
    assert sorted(r["name"] for r in runtime.written) == ["(other imports)", slow_name]
    (slow,) = [r for r in runtime.written if r["name"] == slow_name]
    assert (
        slow["ms"] >= 50 and slow["step"] == -1 and slow["location"] == f"{Path(__file__).resolve()}:{_import_line()}"
    )
    (others,) = [r for r in runtime.written if r["name"] == "(other imports)"]
    assert others["location"] is None and others["ms"] > 0  # the failed import, which raised through the wrapper


def test_a_relative_import_is_named_by_its_full_module_name():
    """``from ._mhlo_ops_gen import *`` inside jaxlib read "._mhlo_ops_gen" in a report's slowest imports."""
    import sys

    from diagnose.launch.runtime.import_times import absolute_name

    slow_name = "tests.launch.scripts.slow_import_module"
    runtime = FakeRuntime()
    times = ImportTimes(runtime, threading.get_ident())
    times.install()
    try:
        sys.modules.pop(slow_name, None)
        exec(
            "from .slow_import_module import time",
            {"__name__": "tests.launch.scripts.x", "__package__": "tests.launch.scripts"},
        )
    finally:
        times.finish()
    assert [r["name"] for r in runtime.written if r["name"] != "(other imports)"] == [slow_name]
    package = {"__name__": "jaxlib.mlir.dialects.mhlo", "__package__": "jaxlib.mlir.dialects"}
    assert absolute_name("_mhlo_ops_gen", 1, package) == "jaxlib.mlir.dialects._mhlo_ops_gen"
    assert absolute_name("ir", 2, package) == "jaxlib.mlir.ir"
    assert absolute_name("", 1, {"__name__": "pkg", "__path__": []}) == "pkg"  # from . import x in pkg/__init__
    assert absolute_name("x", 1, {"__name__": "pkg.mod"}) == "pkg.x"  # no __package__: from the module's name
    assert absolute_name("x", 3, package) == "jaxlib.x"
    assert absolute_name("x", 4, package) == "....x"  # beyond the top package: as written
    assert absolute_name("x", 1, None) == ".x" and absolute_name("torch", 0, None) == "torch"


def test_an_import_wrapper_put_over_ours_stays_in_place():
    import builtins

    times = ImportTimes(FakeRuntime(), threading.get_ident())
    original = builtins.__import__
    times.install()
    ours = builtins.__import__

    def theirs(*args, **kwargs):
        return ours(*args, **kwargs)

    builtins.__import__ = theirs
    try:
        times.uninstall()
        assert builtins.__import__ is theirs  # theirs calls ours, which now passes every call straight through
        import json  # noqa: F401
    finally:
        builtins.__import__ = original
    assert times.others_count == 0


def test_an_evaluation_loaders_batches_are_no_input_wait_and_no_new_shape(tmp_path):
    """While model.eval() holds, the DataLoader hook is paused: the evaluation loader's 8 items of 30 ms (240 ms a
    batch, of 8 rows where training takes 4) are neither the step's input wait nor a new input shape (HF Trainer's
    evaluation batches read as a new shape of its training loop, CPU 2026-12-05)."""
    run = tmp_path / "run"
    done = gpudiag(
        "profile", "-q", "--trace-steps", "0", "-o", run, "--", "python3", SCRIPTS / "eval_loader_apart.py",
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = records(run)
    evaluations = [r for r in found if r["kind"] == "work" and r["what"] == "evaluation"]
    assert len(evaluations) == 4 and all(r["ms"] >= 240 for r in evaluations)
    assert not [r for r in found if r["kind"] == "work" and r["what"] == "new-shape"]
    steps = {r["step"]: r for r in found if r["kind"] == "step"}
    timed = [r for r in evaluations if r["step"] in steps]  # the last one ran in the step the run ended in
    assert len(timed) == 3
    for r in timed:  # the evaluation ran inside this step: its 240 ms of fetching is not the step's input
        assert steps[r["step"]]["host_ms"] >= 240
        assert steps[r["step"]]["input_ms"] < 100, steps[r["step"]]
    loaders = [r for r in found if r.get("event") == "dataloader"]
    assert [r["batch_size"] for r in loaders] == [4]  # the evaluation's loader is not the training loop's


def test_an_evaluation_ended_by_setting_training_back_is_closed_and_input_resumes(tmp_path):
    """Lightning 2.6 ends its evaluation by setting each submodule's ``training`` back, never calling train(): the
    span is closed at the training loop's next fetch (or step boundary), and the steps after it measure their input
    again (the hook stayed paused for the rest of the run before: a real Lightning run on CPU, 2026-12-05)."""
    run = tmp_path / "run"
    script = SCRIPTS / "eval_restored_by_attribute.py"
    done = gpudiag("profile", "-q", "--trace-steps", "0", "-o", run, "--", "python3", script, timeout=300)
    assert done.returncode == 0, done.stderr
    found = records(run)
    evaluations = [r for r in found if r["kind"] == "work" and r["what"] == "evaluation"]
    assert [r["step"] for r in evaluations] == [4, 9, 14]  # the last one (step 15) is in the step the run ended in
    assert all(240 <= r["ms"] < 1000 for r in evaluations), evaluations
    assert all(r["location"] == at(script, "# EVALUATION") for r in evaluations)
    steps = {r["step"]: r for r in found if r["kind"] == "step"}
    after = [steps[s]["input_ms"] for s in (5, 6, 10, 11)]  # 4 items of 5 ms each: ~20 ms, measured again
    assert all(ms >= 15 for ms in after), after
