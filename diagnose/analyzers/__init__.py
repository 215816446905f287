"""One module per diagnosis. Each defines ``NAME`` and ``analyze(profile, thresholds) -> Result``.

Modules are discovered, so adding a diagnosis is adding a file. An analyzer whose
input is missing returns an info finding saying so (``findings.not_measured``).
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def discover() -> list[ModuleType]:
    """Every analyzer module, in a fixed order (the module's ``ORDER``, then name)."""
    mods = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "analyze") and hasattr(mod, "NAME"):
            mods.append(mod)
    return sorted(mods, key=lambda m: (getattr(m, "ORDER", 50), m.NAME))
