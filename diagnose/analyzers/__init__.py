"""One module per diagnosis. Each defines ``NAME`` and ``analyze(profile, derived, thresholds) -> Result``, and
describes itself: ``ORDER``, ``SECTION``, ``TITLE``, ``JUDGES``, ``COST_BASIS`` (and ``COST_BASIS_BY_ID``),
``THRESHOLDS``, ``FINDING_IDS`` and ``SUMMARY_METRICS`` (CONTRIBUTING.md, "Add an analyzer").

Modules are discovered, so adding a diagnosis is adding a file: the report's section headings, the verdict's words
and the ids ``gpudiag check --ignore`` accepts come from what each module declares (:func:`description_of`, put on
the Analysis by ``diagnose.analyze``), never from a list of names. An analyzer whose input is missing returns an
info finding saying so (``findings.not_measured``).
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from diagnose.findings import AnalyzerDescription


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


def description_of(mod: ModuleType) -> AnalyzerDescription:
    """What the analyzer module ``mod`` declares about itself, as the report and the verdict read it."""
    return AnalyzerDescription(
        name=mod.NAME,
        title=mod.TITLE,
        judges=mod.JUDGES,
        cost_basis=mod.COST_BASIS,
        section=mod.SECTION,
        thresholds=tuple(mod.THRESHOLDS),
        finding_ids=tuple(mod.FINDING_IDS),
        cost_basis_by_id=tuple(sorted(mod.COST_BASIS_BY_ID.items())),
        cause_ids=tuple(getattr(mod, "CAUSE_FINDING_IDS", ())),
        symptom_ids=tuple(getattr(mod, "SYMPTOM_FINDING_IDS", ())),
        shows_step_budget=bool(getattr(mod, "SHOWS_STEP_BUDGET", False)),
    )


def descriptions() -> dict[str, AnalyzerDescription]:
    """Every discovered analyzer's description, by name, in report order."""
    return {mod.NAME: description_of(mod) for mod in discover()}
