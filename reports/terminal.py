"""A short terminal summary: findings ranked by cost, one line each, then where the report is."""

from __future__ import annotations

import shutil

from reports.format import share_human

_COLORS = {"critical": "\x1b[31;1m", "warning": "\x1b[33;1m", "info": "\x1b[34m"}
_RESET = "\x1b[0m"


def render_terminal(analysis, color: bool = False, limit: int = 15) -> str:
    width = shutil.get_terminal_size((100, 20)).columns
    lines = []
    src = analysis.source
    lines.append(f"gpudiag: {', '.join(src.get('paths', []))}" + (f"  [{src['gpu']}]" if src.get("gpu") else ""))
    counts = {s: sum(1 for f in analysis.findings if f.severity.label == s) for s in ("critical", "warning", "info")}
    lines.append(f"{counts['critical']} critical, {counts['warning']} warning, {counts['info']} info")
    for f in analysis.findings[:limit]:
        sev = f.severity.label
        tag = f"{_COLORS[sev]}{sev:>8}{_RESET}" if color else f"{sev:>8}"
        cost = f" (cost {share_human(f.cost_share)})" if f.cost_share is not None else ""
        text = f"{tag}  {f.title}{cost}"
        lines.append(text if color else text[: max(width, 60)])
    if len(analysis.findings) > limit:
        lines.append(f"   … and {len(analysis.findings) - limit} more in the report")
    for w in analysis.warnings:
        lines.append(f"  note: {w}")
    return "\n".join(lines) + "\n"
