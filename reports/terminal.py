"""A short terminal summary: findings ranked by cost, one line each with its id, then the notes.

Lines are shortened only when a width is given (the CLI gives the terminal's width when stdout is a
terminal, nothing otherwise): CI logs keep every word, so a title is never cut mid-number there. When
a line must fit, the title is cut at a word boundary and ends in "…"; the severity, cost and id stay.
Notes (what could not be read, the files left out and why) are wrapped onto more lines, never cut: the
names they end with are what the user acts on.
"""

from __future__ import annotations

import re
import textwrap

from reports.format import input_name, share_human

_COLORS = {"critical": "\x1b[31;1m", "warning": "\x1b[33;1m", "info": "\x1b[34m"}
_RESET = "\x1b[0m"
MIN_WIDTH = 60  # narrower terminals still get this much: a line that wraps beats one cut to nothing
ELLIPSIS = "…"


def render_terminal(analysis, color: bool = False, limit: int | None = 15, width: int | None = None) -> str:
    """The summary of ``analysis`` (anything with ``source``, ranked ``findings``, ``warnings``).

    ``limit``: findings listed (None: all); ``width``: shorten lines to this many characters (None: never).
    """
    width = None if width is None else max(width, MIN_WIDTH)
    src = analysis.source or {}
    lines = [
        fit(
            f"gpudiag: {input_name(list(src.get('paths', [])))}" + (f"  [{src['gpu']}]" if src.get("gpu") else ""),
            width,
        )
    ]
    verdict = getattr(analysis, "verdict", None)
    if getattr(verdict, "sentence", None):
        lines.append(fit(verdict.sentence, width))
    run = getattr(verdict, "run", None)
    if run is not None:  # the run budget in one line: where the wall time went, process start to exit
        lines.append(fit(run.line(), width))
    counts = {s: sum(1 for f in analysis.findings if f.severity.label == s) for s in ("critical", "warning", "info")}
    lines.append(f"{counts['critical']} critical, {counts['warning']} warning, {counts['info']} info")
    shown = analysis.findings if limit is None else analysis.findings[:limit]
    for f in shown:
        lines.append(finding_line(f, color, width))
    if len(shown) < len(analysis.findings):
        lines.append(f"   … and {len(analysis.findings) - len(shown)} more in the report")
    for w in analysis.warnings:
        lines.extend(note_lines(w, width))
    return "\n".join(lines) + "\n"


NOTE = "  note: "


def note_lines(note: str, width: int | None = None) -> list[str]:
    """``  note: <note>``, wrapped (never cut) at ``width``: a note names the files left out and why, last.

    A word wider than the line (a deep path) is split across lines rather than left to overflow the terminal."""
    if width is None or len(NOTE) + len(note) <= width:
        return [NOTE + note]
    return textwrap.wrap(
        note,
        width,
        initial_indent=NOTE,
        subsequent_indent=" " * len(NOTE),
        break_long_words=True,
        break_on_hyphens=False,
    )


def finding_line(finding, color: bool = False, width: int | None = None) -> str:
    """``severity  title (cost x %)  [id]``; only the title is shortened to fit ``width``."""
    sev = finding.severity.label
    tag = f"{sev:>8}"
    cost = f" (cost {share_human(finding.cost_share)})" if finding.cost_share is not None else ""
    tail = f"{cost}  [{finding.id}]"
    title = finding.title
    if width is not None:
        title = fit(title, width - len(tag) - 2 - len(tail))
    if color:
        tag = f"{_COLORS[sev]}{tag}{_RESET}"
    return f"{tag}  {title}{tail}"


def fit(text: str, width: int | None) -> str:
    """``text`` within ``width`` characters, cut at the last space that fits and ended with "…".

    Never cuts inside a word (so never inside a number), nor between a number and its unit ("12.5 %");
    a first word longer than the width is kept whole, since a line that wraps misleads less than a
    number cut short.
    """
    if width is None or len(text) <= width:
        return text
    room = max(width - len(ELLIPSIS), 0)
    breaks = [m.start() for m in _BREAK.finditer(text)]
    fitting = [b for b in breaks if b <= room]
    if not fitting:
        return text[: breaks[0]] + ELLIPSIS if breaks else text
    return text[: fitting[-1]].rstrip(" ,;:(–-") + ELLIPSIS


# a space where a line may be cut: not before a unit that belongs to the number in front of it
_BREAK = re.compile(r" (?!(?:%|µs|us|ms|ns|s|[KMGT]i?B|B|x)(?:[\s,;:.)\]]|$))")
