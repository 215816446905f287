"""GPU test of issue 18's periodic work: examples/periodic_work.py saves a checkpoint, or evaluates, every 20 steps;
light mode's work records name it in the step budget's periodic finding, with the line. Skipped without a GPU.

    PYTHONPATH=$PWD python3 -m pytest tests/gpu/test_periodic_work_gpu.py -m gpu -s -q
"""

from __future__ import annotations

import sys

import pytest

from tests.gpu.gpu_present import has_cuda_gpu

pytestmark = pytest.mark.gpu

if not has_cuda_gpu():
    pytest.skip("no NVIDIA GPU here", allow_module_level=True)

from tests.gpu.test_launch_gpu import EXAMPLES, _events, _profile, _record, _report  # noqa: E402


def _line_of(text: str) -> int:
    lines = (EXAMPLES / "periodic_work.py").read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if text in line)


@pytest.mark.parametrize("work, call", [("checkpoint", "# WORK-CHECKPOINT"), ("evaluation", "# WORK-EVALUATION")])
def test_periodic_work_is_named_with_its_line(tmp_path, work, call):
    run = tmp_path / work
    command = [sys.executable, str(EXAMPLES / "periodic_work.py"), "--device", "cuda", "--work", work, "--steps", "100"]
    r, wall = _profile(run, [], command)
    assert r.returncode == 0, r.stderr[-3000:]
    findings = _report(run)
    _record(f"periodic_{work}", "light", r, run, wall, findings)
    records = [e for e in _events(run) if e["kind"] == "work" and e["what"] in ("checkpoint", "evaluation")]
    assert [e["step"] for e in records][:4] == [19, 39, 59, 79] and {e["what"] for e in records} == {work}
    assert all(e["location"].endswith(f"periodic_work.py:{_line_of(call)}") for e in records), records
    (periodic,) = [f for f in findings["findings"] if f["id"] == "step_budget.periodic"]
    # "Every 20 steps (step 19 + 20i …)", or, where the first one is far slower (the first evaluation on CUDA sets up
    # cuBLAS: 30 ms against 3.5 on an H100, 2026-12-06), "Steps 19, 39, 59, 79 (4 steps, about every 20 steps) …"
    title = periodic["title"]
    assert title.startswith("Every 20 steps") or (
        title.startswith("Steps 19, 39, 59, 79") and "about every 20 steps" in title
    ), title
    assert f"periodic_work.py:{_line_of(call)}" in periodic["title"], periodic["title"]
