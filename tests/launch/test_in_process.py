"""`with diagnose.profile() as run:` instruments the block in this process and writes the same run folder."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import diagnose  # noqa: E402
from diagnose.analysis import run_analyzer  # noqa: E402
from diagnose.launch.runtime import lifecycle  # noqa: E402
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
    assert lifecycle.active() is None
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
        runtime = lifecycle.active()

        def broken(*args, **kwargs):
            raise ZeroDivisionError("planted")

        monkeypatch.setattr(runtime.steps, "drain", broken)
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


def test_own_time_per_step_is_recorded_in_the_step_it_was_spent_in(tmp_path, monkeypatch):
    """A boundary made 50 ms slower (a planted sleep where it holds the finished step's record, which every
    boundary does) shows as overhead_us of the step that boundary starts, inside that step's host_ms; the steps
    analyzer turns it into a share of a step. The sleep is long beside a boundary's usual tens of µs, so a busy
    machine's preemptions cannot blur which steps hold it."""
    import collections
    import statistics
    import time

    from diagnose.analyzers import steps as steps_analyzer
    from diagnose.ingest.loading import load
    from diagnose.thresholds import Thresholds

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with diagnose.profile(out=tmp_path / "nb", trace_steps=0, nvml=False, quiet=True) as run:
        for i in range(16):
            if i == 6:
                steps = lifecycle.active().steps

                class SlowToHold(collections.deque):
                    def append(self, item):
                        time.sleep(0.05)
                        super().append(item)

                monkeypatch.setattr(steps, "_pending", SlowToHold(steps._pending))
            loss = model(torch.ones(8, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    steps = [r for r in records(run.path) if r["kind"] == "step"]
    assert len(steps) == 15
    assert all(0 <= s["overhead_us"] <= s["host_ms"] * 1000 for s in steps)
    # boundaries 1-6 are unplanted (they start steps 0-5: step 0's holds the first boundary's setup);
    # boundaries 7-16 sleep, and start steps 6-15 (the last one's step is never finished)
    assert all(s["overhead_us"] < 50_000 for s in steps[1:6]), [s["overhead_us"] for s in steps]
    assert all(s["overhead_us"] >= 50_000 and s["host_ms"] >= 50.0 for s in steps[6:]), steps[6:]

    result = run_analyzer(steps_analyzer, load(run.path))
    measured = steps[3:]  # the first 3 are warm-up
    own = statistics.fmean(s["overhead_us"] for s in measured)
    host = statistics.median(s["host_ms"] for s in measured)
    assert result.summary["gpudiag_overhead_mean_us"] == pytest.approx(own)
    assert result.summary["gpudiag_overhead_pct"] == pytest.approx(100 * own / 1000 / host)
    finding = next(f for f in result.findings if f.id == "steps.own_overhead")
    assert result.summary["gpudiag_overhead_pct"] > 50 and finding.cost_share > 0.5
    high = Thresholds().with_overrides({"steps": {"own_overhead_pct": 100.0}})
    assert "steps.own_overhead" not in {f.id for f in run_analyzer(steps_analyzer, load(run.path), high).findings}


def test_no_boundary_is_lost_while_another_thread_writes_a_record(tmp_path):
    """The long-step sampler writes its records from its own thread, through the runtime's lock. A boundary that
    needs the lock (the first one, which starts the run; any that writes the held step records) waits for such a
    write; the usual ones do not take it. Before, a boundary gave up on a held lock, and the steps around it ran
    together as one record (seen on the 2-core CPU host: one sampler's write dropped hundreds of boundaries)."""
    import threading
    import time

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with diagnose.profile(out=tmp_path / "nb", trace_steps=0, nvml=False, quiet=True) as run:
        runtime = lifecycle.active()
        for i in range(20):
            if i in (0, 8):  # a write from another thread holds the lock for 50 ms while the loop goes on
                held = threading.Event()

                def write(held=held):
                    with runtime.lock:
                        held.set()
                        time.sleep(0.05)

                writer = threading.Thread(target=write)
                writer.start()
                held.wait()
            loss = model(torch.ones(8, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i in (0, 8):
                writer.join()
    steps = [r for r in records(run.path) if r["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(19))  # 20 optimizer steps: 19 finished steps, none merged
    # the first boundary waited for the rest of the write: its own time, in step 0
    assert steps[0]["overhead_us"] >= 25_000 and steps[0]["host_ms"] >= 25.0, steps[0]


def test_a_forked_child_records_nothing(tmp_path):
    """The boundary has no getpid() check (a syscall per step): os.register_at_fork switches the child off."""
    import os

    with diagnose.profile(out=tmp_path / "nb", trace_steps=0, nvml=False, quiet=True) as run:
        for _ in range(5):
            diagnose.step()
        pid = os.fork()
        if pid == 0:
            code = 0 if lifecycle.active() is None or lifecycle.active().disabled else 3
            for _ in range(5):
                diagnose.step()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        for _ in range(5):
            diagnose.step()
    assert os.waitstatus_to_exitcode(status) == 0
    assert [r["step"] for r in records(run.path) if r["kind"] == "step"] == list(range(9))
