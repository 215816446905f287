"""parsers.nvml on mutated real NVML sample CSVs (the sampler's nvml.csv of two runs)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import check_mutated, fuzz_settings
from tests.fuzz.mutations import reader_kinds


@pytest.mark.parametrize("kind", reader_kinds("nvml"))
@fuzz_settings()
@given(data=st.data())
def test_nvml_reader_on_mutated_captures(kind, data, fuzz_dir):
    check_mutated("nvml", kind, data, fuzz_dir)
