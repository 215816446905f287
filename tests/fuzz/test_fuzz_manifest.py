"""parsers.run_folder.read_manifest on mutated real run-folder manifests."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import check_mutated, fuzz_settings
from tests.fuzz.mutations import reader_kinds


@pytest.mark.parametrize("kind", reader_kinds("manifest"))
@fuzz_settings()
@given(data=st.data())
def test_manifest_reader_on_mutated_captures(kind, data, fuzz_dir):
    check_mutated("manifest", kind, data, fuzz_dir)
