"""gpudiag: profile a PyTorch or JAX training script and diagnose what holds it back.

The library API (the CLI is a thin layer over it)::

    import diagnose
    profile = diagnose.load("gpudiag-runs/20261202-train")    # or an .ncu-rep, a CSV, a trace, a snapshot
    analysis = diagnose.analyze(profile)
    diagnose.write_html(analysis, "report.html")
    diagnose.write_json(analysis, "findings.json")
"""

from __future__ import annotations

import importlib

from diagnose.version import __version__

# name → the module that defines it, imported on first use (PEP 562): `gpudiag --help`, a bad argument or a
# JSON-only report need not pay for pandas, the launcher or the HTML stack until something asks for them
_LAZY = {
    "Analysis": "diagnose.analysis",
    "analyze": "diagnose.analysis",
    "Evidence": "diagnose.findings",
    "Finding": "diagnose.findings",
    "Result": "diagnose.findings",
    "Severity": "diagnose.findings",
    "Subject": "diagnose.findings",
    "profile": "diagnose.launch.api",
    "load": "diagnose.ingest.loading",
    "write_html": "diagnose.outputs.report_files",
    "write_json": "diagnose.outputs.report_files",
    "Profile": "diagnose.ingest.profile_data",
    "Thresholds": "diagnose.thresholds",
    "InputError": "parsers.errors",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # once: later lookups are plain attribute reads
        return value
    raise AttributeError(f"module 'diagnose' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
