"""Reports of real captures read as a person writes: no raw numbers, keys or plural slips (issue 28, item 11).

Before, the reports of these fixtures printed ``1.13e+03 ms`` (jax_recompile's appendix), ``4.37e+04 1/s``
(a launch rate), grids as ``16,384.00``, bytes as ``150,754,820,096.00``, ``<NA>`` cells (the allocator
history's coverage), snake_case column headers in every table (``gpu_time_ns``), "Kernel launch statistics
was not measured", "1 kernel below 85 % L2 hit rate take", and kernel tables printed whole demangled templates.
Each check runs on the HTML's text (what a reader sees: no script, style or attribute), the findings JSON's
titles, the terminal summary and the Markdown.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

import diagnose
from reports.html import render_html
from reports.markdown import render_markdown
from reports.terminal import render_terminal
from tests.browser import visit
from tests.paths import FIXTURES

INPUTS = {
    "ncu_churn": FIXTURES / "runs" / "ncu_churn",
    "ncu_mlp": FIXTURES / "runs" / "ncu_mlp",
    "mem_churn": FIXTURES / "runs" / "mem_churn",
    "epoch_stall": FIXTURES / "runs" / "epoch_stall",
    "jax_recompile": FIXTURES / "runs" / "jax_recompile",
    "kernel_kinds": FIXTURES / "ncu" / "kernel_kinds" / "raw.csv.gz",
    "snapshot_churn": FIXTURES / "memory" / "churn" / "snapshot.pickle.gz",
    "sgd_stacks": FIXTURES / "trace" / "no_profilerstep" / "sgd_stacks.json.gz",
    "gloo_straggler": FIXTURES / "comm" / "gloo_straggler",
}
RAW_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?[eE][+-]?\d+\b|<NA>|\bNaT\b|\bnan\b|\bNaN\b|(?<![\w.])-?inf\b")
# "1 host syncs", "1 steps": a 1 (not part of 0.1, 2,1 or "rank 1") before a plural word (not one ending in ss)
PLURAL_AFTER_ONE = re.compile(
    r"(?<![\d.,])(?<![Rr]ank )(?<!GPU )(?<!step )1 (?!of\b|in\b|per\b|is\b|µs\b|ms\b|ns\b|s\b)[a-z][\w-]*[^s\W]s\b"
)
GRAMMAR = re.compile(r"statistics was|results was|\b1 \w+ take\b|\b1 \w+ reach\b|\w\(s\)")
DECIMAL_COUNT = re.compile(r"\b\d{1,3}(?:,\d{3})+\.00\b")  # 16,384.00


class Reading(HTMLParser):
    """What a reader sees: text outside script and style, one cell per chunk; the table headers; kernel cells."""

    def __init__(self):
        super().__init__()
        self.chunks: list[str] = []
        self.headers: list[str] = []
        self.kernel_cells: list[tuple[str, str]] = []  # (text, title)
        self._skip = 0
        self._th = False
        self._kernel: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.chunks.append("\n")
        if tag in ("script", "style"):
            self._skip += 1
        if tag == "th":
            self._th = True
            self.headers.append("")
        if tag == "td" and "kernel" in (a.get("class") or "").split():
            self._kernel = {"text": "", "title": a.get("title") or ""}

    def handle_endtag(self, tag):
        self.chunks.append("\n")
        if tag in ("script", "style"):
            self._skip -= 1
        if tag == "th":
            self._th = False
        if tag == "td" and self._kernel is not None:
            self.kernel_cells.append((self._kernel["text"], self._kernel["title"]))
            self._kernel = None

    def handle_data(self, data):
        if self._skip:
            return
        self.chunks.append(data)
        if self._th:
            self.headers[-1] += data
        if self._kernel is not None:
            self._kernel["text"] += data

    @property
    def text(self) -> str:
        return "".join(self.chunks)


_CACHE: dict = {}


def outputs(name: str):
    if name not in _CACHE:
        profile = diagnose.load(INPUTS[name], quiet=True)
        analysis = diagnose.analyze(profile)
        html = render_html(analysis)
        reading = Reading()
        reading.feed(html)
        _CACHE[name] = {
            "analysis": analysis,
            "kernel_names": set(profile.kernels["kernel_name"].dropna()) if len(profile.kernels) else set(),
            "html": html,
            "reading": reading,
            "texts": {
                "html": reading.text,
                "json titles": "\n".join(
                    f["title"] for f in json.loads(json.dumps([f.to_json() for f in analysis.findings]))
                ),
                "terminal": render_terminal(analysis, limit=None),
                "markdown": render_markdown(analysis),
            },
        }
    return _CACHE[name]


def hits(pattern: re.Pattern, text: str) -> list[str]:
    return [text[max(0, m.start() - 60) : m.end() + 30].replace("\n", " ") for m in pattern.finditer(text)]


@pytest.mark.parametrize("name", list(INPUTS))
def test_no_exponent_na_or_nan_anywhere_a_reader_looks(name):
    for where, text in outputs(name)["texts"].items():
        assert not hits(RAW_NUMBER, text), (where, hits(RAW_NUMBER, text)[:5])
        assert not hits(DECIMAL_COUNT, text), (where, hits(DECIMAL_COUNT, text)[:5])


@pytest.mark.parametrize("name", list(INPUTS))
def test_no_snake_case_column_headers(name):
    headers = [h.strip() for h in outputs(name)["reading"].headers]
    assert headers, name
    assert not [h for h in headers if "_" in h], name


@pytest.mark.parametrize("name", list(INPUTS))
def test_counts_agree_with_their_nouns(name):
    for where, text in outputs(name)["texts"].items():
        assert not hits(PLURAL_AFTER_ONE, text), (where, hits(PLURAL_AFTER_ONE, text)[:5])
        assert not hits(GRAMMAR, text), (where, hits(GRAMMAR, text)[:5])


def test_grammar_of_titles_that_were_wrong():
    tiny = diagnose.analyze(diagnose.load(FIXTURES / "ncu" / "small_grid" / "raw.csv"))
    titles = {f.id: f.title for f in tiny.findings}
    assert titles["l2.low_hit_rate"].startswith("1 kernel below 85 % L2 hit rate takes 100.0 % of GPU time")
    assert titles["speed_of_light.latency_bound"].startswith("1 kernel (100.0 % of GPU time) reaches under 40 %")
    assert titles["launch.not_measured"] == "Kernel launch statistics were not measured"
    assert titles["ncu_rules.not_measured"] == "ncu's own rule results were not measured"


def test_the_appendix_and_evidence_use_labels_and_units():
    out = outputs("jax_recompile")
    text = out["texts"]["html"]
    assert "1.13 s" in text  # step_budget_compile_ms, 1,132 ms: was "1.13e+03 ms"
    churn = outputs("ncu_churn")["texts"]["html"]
    assert "Waves per SM" in churn and "2.67 waves" in churn  # launch__waves_per_multiprocessor, 2.67 "waves"
    mem = outputs("mem_churn")["texts"]["html"]
    assert "140 GiB" in mem and "150,754,820,096" not in mem  # NVML's mem_total_bytes


@pytest.mark.parametrize("name", ["ncu_churn", "ncu_mlp", "kernel_kinds"])
def test_kernel_cells_are_short_with_the_full_name_on_hover(name):
    out = outputs(name)
    reading = out["reading"]
    assert reading.kernel_cells, name
    for text, title in reading.kernel_cells:
        assert len(text) <= 44, text  # 40 characters, and a " #12" label
        assert text and title, (text, title)
        assert title.splitlines()[-1] in out["kernel_names"], title  # the full demangled name, on hover
    assert "Kernel (full name)" not in reading.headers  # the kernel_name column is not repeated
    # no cell prints a whole demangled template (the convnet's ran to ~150 px a row)
    assert not re.search(r"\nvoid [\w:]+<[^\n]{60,}", reading.text)


def test_kernel_cells_are_one_line_in_chromium(tmp_path):
    """Each kernel cell is one line of at most ~40 characters (a whole cuDNN template made rows ~150 px tall)."""
    out = outputs("ncu_mlp")
    page = tmp_path / "report.html"
    page.write_text(out["html"])
    lines = (
        "[...document.querySelectorAll('td.kernel')].map(td => { const r = document.createRange(); "
        "r.selectNodeContents(td); return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; })"
    )
    v = visit(
        page,
        evaluate={
            "lines": lines,
            "widest_px": "Math.max(...[...document.querySelectorAll('td.kernel')].map(td => td.getBoundingClientRect().width))",
            "titled": "[...document.querySelectorAll('td.kernel')].every(td => td.title.length > 0)",
        },
        viewport={"width": 1280, "height": 1000},
    )
    assert not v.page_errors and not v.console_errors
    assert len(v.evaluated["lines"]) > 20 and v.evaluated["titled"]
    assert set(v.evaluated["lines"]) == {1}
    assert v.evaluated["widest_px"] < 360, v.evaluated["widest_px"]
