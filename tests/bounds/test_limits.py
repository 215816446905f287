"""parsers/limits.py in-process: the nesting scan against a reference, line and gzip caps, the
overrides, non-regular files, the pickle row check. Hand-made inputs only (named fake_*)."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import random
import re

import pytest

from parsers import limits
from parsers.errors import InputError
from parsers.restricted_pickle import loads_plain
from tests.bounds import inputs


def _depth(obj) -> int:
    if isinstance(obj, dict):
        return 1 + max(map(_depth, obj.values()), default=0)
    if isinstance(obj, list):
        return 1 + max(map(_depth, obj), default=0)
    return 0


def _random_json(rng: random.Random, depth: int = 0):
    if depth > 6 or rng.random() < 0.3:  # strings full of the characters the scan must see through
        return rng.choice(['a"b', "\\", '\\"[{', "[[", "x\\\\", 1, None, '}]"', "{", "plain"])
    if rng.random() < 0.5:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["k", "[", '"q\\\\', "z"]): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def _scanned_depth(data: bytes, piece: int | None) -> int:
    """The smallest limit the scan lets ``data`` through, fed in pieces of ``piece`` bytes."""
    for limit in range(64):
        scan = limits._Nesting(limit)
        chunks = [data] if piece is None else [data[i : i + piece] for i in range(0, len(data), piece)]
        if all(scan.feed(chunk) is None for chunk in chunks):
            return limit
    raise AssertionError("deeper than the test expects")


def test_nesting_scan_matches_the_parsed_depth():
    rng = random.Random(8)
    for _ in range(400):
        obj = _random_json(rng)
        text = json.dumps(obj).encode()
        if rng.random() < 0.3:
            text = b"]]}" + text  # closers with nothing open must not hide what follows
        for piece in (None, 1, 2, 3, 7):  # escapes and strings cut between pieces
            assert _scanned_depth(text, piece) == _depth(obj), (text, piece)


def test_nesting_error_gives_the_byte_and_the_cap(tmp_path):
    data = b'{"a": "[[[[", "b": ' + b"[" * 70 + b"]" * 70 + b"}"
    with pytest.raises(InputError, match=r"at byte 82 it nests deeper than 64 levels \(MAX_NESTING_DEPTH\)"):
        limits.check_json_nesting(data, tmp_path / "fake.json")


def test_nesting_cap_can_be_raised(monkeypatch):
    data = b"[" * 100 + b"]" * 100
    with pytest.raises(InputError, match="MAX_NESTING_DEPTH"):
        limits.check_json_nesting(data, None)
    monkeypatch.setenv("GPUDIAG_MAX_NESTING_DEPTH", "100")
    limits.check_json_nesting(data, None)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_line_cap_matches_the_longest_line(tmp_path, monkeypatch, gz):
    monkeypatch.setenv("GPUDIAG_MAX_LINE_BYTES", "50")
    monkeypatch.setattr(limits, "PIECE_BYTES", 16)  # windows and pieces shorter than the lines
    rng = random.Random(3)
    path = tmp_path / "fake_lines.txt"
    for _ in range(150):
        data = b"".join(
            b"x" * rng.randint(0, 70) + rng.choice([b"\n", b"\r", b"\r\n"]) for _ in range(rng.randint(0, 6))
        )
        data += b"y" * rng.randint(0, 70)
        path.write_bytes(gzip.compress(data) if gz else data)
        longest = max(len(line) for line in re.split(rb"[\r\n]", data))
        try:
            with limits.open_input(path, lines=True) as f:
                got = b"".join(iter(lambda: f.read(rng.randint(1, 40)), b""))
        except InputError as e:
            assert longest > 50 and "MAX_LINE_BYTES" in str(e), (data, e)
        else:
            assert longest <= 50 and got == data, data


def test_line_error_names_the_line(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDIAG_MAX_LINE_BYTES", "1000")
    path = tmp_path / "fake.csv"
    path.write_bytes(b"a,b\n1,2\n" + b"9" * 2000 + b"\n")
    with pytest.raises(InputError, match=r"line 3 is longer than 1000 bytes \(MAX_LINE_BYTES\)"):
        limits.read_input(path, lines=True)


def test_gzip_bomb_is_refused_early_and_the_cap_can_be_raised(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDIAG_GZIP_ALLOWANCE_BYTES", str(2**20))
    bomb = inputs.gzip_bomb(tmp_path / "fake_bomb.json.gz", 16 * 2**20)  # 16 MiB of spaces, ~1,000×
    with limits.open_input(bomb) as f:
        with pytest.raises(InputError, match=r"inflates more than 100× \(MAX_GZIP_RATIO\)"):
            f.read()
        assert f._offset <= 2 * 2**20  # stopped at the allowance, not at the end
    monkeypatch.setenv("GPUDIAG_MAX_GZIP_RATIO", "2000")
    assert limits.read_input(bomb) == b" " * (16 * 2**20)


def test_real_gzip_fixtures_read_whole(tmp_path, monkeypatch):
    """The most compressible real capture (43×) passes even with the allowance at its minimum."""
    from tests.paths import FIXTURES

    monkeypatch.setenv("GPUDIAG_GZIP_ALLOWANCE_BYTES", "1")
    for path in [
        FIXTURES / "ncu" / "tiny_kernels" / "details.csv.gz",
        FIXTURES / "runs" / "mem_churn" / "memory" / "rank0.snapshot.json.gz",
    ]:
        assert limits.read_input(path) == gzip.decompress(path.read_bytes())


def test_absolute_decompressed_cap(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDIAG_MAX_DECOMPRESSED_BYTES", str(2**20))
    path = tmp_path / "fake.json.gz"
    path.write_bytes(gzip.compress(os.urandom(3 * 2**20)))  # ratio 1: only the absolute cap applies
    with pytest.raises(InputError, match="MAX_DECOMPRESSED_BYTES"):
        limits.read_input(path)


def test_gunzip_false_refuses_gzip_without_inflating_it(tmp_path):
    path = tmp_path / "fake.csv.gz"
    path.write_bytes(gzip.compress(b"a,b\n"))
    with pytest.raises(InputError, match="is gzip-compressed, but this kind of file is read as plain text"):
        limits.read_input(path, gunzip=False)


def test_truncated_gzip_is_an_input_error(tmp_path):
    path = tmp_path / "fake_cut.json.gz"
    path.write_bytes(gzip.compress(b"[1, 2, 3]" * 1000)[:-20])
    with pytest.raises(InputError, match="truncated"):
        limits.read_input(path)


@pytest.mark.parametrize(
    "make, kind",
    [
        (lambda p: os.mkfifo(p) or p, "a FIFO (named pipe)"),
        (lambda p: p.mkdir() or p, "a folder"),
        (lambda p: "/dev/zero", "a character device"),
    ],
    ids=["fifo", "folder", "dev-zero"],
)
def test_only_regular_files_are_opened(tmp_path, make, kind):
    path = make(tmp_path / "fake_input")
    for check in (limits.read_input, limits.require_regular_file):
        with pytest.raises(InputError, match=re.escape(f"is {kind}; expected a regular file")):
            check(path)


def test_symlink_loop_is_an_os_error_or_input_error(tmp_path):
    (tmp_path / "fake_a").symlink_to(tmp_path / "fake_b")
    (tmp_path / "fake_b").symlink_to(tmp_path / "fake_a")
    with pytest.raises(InputError, match="symbolic links"):
        limits.require_regular_file(tmp_path / "fake_a")
    with pytest.raises(OSError):
        limits.read_input(tmp_path / "fake_a")  # readers turn it into their own "cannot read" InputError


def test_large_plain_reads_are_whole(tmp_path):
    path = tmp_path / "fake.bin"
    data = os.urandom(3 * 2**20 + 5)
    path.write_bytes(data)
    with limits.open_input(path) as f:
        assert f.read(2**20) + f.read(10**9) == data


@pytest.mark.parametrize("value", ["abc", "-1", "0", "1.5", "", " 2_000 "])
def test_overrides_are_checked(monkeypatch, value):
    monkeypatch.setenv("GPUDIAG_MAX_LINE_BYTES", value)
    if value.strip() in ("", "2_000"):
        assert limits.limit("MAX_LINE_BYTES") == (limits.MAX_LINE_BYTES if not value else 2000)
    else:
        with pytest.raises(InputError, match="GPUDIAG_MAX_LINE_BYTES should be a whole number ≥ 1"):
            limits.limit("MAX_LINE_BYTES")


def test_pickle_row_check(tmp_path, monkeypatch):
    block = {"address": 0, "size": 512, "state": "active_allocated", "frames": []}
    shared = {"segments": [{"address": 0, "total_size": 512, "blocks": [block] * 1000}] * 100}
    raw = pickle.dumps(shared, protocol=4)
    with pytest.raises(InputError, match="MIN_INPUT_BYTES_PER_ROW"):
        limits.check_rows(tmp_path / "fake.pickle", 100 * 1001, len(raw))
    monkeypatch.setenv("GPUDIAG_MIN_INPUT_BYTES_PER_ROW", "0")
    limits.check_rows(tmp_path / "fake.pickle", 100 * 1001, len(raw))


def test_pickle_depth_counts_the_longest_path_through_shared_lists(tmp_path):
    """Every list of the chain is also an item of one list near the top: the shortest path to each is 3,
    the longest (which repr follows) 200 deep."""
    chain = [[]]
    for _ in range(200):
        chain.append([chain[-1]])
    top = {"segments": chain}  # chain[k] holds chain[k-1]: a path 200 deep through lists met at depth 2
    with pytest.raises(InputError, match="MAX_NESTING_DEPTH"):
        loads_plain(pickle.dumps(top, protocol=4), tmp_path / "fake.pickle")
    assert loads_plain(pickle.dumps({"segments": [[[1]] * 50] * 50}, protocol=4), None)  # shared, shallow


def test_gzip_bomb_writer_makes_valid_gzip(tmp_path):
    path = inputs.gzip_bomb(tmp_path / "fake_bomb.gz", 5 * 2**20, prefix=b"[", unit=b"ab", suffix=b"]")
    assert gzip.decompress(path.read_bytes()) == b"[" + b"ab" * (4 * 2**19) + b"]"  # CRC and size checked
    assert path.stat().st_size < 10_000
