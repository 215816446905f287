"""`gpudiag report` and `gpudiag check` on a sample of mutated inputs: exit 0 (or 2 for input they
cannot use, or 1 from `check` when a finding reaches --fail-on), never a traceback, and an exit-2
message that names the file. In-process through click's runner for most of the sample, and a few
real `python -m diagnose` runs for the whole path (interpreter start, stderr as a user sees it)."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner
from hypothesis import given, note
from hypothesis import strategies as st

from diagnose.cli import main
from tests.fuzz import fuzz_settings
from tests.fuzz.mutations import DrawChooser, RandomChooser, build_case, reader_kinds

CLI_READERS = ("ncu_csv", "trace", "snapshot_pickle", "snapshot_json", "memory_stats", "events", "nvml", "run_folder")
_numbers = itertools.count()


def _check_run(cmd: str, path: str, code: int, stdout: str, stderr: str) -> None:
    assert "Traceback" not in stderr and "Traceback" not in stdout, stderr
    allowed = (0, 1, 2) if cmd == "check" else (0, 2)
    assert code in allowed, (cmd, path, code, stdout[-2000:], stderr[-2000:])
    if code == 1:
        assert "FAIL:" in stdout, stdout
    if code == 2:
        assert stderr.startswith("gpudiag: error:"), stderr
        named = os.path.basename(path.rstrip("/"))
        assert named in stderr, stderr


def _args(cmd: str, path: str, out_dir) -> list[str]:
    return [cmd, path] + (["-o", str(out_dir / "out.html")] if cmd == "report" else [])


@fuzz_settings(scale=2)
@given(reader=st.sampled_from(CLI_READERS), data=st.data())
def test_cli_on_mutated_inputs_in_process(reader, data, tmp_path):
    kind = data.draw(st.sampled_from(reader_kinds(reader)))
    dest = tmp_path / f"case{next(_numbers)}"
    path, seed = build_case(reader, kind, DrawChooser(data.draw), dest)
    note(f"{kind} of {seed!r}: {path}")
    runner = CliRunner()
    for cmd in ("report", "check"):
        r = runner.invoke(main, _args(cmd, path, dest.parent))
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            raise r.exception  # a traceback the user would have seen
        _check_run(cmd, path, r.exit_code, r.stdout, r.stderr)
    shutil.rmtree(dest, ignore_errors=True)


# fixed cases (reader, kind, case number) for the real command line: today the first is an event log
# whose last line is cut (read in part, exit 0), the second a gzip stream cut short (exit 2)
SUBPROCESS_CASES = [("events", "truncate", 0), ("trace", "gzip_cut", 1)]


@pytest.mark.parametrize("reader,kind,number", SUBPROCESS_CASES)
def test_cli_on_mutated_inputs_as_a_user_runs_it(reader, kind, number, tmp_path):
    path, _ = build_case(reader, kind, RandomChooser(random.Random(f"cli:{reader}:{kind}:{number}")), tmp_path / "case")
    for cmd in ("report", "check"):
        r = subprocess.run(
            [sys.executable, "-m", "diagnose", *_args(cmd, path, tmp_path)], capture_output=True, text=True, timeout=180
        )
        _check_run(cmd, path, r.returncode, r.stdout, r.stderr)
