"""A Markdown summary for CI logs and pull-request comments: the verdict, the findings as a table, what was
not measured, and the notes. GitHub-flavoured: pipes and HTML in user text (kernel names such as
``void gemm<float>``) are escaped so a cell never breaks the table or the comment.
"""

from __future__ import annotations

from reports.format import input_name, share_human

NOT_MEASURED_SUFFIX = ".not_measured"


def render_markdown(analysis, gate: str | None = None) -> str:
    """``analysis``: anything with ``source``, ranked ``findings``, ``warnings`` and optionally ``verdict``
    (its ``.sentence``). ``gate``: a line saying what a CI gate decided, shown under the verdict."""
    src = analysis.source or {}
    paths = list(src.get("paths", []))
    title = (code(paths[0]) + input_name(paths)[len(paths[0]) :]) if paths else input_name(paths)
    lines = [f"## gpudiag: {title}" + (f" on {cell(src['gpu'])}" if src.get("gpu") else ""), ""]
    verdict = getattr(analysis, "verdict", None)
    if getattr(verdict, "sentence", None):
        lines += [f"**Verdict:** {cell(verdict.sentence)}", ""]
    if gate:
        lines += [f"**Gate:** {cell(gate)}", ""]
    measured = [f for f in analysis.findings if not f.id.endswith(NOT_MEASURED_SUFFIX)]
    unmeasured = [f for f in analysis.findings if f.id.endswith(NOT_MEASURED_SUFFIX)]
    counts = {s: sum(1 for f in measured if f.severity.label == s) for s in ("critical", "warning", "info")}
    lines += [
        f"{counts['critical']} critical, {counts['warning']} warning, {counts['info']} info, {len(unmeasured)} not measured",
        "",
    ]
    if measured:
        lines += ["| Severity | Id | Finding | Cost | Fix |", "|---|---|---|---:|---|"]
        for f in measured:
            cost = share_human(f.cost_share) if f.cost_share is not None else "–"
            fix = cell(getattr(f, "recommendation", "") or "")
            lines.append(f"| {f.severity.label} | {code(f.id)} | {cell(f.title)} | {cost} | {fix} |")
        lines.append("")
    else:
        lines += ["No findings.", ""]
    if unmeasured:
        lines += ["### Not measured", ""]
        for f in unmeasured:
            how = getattr(f, "recommendation", "") or ""
            lines.append(f"- {cell(f.title)}" + (f": {cell(how)}" if how else "") + f" ({code(f.id)})")
        lines.append("")
    if analysis.warnings:
        lines += ["### Notes", ""]
        lines += [f"- {cell(w)}" for w in analysis.warnings]
        lines.append("")
    return "\n".join(lines)


def cell(text) -> str:
    """``text`` safe inside a table cell or a list item: one line, ``|`` and HTML escaped."""
    text = " ".join(str(text).split())
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def code(text) -> str:
    """``text`` as an inline code span in a table cell: HTML is literal there, so only ``|`` and backticks
    are escaped."""
    text = " ".join(str(text).split()).replace("`", "'").replace("|", "\\|")
    return f"`{text}`"
