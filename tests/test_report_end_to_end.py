"""End to end on the real H200 ncu fixtures: CLI report/check, findings JSON, HTML in Chromium."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import diagnose
from reports.html import render_html
from reports.json_report import SCHEMA, to_dict
from tests.browser import external_requests, visit
from tests.html_checks import external_resources
from tests.paths import FIXTURES

GATHER = FIXTURES / "ncu" / "l2_random_gather" / "raw.csv"
SMALL_GRID_REP = FIXTURES / "ncu" / "small_grid" / "report.ncu-rep.gz"
TINY = FIXTURES / "ncu" / "tiny_kernels" / "raw_base.csv"


def gpudiag(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "diagnose", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_report_cli_writes_html_and_json(tmp_path):
    out, js = tmp_path / "r.html", tmp_path / "f.json"
    r = gpudiag("report", GATHER, "-o", out, "--json", js)
    assert r.returncode == 0, r.stderr
    assert f"Wrote {out}" in r.stdout
    data = json.loads(js.read_text())
    assert data["schema"] == SCHEMA
    ids = {f["id"]: f for f in data["findings"]}
    low = ids["l2.low_hit_rate"]
    assert low["severity"] == "critical"
    assert low["subjects"][0]["kind"] == "kernel"
    assert "scatter_gather" in low["subjects"][0]["name"]
    assert 15.0 < data["summary"]["l2_hit_time_weighted_pct"] < 19.0  # 17.12 / 17.16 / 17.13 in the capture
    html = out.read_text()
    assert external_resources(html) == []
    assert html.count("Plotly.newPlot") >= 1
    assert html.index("l2.low_hit_rate") < html.index('id="section-l2"')  # findings come first


def test_check_gates_on_severity(tmp_path):
    assert gpudiag("check", GATHER, "--fail-on", "critical").returncode == 1
    # raising the critical band below the measured 17 % leaves only a warning
    r = gpudiag("check", GATHER, "--fail-on", "critical", "--threshold", "l2.critical_pct=10")
    assert r.returncode == 0, r.stdout + r.stderr
    js = tmp_path / "f.json"
    gpudiag("report", GATHER, "--no-html", "--json", js)
    assert gpudiag("check", js, "--fail-on", "critical").returncode == 1  # reads the findings JSON back
    assert gpudiag("check", js, "--fail-on", "critical", "--ignore", "l2.low_hit_rate").returncode in (0, 1)


def test_config_file_overrides(tmp_path):
    cfg = tmp_path / "gpudiag.toml"
    cfg.write_text("[l2]\ncritical_pct = 10\nwarning_pct = 15\n")
    r = gpudiag("check", GATHER, "--fail-on", "warning", "--config", cfg)
    data_json = tmp_path / "f.json"
    gpudiag("report", GATHER, "--no-html", "--json", data_json, "--config", cfg)
    ids = [f["id"] for f in json.loads(data_json.read_text())["findings"]]
    assert "l2.low_hit_rate" not in ids  # 17 % is above a 15 % warning band
    assert r.returncode in (0, 1)


def test_ncu_rep_gz_reports(tmp_path):
    pytest.importorskip("ncu_report")
    out = tmp_path / "r.html"
    r = gpudiag("report", SMALL_GRID_REP, "-o", out)
    assert r.returncode == 0, r.stderr
    assert "launch_config.small_grid" in out.read_text()


def _html_for(path, tmp_path, rename=None):
    profile = diagnose.load(path)
    if rename:
        k = profile.kernels.copy()
        k.loc[0, "kernel_short"] = rename
        k.loc[0, "kernel_name"] = rename
        profile.kernels = k
    analysis = diagnose.analyze(profile)
    out = tmp_path / "report.html"
    out.write_text(render_html(analysis))
    return out, analysis


@pytest.mark.browser
def test_html_renders_offline_in_chromium(tmp_path):
    out, analysis = _html_for(TINY, tmp_path)
    v = visit(out)
    assert v.page_errors == [] and v.console_errors == []
    assert external_requests(v, out.as_uri()) == []
    assert v.figure_divs >= 1 and v.rendered_plots == v.figure_divs


@pytest.mark.browser
def test_hostile_kernel_name_is_escaped(tmp_path):
    evil = "fake_kernel</script><script>window.__pwned=1</script>"
    out, analysis = _html_for(GATHER, tmp_path, rename=evil)
    html = out.read_text()
    assert "<script>window.__pwned=1</script>" not in html
    v = visit(out, evaluate={"pwned": "typeof window.__pwned", "text": "document.body.innerText"})
    assert v.evaluated["pwned"] == "undefined"
    assert "</script><script>window.__pwned=1" in v.evaluated["text"]  # shown as text
    assert v.page_errors == [] and v.console_errors == []


def test_findings_json_is_strict_json_on_empty_analysis():
    analysis = diagnose.analyze(diagnose.Profile())
    data = to_dict(analysis)
    json.dumps(data, allow_nan=False)
    assert data["schema"] == SCHEMA and isinstance(data["findings"], list)
    html = render_html(analysis)
    assert "gpudiag report" in html
