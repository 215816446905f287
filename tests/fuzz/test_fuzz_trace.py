"""parsers.trace (and trace_collectives' second pass) on mutated real Kineto and JAX perfetto traces.

The seeds are far smaller than ``trace_stream.PIECE_BYTES``, so by default they take the
whole-tail path of the streaming reader; the second test shrinks the pieces to 4 KiB so that
mutated inputs also go through the cuts between events and the whole-file fallback.
"""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parsers import trace_stream
from parsers.trace import read_trace
from tests.fuzz import check_mutated, fuzz_settings
from tests.fuzz.mutations import reader_kinds
from tests.fuzz.seeds import seeds


@pytest.mark.parametrize("kind", reader_kinds("trace"))
@fuzz_settings()
@given(data=st.data())
def test_trace_reader_on_mutated_captures(kind, data, fuzz_dir):
    check_mutated("trace", kind, data, fuzz_dir)


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(trace_stream, "PIECE_BYTES", 4096)


@pytest.mark.parametrize(
    "kind", ["truncate", "swap_columns", "bad_numbers", "duplicate_ids", "unknown_enum", "byte_flip"]
)
@fuzz_settings(scale=0.5)
@given(data=st.data())
def test_trace_reader_streaming_in_small_pieces(kind, data, fuzz_dir, small_pieces):
    check_mutated("trace", kind, data, fuzz_dir)


@pytest.mark.parametrize("seed", seeds("trace"), ids=lambda s: s.name)
def test_small_pieces_read_the_same_tables(seed, tmp_path, monkeypatch):
    """The cut between events must not change what is read (real traces, unmutated).

    Row order may differ (runtime calls and cpu ops are kept in the order their chunk and category
    bucket delivered them) and so may the row indexes that link tables: the rows themselves may not.
    """
    p = tmp_path / ("fake_seed" + seed.suffix)
    p.write_bytes(seed.data)
    whole = read_trace(p)
    monkeypatch.setattr(trace_stream, "PIECE_BYTES", 4096)
    pieces = read_trace(p)
    for table in ("gpu", "runtime", "cpu_ops", "python", "flows", "other"):
        a, b = _plain(getattr(whole, table)), _plain(getattr(pieces, table))
        pd.testing.assert_frame_equal(a, b, obj=table)


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """Rows without their links, categories as their values (their order is the order first met), sorted."""
    df = df.drop(columns=[c for c in df.columns if c.endswith("_index")])
    df = df.astype({c: str for c in df.columns if isinstance(df[c].dtype, pd.CategoricalDtype)})
    return df.sort_values(list(df.columns), kind="stable").reset_index(drop=True)
