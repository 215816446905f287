"""Hostile pickles: every way a pickle can call code, alone, inside a real snapshot, cut short, and
injected at any opcode boundary of a real snapshot pickle. Each must be an InputError naming the
file, and nothing may run: no marker file appears and the audit hook sees no os.system,
subprocess, exec or stock find_class (tests/fuzz/oracle.py). The pickles are made by hand here
(tests/fuzz/mutations.py: hostile_pickles); none is kept on disk."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import diagnose
from parsers.errors import InputError
from parsers.snapshot import read_snapshot
from tests.fuzz import fuzz_settings
from tests.fuzz.mutations import RUN_BY_STOCK_PICKLE, DrawChooser, boundaries, hostile_pickles, inject_global
from tests.fuzz.oracle import watch_code_execution
from tests.fuzz.seeds import seeds

NAMES = sorted(hostile_pickles("x"))


def _refused(path, marker, read=read_snapshot) -> str:
    with watch_code_execution() as ran:
        with pytest.raises(InputError) as err:
            read(path)
    assert not ran, ran
    assert not os.path.exists(marker), "the pickle ran code"
    assert str(path) in str(err.value)
    return str(err.value)


def test_the_hostile_pickles_run_code_under_the_stock_unpickler(tmp_path):
    """Sanity, in a child process: each of these really is an attack (it creates its marker)."""
    script = "import pickle, sys, os\nfor path in sys.argv[1:]:\n    pickle.loads(open(path, 'rb').read())\n"
    paths, markers = [], []
    for name in RUN_BY_STOCK_PICKLE:
        marker = tmp_path / f"ran_{name}"
        p = tmp_path / f"fake_{name}.pickle"
        p.write_bytes(hostile_pickles(str(marker))[name])
        paths.append(str(p))
        markers.append(marker)
    subprocess.run([sys.executable, "-c", script, *paths], check=True, timeout=60, capture_output=True)
    assert [m.name for m in markers if not m.exists()] == []


@pytest.mark.parametrize("name", NAMES)
def test_hostile_pickle_is_refused_and_nothing_runs(name, tmp_path):
    marker = str(tmp_path / "pwned")
    data = hostile_pickles(marker)[name]
    for label, payload in (("plain", data), ("gzip", gzip.compress(data))):
        p = tmp_path / f"fake_{name}_{label}.pickle"
        p.write_bytes(payload)
        message = _refused(p, marker)
        # a protocol 0/1 pickle (no PROTO opcode: torch never writes one) is not even taken for a pickle
        assert any(why in message for why in ("Nothing was run", "malformed", "ends early", "it is neither")), message
        if data[:1] == b"\x80":  # what `gpudiag report` does with it: sniffed as a snapshot pickle
            _refused(p, marker, read=diagnose.load)


@fuzz_settings()
@given(data=st.data())
def test_hostile_opcodes_injected_into_a_real_snapshot_are_refused(data, tmp_path):
    seed = data.draw(st.sampled_from(seeds("snapshot_pickle")))
    marker = str(tmp_path / "pwned")
    evil = inject_global(seed.payload, marker, DrawChooser(data.draw))
    p = tmp_path / "fake_injected.pickle"
    p.write_bytes(gzip.compress(evil) if data.draw(st.booleans()) else evil)
    _refused(p, marker)


@fuzz_settings()
@given(name=st.sampled_from(NAMES), data=st.data())
def test_hostile_pickles_cut_at_any_opcode_are_refused(name, data, tmp_path):
    marker = str(tmp_path / "pwned")
    whole = hostile_pickles(marker)[name]
    cuts = boundaries(whole, "pickle")
    p = tmp_path / "fake_cut.pickle"
    p.write_bytes(whole[: data.draw(st.sampled_from(cuts[:-1]))] or b"\x80")
    _refused(p, marker)
