"""A callback right after a module is first imported: how the runtime hooks torch without importing it.

The runtime starts before the user's script runs, and must not import torch itself (slow,
and it may not be used). A meta path finder sees the script's own ``import torch``, lets the
real loader run it, then calls the callback with the module and takes itself off the path.
"""

from __future__ import annotations

import importlib.util
import sys

from diagnose.launch.runtime.faults import log


class PostImportHook:
    """Calls ``callback(module)`` right after ``name`` is first imported (a meta path finder)."""

    def __init__(self, name: str, callback):
        self.name, self.callback, self._busy = name, callback, False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _CallbackLoader(spec.loader, self)
        return spec

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def remove_all() -> None:
    """Take every PostImportHook off the path (the runtime is uninstalled before the import came)."""
    for hook in [h for h in sys.meta_path if isinstance(h, PostImportHook)]:
        hook.remove()


class _CallbackLoader:
    def __init__(self, loader, hook):
        self._loader, self._hook = loader, hook

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._hook.remove()
        try:
            self._hook.callback(module)
        except Exception as e:
            log(f"internal error hooking {self._hook.name} ({type(e).__name__}: {e}); instrumentation is off")

    def __getattr__(self, name):
        return getattr(self._loader, name)
