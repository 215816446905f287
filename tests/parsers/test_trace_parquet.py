"""A parsed trace written as Parquet reads back table for table (dtypes, categories, metadata), on every trace
the fixtures hold; a folder that is not one, or one cut short, is an InputError naming it."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from parsers import registry
from parsers.errors import InputError
from parsers.reader import TRACES
from parsers.trace_parquet import HEADER, read_trace, write_trace
from tests.paths import FIXTURES


def trace_fixtures():
    found = []
    for path in sorted(FIXTURES.rglob("*.json*")):
        if "bad" in path.parts or path.name == "manifest.json":
            continue
        try:
            reader = registry.detect(path)
        except InputError:
            continue
        if reader is not None and reader.table == TRACES:
            found.append(path)
    return found


TRACES_HERE = trace_fixtures()


def test_the_fixtures_hold_traces_of_every_kind():
    names = " ".join(str(p) for p in TRACES_HERE)
    assert len(TRACES_HERE) >= 30
    assert "perfetto" in names and "hta" in names and "rank1" in names


@pytest.mark.parametrize("path", TRACES_HERE, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_round_trip_is_exact(path, tmp_path):
    trace = registry.detect(path).read(path)
    write_trace(trace, tmp_path / "t")
    back = read_trace(tmp_path / "t")
    for f in dataclasses.fields(trace):
        a, b = getattr(trace, f.name), getattr(back, f.name)
        if isinstance(a, pd.DataFrame):
            pd.testing.assert_frame_equal(a, b, check_exact=True, obj=f.name)
        else:
            assert a == b, f.name


def test_a_folder_without_header_is_named(tmp_path):
    with pytest.raises(InputError, match=f"holds no {HEADER}"):
        read_trace(tmp_path)


def test_a_damaged_table_is_named(tmp_path):
    path = FIXTURES / "comm" / "gloo_straggler" / "trace" / "rank0.json.gz"
    write_trace(registry.detect(path).read(path), tmp_path)
    (tmp_path / "gpu.parquet").write_bytes(b"PAR1 not parquet at all")
    with pytest.raises(InputError, match=r"gpu\.parquet: cannot be read as Parquet"):
        read_trace(tmp_path)


def test_a_foreign_header_is_named(tmp_path):
    (tmp_path / HEADER).write_text('{"format": "something else"}')
    with pytest.raises(InputError, match="is not a gpudiag.trace-parquet/1 header"):
        read_trace(tmp_path)


def test_a_cluster_reads_header_names_whose_trace_it_is(tmp_path):
    """The cluster read's light header (diagnose.cluster.parquet_traces) carries the trace's format: the step budget
    reads it to give a JAX trace JAX's advice without reading the rank's tables. XLA's correlation ids survive the
    round trip, so the rank's kernels stay linked to their launches."""
    from diagnose.cluster.parquet_traces import ParquetTraces
    from diagnose.cluster.rank_cache import TRACE_DIR

    trace = registry.detect(JAX := FIXTURES / "trace" / "jax" / "perfetto_trace.json.gz").read(JAX)
    write_trace(trace, tmp_path / "rank0" / TRACE_DIR)
    traces = ParquetTraces({0: tmp_path / "rank0"})
    assert traces.light(0).format == "perfetto" and traces.reads == 0
    assert (traces[0].gpu["runtime_index"] >= 0).sum() == 80
