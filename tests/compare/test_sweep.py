"""gpudiag sweep: grid parsing, the samples contract, the Pareto front, and a real sweep of
examples/train_sweep.py on this CPU with a planted failing combination."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from diagnose.comparison import sweep as sw
from parsers.errors import InputError
from tests.compare.conftest import EXAMPLE, gpudiag


def test_parse_and_expand_grid():
    grid = sw.parse_grid(["accum=1,2,4,8", "precision=fp32, bf16,fp16"])
    assert grid == [("accum", ["1", "2", "4", "8"]), ("precision", ["fp32", "bf16", "fp16"])]
    combos = sw.expand_grid(grid)
    assert len(combos) == 12
    assert combos[0] == {"accum": "1", "precision": "fp32"} and combos[1] == {"accum": "1", "precision": "bf16"}
    assert combos[-1] == {"accum": "8", "precision": "fp16"}


@pytest.mark.parametrize("bad", ["accum", "=1,2", "1x=1", "a=", "a=1,,2", "a=1,1"])
def test_bad_grid_raises_input_error(bad):
    with pytest.raises(InputError):
        sw.parse_grid([bad])
    with pytest.raises(InputError):
        sw.parse_grid(["a=1", "a=2"])


def test_fill_command_and_labels():
    cmd = sw.fill_command(
        ["python", "t.py", "--a={accum}", "{precision}", '{"json": 1}'], {"accum": "4", "precision": "bf16"}
    )
    assert cmd == ["python", "t.py", "--a=4", "bf16", '{"json": 1}']
    assert sw.label_of(3, {"accum": "4", "opt": "a/b c"}) == "03-accum=4-opt=a_b_c"
    assert sw.check_template(["python", "t.py", "{a}"], [("a", ["1"]), ("rep", ["1", "2"])]) == [
        "grid rep is not used in the command ({rep} appears nowhere): its runs are repeats"
    ]


def test_samples_contract():
    assert sw.samples_per_step_from_output("x\ngpudiag: samples_per_step=64\nstep 0\n") == 64.0
    assert sw.samples_per_step_from_output("gpudiag: samples_per_step=8\ngpudiag: samples_per_step=16") == 16.0
    assert sw.samples_per_step_from_output("no line here") is None
    assert sw.eval_samples_expr("{batch}*8 // 2", {"batch": "32"}) == 128.0
    with pytest.raises(InputError):
        sw.eval_samples_expr("__import__('os')", {})


def test_pareto_front():
    t = pd.DataFrame(
        {
            "status": ["ok", "ok", "ok", "ok", "failed"],
            "peak_reserved_bytes": [10.0, 20.0, 15.0, 30.0, 1.0],
            "samples_per_s": [100.0, 300.0, 90.0, 300.0, 1e9],
        }
    )
    # 0: least memory; 1: fastest at 20; 2: dominated by 0; 3: as fast as 1 with more memory; 4: failed
    assert list(sw.pareto_front(t)) == [True, True, False, False, False]
    assert list(sw.pareto_front(t.assign(samples_per_s=math.nan, steps_per_s=[1.0, 2.0, 3.0, 4.0, 5.0]))) == [
        True,
        False,
        True,
        True,
        False,
    ]  # (20 MB, 2/s) is beaten by (15 MB, 3/s)


def test_fake_runner_failure_and_timeout_rows(tmp_path):
    """A pluggable runner (here a fake that writes logs) drives the same row logic."""

    def fake_runner(command, run_dir, out, err, timeout_s):
        out.parent.mkdir(parents=True, exist_ok=True)
        code = {"ok": 0, "oom": 1, "hang": None}[command[-1]]
        out.write_text("gpudiag: samples_per_step=32\n")
        err.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n" if code == 1 else "")
        return sw.Attempt(code, out, err, 0.1)

    def fake_measure(run_dir):
        return {
            "step_count": 10,
            "step_time_median_ms": 250.0,
            "peak_reserved_bytes": 4e9,
            "peak_allocated_bytes": 3e9,
            "warnings": [],
        }

    s = sw.run_sweep(
        ["train", "{mode}"],
        [("mode", ["ok", "oom", "hang"])],
        tmp_path / "s",
        runner=fake_runner,
        timeout_s=5,
        measure=fake_measure,
    )
    rows = s.rows.set_index("mode")
    assert rows.loc["ok", "status"] == "ok" and rows.loc["ok", "samples_per_s"] == pytest.approx(128.0)
    assert rows.loc["ok", "pareto"]
    assert rows.loc["oom", "status"] == "oom" and "out of memory" in rows.loc["oom", "reason"]
    assert rows.loc["hang", "status"] == "timeout" and "killed after 5 s" in rows.loc["hang", "reason"]
    written = json.loads((tmp_path / "s" / "sweep.json").read_text(encoding="utf-8"))
    assert written["schema"] == sw.SCHEMA and [r["status"] for r in written["rows"]] == ["ok", "oom", "timeout"]


@pytest.fixture(scope="module")
def cpu_sweep(tmp_path_factory):
    """A real sweep on this CPU: 2 x 2 grid, precision=int3 is invalid (argparse exits 2)."""
    folder = tmp_path_factory.mktemp("sweep") / "s"
    r = gpudiag(
        "sweep",
        "-o",
        folder,
        "--grid",
        "accum=1,2",
        "--grid",
        "precision=fp32,int3",
        "--",
        "python",
        EXAMPLE,
        "--device",
        "cpu",
        "--tiny",
        "--steps",
        "8",
        "--grad-accum",
        "{accum}",
        "--precision",
        "{precision}",
        timeout=600,
    )
    return folder, r


def test_cpu_sweep_table_and_failed_combination(cpu_sweep):
    folder, r = cpu_sweep
    assert r.returncode == 0, r.stderr
    data = json.loads((folder / "sweep.json").read_text())
    assert data["schema"] == "gpudiag.sweep/1" and len(data["rows"]) == 4
    rows = {(x["accum"], x["precision"]): x for x in data["rows"]}
    for accum in ("1", "2"):
        ok, bad = rows[(accum, "fp32")], rows[(accum, "int3")]
        assert ok["status"] == "ok" and ok["exit_code"] == 0
        assert ok["samples_per_step"] == 8 and ok["step_count"] >= 3
        assert ok["samples_per_s"] == pytest.approx(8 * 1000 / ok["step_time_median_ms"])
        assert ok["peak_reserved_bytes"] is None  # a CPU run has no CUDA memory stats
        assert bad["status"] == "failed" and bad["exit_code"] == 2
        assert "invalid choice: 'int3'" in bad["reason"]
    csv = pd.read_csv(folder / "sweep.csv")
    assert list(csv["status"]) == ["ok", "failed", "ok", "failed"]
    for label in csv["label"]:
        assert (folder / "logs" / f"{label}.stderr.log").exists()
    assert (folder / "00-accum=1-precision=fp32" / "manifest.json").exists()
    html = (folder / "sweep.html").read_text()
    assert "invalid choice: &#39;int3&#39;" in html and "02-accum=2-precision=fp32" in html


def _events_median_ms(run_dir):
    """Step median straight from events/rank0.jsonl (docs/step-timings.md: the first 3 steps and
    instrumented steps left out, host time): an independent recomputation, not the sweep's code."""
    steps = [json.loads(line) for line in (run_dir / "events" / "rank0.jsonl").read_text().splitlines()]
    steps = sorted((e for e in steps if e.get("kind") == "step"), key=lambda e: e["step"])
    kept = [e["host_ms"] for i, e in enumerate(steps) if i >= min(3, len(steps) // 2) and not e.get("instrumented")]
    kept.sort()
    n = len(kept)
    return n, (kept[n // 2] if n % 2 else (kept[n // 2 - 1] + kept[n // 2]) / 2)


def test_sweep_numbers_match_the_run_folders_they_came_from(cpu_sweep):
    folder, r = cpu_sweep
    rows = [x for x in json.loads((folder / "sweep.json").read_text())["rows"] if x["status"] == "ok"]
    assert len(rows) == 2
    for row in rows:
        run_dir = folder / row["label"]
        count, median = _events_median_ms(run_dir)
        assert row["step_count"] == count
        assert row["step_time_median_ms"] == pytest.approx(median, rel=1e-9)
        report = gpudiag("report", run_dir, "-o", run_dir / "r.html", "--json", run_dir / "r.json")
        assert report.returncode == 0, report.stderr
        summary = json.loads((run_dir / "r.json").read_text())["summary"]
        assert summary["step_time_median_ms"] == pytest.approx(row["step_time_median_ms"], rel=1e-9)


def test_sweep_all_failed_exits_1_and_bad_grid_exits_2(tmp_path):
    r = gpudiag(
        "sweep",
        "--no-profile",
        "-o",
        tmp_path / "s",
        "--grid",
        "precision=int3,int4",
        "--",
        "python",
        EXAMPLE,
        "--device",
        "cpu",
        "--tiny",
        "--precision",
        "{precision}",
        timeout=300,
    )
    assert r.returncode == 1, r.stderr
    rows = json.loads((tmp_path / "s" / "sweep.json").read_text())["rows"]
    assert [x["status"] for x in rows] == ["failed", "failed"]
    r = gpudiag("sweep", "--grid", "accum", "--", "python", EXAMPLE)
    assert r.returncode == 2 and r.stderr.startswith("gpudiag: error:") and "Traceback" not in r.stderr
    r = gpudiag("sweep", "--grid", "a=1", "--samples-per-step", "{a}+", "--", "python", EXAMPLE)
    assert r.returncode == 2 and "--samples-per-step" in r.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    r = gpudiag("sweep", "-o", tmp_path / "full", "--grid", "a=1", "--", "python", EXAMPLE)
    assert r.returncode == 2 and "not empty" in r.stderr


def test_sweep_html_renders_in_browser(tmp_path):
    from tests.browser import external_requests, visit

    rows = pd.DataFrame(
        {
            "index": [0, 1, 2],
            "label": ["00-a=1", "01-a=2", "02-a=3"],
            "a": ["1", "2", "3"],
            "status": ["ok", "ok", "oom"],
            "exit_code": [0, 0, 1],
            "reason": ["", "", "exit code 1\nCUDA out of memory </pre><script>x</script>"],
            "samples_per_s": [100.0, 150.0, math.nan],
            "steps_per_s": [1.0, 1.5, math.nan],
            "step_time_median_ms": [1000.0, 666.0, math.nan],
            "peak_reserved_bytes": [2e9, 5e9, math.nan],
            "peak_allocated_bytes": [1e9, 4e9, math.nan],
        }
    )
    rows["pareto"] = sw.pareto_front(rows)
    fake = sw.Sweep(folder=tmp_path, grid=[("a", ["1", "2", "3"])], template=["python", "t.py", "{a}"], rows=rows)
    from reports.sweep_html import render_sweep_html, render_sweep_terminal

    html = render_sweep_html(fake)
    assert "<script>x</script>" not in html and "&lt;script&gt;x" in html
    out = tmp_path / "sweep.html"
    out.write_text(html)
    v = visit(out)
    assert v.figure_divs == 1 and v.rendered_plots == 1
    assert not v.console_errors and not v.page_errors and external_requests(v, out.as_uri()) == []
    text = render_sweep_terminal(fake)
    assert "01-a=2" not in text.splitlines()[0] and "oom" in text
