"""Compilation as work records: each JAX jit compile and each torch.compile (dynamo) compile, with its step and line.

A script that compiles again mid-run (a new input shape, the last partial batch of an epoch, a torch.compile
guard that fails) shows as a few unexplained slow steps; these records say what ran in them. One
``{"kind": "work", "what": "compilation", "name": ...}`` record per compile, written as it ends (one write,
like periodic_work's), on the main thread, and torch.compile's on the autograd engine's thread while the main thread
waits in backward() (a CUDA backward's lazy compile runs there; named with the main thread's line); nothing runs per
step, only while a compile runs.

* JAX: ``jax.monitoring``'s duration events, which jax fires synchronously on the dispatching thread at the end
  of each phase of a compile: ``/jax/core/compile/jaxpr_trace_duration`` (the trace),
  ``…/jaxpr_to_mlir_module_duration`` (lowering) and ``…/backend_compile_duration`` (XLA). The phases seen since
  the last backend compile make one record, ending at the backend compile: its ``ms`` is the union of their time
  spans (a jit traced inside another one's trace is not counted twice), its name the backend compile's
  ``fun_name`` (``jit(update)``), its line the user's frame that called the jitted function. A compile served
  from the persistent cache has no backend phase: its trace and lowering are dropped at the next step.
* torch.compile: ``torch._dynamo.callback.callback_handler``'s start and end callbacks (dynamo runs them once
  around its outermost compile); the name is the compiled frame's function (``torch.compile(forward)``), the
  line the user's call into it. ``torch._dynamo`` is never imported here: the callbacks go in when the script's
  own torch.compile imports it.

A compile before the first step boundary (a torch.compile's first compile usually comes before the first optimizer
step; JAX's first jit compile likewise) has step -1: the runtime holds its record and writes it right after the
run's start record at the first boundary (coordinator.Runtime.write_record). Each record also names the library
frame that called into the compiled function when it is not the user's (``library_location``, periodic_work). Any
error goes to runtime.faults and the compile runs unchanged.
"""

from __future__ import annotations

import sys
import threading
import time

from diagnose.launch.runtime.periodic_work import call_sites, write_work
from parsers.run_records import WORK_COMPILATION

JAX_PHASES = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)
JAX_LAST_PHASE = JAX_PHASES[-1]
MAX_PENDING_PHASES = 256  # phases held waiting for their backend compile (traces that never compile are dropped)
DYNAMO_CALLBACK_MODULE = "torch._dynamo.callback"


def union_ns(spans: list[tuple[int, int]]) -> int:
    """Total length of the union of (start_ns, end_ns) spans."""
    total, reach = 0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


class CompileWork:
    """The JAX listener and the dynamo callbacks of one Runtime, and the compile in progress."""

    def __init__(self, runtime):
        self._runtime = runtime
        self._main_thread = threading.get_ident()
        self._on = True
        self._phases: list[tuple[int, int]] = []  # (start, end) perf ns of the JAX phases since the last compile
        self._phases_step = None
        self._jax_monitoring = None
        self._dynamo_handler = None
        self._dynamo_open = None  # (perf ns, unix ns, step, call sites, name) of the torch.compile in progress

    # ---- hooking
    def hook_jax(self, jax) -> None:
        monitoring = getattr(jax, "monitoring", None)
        register = getattr(monitoring, "register_event_duration_secs_listener", None)
        if register is None or self._jax_monitoring is not None:
            return
        register(self._on_jax_duration)
        self._jax_monitoring = monitoring

    def hook_torch(self, torch) -> None:
        """The dynamo callbacks now when torch._dynamo is loaded, else when the script's torch.compile loads it."""
        module = sys.modules.get(DYNAMO_CALLBACK_MODULE)
        if module is not None:
            self.hook_dynamo(module)
            return
        from diagnose.launch.runtime.import_hooks import PostImportHook

        PostImportHook(DYNAMO_CALLBACK_MODULE, self._hook_dynamo_quietly).install()

    def _hook_dynamo_quietly(self, module) -> None:
        try:
            self.hook_dynamo(module)
        except Exception as e:
            self._runtime.faults.log_once("compile-work", f"cannot watch torch.compile's compiles ({e})")

    def hook_dynamo(self, module) -> None:
        handler = getattr(module, "callback_handler", None)
        if handler is None or self._dynamo_handler is not None or not self._on:
            return
        handler.register_start_callback(self._on_dynamo_start)
        handler.register_end_callback(self._on_dynamo_end)
        self._dynamo_handler = handler

    def unhook(self) -> None:
        """Take the listener and the callbacks out; a jax without an unregister keeps a listener that does nothing."""
        self._on = False
        monitoring, self._jax_monitoring = self._jax_monitoring, None
        handler, self._dynamo_handler = self._dynamo_handler, None
        self._phases.clear()
        self._dynamo_open = None
        unregister = getattr(monitoring, "unregister_event_duration_listener", None)
        if unregister is not None:
            try:
                unregister(self._on_jax_duration)
            except Exception:
                pass  # already gone (jax.monitoring.clear_event_listeners)
        if handler is not None:
            for remove, callback in (
                (getattr(handler, "remove_start_callback", None), self._on_dynamo_start),
                (getattr(handler, "remove_end_callback", None), self._on_dynamo_end),
            ):
                try:
                    remove(callback)
                except Exception:
                    pass

    # ---- JAX
    def _active(self) -> bool:
        return self._on and not self._runtime.disabled and threading.get_ident() == self._main_thread

    def _on_jax_duration(self, event, secs, *args, **kwargs) -> None:
        if event not in JAX_PHASES or not self._active():
            return
        try:
            end = time.perf_counter_ns()
            step = self._runtime.steps.current_step
            if self._phases and self._phases_step != step:
                self._phases.clear()  # a trace whose compile never came (a cache hit, eval_shape) in an earlier step
            if not self._phases:
                self._phases_step = step
            if len(self._phases) < MAX_PENDING_PHASES:
                self._phases.append((end - int(float(secs) * 1e9), end))
            if event != JAX_LAST_PHASE:
                return
            phases, self._phases = self._phases, []
            start = min(s for s, _ in phases)
            t_ns = time.time_ns() - (end - start)
            name = kwargs.get("fun_name")
            self._write(step, t_ns, union_ns(phases), call_sites(sys._getframe(1)), name)
        except Exception as e:
            self._runtime.faults.internal_error("compilation record", e)

    # ---- torch.compile
    def _dynamo_active(self) -> bool:
        """Dynamo's callbacks count on the main thread, and on another thread while the main thread waits in
        torch.autograd.backward: a CUDA backward runs on the autograd engine's device thread, so its lazy compile
        (AOTAutograd's backward graph, seconds on a GPU) fires them there (on the H100, char_gpt's 4.9 s backward
        compile was missed for this). A compile on a thread of the script's own is not the loop's."""
        if not self._on or self._runtime.disabled:
            return False
        if threading.get_ident() == self._main_thread:
            return True
        return getattr(self._runtime.steps, "_backward_depth", 0) > 0

    def _on_dynamo_start(self, *args, **kwargs) -> None:
        if not self._dynamo_active():
            return
        try:
            caller = sys._getframe(1)
            name = compiled_function(caller, args)
            if threading.get_ident() != self._main_thread:  # the user's line is the main thread's, in backward()
                main = sys._current_frames().get(self._main_thread)
                sites = call_sites(main) if main is not None else (None, None)
                name = "backward" if name == "?" else name
            else:
                sites = call_sites(caller)
            self._dynamo_open = (
                time.perf_counter_ns(),
                time.time_ns(),
                self._runtime.steps.current_step,
                sites,
                f"torch.compile({name})",
            )
        except Exception as e:
            self._runtime.faults.internal_error("compilation record", e)

    def _on_dynamo_end(self, *args, **kwargs) -> None:
        if not self._dynamo_active() or self._dynamo_open is None:
            return
        try:
            started_ns, t_ns, step, sites, name = self._dynamo_open
            self._dynamo_open = None
            self._write(step, t_ns, time.perf_counter_ns() - started_ns, sites, name)
        except Exception as e:
            self._runtime.faults.internal_error("compilation record", e)

    # ---- writing
    def _write(self, step, t_ns: int, elapsed_ns: int, sites: tuple[str | None, str | None], name) -> None:
        """``sites``: periodic_work.call_sites, (the user's line, the library's line beside it)."""
        location, library = sites
        extra = {} if library is None else {"library_location": library}
        write_work(
            self._runtime, WORK_COMPILATION, step, t_ns, elapsed_ns, location, name=str(name) if name else None, **extra
        )


def compiled_function(frame, args) -> str:
    """The function dynamo compiles: the ``frame`` argument of its convert_frame calls on the stack, else what
    triggered the compile (a lazy backward: ``backward``)."""
    while frame is not None:
        target = frame.f_locals.get("frame") if frame.f_code.co_name in ("_compile", "__call__") else None
        code = getattr(target, "f_code", None)
        if code is not None and hasattr(code, "co_name"):
            return code.co_name
        frame = frame.f_back
    trigger = getattr(args[0], "callback_trigger", None) if args else None
    return "backward" if getattr(trigger, "name", "") == "LAZY_BACKWARD" else "?"
