"""Advice follows from what was captured (issue 28, item 7): a run folder that `gpudiag profile` wrote is never told
to "run under `gpudiag profile`"; it is told why it lacks a measurement and what option records it. An input
captured elsewhere still is."""

from __future__ import annotations

import re

import pytest

import diagnose
from diagnose.derive import capture_advice
from tests.paths import FIXTURES, shared

RUNS = FIXTURES / "runs"
BARE = re.compile(r"`?gpudiag profile`?(?!\s+--[\w-])")  # the command without a flag the run did not use
# the run folders whose reports carried the advice, and the findings that carried it
CASES = {
    "cudnn_new_shape": ("step_budget.unexplained", "fragmentation.not_measured", "idle.not_measured",
                        "sync.not_measured", "utilization.not_measured"),
    "jax_train": ("idle.gpu_idle", "step_budget.launch_bound"),  # XLA's correlation ids link its kernels (issue 34)
    "ncu_churn": ("step_budget.not_measured", "idle.not_measured", "sync.not_measured", "utilization.not_measured"),
    "ncu_kinds": ("steps.not_measured", "step_budget.not_measured", "fragmentation.not_measured",
                  "idle.not_measured"),
    "ncu_mlp": ("fragmentation.not_measured",),
}  # fmt: skip


@pytest.mark.parametrize("run", sorted(CASES))
def test_a_run_folder_is_not_sent_back_to_gpudiag_profile(run):
    a = diagnose.analyze(diagnose.load(RUNS / run))
    by_id = {f.id: f for f in a.findings}
    for fid in CASES[run]:
        f = by_id[fid]
        assert not BARE.search(f.recommendation), (fid, f.recommendation)
        assert not BARE.search(f.title), (fid, f.title)


def test_the_run_folder_says_why_it_lacks_a_measurement():
    a = diagnose.analyze(diagnose.load(RUNS / "ncu_kinds"))
    steps = next(f for f in a.findings if f.id == "steps.not_measured")
    assert steps.recommendation.startswith(
        "In this run folder events/rank0.jsonl was not written: rank 0 never reached a step boundary"
    )
    assert "diagnose.step()" in steps.recommendation
    a = diagnose.analyze(diagnose.load(RUNS / "cudnn_new_shape"))
    nvml = next(f for f in a.findings if f.id == "utilization.not_measured")
    assert nvml.recommendation.startswith("In this run folder nvml.csv was not recorded: NVML cannot start")
    unexplained = next(f for f in a.findings if f.id == "step_budget.unexplained")
    assert "this run traced no steps (--trace-steps 0" in unexplained.recommendation


def test_an_input_captured_elsewhere_is_still_told_to_use_gpudiag_profile():
    a = diagnose.analyze(diagnose.load(shared("torch", "convnet.trace.json.gz")))
    assert not capture_advice.from_run_folder(diagnose.load(shared("torch", "convnet.trace.json.gz")))
    for fid in ("steps.not_measured", "utilization.not_measured", "fragmentation.not_measured"):
        f = next(f for f in a.findings if f.id == fid)
        assert "gpudiag profile" in f.recommendation, fid


def test_an_ncu_run_is_told_what_its_ncu_collected_not_to_run_gpudiag_profile_ncu():
    """fixtures/runs/ncu_mlp ran `gpudiag profile --ncu` when its default sections were four, without SourceCounters:
    memory_access had told it "`gpudiag profile --ncu` collects it by default". It names the sections its ncu was
    asked for (the manifest's ncu_command) and the option that adds SourceCounters."""
    a = diagnose.analyze(diagnose.load(RUNS / "ncu_mlp"))
    profile = diagnose.load(RUNS / "ncu_mlp")
    assert capture_advice.ncu_command_values(profile, "--section") == [
        "SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats"
    ]  # fmt: skip
    assert capture_advice.ncu_command_values(profile, "--set") == []
    f = next(f for f in a.findings if f.id == "memory_access.not_measured")
    assert "gpudiag profile" not in f.recommendation
    assert f.recommendation.startswith(
        "This run's ncu collected the sections SpeedOfLight, MemoryWorkloadAnalysis, Occupancy, LaunchStats "
        "(its manifest's ncu_command): not SourceCounters"
    )
    assert "`--ncu-section SourceCounters`" in f.recommendation and "`--ncu-set full`" in f.recommendation
    elsewhere = diagnose.load(shared("torch", "convnet.trace.json.gz"))  # not a run folder: no ncu command to read
    assert capture_advice.ncu_command_values(elsewhere, "--section") is None
