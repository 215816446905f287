"""parsers.memory_stats on mutated real per-step allocator stats (torch and JAX, plain and gzip)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import check_mutated, fuzz_settings
from tests.fuzz.mutations import reader_kinds


@pytest.mark.parametrize("kind", reader_kinds("memory_stats"))
@fuzz_settings()
@given(data=st.data())
def test_memory_stats_reader_on_mutated_captures(kind, data, fuzz_dir):
    check_mutated("memory_stats", kind, data, fuzz_dir)
