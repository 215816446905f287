"""parsers.snapshot on mutated real allocator snapshots: torch's pickle (plain and gzip) and
gpudiag's JSON form. Value-level kinds mutate the unpickled object and pickle it again with a
chosen protocol (0, 2, 4, 5); byte-level kinds cut and flip the real pickle's opcodes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import check_mutated, fuzz_settings
from tests.fuzz.mutations import reader_kinds


@pytest.mark.parametrize("kind", reader_kinds("snapshot_pickle"))
@fuzz_settings()
@given(data=st.data())
def test_snapshot_pickle_reader_on_mutated_captures(kind, data, fuzz_dir):
    check_mutated("snapshot_pickle", kind, data, fuzz_dir)


@pytest.mark.parametrize("kind", reader_kinds("snapshot_json"))
@fuzz_settings()
@given(data=st.data())
def test_snapshot_json_reader_on_mutated_captures(kind, data, fuzz_dir):
    check_mutated("snapshot_json", kind, data, fuzz_dir)
