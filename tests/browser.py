"""Open a rendered report in real headless Chromium (Debian's, driven by Playwright).

Collects console errors, page errors and every network request, so tests can
assert that the page renders offline with no errors. Skips where Chromium is not
installed, unless GPUDIAG_REQUIRE_BROWSER=1 (CI sets it), where it fails instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class PageVisit:
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    rendered_plots: int = 0
    figure_divs: int = 0
    evaluated: dict = field(default_factory=dict)


def require_browser():
    if not os.path.exists(CHROMIUM):
        if os.environ.get("GPUDIAG_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is required (GPUDIAG_REQUIRE_BROWSER=1) but not installed")
        pytest.skip(f"{CHROMIUM} not installed")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        if os.environ.get("GPUDIAG_REQUIRE_BROWSER") == "1":
            pytest.fail("playwright is required (GPUDIAG_REQUIRE_BROWSER=1) but not installed")
        pytest.skip("playwright not installed")


def visit(
    html_path: Path, evaluate: dict[str, str] | None = None, timeout_ms: int = 30000, viewport: dict | None = None
) -> PageVisit:
    """Load ``html_path``, wait until every plotly div has drawn, return what happened.

    ``evaluate`` maps names to JS expressions whose values land in ``evaluated``; ``viewport``
    (``{"width": 1280, "height": 1000}``) sets the window size, for tests of what shows without scrolling."""
    require_browser()
    from playwright.sync_api import sync_playwright

    result = PageVisit()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport=viewport) if viewport else browser.new_page()
            page.on("console", lambda m: result.console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: result.page_errors.append(str(e)))
            page.on("request", lambda r: result.requests.append(r.url))
            page.goto(Path(html_path).resolve().as_uri(), wait_until="load", timeout=timeout_ms)
            result.figure_divs = page.evaluate("document.querySelectorAll('div.plotly-graph-div').length")
            if result.figure_divs:
                page.wait_for_function(
                    "document.querySelectorAll('div.plotly-graph-div .main-svg').length > 0 && "
                    "[...document.querySelectorAll('div.plotly-graph-div')].every(d => d.querySelector('.main-svg'))",
                    timeout=timeout_ms,
                )
            result.rendered_plots = page.evaluate(
                "[...document.querySelectorAll('div.plotly-graph-div')].filter(d => d.querySelector('.main-svg')).length"
            )
            for key, js in (evaluate or {}).items():
                result.evaluated[key] = page.evaluate(js)
        finally:
            browser.close()
    return result


def external_requests(v: PageVisit, page_uri: str) -> list[str]:
    return [u for u in v.requests if not (u.startswith("file://") or u.startswith("data:") or u.startswith("blob:"))]
