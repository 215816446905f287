"""The ncu readers (parsers/ncu_csv.py, parsers/ncu_rep.py) on mutated real Nsight Compute exports: raw page
(human and base units), details page, ncu's stdout form, gzip-compressed; and on damaged .ncu-rep bytes.

The .ncu-rep cases run with ``ncu_report`` made unimportable, which is what a CPU-only machine
has: every damaged report must then give the clear "needs the ncu-report package" InputError.
(With the real module present, damaged reports go to NVIDIA's C++ loader, which this suite does
not fuzz: a crash there is not ours to catch.)
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parsers.errors import InputError
from parsers.ncu_rep import read_ncu_rep_tables
from tests.fuzz import check_mutated, fuzz_settings
from tests.fuzz.mutations import reader_kinds
from tests.fuzz.seeds import seeds


@pytest.mark.parametrize("kind", reader_kinds("ncu_csv"))
@fuzz_settings()
@given(data=st.data())
def test_ncu_csv_reader_on_mutated_exports(kind, data, fuzz_dir):
    check_mutated("ncu_csv", kind, data, fuzz_dir)


@pytest.fixture
def no_ncu_report(monkeypatch):
    monkeypatch.setitem(sys.modules, "ncu_report", None)  # `import ncu_report` now raises ImportError


@pytest.mark.parametrize("kind", reader_kinds("ncu_rep"))
@fuzz_settings(scale=0.5)
@given(data=st.data())
def test_ncu_rep_reader_on_damaged_reports(kind, data, fuzz_dir, no_ncu_report):
    check_mutated("ncu_rep", kind, data, fuzz_dir)


def test_damaged_report_without_ncu_report_says_what_to_install(tmp_path, no_ncu_report):
    for n, seed in enumerate(seeds("ncu_rep")):
        for cut in (4, 100, len(seed.data) // 2):
            p = tmp_path / f"fake_cut{n}_{cut}.ncu-rep"
            p.write_bytes(seed.data[:cut])
            with pytest.raises(InputError) as err:
                read_ncu_rep_tables(p)
            assert str(p) in str(err.value)
            if seed.data[:4] == b"NVR\x00" or cut > 4:
                assert "ncu-report" in str(err.value) or "Nsight Compute" in str(err.value)
