"""Which Python frames are torch's profiler's own.

A sync whose Python stack passes through torch's profiler is the profiler's (its stop's ``torch.cuda.synchronize()``,
under gpudiag's window close or a user's ``profile.__exit__``), never the script's. Both the sync records the runtime
writes (diagnose/launch/runtime/profilers.py) and the trace's sync calls (diagnose/derive/trace_timeline.py) leave
them out by this one rule; a module of its own because the runtime must not import the trace parser (pandas).
"""

from __future__ import annotations

PROFILER_FILES = ("torch/profiler/", "torch/autograd/profiler")


def is_profiler_file(text: str) -> bool:
    """True when ``text`` (a file name, or a stack line naming one) is in torch's profiler."""
    return any(p in text for p in PROFILER_FILES)
