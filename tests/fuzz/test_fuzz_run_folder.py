"""diagnose.load on whole run folders (real runs, one file mutated or the layout broken) and on
single mutated artifacts, which it must recognise by content alone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import check_mutated, fuzz_settings
from tests.fuzz.mutations import reader_kinds


@pytest.mark.parametrize("kind", reader_kinds("run_folder"))
@fuzz_settings(scale=0.5)
@given(data=st.data())
def test_load_on_mutated_run_folders(kind, data, fuzz_dir):
    check_mutated("run_folder", kind, data, fuzz_dir)


@pytest.mark.parametrize("kind", reader_kinds("load"))
@fuzz_settings(scale=0.5)
@given(data=st.data())
def test_load_on_single_mutated_artifacts(kind, data, fuzz_dir):
    check_mutated("load", kind, data, fuzz_dir)
