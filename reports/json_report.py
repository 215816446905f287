"""The findings JSON: ``gpudiag.findings/1``, the contract with CI (docs/findings-json.md)."""

from __future__ import annotations

import json

from diagnose.findings import jsonable

SCHEMA = "gpudiag.findings/1"


def to_dict(analysis) -> dict:
    verdict = getattr(analysis, "verdict", None)  # None for an Analysis built by hand, not by diagnose.analyze
    return {
        "schema": SCHEMA,
        "verdict": verdict.to_json() if verdict is not None else None,
        # the run's wall time in parts, process start to exit (docs/run-budget.md); null without a run folder
        "run_budget": verdict.run.to_json() if getattr(verdict, "run", None) is not None else None,
        "source": jsonable(analysis.source),
        "summary": {k: jsonable(v) for k, v in sorted(analysis.summary.items())},
        "findings": [f.to_json() for f in analysis.findings],
        "warnings": list(analysis.warnings),
    }


def render_json(analysis) -> str:
    return json.dumps(to_dict(analysis), indent=2, sort_keys=False, allow_nan=False, default=str) + "\n"
