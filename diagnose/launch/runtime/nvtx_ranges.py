"""One NVTX start/end range per training step, named ``gpudiag.step_<N>`` (plus a push/pop twin).

The start/end range is what gpudiag's ncu window uses, because it is process-wide: kernels that torch's
autograd threads or XLA's worker threads launch during the step fall inside them, which
is what ``ncu --nvtx --nvtx-include gpudiag.step_<N>`` needs to find the step's kernels.
The push/pop range of the same name on the stepping thread is for timelines (and for
``--ncu-nvtx-include gpudiag.step_<N>/``, which only sees that thread's launches).
Backends, first that works: torch.cuda.nvtx (when torch is already imported and CUDA is
up), the ``nvtx`` package, libnvToolsExt through ctypes, and, only under ncu, torch
imported for this purpose. Without any, ranges are off (one log line from the caller).

In light mode the ranges are pushed only when an NVTX tool may be listening (``tool_may_listen``):
without one the NVTX library drops every range, and the four calls a step cost 9 µs of a 2.3 ms step
on the H200 host (2026-12-03, tools/overhead_sources.py). Under ncu they are the window: always on.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
import time

from parsers.run_records import NVTX, format_record

# How an NVTX tool gets into a process: the NVTX library loads the one NVTX_INJECTION64_PATH (32 on 32-bit)
# names at its first call, as Nsight Systems and Nsight Compute set it for what they launch; or a preloaded
# library provides the injection symbol (LD_PRELOAD); newer NVTX also asks the CUDA driver, which a tool
# enters through CUDA_INJECTION64_PATH. NSYS_PROFILING_SESSION_ID marks a process Nsight Systems launched.
TOOL_ENV = (
    "NVTX_INJECTION64_PATH",
    "NVTX_INJECTION32_PATH",
    "CUDA_INJECTION64_PATH",
    "LD_PRELOAD",
    "NSYS_PROFILING_SESSION_ID",
)


def tool_may_listen(environ=None) -> bool:
    """True when the environment shows a way for an NVTX tool to receive ranges (see TOOL_ENV)."""
    env = os.environ if environ is None else environ
    return any(env.get(name) for name in TOOL_ENV)


def open_for_steps(config, events, rank: int, log_once):
    """The backend for the step ranges when a tool can receive them (always under ncu), else None; an
    ``{"kind": "run", "event": "nvtx"}`` record in ``events`` says which way it went and why."""
    ncu = config.mode == "ncu"
    listening = ncu or config.nvtx_always or tool_may_listen()
    backend = None
    if listening:
        backend = open_backend(allow_torch_import=ncu)
        if backend is None and ncu:
            log_once(
                "no-nvtx",
                "no NVTX library found (torch CUDA, the nvtx package or libnvToolsExt); "
                "steps carry no NVTX ranges, so ncu's step window cannot match: "
                "use --launch-skip/--launch-count",
            )
    why = (
        "no NVTX tool in the environment (" + ", ".join(TOOL_ENV) + " unset)"
        if not listening
        else "no NVTX library found"
        if backend is None
        else None
    )
    events.append_line(
        format_record(
            NVTX,
            rank=rank,
            ranges=backend is not None,
            backend=getattr(backend, "name", None),
            why_not=why,
            t_ns=time.time_ns(),
        )
    )
    return backend


class _TorchBackend:
    name = "torch.cuda.nvtx"

    def __init__(self, torch):
        nvtx = torch.cuda.nvtx
        raw = getattr(nvtx, "_nvtx", None)  # the C functions torch's one-line wrappers call (one call less a step)
        self._start = getattr(raw, "rangeStartA", None) or nvtx.range_start
        self._end = getattr(raw, "rangeEnd", None) or nvtx.range_end
        self._push = getattr(raw, "rangePushA", None) or nvtx.range_push
        self._pop = getattr(raw, "rangePop", None) or nvtx.range_pop

    def start(self, message: str):
        self._push(message)
        return self._start(message)

    def end(self, handle) -> None:
        self._end(handle)
        self._pop()


class _NvtxPackageBackend:
    name = "nvtx"

    def __init__(self, nvtx):
        self._nvtx = nvtx

    def start(self, message: str):
        self._nvtx.push_range(message=message)
        return self._nvtx.start_range(message=message)

    def end(self, handle) -> None:
        self._nvtx.end_range(handle)
        self._nvtx.pop_range()


class _CtypesBackend:
    name = "libnvToolsExt"

    def __init__(self, lib):
        self._start = lib.nvtxRangeStartA
        self._start.restype = ctypes.c_uint64
        self._start.argtypes = [ctypes.c_char_p]
        self._end = lib.nvtxRangeEnd
        self._end.restype = None
        self._end.argtypes = [ctypes.c_uint64]
        self._push = lib.nvtxRangePushA
        self._push.argtypes = [ctypes.c_char_p]
        self._pop = lib.nvtxRangePop

    def start(self, message: str):
        self._push(message.encode())
        return self._start(message.encode())

    def end(self, handle) -> None:
        self._end(handle)
        self._pop()


def _nvtx_library_candidates() -> list[str]:
    found = ctypes.util.find_library("nvToolsExt")
    candidates = [found] if found else []
    for base in sys.path:
        candidates += glob.glob(os.path.join(base, "nvidia", "nvtx", "lib", "libnvToolsExt.so*"))
    for cuda in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        if cuda:
            candidates += glob.glob(os.path.join(cuda, "lib64", "libnvToolsExt.so*"))
    return candidates


def open_backend(allow_torch_import: bool = False):
    """The first NVTX backend that loads, or None."""
    torch = sys.modules.get("torch")
    if torch is None and allow_torch_import:
        try:
            import torch  # noqa: F811 - only under ncu, where the range is the profiling window
        except Exception:
            torch = None
    if torch is not None:
        try:
            if torch.cuda.is_available() and hasattr(torch._C, "_nvtx"):
                return _TorchBackend(torch)
        except Exception:
            pass
    try:
        import nvtx

        if hasattr(nvtx, "start_range"):
            return _NvtxPackageBackend(nvtx)
    except Exception:
        pass
    for path in _nvtx_library_candidates():
        try:
            return _CtypesBackend(ctypes.CDLL(path))
        except (OSError, AttributeError):
            continue
    return None
