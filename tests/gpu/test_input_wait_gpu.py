"""GPU test of issue 18's input wait for a loop with no DataLoader: examples/input_generator.py under light mode on
the H200. Skipped without a GPU (the `gpu` marker). Written 2026-12-04 after the session's device time ran out: not
yet run on the H200.

    PYTHONPATH=$PWD python3 -m pytest tests/gpu/test_input_wait_gpu.py -m gpu -s -q
"""

from __future__ import annotations

import sys

import pytest

from tests.gpu.gpu_present import has_cuda_gpu

pytestmark = pytest.mark.gpu

if not has_cuda_gpu():
    pytest.skip("no NVIDIA GPU here", allow_module_level=True)

from tests.gpu.test_launch_gpu import EXAMPLES, _events, _profile, _record, _report  # noqa: E402


def test_generator_fed_loop_names_its_iterator(tmp_path):
    """The loop waits ~30 ms a step in a hand-written generator while the GPU step takes ~1 ms: the step budget's
    top cause is the input wait, measured in the traced steps and naming the generator and its line."""
    run = tmp_path / "input-generator"
    command = [sys.executable, str(EXAMPLES / "input_generator.py"), "--steps", "40", "--device", "cuda"]
    r, wall = _profile(run, [], command)
    assert r.returncode == 0, r.stderr[-3000:]
    findings = _report(run)
    _record("input_generator", "light", r, run, wall, findings)
    steps = [e for e in _events(run) if e["kind"] == "step"]
    # no DataLoader: measured per step only by Python 3.12+'s watch of the loop's for statement (input_from "loop")
    assert len(steps) >= 35 and all("input_ms" not in s or s.get("input_from") == "loop" for s in steps[1:])
    top = findings["findings"][0]
    assert top["id"] == "step_budget.input", [f["id"] for f in findings["findings"][:4]]
    assert "its iterator" in top["title"] and "batches at input_generator.py:" in top["title"], top["title"]
    assert top["cost_share"] > 0.5
