"""The steps gpudiag's profiler trace window covered, as the run's manifest says.

Shared because sync records are captured only in that window (the sync analyzer divides by its steps when a
rank has records and no trace) and the step budget tells the traced steps from the others by it. Where the
manifest keeps it is parsers.run_records' (``run_options``), not this module's.
"""

from __future__ import annotations

from parsers.run_records import run_options


def window_of(manifest: dict | None) -> range | None:
    """The steps gpudiag's trace window covered (sync records are captured only there), from the manifest."""
    return run_options(manifest).trace_window
