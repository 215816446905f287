"""Write docs/thresholds.md from diagnose/thresholds.py (one place for every threshold)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diagnose.thresholds import Thresholds  # noqa: E402


def render() -> str:
    lines = [
        "# Thresholds",
        "",
        "Generated from `diagnose/thresholds.py` by `python tools/gen_threshold_docs.py`; a test keeps it current.",
        "Override one with `--threshold GROUP.NAME=VALUE` (repeatable) or a config file",
        "(`--config gpudiag.toml` with `[GROUP]` tables, or the same as JSON).",
        "",
    ]
    th = Thresholds()
    for f in dataclasses.fields(th):
        group = getattr(th, f.name)
        doc = " ".join((type(group).__doc__ or "").split())
        lines += [f"## `{f.name}`", "", doc, "", "| name | default |", "| --- | --- |"]
        for g in dataclasses.fields(group):
            lines.append(f"| `{f.name}.{g.name}` | {getattr(group, g.name)!r} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    out = Path(__file__).resolve().parents[1] / "docs" / "thresholds.md"
    out.write_text(render())
    print(f"wrote {out}")
