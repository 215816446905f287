"""`with diagnose.profile() as run:` instruments the block in this process and writes the same run folder."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import diagnose  # noqa: E402
from diagnose.launch import bootstrap_runtime  # noqa: E402
from tests.launch.launch_helpers import manifest, records  # noqa: E402


def _train(steps: int, marker: bool = False) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        loss = model(torch.ones(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if marker:
            diagnose.step()
        losses.append(loss.item())
    return losses


def test_context_manager_writes_a_run_folder(tmp_path):
    baseline = _train(12)
    with diagnose.profile(out=tmp_path / "nb", trace_start=3, trace_steps=2, nvml=False, quiet=True) as run:
        losses = _train(12)
    assert losses == baseline
    assert run.exit_code == 0 and run.path == tmp_path / "nb"
    m = manifest(run.path)
    assert m["mode"] == "in-process" and m["exit_code"] == 0 and m["missing"] == []
    assert sorted(m["artifacts"]) == ["events/rank0.jsonl", "trace/rank0.json.gz"]
    steps = [r for r in records(run.path) if r["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(11)) and {s["source"] for s in steps} == {"optimizer"}
    assert bootstrap_runtime.active() is None
    _train(3)  # after the block the optimizer hook is gone: nothing more is written
    assert len([r for r in records(run.path) if r["kind"] == "step"]) == 11


def test_marker_takes_over_from_the_optimizer_hook(tmp_path):
    with diagnose.profile(out=tmp_path / "nb", trace_steps=0, nvml=False, quiet=True) as run:
        _train(6, marker=True)
    steps = [r for r in records(run.path) if r["kind"] == "step"]
    # boundary 1 from optimizer.step(), then only the markers: 6 boundaries, 5 steps, no double count
    assert [s["step"] for s in steps] == list(range(5))
    assert [s["source"] for s in steps] == ["marker"] * 5


def test_internal_error_logs_once_and_disables_without_touching_training(tmp_path, capsys, monkeypatch):
    baseline = _train(8)
    with diagnose.profile(out=tmp_path / "nb", trace_steps=0, nvml=False, quiet=True) as run:
        runtime = bootstrap_runtime.active()

        def broken(*args, **kwargs):
            raise ZeroDivisionError("planted")

        monkeypatch.setattr(runtime, "_drain", broken)
        losses = _train(8)
        assert runtime.disabled
    assert losses == baseline
    err = capsys.readouterr().err
    assert err.count("internal error in the bootstrap") == 1 and "ZeroDivisionError: planted" in err
    assert run.exit_code == 0 and manifest(run.path)["exit_code"] == 0


def test_exception_in_the_block_is_recorded_and_propagates(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with diagnose.profile(out=tmp_path / "nb", trace_steps=0, nvml=False, quiet=True) as run:
            _train(3)
            raise RuntimeError("boom")
    assert run.exit_code == 1 and manifest(run.path)["status"] == "failed"
