"""This process's one Runtime: started by the sitecustomize (install_from_env) or ``with diagnose.profile()``
(install / uninstall), found by ``active()``, and marked by ``diagnose.step()`` (step)."""

from __future__ import annotations

import os
import sys

from diagnose.launch.child_config import from_env
from diagnose.launch.runtime.coordinator import Runtime
from diagnose.launch.runtime.faults import log
from diagnose.launch.runtime.import_hooks import PostImportHook, remove_all

_RUNTIME = None  # the active Runtime, if any


def install(config) -> Runtime | None:
    """Start the runtime in this process with ``config`` (a child_config.ChildConfig)."""
    global _RUNTIME
    if _RUNTIME is not None and not _RUNTIME.disabled:
        return _RUNTIME
    runtime = Runtime(config)
    _RUNTIME = runtime
    runtime.start_import_timing()  # from here to the first step boundary (import_times)
    torch = sys.modules.get("torch")
    if torch is not None:
        runtime.on_torch_imported(torch)
    else:
        PostImportHook("torch", runtime.on_torch_imported).install()
    jax = sys.modules.get("jax")
    if jax is not None:
        runtime.on_jax_imported(jax)
    else:
        PostImportHook("jax", runtime.on_jax_imported).install()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_disable_in_fork_child)
    return runtime


def _disable_in_fork_child() -> None:
    """A forked child (a DataLoader worker) records nothing: the boundary itself has no getpid() check."""
    runtime = _RUNTIME
    if runtime is not None and runtime.pid != os.getpid():
        runtime.disabled = True
        try:
            runtime.stop_import_timing(keep=False)
        except Exception:
            pass


def install_from_env() -> Runtime | None:
    """What the sitecustomize calls: start when the parent set GPUDIAG_RUN_DIR, else do nothing."""
    try:
        config = from_env()
        if config is None:
            return None
        return install(config)
    except Exception as e:
        log(f"bootstrap not started ({type(e).__name__}: {e}); the script runs without instrumentation")
        return None


def uninstall() -> list[dict]:
    """Flush and stop (the in-process context manager's end); returns the faults the runtime met."""
    global _RUNTIME
    runtime, _RUNTIME = _RUNTIME, None
    if runtime is None:
        return []
    remove_all()
    runtime.stop_import_timing(keep=False)
    runtime.flush("context-exit")
    runtime.steps.unhook_all()
    runtime.unhook_torch()
    runtime.unhook_compile_work()
    return list(runtime.faults.reported)


def active() -> Runtime | None:
    return _RUNTIME


def step() -> None:
    """``diagnose.step()``: mark a step boundary. A no-op when not under gpudiag."""
    runtime = _RUNTIME
    if runtime is not None:
        try:
            runtime.steps.marker()
        except Exception as e:
            runtime.faults.internal_error("diagnose.step", e)
