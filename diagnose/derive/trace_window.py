"""The steps gpudiag's profiler trace window covered, as the run's manifest says.

Shared because sync records are captured only in that window (the sync analyzer divides by its steps when a
rank has records and no trace) and the step budget tells the traced steps from the others by it.
"""

from __future__ import annotations


def window_of(manifest: dict | None) -> range | None:
    """The steps gpudiag's trace window covered (sync records are captured only there), from the manifest."""
    child = ((manifest or {}).get("options") or {}).get("child") or {}
    start, count = child.get("trace_start"), child.get("trace_steps")
    if isinstance(start, int) and isinstance(count, int) and count > 0:
        return range(start, start + count)
    return None
