"""gpudiag: profile a PyTorch or JAX training script and diagnose what holds it back.

The library API (the CLI is a thin layer over it)::

    import diagnose
    profile = diagnose.load("gpudiag-runs/20261202-train")    # or an .ncu-rep, a CSV, a trace, a snapshot
    analysis = diagnose.analyze(profile)
    diagnose.write_html(analysis, "report.html")
    diagnose.write_json(analysis, "findings.json")
"""
from __future__ import annotations

__version__ = "0.1.0"

from diagnose.analysis import Analysis, analyze  # noqa: E402
from diagnose.findings import Evidence, Finding, Result, Severity, Subject  # noqa: E402
from diagnose.load import load  # noqa: E402
from diagnose.launch.api import profile  # noqa: E402
from diagnose.profile_data import Profile  # noqa: E402
from diagnose.thresholds import Thresholds  # noqa: E402
from parsers.errors import InputError  # noqa: E402


def write_html(analysis: Analysis, path) -> str:
    """Render the self-contained HTML report to ``path``; returns the path."""
    from reports.html import render_html

    from diagnose._io import atomic_write_text

    atomic_write_text(path, render_html(analysis))
    return str(path)


def write_json(analysis: Analysis, path) -> str:
    """Write the findings JSON (schema ``gpudiag.findings/1``) to ``path``."""
    from reports.json_report import render_json

    from diagnose._io import atomic_write_text

    atomic_write_text(path, render_json(analysis))
    return str(path)


def step() -> None:
    """Mark a training-step boundary (JAX, or torch without an optimizer). No-op outside `gpudiag profile`."""
    try:
        from diagnose.launch import bootstrap_runtime
    except ImportError:
        return
    bootstrap_runtime.step()


__all__ = ["Analysis", "Evidence", "Finding", "InputError", "Profile", "Result", "Severity", "Subject",
           "Thresholds", "analyze", "load", "step", "write_html", "write_json", "__version__"]
