"""The fragmentation section: draws the analyzer's tables, escapes user text, renders offline in Chromium."""

from __future__ import annotations

import re

from diagnose.analysis import Analysis
from diagnose.findings import Result
from reports.html import render_html
from reports.sections import fragmentation as section
from tests.browser import external_requests, visit
from tests.memory.conftest import scenario_result


def test_empty_result_renders():
    assert "No allocator data" in section.render(Result(analyzer="fragmentation"))


def test_section_has_the_figures_and_tables():
    html = section.render(scenario_result("churn"))
    for div in ("fragmentation-timeline", "fragmentation-heatmap", "fragmentation-external"):
        assert f'id="{div}"' in html
    assert "fragmentation-segment_growth" in html and "fragmentation-memory_stats_agreement" in html
    assert "mem_churn.py:43" in html  # hover names the Python line of the largest live allocation
    assert "allocator history covers steps 0–29 (30 of the run&#x27;s 30 steps, 100.0 %" in html
    assert not re.search(r"<script[^>]+src=", html)


def test_user_text_is_escaped():
    result = scenario_result("oom")
    result = Result(
        analyzer="fragmentation",
        tables=dict(result.tables),
        meta=dict(result.meta, warnings=["</p><script>x</script>"]),
    )
    html = section.render(result)
    assert "<script>x</script>" not in html and "&lt;script&gt;" in html


def test_report_renders_offline_in_chromium(tmp_path):
    results = {"fragmentation": scenario_result("churn")}
    analysis = Analysis(
        results=results,
        findings=list(results["fragmentation"].findings),
        summary=dict(results["fragmentation"].summary),
        source={"paths": ["fixtures/memory/churn"]},
    )
    out = tmp_path / "report.html"
    out.write_text(render_html(analysis))
    assert out.stat().st_size < 10 * 2**20
    v = visit(out)
    assert v.page_errors == [] and v.console_errors == []
    assert external_requests(v, out.as_uri()) == []
    assert v.rendered_plots == v.figure_divs >= 3
