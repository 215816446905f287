"""Property-based fuzzing of every reader on mutated real fixtures (see docs/fuzzing.md).

The property (tests/fuzz/oracle.py): an input either loads into the typed tables of
docs/contracts.md, or raises ``parsers.errors.InputError`` naming the file; never another
exception, never past the time limit, never code run on the input's behalf.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

PROFILE_ENV = "GPUDIAG_FUZZ_PROFILE"
HARD_LIMIT_S = 30.0  # one example past this is a hang (examples take milliseconds: generous under any load)
_numbers = itertools.count()


def fuzz_settings(scale: float = 1.0):
    """The active hypothesis profile (``ci`` unless ``GPUDIAG_FUZZ_PROFILE`` says otherwise) as a decorator.

    ``scale`` multiplies its ``max_examples`` for a test whose examples are cheaper or dearer.
    """
    from hypothesis import settings

    import tests.fuzz.conftest  # noqa: F401  - registers the profiles when imported outside pytest

    base = settings.get_profile(os.environ.get(PROFILE_ENV, "ci"))
    return settings(base, max_examples=max(1, round(base.max_examples * scale)))


def check_mutated(reader: str, kind: str, data, root: Path, full: bool = False):
    """Build one mutated input with hypothesis' ``data`` and assert the property on it; return the Outcome."""
    from hypothesis import note

    from tests.fuzz.mutations import DrawChooser, build_case
    from tests.fuzz.oracle import run_reader

    dest = Path(root) / f"case{next(_numbers)}"
    try:
        path, seed = build_case(reader, kind, DrawChooser(data.draw), dest, full=full)
        note(f"{kind} of seed {seed!r} at {path}")
        outcome = run_reader(reader, path, limit_s=HARD_LIMIT_S)
        assert outcome.ok, f"{reader} on {kind} of {seed!r}: {outcome.kind}: {outcome.detail}"
        return outcome
    finally:
        shutil.rmtree(dest, ignore_errors=True)
