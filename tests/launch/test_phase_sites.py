"""Issue 31 (5): light mode records the user's lines that call backward() and the optimizer's step() (run records
"phase-site", diagnose/launch/runtime/phase_sites.py), from the first calls of each, once per line: a trace names a
module-level loop's frame by its file alone, and these give the line. On tests/launch/scripts/timed_phases.py, a
module-level loop, and its closure form (the forward, the loss and the backward inside a closure given to step())."""

from __future__ import annotations

import sys

import pytest

from tests.launch.launch_helpers import SCRIPTS, gpudiag, records

pytest.importorskip("torch")

SCRIPT = SCRIPTS / "timed_phases.py"


def line_of(text: str, after: str = "") -> int:
    """The 1-based number of the first line that is ``text`` stripped, past the first line holding ``after``."""
    lines = SCRIPT.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    return next(i for i, line in enumerate(lines) if i >= start and line.strip() == text) + 1


def sites_of(run) -> list[dict]:
    return [r for r in records(run) if r["kind"] == "run" and r.get("event") == "phase-site"]


@pytest.mark.parametrize("form", ["plain", "closure"])
def test_each_phase_call_line_is_recorded_once(tmp_path, form):
    from diagnose.launch.runtime.phase_sites import SITE_CALLS

    run = tmp_path / "r"
    steps = SITE_CALLS + 4  # past the calls that look: still one record a line
    args = [str(steps)] + (["closure"] if form == "closure" else [])
    r = gpudiag("profile", "-q", "--trace-steps", "0", "-o", run, "--", sys.executable, SCRIPT, *args)
    assert r.returncode == 0, r.stderr[-2000:]
    got = [(s["phase"], s["location"], s["function"], s["library_location"]) for s in sites_of(run)]
    if form == "closure":  # the backward is called inside closure(), the step from the loop
        backward = (f"{SCRIPT}:{line_of('loss.backward()')}", "closure")
        optimizer = (f"{SCRIPT}:{line_of('optimizer.step(closure=closure)')}", "<module>")
    else:
        backward = (f"{SCRIPT}:{line_of('loss.backward()', after='optimizer.step(closure=closure)')}", "<module>")
        optimizer = (f"{SCRIPT}:{line_of('optimizer.step()')}", "<module>")
    assert sorted(got) == [("backward", *backward, None), ("optimizer", *optimizer, None)]


def test_the_run_marks_carry_them(tmp_path):
    import diagnose

    run = tmp_path / "r"
    r = gpudiag("profile", "-q", "--trace-steps", "0", "-o", run, "--", sys.executable, SCRIPT, "12")
    assert r.returncode == 0, r.stderr[-2000:]
    marks = diagnose.load(run, quiet=True).run_marks[0]
    assert [(phase, function) for phase, _, function, _ in marks["phase_sites"]] == [
        ("backward", "<module>"),
        ("optimizer", "<module>"),
    ]
    assert marks["phase_sites"][1][1].endswith(f"timed_phases.py:{line_of('optimizer.step()')}")


def test_a_loop_updating_by_hand_records_its_backward_only(tmp_path):
    run = tmp_path / "r"
    r = gpudiag("profile", "-q", "--trace-steps", "0", "-o", run, "--", sys.executable, SCRIPT, "8", "by_hand")
    assert r.returncode == 0, r.stderr[-2000:]
    got = [(s["phase"], s["function"]) for s in sites_of(run)]
    assert got == [("backward", "<module>")]


def test_a_gan_two_backward_lines_are_not_called_gradient_accumulation(tmp_path):
    """examples/gan_loader.py (a DCGAN, not written for this issue: two losses, each with its backward() and its
    optimizer, and its own scheduled torch.profiler) on the CPU: each step (optD's) holds two backward passes, from
    two lines. The step budget said "(gradient accumulation)" for them before the phase-site records named the
    lines; a loop that accumulates calls one line (tests/launch/test_step_inference.py keeps that wording)."""
    import diagnose
    from tests.paths import REPO

    script = REPO / "examples" / "gan_loader.py"
    lines = script.read_text().splitlines()
    backward = [i + 1 for i, line in enumerate(lines) if line.strip().endswith(".backward()")]
    assert len(backward) == 2
    run = tmp_path / "r"
    args = ["--trace-out", tmp_path / "gan.trace.json", "--iters", "40", "--batch", "8", "--workers", "1"]
    r = gpudiag("profile", "-q", "-o", run, "--", sys.executable, script, "--device", "cpu", *args, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    phases = diagnose.analyze(diagnose.load(run, quiet=True)).results["step_budget"].meta["ranks"][0]["host_phases"]
    assert phases["backward_passes"] == 2
    assert phases["backward_lines"] == [f"gan_loader.py:{n}" for n in backward]
    from diagnose.derive.host_phases import phases_text

    text = phases_text(phases)
    assert f"each step makes 2 backward passes (called from 2 lines: gan_loader.py:{backward[0]}, " in text
    assert "gradient accumulation" not in text
