"""Where the test data lives: the repo's fixtures/ (a clone has all of it; nothing is read from ../shared)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
SHARED_DATA = FIXTURES / "shared"  # the shared starter data, committed: see fixtures/shared/PROVENANCE.md


def shared(*parts: str) -> Path:
    """A file of the shared starter data (fixtures/shared, the names of ../shared/data kept)."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        raise FileNotFoundError(f"{p} is not in fixtures/shared (see its PROVENANCE.md for what was copied)")
    return p
