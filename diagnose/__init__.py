"""gpudiag: profile a PyTorch or JAX training script and diagnose what holds it back.

The library API (the CLI is a thin layer over it)::

    import diagnose
    profile = diagnose.load("gpudiag-runs/20261202-train")    # or an .ncu-rep, a CSV, a trace, a snapshot
    analysis = diagnose.analyze(profile)
    diagnose.write_html(analysis, "report.html")
    diagnose.write_json(analysis, "findings.json")
"""

from __future__ import annotations

from diagnose.analysis import Analysis, analyze
from diagnose.findings import Evidence, Finding, Result, Severity, Subject
from diagnose.launch.api import profile
from diagnose.load import load
from diagnose.outputs import write_html, write_json
from diagnose.profile_data import Profile
from diagnose.thresholds import Thresholds
from diagnose.version import __version__
from parsers.errors import InputError


def step() -> None:
    """Mark a training-step boundary (JAX; torch steps are found from optimizer.step() or backward()). No-op outside `gpudiag profile`."""
    try:
        from diagnose.launch.runtime import lifecycle
    except ImportError:
        return
    lifecycle.step()


__all__ = [
    "Analysis",
    "Evidence",
    "Finding",
    "InputError",
    "Profile",
    "Result",
    "Severity",
    "Subject",
    "Thresholds",
    "analyze",
    "load",
    "profile",
    "step",
    "write_html",
    "write_json",
    "__version__",
]
