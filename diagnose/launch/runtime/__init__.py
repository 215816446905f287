"""The in-process runtime: what gpudiag does inside the user's training process (the child side).

One module per concern, wired by one coordinator:

    lifecycle.py       install / install_from_env / uninstall / active / step: this process's one Runtime
    coordinator.py     Runtime: what the parts share (config, rank, framework, the events file, the
                       artifacts expected and written), the run's start at the first step and its end
    steps.py           the step boundary, the step records, and where boundaries come from: diagnose.step()'s
                       marker, the optimizer hook, the end of each backward pass
    jit_steps.py       JAX without a marker: the jitted function dispatched once per iteration
    input_wait.py      the time the loop blocks in torch DataLoader iterators: each step's input_ms
    dataloader_config.py  each torch DataLoader's configuration, as a run record at its first batch
    import_times.py    the imports before the first step boundary, timed, as work records
    periodic_work.py   checkpoints (torch.save, safetensors, torch.distributed.checkpoint) and evaluation spans
    compile_work.py    JAX and torch.compile compiles, as work records
    gpu_time.py        CUDA-event GPU time per step, and k when only one step in k is timed
    nvtx_ranges.py     an NVTX range per step, when a tool can receive it (always under ncu)
    trace_window.py    the profiler window of a few steps
    profilers.py       torch.profiler / jax.profiler driven by the window (imported when it opens)
    sync_capture.py    synchronizing calls inside the window, as sync records
    jax_sync_capture.py  JAX's host-blocking calls (float(x), device_get ...) inside the window, timed
    memory_capture.py  memory_stats records, the allocator history and its snapshot
    faults.py          internal errors, a full disk, an artifact not written: logged once, runtime off
    import_hooks.py    a callback right after the user imports torch or jax
    exit_hooks.py      the flush at exit and on SIGTERM/SIGHUP

Rules kept by every module here: standard library only until the user imports torch or jax;
nothing touches CUDA before the user does (torch's lazy-init queue); no RNG, no extra syncs;
any internal error logs one line and switches the runtime off.

Loading. The child must never import the ``diagnose`` package's ``__init__`` (it imports
pandas). The sitecustomize registers this package from its file under its dotted name;
importing it registers, the same way, the modules it shares with the parent (SHARED_WITH_PARENT):
parsers/run_records.py (the run folder's names and every record's fields, which the readers use
too) and four of diagnose/launch/. After that, ``from parsers.run_records import name``, ``from diagnose.launch.<module> import
name`` and ``from diagnose.launch.runtime.<module> import name`` inside this package find their
module (or its package) in ``sys.modules``. The form ``from <package> import <module>`` must not be
written here: for a module not yet loaded, Python imports it through ``__import__``, which
then imports the top package, ``diagnose``. Where ``diagnose.launch`` is already imported
(the parent, ``with diagnose.profile()``), every import is a plain one.
"""

from __future__ import annotations

import importlib.util
import os
import sys

# the modules outside this package the runtime uses, in the order they import each other (standard library only)
SHARED_WITH_PARENT = (
    "parsers.run_records",
    "diagnose.launch.fault_injection",
    "diagnose.launch.fault_reports",
    "diagnose.launch.child_config",
    "diagnose.launch.event_log",
)


def _register_shared_modules() -> None:
    if getattr(sys.modules.get("diagnose.launch"), "__path__", None):
        return  # the package is imported: plain imports work
    source_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    for full in SHARED_WITH_PARENT:
        if full in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(full, os.path.join(source_root, *full.split(".")) + ".py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[full]
            raise


_register_shared_modules()
