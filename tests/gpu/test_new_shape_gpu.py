"""GPU test of issue 18's new input shapes: examples/cudnn_new_shape.py (cudnn.benchmark=True, the last batch of the
first epoch smaller) under light mode on the GPU: the step that meets the new shape is recorded, kept out of the
steady-state figures and named with cuDNN's re-tuning. Skipped without a GPU.

    PYTHONPATH=$PWD python3 -m pytest tests/gpu/test_new_shape_gpu.py -m gpu -s -q
"""

from __future__ import annotations

import sys

import pytest

from tests.gpu.gpu_present import has_cuda_gpu

pytestmark = pytest.mark.gpu

if not has_cuda_gpu():
    pytest.skip("no NVIDIA GPU here", allow_module_level=True)

from tests.gpu.test_launch_gpu import EXAMPLES, _events, _profile, _record, _report  # noqa: E402


def test_the_new_shape_step_is_named_with_cudnn(tmp_path):
    run = tmp_path / "cudnn-new-shape"
    command = [sys.executable, str(EXAMPLES / "cudnn_new_shape.py"), "--device", "cuda", "--epochs", "4"]
    r, wall = _profile(run, [], command)
    assert r.returncode == 0, r.stderr[-3000:]
    findings = _report(run)
    _record("cudnn_new_shape", "light", r, run, wall, findings)
    records = [e for e in _events(run) if e["kind"] == "work" and e["what"] == "new-shape"]
    late = [e for e in records if e["step"] > 0]
    assert len(late) == 1 and late[0]["name"].startswith("(40,") and late[0]["cudnn_benchmark"] is True, records
    steps = {e["step"]: e for e in _events(run) if e["kind"] == "step"}
    print("new-shape step", late[0]["step"], "host ms", steps.get(late[0]["step"], {}).get("host_ms"))
    (finding,) = [f for f in findings["findings"] if f["id"] == "step_budget.new_shape"]
    assert f"step {late[0]['step']}" in finding["title"] and "cudnn.benchmark=True" in finding["title"], finding
