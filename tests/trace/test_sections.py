"""Report sections sync / idle / launch: draw what the analyzers computed, and cope with empty results."""

from __future__ import annotations

from diagnose.analysis import analyze
from diagnose.findings import Result
from reports.html import render_html
from reports.sections import idle as idle_section
from reports.sections import launch as launch_section
from reports.sections import sync as sync_section
from tests.trace.helpers import SYNC_FREE, SYNC_PLANTED, profile_of


def test_sections_on_empty_results():
    assert "No host synchronisation" in sync_section.render(Result("sync"))
    assert "No GPU activity" in idle_section.render(Result("idle"))
    assert "No kernel launches" in launch_section.render(Result("launch"))


def test_planted_report_has_table_bars_and_timeline():
    a = analyze(profile_of(SYNC_PLANTED), only=["sync", "idle", "launch"])
    html_sync = sync_section.render(a.results["sync"])
    assert "sync_planted.py:20" in html_sync and "GPU idle ms / step" in html_sync
    assert "exact line that synced is not in the trace" in html_sync
    assert "host syncs in step" in html_sync  # the timeline of the representative step
    html_idle = idle_section.render(a.results["idle"])
    assert html_idle.count("idle: held by syncs") == 1 and "GPU time per step" in html_idle
    page = render_html(a)
    assert '<script src="http' not in page and "sync.host_sync" in page


def test_sync_free_report():
    a = analyze(profile_of(SYNC_FREE), only=["sync"])
    assert "No host synchronisation" in sync_section.render(a.results["sync"])
