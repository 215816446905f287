"""The word LM with a hand-written SGD, traced with torch.profiler.profile() and no schedule on the H200 (issue 28
item 15; fixtures/trace/wordlm_sgd_h200, tools/capture_wordlm_sgd.py on CUDA): one iteration per backward pass, on
the autograd engine's own thread, and one host sync per iteration, with and without Python stacks."""

from __future__ import annotations

import pytest

import diagnose
from tests.paths import FIXTURES

WORDLM = FIXTURES / "trace" / "wordlm_sgd_h200"


@pytest.mark.parametrize("name", ["wordlm_stacks.json.gz", "wordlm_nostacks.json.gz"])
def test_one_iteration_and_one_sync_per_backward_pass(name):
    profile = diagnose.load(WORDLM / name, quiet=True, workers=1)
    analysis = diagnose.analyze(profile)
    assert analysis.results["sync"].meta["steps"][0]["steps"] == 24
    # the 24 loss.item() calls; without stacks the profiler's own synchronize as it stops read as a 25th (1.0417)
    assert analysis.summary["sync_count_per_step"] == 1.0
    kernels = len(profile.traces[0].gpu)
    assert analysis.summary["launch_kernels_per_step"] <= kernels / 24 + 1e-9


def test_the_profilers_stop_sync_is_found_by_its_place_without_stacks():
    from diagnose.derive import trace_timeline as tl

    trace = diagnose.load(WORDLM / "wordlm_nostacks.json.gz", quiet=True, workers=1).traces[0]
    stop = tl.profiler_stop_sync(trace.runtime)
    row = trace.runtime.iloc[stop]
    assert row["name"] == "cudaDeviceSynchronize" and row["ts_ns"] == trace.runtime["ts_ns"].max()
    assert stop not in set(tl.host_syncs(trace).tolist())
    assert len(tl.host_syncs(trace)) == 24
