"""parsers.events on mutated real event logs (JSONL) and the user step-timing CSV / JSON forms."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import check_mutated, fuzz_settings
from tests.fuzz.mutations import reader_kinds


@pytest.mark.parametrize("kind", reader_kinds("events"))
@fuzz_settings()
@given(data=st.data())
def test_events_reader_on_mutated_captures(kind, data, fuzz_dir):
    check_mutated("events", kind, data, fuzz_dir)
