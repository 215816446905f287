"""Every subcommand on every bad input: exit 2, a message naming the file, never a traceback.

Inputs: every file in fixtures/bad/ (hand-made bad inputs, see its README) plus a
few made here. Nothing here is a real capture.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.paths import FIXTURES

BAD = sorted(p for p in (FIXTURES / "bad").iterdir() if p.is_file() and not p.name.endswith("README.md"))


def gpudiag(*args):
    return subprocess.run(
        [sys.executable, "-m", "diagnose", *map(str, args)], capture_output=True, text=True, timeout=120
    )


def _made_here(tmp_path):
    made = {}
    made["fake_empty.csv"] = b""
    made["fake_garbage.ncu-rep"] = os.urandom(4096)
    made["fake_other_tool.csv"] = b"name,value\nfoo,1\nbar,2\n"
    made["fake_nvidia_smi.csv"] = b"timestamp, name, utilization.gpu [%]\n2026/12/02 10:00:00.000, NVIDIA H200, 5 %\n"
    made["fake_not_a_trace.json"] = b'{"hello": "world"}'
    made["fake_truncated.json.gz"] = b"\x1f\x8b\x08\x00" + os.urandom(64)
    made["fake_text.txt"] = b"just some words\n"
    paths = []
    for name, data in made.items():
        p = tmp_path / name
        p.write_bytes(data)
        paths.append(p)
    (tmp_path / "fake_folder").mkdir()
    paths.append(tmp_path / "fake_folder")
    paths.append(tmp_path / "does_not_exist.ncu-rep")
    return paths


def _assert_clean_failure(r, path):
    assert r.returncode == 2, (path, r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    assert os.path.basename(str(path)) in r.stderr, r.stderr
    assert r.stderr.startswith("gpudiag: error:")


@pytest.mark.parametrize("cmd", ["report", "check"])
def test_made_here_bad_inputs_exit_2(cmd, tmp_path):
    for path in _made_here(tmp_path):
        args = [cmd, path] + (["-o", tmp_path / "x.html"] if cmd == "report" else [])
        _assert_clean_failure(gpudiag(*args), path)


@pytest.mark.parametrize("path", BAD, ids=[p.name for p in BAD])
def test_fixture_bad_inputs_exit_2_or_report_partially(path, tmp_path):
    """A bad file is refused with exit 2, unless the reader can use part of it (then exit 0 with a note)."""
    r = gpudiag("report", path, "-o", tmp_path / "x.html")
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    if r.returncode == 2:
        assert path.name in r.stderr
    else:
        assert r.returncode == 0, r.stderr


def test_bad_threshold_names_exit_2(tmp_path):
    f = FIXTURES / "ncu" / "tiny_kernels" / "raw.csv"
    for bad in ("l2.nope=1", "nogroup.x=1", "l2.warning_pct=abc", "l2warning"):
        r = gpudiag("check", f, "--threshold", bad)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (bad, r.stderr)
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[l2\nwarning_pct = ")
    r = gpudiag("check", f, "--config", cfg)
    assert r.returncode == 2 and "bad.toml" in r.stderr


def test_debug_shows_traceback(tmp_path):
    p = tmp_path / "fake_empty.csv"
    p.write_bytes(b"")
    r = gpudiag("--debug", "report", p)
    assert r.returncode != 0 and "Traceback" in r.stderr
