"""Exact source lines of JAX host syncs, inside the trace window only.

JAX has no sync debug mode like torch's: a host sync is a call that waits for a device value
(``float(x)``, ``x.item()``, ``np.asarray(x)``, ``jax.device_get(x)``, ``block_until_ready`` ...).
While the window is open this module wraps those methods of JAX's concrete array class and
those two module functions; each wrapper times the original call and records the Python stack
at that moment (the innermost user frame is the line to fix). Results are the original's, untouched,
and every original is put back when the window closes. The runtime never imports jax: ``start``
takes the module the user imported. Not seen: ``np.asarray`` of a CPU array, which numpy reads
through the C buffer protocol without calling ``__array__`` (GPU arrays and bfloat16 go through it).
"""

from __future__ import annotations

import functools
import sys
import threading
import time

from diagnose.launch.runtime.sync_capture import user_stack

# methods of the concrete array that block the host until the device value is ready
BLOCKING_METHODS = ("__float__", "__int__", "__bool__", "__index__", "__array__", "item", "tolist", "block_until_ready")
# functions of the jax module that do the same
BLOCKING_FUNCTIONS = ("device_get", "block_until_ready")


class JaxSyncCapture:
    """Collects JAX host syncs (with stacks and waits) between :meth:`start` and :meth:`stop`."""

    def __init__(self, step_of):
        self._step_of = step_of  # () -> the current step number
        self.captured: list[tuple[int, int, list, str, int]] = []  # (t_ns, step, stack, op, dur_ns)
        self._patched: list[tuple[object, str, object, object]] = []  # (owner, name, original, wrapper)
        self._main_thread_id = None
        self._depth = 0  # > 0 while a wrapped call runs: calls inside it are not syncs of their own

    def start(self, jax) -> bool:
        """Wrap the blocking calls of ``jax``; False (nothing wrapped) when its array class is not found."""
        array_class = _array_class(jax)
        if array_class is None:
            return False
        self._main_thread_id = threading.main_thread().ident
        for name in BLOCKING_METHODS:
            original = array_class.__dict__.get(name)  # the class's own attribute, restored exactly
            if original is not None:
                self._patch(array_class, name, original, f"jax:{name}")
        for name in BLOCKING_FUNCTIONS:
            original = getattr(jax, name, None)
            if callable(original):
                self._patch(jax, name, original, f"jax:{name}")
        return bool(self._patched)

    def stop(self) -> None:
        """Put every original back, where our wrapper is still the one in place."""
        patched, self._patched = self._patched, []
        for owner, name, original, wrapper in reversed(patched):
            current = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
            if current is wrapper:
                try:
                    setattr(owner, name, original)
                except Exception:
                    pass

    def _patch(self, owner, name: str, original, op: str) -> None:
        wrapper = self._wrap(original, op)
        try:
            setattr(owner, name, wrapper)
        except Exception:
            return  # a read-only attribute: that call stays unrecorded
        self._patched.append((owner, name, original, wrapper))

    def _wrap(self, original, op: str):
        capture = self

        def wrapper(*args, **kwargs):
            if capture._depth or threading.get_ident() != capture._main_thread_id:
                return original(*args, **kwargs)
            t_ns = time.time_ns()
            start_ns = time.perf_counter_ns()
            capture._depth += 1
            try:
                result = original(*args, **kwargs)
            finally:
                capture._depth -= 1
            dur_ns = time.perf_counter_ns() - start_ns
            try:
                capture.captured.append((t_ns, capture._step_of(), user_stack(sys._getframe(1)), op, dur_ns))
            except Exception:
                pass
            return result

        try:
            functools.update_wrapper(wrapper, original)
        except Exception:
            pass
        return wrapper


def _array_class(jax):
    """JAX's concrete array class: jax._src.array.ArrayImpl where the user's jax has it (no device work),
    else the type of a one-element array."""
    array_module = sys.modules.get("jax._src.array")
    array_class = getattr(array_module, "ArrayImpl", None)
    if isinstance(array_class, type):
        return array_class
    try:
        return type(jax.numpy.zeros(1))
    except Exception:
        return None
