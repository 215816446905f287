"""GPU tests of issue 28 items 3, 7 and 15, for a session with the H200; skipped without a GPU.

A module-level training loop under `gpudiag profile`: its `.item()` is named at the line light mode recorded, in the
sync finding and the step budget alike, never `main.py:0`. The word-level LM with a hand-written SGD traced with
`torch.profiler.profile()` and no schedule (tools/capture_wordlm_sgd.py on CUDA): one step per backward pass, so one
host sync a step (its `loss.item()`), not 13.

    PYTHONPATH=$PWD python3 -m pytest tests/gpu/test_sync_lines_gpu.py -m gpu -s -q
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.gpu_present import has_cuda_gpu

pytestmark = pytest.mark.gpu

if not has_cuda_gpu():
    pytest.skip("no NVIDIA GPU here", allow_module_level=True)

from tests.gpu.test_launch_gpu import _profile, _report  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

MODULE_LOOP = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4096, 1024, device="cuda")
y = torch.randint(0, 10, (4096,), device="cuda")
losses = []
for step in range(40):
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(loss.item())  # SYNC-1
print(losses[-1])
"""


def test_a_module_level_loop_is_named_at_its_recorded_line(tmp_path):
    script = tmp_path / "main.py"
    script.write_text(MODULE_LOOP)
    line = next(i for i, text in enumerate(MODULE_LOOP.splitlines(), 1) if "# SYNC-1" in text)
    run = tmp_path / "run"
    r, _ = _profile(run, [], [sys.executable, str(script)])
    assert r.returncode == 0, r.stderr[-3000:]
    findings = _report(run)["findings"]
    (host,) = [f for f in findings if f["id"] == "sync.host_sync"]
    assert f"aten::item at {script}:{line}" in host["title"], host["title"]
    assert "exact line" not in host["title"] and "module level" not in host["title"]
    for f in findings:
        assert not re.search(r"\.py:0\b", json.dumps(f)), f["title"]
    for f in [f for f in findings if f["id"] == "step_budget.sync"]:
        assert f"aten::item at {script}:{line}, holds " in f["title"], f["title"]


@pytest.mark.parametrize("name", ["wordlm_stacks.json.gz", "wordlm_nostacks.json.gz"])
def test_word_lm_without_profilerstep_has_one_sync_a_step(tmp_path, name):
    r = subprocess.run(
        [sys.executable, str(REPO / "tools" / "capture_wordlm_sgd.py"), str(tmp_path), "cuda"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    import diagnose

    analysis = diagnose.analyze(diagnose.load(tmp_path / name))
    summary = analysis.summary
    assert analysis.results["sync"].meta["steps"][0]["steps"] == 24
    assert summary["sync_count_per_step"] == pytest.approx(1.0)  # the 24 loss.item() calls over 24 iterations
    kernels = len(diagnose.load(tmp_path / name).traces[0].gpu)
    assert summary["launch_kernels_per_step"] <= kernels / 24 + 1e-9
