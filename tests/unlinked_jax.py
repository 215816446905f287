"""FAKE inputs for the tests of traces that link no GPU work to its launch: copies of the real JAX captures
(fixtures/trace/jax, fixtures/runs/jax_train, H200) with XLA's ``correlation_id`` args taken out, as a trace from an
XLA that does not write them. The real captures link their device ops to cuGraphLaunch and the host copies
(parsers/trace.py ``_from_perfetto``)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from tests.paths import FIXTURES

JAX_TRACE = FIXTURES / "trace" / "jax" / "perfetto_trace.json.gz"
JAX_RUN = FIXTURES / "runs" / "jax_train"


def _strip(src: Path, dst: Path) -> None:
    data = json.loads(gzip.decompress(src.read_bytes()))
    events = data["traceEvents"] if isinstance(data, dict) else data
    for e in events:
        args = e.get("args")
        if isinstance(args, dict):
            args.pop("correlation_id", None)
    dst.write_bytes(gzip.compress(json.dumps(data).encode()))


def unlinked(path: Path, tmp: Path) -> Path:
    """A copy of the JAX trace or run folder ``path`` under ``tmp`` without correlation ids."""
    if path.is_dir():
        out = tmp / path.name
        shutil.copytree(path, out)
        for trace in out.glob("trace/*.json.gz"):
            _strip(trace, trace)
        return out
    out = tmp / path.name
    _strip(path, out)
    return out
