"""How big a report is and how long Chromium takes to open it, until every plot has rendered.

    python benchmarks/report_open.py                          # the largest report and a small one
    python benchmarks/report_open.py a.html b.html --repeat 5 # reports already rendered
    python benchmarks/report_open.py --render TRACE ...       # render these inputs first (gpudiag report)
    python benchmarks/report_open.py --fixtures               # the largest report of any fixture (was a test)

Without arguments it renders the grown ~1 GB trace of ``benchmarks/trace_load.py --grow-mb 1000``
(``scratch/grown_1000mb.trace.json``, git-ignored) and a small real fixture into ``scratch/``, then
opens both side by side. Opening uses the tests' headless Chromium (tests/browser.py): a fresh page
per run, the clock is the page's own (``performance.now()`` from navigation start) read once every
plotly div holds its SVG. Also prints the figures' mark counts (reports/chart_budget.py), so a
slow page can be traced to the chart that draws too much. Targets (issue 19): < 10 MB, < 3 s.
``--fixtures`` renders every fixture's report as tests/test_chart_budget.py does and opens the largest: the
suite checks that page renders, this prints how long it takes (a wall time depends on the machine's load).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reports.chart_budget import figure_marks, figures_in_page  # noqa: E402
from tests.browser import ARGS, CHROMIUM  # noqa: E402

GROWN = ROOT / "scratch" / "grown_1000mb.trace.json"
SMALL = ROOT / "fixtures" / "trace" / "sync_planted" / "trace.json.gz"
SCRATCH = ROOT / "scratch" / "report_open"
ALL_PLOTTED = (
    "document.querySelectorAll('div.plotly-graph-div').length === 0 || "
    "[...document.querySelectorAll('div.plotly-graph-div')].every(d => d.querySelector('.main-svg'))"
)
TARGET_BYTES, TARGET_S = 10 * 10**6, 3.0


def render(source: Path) -> Path:
    """``gpudiag report SOURCE -o scratch/report_open/<name>.html``; returns the page's path."""
    SCRATCH.mkdir(parents=True, exist_ok=True)
    out = SCRATCH / f"{source.parent.name}_{source.name.split('.')[0]}.html"
    r = subprocess.run([sys.executable, "-m", "diagnose", "report", str(source), "-o", str(out)], cwd=ROOT)
    if r.returncode != 0 or not out.exists():
        raise SystemExit(f"gpudiag report {source} failed (exit {r.returncode})")
    return out


def open_times_s(page: Path, repeat: int, timeout_s: float) -> list[float]:
    """Seconds from navigation start until every plot has rendered, once per fresh page; a page that has
    not rendered within ``timeout_s`` counts as infinity and is not opened again."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    times = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            for _ in range(repeat):
                context = browser.new_context()
                tab = context.new_page()
                try:
                    tab.goto(page.resolve().as_uri(), wait_until="load", timeout=timeout_s * 1000)
                    tab.wait_for_function(ALL_PLOTTED, timeout=timeout_s * 1000, polling="raf")
                    times.append(tab.evaluate("performance.now()") / 1000.0)
                except PlaywrightTimeout:
                    times.append(float("inf"))
                    break
                finally:
                    context.close()
        finally:
            browser.close()
    return times


def largest_fixture_page() -> Path:
    """The largest report of the fixtures tests/test_chart_budget.py renders, written to scratch/report_open/."""
    from tests.test_chart_budget import ALL_INPUTS, page_of

    largest = max(ALL_INPUTS, key=lambda p: len(page_of(p)))
    print(f"largest fixture report: {largest.relative_to(ROOT)}")
    SCRATCH.mkdir(parents=True, exist_ok=True)
    out = SCRATCH / "largest_fixture.html"
    out.write_text(page_of(largest), encoding="utf-8")
    return out


def describe(page: Path, repeat: int, timeout_s: float) -> dict:
    text = page.read_text(encoding="utf-8")
    marks = [figure_marks(f) for f in figures_in_page(text)]
    times = open_times_s(page, repeat, timeout_s)
    return {
        "page": page,
        "bytes": page.stat().st_size,
        "figures": len(marks),
        "max_marks": max(marks, default=0),
        "all_marks": sum(marks),
        "open_s": statistics.median(times),
        "open_max_s": max(times),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", nargs="*", type=Path, help="rendered reports (default: render the two inputs below)")
    ap.add_argument("--render", nargs="*", type=Path, default=None, help="inputs to render with gpudiag report")
    ap.add_argument("--fixtures", action="store_true", help="add the largest report of any fixture")
    ap.add_argument("--repeat", type=int, default=3, help="opens per page; the median is printed")
    ap.add_argument("--timeout-s", type=float, default=60.0, help="give up on a page after this long")
    args = ap.parse_args()
    pages = list(args.pages) + ([largest_fixture_page()] if args.fixtures else [])
    sources = args.render if args.render is not None else ([] if pages else [GROWN, SMALL])
    for source in sources:
        if not source.exists():
            raise SystemExit(f"{source} is missing; grow it with: python benchmarks/trace_load.py --grow-mb 1000")
        pages.append(render(source))
    rows = [describe(p, args.repeat, args.timeout_s) for p in pages]
    print(f"{'report':40} {'MB':>7} {'figs':>5} {'max marks':>10} {'marks':>8} {'open s':>7} {'worst s':>8}")
    for r in rows:
        ok = r["bytes"] < TARGET_BYTES and r["open_max_s"] < TARGET_S
        print(
            f"{r['page'].name:40} {r['bytes'] / 1e6:7.2f} {r['figures']:5d} {r['max_marks']:10,d} "
            f"{r['all_marks']:8,d} {r['open_s']:7.2f} {r['open_max_s']:8.2f}  {'ok' if ok else 'OVER TARGET'}"
            + (f" (not rendered within {args.timeout_s:g} s)" if r["open_max_s"] == float("inf") else "")
        )
    print(f"targets: < {TARGET_BYTES / 1e6:g} MB, < {TARGET_S:g} s until every plot has rendered")


if __name__ == "__main__":
    main()
