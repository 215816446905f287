"""Light mode's work records (issue 18): each torch.save and each evaluation span, with its step and user line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import diagnose  # noqa: E402
from diagnose.launch.runtime.periodic_work import PeriodicWork  # noqa: E402
from tests.launch.launch_helpers import EXAMPLES, SCRIPTS, gpudiag, records  # noqa: E402

ORIGINAL_SAVE = torch.save
ORIGINAL_TRAIN = torch.nn.Module.__dict__["train"]


def line_of(path, marker: str) -> int:
    (number,) = [i for i, text in enumerate(path.read_text().splitlines(), start=1) if marker in text]
    return number


def work_of(run_dir) -> list[dict]:
    """The checkpoint and evaluation records (not the imports, compiles and gpudiag's own work)."""
    return [r for r in records(run_dir) if r["kind"] == "work" and r["what"] in ("checkpoint", "evaluation")]


@pytest.mark.parametrize(("work", "marker"), [("checkpoint", "# WORK-CHECKPOINT"), ("evaluation", "# WORK-EVALUATION")])
def test_the_example_writes_one_record_per_save_or_evaluation_with_its_line(tmp_path, work, marker):
    script = EXAMPLES / "periodic_work.py"
    run = tmp_path / "run"
    done = gpudiag(
        "profile", "-q", "--trace-steps", "0", "-o", run, "--",
        "python3", script, "--device", "cpu", "--work", work, "--steps", "30", "--every", "10", "--hidden", "256",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = work_of(run)
    assert [(r["what"], r["step"], r["rank"]) for r in found] == [(work, 9, 0), (work, 19, 0), (work, 29, 0)]
    assert {r["location"] for r in found} == {f"{script.resolve()}:{line_of(script, marker)}"}
    assert all(r["ms"] > 0 and r["t_ns"] > 0 for r in found)  # how long: bounded by its step's time below
    steps = {r["step"]: r for r in records(run) if r["kind"] == "step"}
    for r in found[:2]:  # the record's time is inside its step (step 29 never ended: no step record)
        assert r["ms"] < steps[r["step"]]["host_ms"]
        assert steps[r["step"]]["t_start_ns"] <= r["t_ns"] <= steps[r["step"] + 1]["t_start_ns"]


def test_saves_that_must_not_count_and_spans_on_two_modules(tmp_path):
    """Not recorded: a save on another thread, the inner one of a nested save, a train() with no evaluation open, the
    children's recursive train(). A save that raises is recorded and raises; a save before the first step is
    recorded with step -1, written right after the run's start record."""
    script = SCRIPTS / "periodic_work_edges.py"
    run = tmp_path / "run"
    (tmp_path / "out").mkdir()
    done = gpudiag("profile", "-q", "--trace-steps", "0", "-o", run, "--", "python3", script, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert "save failed as it should: RuntimeError" in done.stdout
    markers = ("# EDGE-BEFORE", "# EDGE-NESTED", "# EDGE-EVAL", "# EDGE-OTHER", "# EDGE-FAILS")
    at = {m: f"{script.resolve()}:{line_of(script, m)}" for m in markers}
    found = sorted(work_of(run), key=lambda r: r["t_ns"])
    assert [(r["what"], r["step"], r["location"]) for r in found] == [
        ("checkpoint", -1, at["# EDGE-BEFORE"]),
        ("checkpoint", 1, at["# EDGE-NESTED"]),
        ("evaluation", 2, at["# EDGE-EVAL"]),  # model.eval() ... model.train(): other's span inside it does not end it
        ("evaluation", 2, at["# EDGE-OTHER"]),
        ("checkpoint", 3, at["# EDGE-FAILS"]),
    ]
    model_span, other_span = found[2], found[3]
    assert model_span["ms"] > other_span["ms"]  # the model's span holds the other module's


def test_the_in_process_profile_takes_its_wrappers_off(tmp_path):
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with diagnose.profile(out=tmp_path / "nb", trace_steps=0, nvml=False, quiet=True) as run:
        assert torch.save is not ORIGINAL_SAVE and torch.nn.Module.__dict__["train"] is not ORIGINAL_TRAIN
        for step in range(4):
            model(torch.ones(3, 4)).sum().backward()
            opt.step()
            if step == 2:
                torch.save(model.state_dict(), tmp_path / "m.pt")
    assert torch.save is ORIGINAL_SAVE and torch.nn.Module.__dict__["train"] is ORIGINAL_TRAIN
    assert [(r["what"], r["step"]) for r in work_of(run.path)] == [("checkpoint", 2)]


class FakeRuntimeWhoseStepsFail:
    """Fake: a runtime whose ``steps`` raises when read, to check an internal error never reaches the user."""

    disabled = False
    events = None

    class faults:  # noqa: N801
        errors: list = []

        @classmethod
        def internal_error(cls, where, error):
            cls.errors.append(where)

    @property
    def steps(self):
        raise RuntimeError("planted")


def test_an_internal_error_goes_to_faults_and_the_call_still_runs(tmp_path):
    runtime = FakeRuntimeWhoseStepsFail()
    work = PeriodicWork(runtime)
    work.hook(torch)
    try:
        model = torch.nn.Linear(2, 2)
        model.eval()
        assert model.training is False
        model.train()
        assert model.training is True
        torch.save({"w": torch.ones(2)}, tmp_path / "w.pt")
        assert torch.load(tmp_path / "w.pt")["w"].tolist() == [1.0, 1.0]
    finally:
        work.unhook()
    assert runtime.faults.errors == ["evaluation span", "checkpoint record"]
    assert torch.nn.Module.__dict__["train"] is ORIGINAL_TRAIN and torch.save is ORIGINAL_SAVE
