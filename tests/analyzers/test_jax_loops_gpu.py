"""Issue 34 on a GPU: three unchanged Flax/optax loops of our own (examples/flax_*.py), each run under `gpudiag
profile` on the lent H100 and on the H200 (fixtures/runs/flax_*_h100, flax_*_h200, PROVENANCE.md). Each report names
the cause with its line, and the median step is explained."""

from __future__ import annotations

import dataclasses
import json

import pytest

import diagnose
from parsers.trace import read_trace
from tests.paths import FIXTURES

RUNS = FIXTURES / "runs"


def analysis(name: str, gpu: str = "h100"):
    return diagnose.analyze(diagnose.load(RUNS / f"{name}_{gpu}", quiet=True))


def by_id(a) -> dict:
    return {f.id: f for f in a.findings}


def explained_share(a) -> float:
    budget = a.results["step_budget"].tables["budget"]
    median = budget[budget["column"] == "median step"]
    return 1.0 - float(median.loc[median["part"] == "unexplained", "share"].fillna(0).sum())


def test_jax_python_frames_are_read_from_the_trace_with_base_names():
    """JAX's Python tracer names frames "$flax_numpy_input.py:53 make_batch": read as Kineto's frames are, none
    taken for the user's by the parser (a base name may be numpy's numeric.py); C functions as built-ins."""
    trace = read_trace(RUNS / "flax_numpy_input_h100" / "trace" / "rank0.json.gz")
    py = trace.python
    batch = py[py["function"] == "make_batch"]
    assert len(batch) == 3 and set(batch["file"].astype(str)) == {"flax_numpy_input.py"}
    assert set(batch["line"]) == {53} and not py["is_user"].any()
    assert (py["name"].astype(str) == "<built-in function acquire>").sum() == 30
    assert not trace.cpu_ops["name"].astype(str).str.startswith("$").any()


@pytest.mark.parametrize(
    ("gpu", "figures", "batch_share"),
    [
        ("h100", "26.6 ms of the 26.8 ms median step (99.3 %)", "94 %"),
        # the H200's jit proxy frame is read as the jitted function's dispatch (5 %), not as gpudiag's own work
        ("h200", "18.8 ms of the 19 ms median step (99.0 %)", "95 %"),
    ],
)
def test_numpy_batches_built_in_python_are_named_with_their_function_and_line(gpu, figures, batch_share):
    a = analysis("flax_numpy_input", gpu)
    f = by_id(a)["step_budget.launch_bound"]
    assert f.title.startswith(f"The GPU waits for the host to launch work {figures}")
    assert f.title.endswith(f"; the host was in make_batch() in flax_numpy_input.py:53 for {batch_share} of it")
    assert a.verdict.top_finding_ids[0] == "step_budget.launch_bound"  # the report's first sentence
    assert explained_share(a) >= 0.8


def test_a_host_bound_loop_names_the_host_work_behind_the_idle():
    """A module-level loop: its own frame began before the trace window, so the trace holds no user frame; the host
    spent 71 % of the GPU's wait in jnp.asarray of the numpy batch and 27 % in the jitted step's dispatch (gpudiag's
    jit proxy is passed through, not counted as gpudiag's own work)."""
    a = analysis("flax_host_bound")
    f = by_id(a)["step_budget.launch_bound"]
    assert "1.28 ms of the 1.33 ms median step (96.1 %)" in f.title
    assert "the host was in asarray() in array_constructors.py for 71 % of it" in f.title
    assert "(no user frame), inside a jitted function's dispatch (27 %)" in f.recommendation
    assert explained_share(a) >= 0.8
    # the script's own stopwatch (device synchronized around each step) against light mode's median step
    clock = json.loads((FIXTURES / "run_clocks" / "flax_host_bound_h100.json").read_text())["step_ms"]
    manual = sorted(clock[20:])[len(clock[20:]) // 2]
    median = a.results["step_budget"].meta["ranks"][0]["median_step_ms"]
    assert manual == pytest.approx(1.27, abs=0.01) and median == pytest.approx(manual, rel=0.1)


def test_on_the_h200_the_host_bound_loop_names_its_loop_line_from_the_jit_step_record():
    """The H200 capture has light mode's jit-step record: the title names the loop's line that calls the step, and
    the host's share in jnp.asarray (74 %) and in the dispatch (24 %). 3,000 steps of 1 ms are 3.09 s of the 14.7 s
    run, and compiling before the first step is 4.58 s: over this short run the verdict is compilation, by the run's
    recoverable seconds. Light mode's median step is 1.01 ms; the script's own clock, in another run, 0.94 ms."""
    a = analysis("flax_host_bound", "h200")
    f = by_id(a)["step_budget.launch_bound"]
    assert "962 µs of the 1.01 ms median step (95.0 %)" in f.title
    assert f.title.endswith(
        "the host was in asarray() in array_constructors.py for 74 % of it, called from the loop that calls "
        "train_step() at flax_host_bound.py:70"
    )
    assert "(no user frame), inside a jitted function's dispatch (24 %)" in f.recommendation
    assert explained_share(a) >= 0.8
    assert a.verdict.top_finding_ids[0] == "run_budget.compilation"
    assert [x.id for x in a.findings[:2]] == ["run_budget.compilation", "step_budget.launch_bound"]
    clock = json.loads((FIXTURES / "run_clocks" / "flax_host_bound_h200.json").read_text())["step_ms"]
    manual = sorted(clock[20:])[len(clock[20:]) // 2]
    median = a.results["step_budget"].meta["ranks"][0]["median_step_ms"]
    assert manual == pytest.approx(0.938, abs=0.001) and median == pytest.approx(manual, rel=0.1)


def test_the_loop_line_light_mode_records_names_where_a_module_level_loop_calls_the_step():
    """This capture predates light mode's jit-step record (tests/launch/test_jit_steps.py shows it written: the step
    function's name and the loop's line). Given that record's values for this script, the title names the loop's
    line where the trace holds no frame of it."""
    from diagnose.derive.derived import Derived
    from diagnose.judges.host_sites_words import with_host_sites

    profile = diagnose.load(RUNS / "flax_host_bound_h100", quiet=True)
    a = diagnose.analyze(profile)
    untitled = next(f for f in a.findings if f.id == "step_budget.launch_bound")
    untitled = dataclasses.replace(untitled, title=untitled.title.split("; the host was in")[0])
    line = f"/tmp/w/examples/flax_host_bound.py:{next(i for i, t in enumerate((FIXTURES.parent / 'examples' / 'flax_host_bound.py').read_text().splitlines(), 1) if '# STEP-1:' in t)}"
    named = with_host_sites(untitled, Derived(profile).host_sites(0), in_title=True, loop=("train_step", line))
    assert named.title.endswith(
        "; the host was in asarray() in array_constructors.py for 71 % of it, called from the loop that calls "
        "train_step() at flax_host_bound.py:70"
    )


@pytest.mark.parametrize(
    ("gpu", "host_code", "compile_step", "compile_words"),
    [
        ("h100", "20.6 s, 52.7 % of the run's 39.1 s", 192, "9 functions compiled for new shapes in step 192"),
        ("h200", "14.6 s, 51.3 % of the run's 28.5 s", 192, "9 functions compiled for new shapes in step 192"),
    ],
)
def test_an_evaluation_outside_jit_is_the_top_finding_with_its_function_and_loop_line(
    gpu, host_code, compile_step, compile_words
):
    a = analysis("flax_eval_outside_jit", gpu)
    assert a.verdict.top_finding_ids[0] == "run_budget.host_code"  # the report's first sentence
    assert a.findings[0].id == "run_budget.host_code"  # and the first finding
    f = by_id(a)["run_budget.host_code"]
    assert f.title.startswith(f"Python code in long steps takes {host_code}: evaluate() at ")
    assert "flax_eval_outside_jit.py:51, called at flax_eval_outside_jit.py:70, in 3 steps, every 200 steps" in f.title
    compile_ = by_id(a)["step_budget.compilation"]
    assert "compiled again" not in compile_.title
    assert compile_.title.startswith(
        f"dot_general (jit) compiled in one step after warm-up, step {compile_step}, for shapes"
    )
    assert f"{compile_words} at flax_eval_outside_jit.py:34–52" in compile_.title
    # one long evaluation step among two short ones is no "every 198 steps" period
    assert "step_budget.periodic" not in by_id(a)
    assert explained_share(a) >= 0.8


def test_without_a_trace_the_sampled_steps_name_a_host_bound_jax_step():
    """examples/flax_host_bound.py under light mode with --trace-steps 0 (lent H100, 2026-12-05): no trace, so no
    GPU timeline; light mode sampled 24 of the 3,000 steps (one in 128). jax's call of train_step took 440 µs of host
    dispatch and its outputs were ready 461 µs after it began, so the device's work is at most 38 % of the 1.23 ms
    median step: the steps analyzer says the step is the host's, with the JAX advice, where before it could say
    nothing (no CUDA events in JAX)."""
    a = analysis("flax_host_bound_notrace")
    samples = a.results["step_budget"].meta["ranks"][0]["jit_dispatch"]
    assert (samples["samples"], samples["ready_samples"], samples["queued_samples"]) == (24, 24, 0)
    assert round(samples["dispatch_ms"], 3) == 0.440 and round(samples["ready_ms"], 3) == 0.461
    f = by_id(a)["steps.host_bound"]
    assert f.title == (
        "The device waits on the host: a step takes 1.23 ms, and its device work at most 461 µs (2.66x), in steps "
        "light mode sampled"
    )
    assert f.recommendation.startswith(
        "In 24 untraced steps light mode sampled (one in 128), jax's call of train_step took 440 µs of host dispatch, "
        "and its outputs were ready 461 µs after the call began with the device idle (median of 24): the device's "
        "work is at most that, 37.6 % of the 1.23 ms median step. Put more of the step into one jitted function"
    )
    assert f.cost_share == pytest.approx(1 - 0.4611825 / 1.226478)
    # the JAX run gets JAX's compile advice, not torch.compile's
    compile_ = by_id(a)["run_budget.compilation"]
    assert "jax_compilation_cache_dir" in compile_.recommendation and "torch" not in compile_.recommendation
    steps = diagnose.load(RUNS / "flax_host_bound_notrace_h100", quiet=True)
    assert not steps.traces  # no trace: the finding stands on the samples alone


def test_the_sampled_steps_beside_the_traced_ones_and_a_step_whose_device_work_overlaps_the_next_dispatch():
    """examples/flax_eval_outside_jit.py (lent H100, 2026-12-05): 5 sampled steps. In 4 of them the step before was
    still on the device when jax's call began (its outputs 125 µs from ready, median): the host's 553 µs dispatch of
    each step overlaps the device's work of the one before, so a step waited for alone (783 µs) takes longer than the
    633 µs median step, and the samples bound nothing: the launch-bound finding says so instead of a share over 100 %.
    Its traced sites are the jitted function's dispatch (gpudiag's jit proxy is passed through)."""
    a = analysis("flax_eval_outside_jit_sampled")
    assert a.verdict.top_finding_ids[0] == "run_budget.host_code"
    samples = a.results["step_budget"].meta["ranks"][0]["jit_dispatch"]
    assert (samples["samples"], samples["queued_samples"]) == (5, 4)
    assert samples["device_at_most_share"] is None and samples["ready_ms"] > samples["median_step_ms"]
    f = by_id(a)["step_budget.launch_bound"]
    assert f.title.endswith(
        "the host was in a jitted function's dispatch for 100 % of it, called from the loop that calls train_step() "
        "at flax_eval_outside_jit.py:69"
    )
    assert f.recommendation.startswith(
        "In 5 untraced steps light mode sampled (one in 128), jax's call of train_step took 553 µs of host dispatch, "
        "and its outputs were ready 783 µs after the call began with the device idle (median of 5), no less than the "
        "633 µs median step: run back to back, the steps overlap the host's dispatch with the device's work; in 4 of "
        "them the step before was still on the device when the call began. While the GPU waited"
    )
    assert f.subjects[0].figures["sampled_samples"] == 5 and "sampled_device_at_most_share" not in f.subjects[0].figures
    assert explained_share(a) >= 0.8
