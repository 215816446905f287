"""The README names every subcommand and links every doc; `gpudiag completion` prints scripts that parse and
that complete the subcommands in a real bash."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from diagnose.cli import main
from tests.cli_run import gpudiag
from tests.paths import REPO

SUBCOMMANDS = ["check", "completion", "diff", "profile", "report", "sweep"]


def test_the_cli_has_the_subcommands_this_file_expects():
    assert sorted(main.commands) == SUBCOMMANDS


def test_readme_names_every_subcommand_and_links_every_doc():
    readme = (REPO / "README.md").read_text()
    for name in main.commands:
        assert re.search(rf"^- `gpudiag {name}[ `]", readme, re.M), f"README has no line for `gpudiag {name}`"
    docs = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))
    assert len(docs) >= 17
    docs.append("docs/measurements/README.md")  # it lists the measurement records kept beside it
    linked = set(re.findall(r"\]\(([^)]+\.md)\)", readme))
    assert [d for d in docs if d not in linked] == []
    assert [link for link in linked if not (REPO / link).is_file()] == []  # and no link to a missing file


def test_bash_completion_script_parses_and_completes_subcommands(tmp_path):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    r = gpudiag("completion", "bash")
    assert r.returncode == 0, r.stderr
    script = tmp_path / "gpudiag.bash"
    script.write_text(r.stdout)
    assert subprocess.run([bash, "-n", script], capture_output=True).returncode == 0
    # the script calls `gpudiag` for candidates: put one on PATH that runs this checkout
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gpudiag").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m diagnose "$@"\n')
    (bin_dir / "gpudiag").chmod(0o755)
    driver = (
        f"source {script}\n"
        "complete -p gpudiag\n"
        'complete_words() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=();'
        ' _gpudiag_completion gpudiag "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}";'
        ' echo "${COMPREPLY[*]}"; }\n'
        "complete_words gpudiag ''\n"
        "complete_words gpudiag ch\n"
        "complete_words gpudiag check --fail-on ''\n"
    )
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    out = subprocess.run([bash, "-c", driver], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "complete -o nosort -F _gpudiag_completion gpudiag"
    assert lines[1].split() == SUBCOMMANDS
    assert lines[2] == "check"
    assert lines[3].split() == ["info", "warning", "critical"]


def test_zsh_and_fish_scripts_are_printed():
    zsh = gpudiag("completion", "zsh")
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef gpudiag")
    assert "_GPUDIAG_COMPLETE=zsh_complete" in zsh.stdout
    if shutil.which("zsh"):
        assert subprocess.run(["zsh", "-n"], input=zsh.stdout, text=True).returncode == 0
    fish = gpudiag("completion", "fish")
    assert fish.returncode == 0 and "_GPUDIAG_COMPLETE=fish_complete" in fish.stdout
    bad = gpudiag("completion", "tcsh")
    assert bad.returncode == 2 and "'tcsh' is not one of 'bash', 'zsh', 'fish'" in bad.stderr
