"""Hostile inputs, written at test time by streaming (never held whole in memory). Names start fake_.

Each writer takes the path to write and returns it. Sizes are in bytes of the file as
written (``*_bytes``) or of what it inflates to (``inflated_bytes``).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

CHUNK_BYTES = 1 << 20


def gzip_bomb(path: Path, inflated_bytes: int, prefix: bytes = b"", unit: bytes = b" ", suffix: bytes = b"") -> Path:
    """A valid gzip of ``prefix + unit * n + suffix`` (about ``inflated_bytes``), ~1/1000 of that on disk.

    Deflate of a repeated 1 MiB chunk, flushed to a byte boundary, reaches a steady state after two
    chunks: the same compressed bytes for every further chunk. They are written again and again, and
    the CRC of n chunks is combined from the CRC of one, so a 16 GiB bomb takes a second.
    """
    chunk = unit * (CHUNK_BYTES // len(unit))
    n_chunks = max(1, (inflated_bytes - len(prefix) - len(suffix)) // len(chunk))
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")  # gzip header: deflate, no name, mtime 0
        f.write(comp.compress(prefix) + comp.flush(zlib.Z_SYNC_FLUSH))
        steady = b""
        for i in range(n_chunks):
            if i < 3:
                steady = comp.compress(chunk) + comp.flush(zlib.Z_SYNC_FLUSH)
            f.write(steady)
        f.write(comp.compress(suffix) + comp.flush(zlib.Z_FINISH))
        crc = _crc32_combine(zlib.crc32(prefix), _crc32_repeated(chunk, n_chunks), n_chunks * len(chunk))
        crc = _crc32_combine(crc, zlib.crc32(suffix), len(suffix))
        size = len(prefix) + n_chunks * len(chunk) + len(suffix)
        f.write(struct.pack("<II", crc, size & 0xFFFFFFFF))
    return path


def _gf2_times(matrix: list[int], vector: int) -> int:
    total, i = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[i]
        vector >>= 1
        i += 1
    return total


def _crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A + B from crc(A), crc(B) and len(B) (zlib's crc32_combine, which Python lacks)."""
    if len2 <= 0:
        return crc1
    op = [0xEDB88320] + [1 << n for n in range(31)]  # appending one zero bit
    for _ in range(3):  # one zero byte: 2**3 bits
        op = [_gf2_times(op, row) for row in op]
    while len2:
        if len2 & 1:
            crc1 = _gf2_times(op, crc1)
        len2 >>= 1
        if len2:
            op = [_gf2_times(op, row) for row in op]
    return crc1 ^ crc2


def _crc32_repeated(data: bytes, n: int) -> int:
    """CRC-32 of ``data * n`` in O(log n) combines."""
    crc, unit_crc, unit_len = 0, zlib.crc32(data), len(data)
    done = 0
    while n:
        if n & 1:
            crc = _crc32_combine(crc, unit_crc, unit_len) if done else unit_crc
            done += unit_len
        n >>= 1
        if n:
            unit_crc, unit_len = _crc32_combine(unit_crc, unit_crc, unit_len), 2 * unit_len
    return crc


def deep_json(path: Path, depth: int, prefix: bytes = b"", suffix: bytes = b"") -> Path:
    """``prefix + [[[…]]] + suffix``: a JSON array nested ``depth`` deep."""
    with open(path, "wb") as f:
        f.write(prefix + b"[" * depth + b"]" * depth + suffix)
    return path


def long_line(path: Path, field_bytes: int, prefix: bytes = b"", suffix: bytes = b"\n", unit: bytes = b"a") -> Path:
    """``prefix`` then one field of ``field_bytes`` bytes with no newline, streamed to disk."""
    chunk = unit * (CHUNK_BYTES // len(unit))
    with open(path, "wb") as f:
        f.write(prefix)
        left = field_bytes
        while left > 0:
            f.write(chunk[:left])
            left -= len(chunk)
        f.write(suffix)
    return path


def repeated(
    path: Path, target_bytes: int, record: bytes, prefix: bytes = b"", suffix: bytes = b"", sep: bytes = b""
) -> int:
    """``prefix + record (sep record)* + suffix`` up to about ``target_bytes``; returns how many records."""
    unit = sep + record
    per_chunk = max(1, CHUNK_BYTES // len(unit))
    n = max(1, (target_bytes - len(prefix) - len(suffix)) // len(unit))
    written = 0
    with open(path, "wb") as f:
        f.write(prefix + record)
        written = 1
        while written < n:
            k = min(per_chunk, n - written)
            f.write(unit * k)
            written += k
        f.write(suffix)
    return written


# --- valid-ish inputs of a given size, grown from the real fixtures --------------------------------


def _fixture(*parts: str) -> Path:
    from tests.paths import FIXTURES

    return FIXTURES.joinpath(*parts)


def _read_maybe_gzip(path: Path) -> bytes:
    import gzip

    with open(path, "rb") as f:
        raw = f.read()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _write_lines(path: Path, target_bytes: int, header: bytes, make_line) -> int:
    """``header`` then ``make_line(i)`` for i = 0, 1, … until the file holds about ``target_bytes``."""
    n = 0
    size = len(header)
    with open(path, "wb") as f:
        f.write(header)
        buf = []
        while size < target_bytes:
            line = make_line(n)
            buf.append(line)
            size += len(line)
            n += 1
            if len(buf) >= 4096:
                f.write(b"".join(buf))
                buf = []
        f.write(b"".join(buf))
    return n


def grown_trace(path: Path, target_bytes: int) -> int:
    """The sync_planted Kineto trace, its events repeated (shifted in time, ids offset); returns events."""
    import orjson

    data = orjson.loads(_read_maybe_gzip(_fixture("runs", "sync_planted", "trace", "rank0.json.gz")))
    events = data.pop("traceEvents")
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events) - min(e.get("ts", 0) for e in events)
    id_args = ("correlation", "External id", "Python id", "Python parent id")
    header = orjson.dumps(data)[:-1] + b',"traceEvents":[\n'
    n = 0
    with open(path, "wb") as f:
        f.write(header)
        size, copy = len(header), 0
        while size < target_bytes:
            out = []
            for e in events:
                e = dict(e)
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] = e["ts"] + copy * span
                if "id" in e and isinstance(e["id"], int):
                    e["id"] = e["id"] + copy * 1_000_000
                args = e.get("args")
                if isinstance(args, dict):
                    e["args"] = {
                        k: (v + copy * 1_000_000 if k in id_args and isinstance(v, int) and v > 0 else v)
                        for k, v in args.items()
                    }
                out.append(orjson.dumps(e))
            piece = (b"" if copy == 0 else b",\n") + b",\n".join(out)
            f.write(piece)
            size += len(piece)
            n += len(out)
            copy += 1
        f.write(b"\n]}\n")
    return n


def tiny_events_trace(path: Path, target_bytes: int) -> int:
    """A trace of the smallest well-formed complete events, as many as ``target_bytes`` holds."""
    return repeated(
        path,
        target_bytes,
        b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1}',
        prefix=b'{"traceEvents":[',
        suffix=b"]}",
        sep=b",",
    )


def grown_snapshot(target_bytes: int, size_of=None) -> dict:
    """The sync_planted snapshot (gpudiag JSON form) with segments and trace entries repeated until
    ``size_of(data)`` (default: its JSON length) is about ``target_bytes``."""
    import json

    data = json.loads(_read_maybe_gzip(_fixture("runs", "sync_planted", "memory", "rank0.snapshot.json.gz")))
    size = (size_of or (lambda d: len(json.dumps(d))))(data)
    segments, trace = data["segments"], data["device_traces"][0]
    copies = max(1, int(target_bytes // size))
    offset = 1 << 40
    data["segments"] = [
        dict(
            s,
            address=s["address"] + c * offset,
            blocks=[dict(b, address=b["address"] + c * offset) for b in s.get("blocks", [])],
        )
        for c in range(copies)
        for s in segments
    ]
    data["device_traces"] = [[dict(t, addr=t.get("addr", 0) + c * offset) for c in range(copies) for t in trace]]
    return data


def grown_snapshot_json(path: Path, target_bytes: int) -> Path:
    import json

    with open(path, "w", encoding="utf-8") as f:
        json.dump(grown_snapshot(target_bytes), f)
    return path


def grown_snapshot_pickle(path: Path, target_bytes: int) -> Path:
    """The grown snapshot as a torch-style pickle; copies share their frame lists (pickle's memo), as
    torch's own pickles share identical stacks, so it takes more copies than the JSON for the size."""
    import pickle

    data = grown_snapshot(target_bytes)
    for _ in range(2):  # the size a copy adds shrinks as copies share more: correct twice
        per_segment = len(pickle.dumps(data, protocol=4)) / len(data["segments"])
        data = grown_snapshot(target_bytes, size_of=lambda d, k=per_segment: k * len(d["segments"]))
    with open(path, "wb") as f:
        pickle.dump(data, f, protocol=4)
    return path


def grown_jsonl(path: Path, target_bytes: int, source: Path, key: str = "step") -> int:
    """The records of a JSON-lines fixture repeated, ``key`` counting up; returns lines written."""
    import json

    records = [json.loads(ln) for ln in _read_maybe_gzip(source).splitlines() if ln.strip()]
    records = [r for r in records if key in r] or records

    def line(i: int) -> bytes:
        r = dict(records[i % len(records)])
        r[key] = i
        return json.dumps(r, separators=(",", ":")).encode() + b"\n"

    return _write_lines(path, target_bytes, b"", line)


def grown_events_jsonl(path: Path, target_bytes: int) -> int:
    return grown_jsonl(path, target_bytes, _fixture("runs", "sync_planted", "events", "rank0.jsonl"))


def grown_memory_stats(path: Path, target_bytes: int) -> int:
    return grown_jsonl(path, target_bytes, _fixture("runs", "sync_planted", "memory", "rank0.stats.jsonl"))


def grown_nvml(path: Path, target_bytes: int) -> int:
    lines = _read_maybe_gzip(_fixture("runs", "sync_planted", "nvml.csv")).splitlines(keepends=True)
    header, rows = lines[0], [ln.split(b",", 1)[1] for ln in lines[1:]]
    t0 = 1_796_241_915_893_017_919
    return _write_lines(path, target_bytes, header, lambda i: b"%d," % (t0 + i * 100_000_000) + rows[i % len(rows)])


def grown_events_csv(path: Path, target_bytes: int) -> int:
    return _write_lines(
        path, target_bytes, b"name,step,elapsed_ms\n", lambda i: b"step,%d,%.3f\n" % (i, 10 + (i % 7) * 0.25)
    )


def grown_events_json(path: Path, target_bytes: int) -> int:
    n = repeated(path, target_bytes, b'{"name":"step","step":0,"elapsed_ms":11.5}', prefix=b"[", suffix=b"]", sep=b",")
    return n


def grown_ncu_raw(path: Path, target_bytes: int) -> int:
    """tiny_kernels' raw page, its kernel rows repeated with new IDs; returns rows."""
    lines = _fixture("ncu", "tiny_kernels", "raw.csv").read_bytes().splitlines(keepends=True)
    head, rows = lines[:2], [ln for ln in lines[2:] if ln.startswith(b'"')]
    rests = [r.split(b",", 1)[1] for r in rows]
    return _write_lines(path, target_bytes, b"".join(head), lambda i: b'"%d",' % i + rests[i % len(rests)])


def grown_ncu_details(path: Path, target_bytes: int) -> int:
    """tiny_kernels' details page, each launch's rows repeated under new IDs; returns rows."""
    lines = _read_maybe_gzip(_fixture("ncu", "tiny_kernels", "details.csv.gz")).splitlines(keepends=True)
    head, rows = lines[0], [ln for ln in lines[1:] if ln.startswith(b'"')]
    first_id = rows[0].split(b",", 1)[0]
    per_launch = [r.split(b",", 1)[1] for r in rows if r.split(b",", 1)[0] == first_id]
    return _write_lines(
        path, target_bytes, head, lambda i: b'"%d",' % (i // len(per_launch)) + per_launch[i % len(per_launch)]
    )


def run_folder_with_manifest(folder: Path, target_bytes: int) -> Path:
    """The sync_planted run folder with its manifest.json grown to about ``target_bytes`` (a long notes list)."""
    import json
    import shutil

    source = _fixture("runs", "sync_planted")
    shutil.copytree(source, folder)
    manifest = json.loads((source / "manifest.json").read_text())
    note = "fake note: " + "x" * 90
    manifest["notes"] = [note] * max(1, target_bytes // (len(note) + 4))
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


NCU_IDENTITY = (
    b'"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
    b'"Grid Size","Device","CC"'
)


def wide_ncu_raw(path: Path, target_bytes: int, columns: int = 20_000) -> int:
    """An ncu raw page of ``columns`` columns (the identity ones, then metrics m0, m1, …); returns rows."""
    metrics = columns - NCU_IDENTITY.count(b",") - 1
    header = NCU_IDENTITY + b"".join(b',"m%d"' % i for i in range(metrics)) + b"\n"
    units = b'"",""' + b',""' * (columns - 2) + b"\n"
    cells = b',"1.5"' * metrics + b"\n"
    return _write_lines(
        path,
        target_bytes,
        header + units,
        lambda i: b'"%d","1","python3","h","k","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0"' % i + cells,
    )


def too_wide_ncu_raw(path: Path, target_bytes: int) -> int:
    """An ncu raw page of 400,000 columns and one row (~7 MB)."""
    return wide_ncu_raw(path, 1, columns=400_000)
