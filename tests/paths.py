"""Where the test data lives: the repo's fixtures/, and ../shared/data when present."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
SHARED_DATA = REPO.parent / "shared" / "data"


def shared(*parts: str) -> Path:
    """A path under ../shared/data, or skip the test (a user's clone has no ../shared)."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared data not present: {p}")
    return p
