"""The findings JSON: ``gpudiag.findings/1``, the contract with CI (docs/findings-json.md)."""

from __future__ import annotations

import json

from diagnose.findings import jsonable

SCHEMA = "gpudiag.findings/1"


def to_dict(analysis) -> dict:
    return {
        "schema": SCHEMA,
        "source": jsonable(analysis.source),
        "summary": {k: jsonable(v) for k, v in sorted(analysis.summary.items())},
        "findings": [f.to_json() for f in analysis.findings],
        "warnings": list(analysis.warnings),
    }


def render_json(analysis) -> str:
    return json.dumps(to_dict(analysis), indent=2, sort_keys=False, allow_nan=False, default=str) + "\n"
