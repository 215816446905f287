"""Output files: created ``0666 & ~umask`` (0644 under 022, 0600 under 077) for report/check/diff outputs and a
`gpudiag profile` run folder, never left as temporaries; an output whose folder is missing is exit 2 naming it."""

from __future__ import annotations

import os
import stat

import pytest

from tests.cli_run import gpudiag
from tests.paths import FIXTURES, REPO

TINY = FIXTURES / "ncu" / "tiny_kernels" / "raw.csv"
TRAIN = REPO / "tests" / "launch" / "scripts" / "train_with_outputs.py"  # a seeded CPU torch training


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("umask,file_mode", [(0o022, 0o644), (0o077, 0o600)], ids=["umask022", "umask077"])
def test_report_html_json_md_follow_the_umask(umask, file_mode, tmp_path):
    out = {"-o": tmp_path / "r.html", "--json": tmp_path / "r.json", "--md": tmp_path / "r.md"}
    r = gpudiag("report", TINY, *[x for pair in out.items() for x in pair], umask=umask)
    assert r.returncode == 0, r.stderr
    assert {name: oct(mode(p)) for name, p in out.items()} == {name: oct(file_mode) for name in out}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.json", "r.md"]  # no temporaries left


def test_check_outputs_follow_the_umask(tmp_path):
    r = gpudiag("check", TINY, "--json", tmp_path / "c.json", "--md", tmp_path / "c.md", umask=0o027)
    assert r.returncode == 1, r.stderr
    assert (oct(mode(tmp_path / "c.json")), oct(mode(tmp_path / "c.md"))) == ("0o640", "0o640")


@pytest.mark.parametrize(
    "umask,file_mode,dir_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)], ids=["umask022", "umask077"]
)
def test_profile_run_folder_follows_the_umask(umask, file_mode, dir_mode, tmp_path):
    run = tmp_path / "run"
    r = gpudiag(
        "profile", "-q", "--no-nvml", "-o", run, "--trace-start", "1", "--trace-steps", "2", "--",
        "python3", TRAIN, "5", umask=umask, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    files = sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file())
    assert files == ["events/rank0.jsonl", "manifest.json", "trace/rank0.json.gz"]
    assert {f: oct(mode(run / f)) for f in files} == {f: oct(file_mode) for f in files}
    dirs = [run, run / "events", run / "trace"]
    assert [oct(mode(d)) for d in dirs] == [oct(dir_mode)] * 3


@pytest.mark.parametrize(
    "args,option",
    [
        (["report", TINY, "-o", "{missing}/r.html"], "-o"),
        (["report", TINY, "--no-html", "--json", "{missing}/r.json"], "--json"),
        (["report", TINY, "--no-html", "--md", "{missing}/r.md"], "--md"),
        (["check", TINY, "--md", "{missing}/c.md"], "--md"),
        (["check", TINY, "--json", "{missing}/c.json"], "--json"),
        (["diff", TINY, TINY, "-o", "{missing}/d.html"], "-o"),
        (["diff", TINY, TINY, "--json", "{missing}/d.json"], "--json"),
    ],
    ids=["report-o", "report-json", "report-md", "check-md", "check-json", "diff-o", "diff-json"],
)
def test_missing_output_folder_is_exit_2_naming_it(args, option, tmp_path):
    missing = tmp_path / "no_such_dir"
    args = [str(a).replace("{missing}", str(missing)) for a in args]
    r = gpudiag(*args)
    target = next(a for a in args if a.startswith(str(missing)))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr == (
        f"gpudiag: error: {target}: cannot write {option} here: its folder '{missing}' does not exist (create it first)\n"
    )
    assert r.stdout == ""  # refused before any analysis
    assert not missing.exists()


def test_output_that_is_a_folder_is_exit_2(tmp_path):
    r = gpudiag("report", TINY, "--no-html", "--md", tmp_path)  # click's own check (dir_okay=False)
    assert r.returncode == 2
    assert f"Invalid value for '--md': File '{tmp_path}' is a directory." in r.stderr


def test_profile_out_creates_a_new_run_folder_with_its_parents(tmp_path):
    """Documented in docs/cli.md: run folders are new, so `profile -o a/b/run` makes a/b like `mkdir -p`."""
    run = tmp_path / "a" / "b" / "run"
    r = gpudiag("profile", "-q", "--no-nvml", "-o", run, "--", "python3", "-c", "pass")
    assert r.returncode == 0, r.stderr
    assert (run / "manifest.json").is_file()


# ---- an output folder that exists but cannot be written (issue 28 item 2) ----------------------------------

RUN = FIXTURES / "runs" / "sync_free"  # a real H200 run folder: the summary used to print, then a traceback


def unwritable_folder(tmp_path):
    """A folder no file can be created in, for this user: /sys (read-only, even for root), else a 0555 folder."""
    from diagnose.outputs.atomic_write import check_can_create_in

    read_only = tmp_path / "read_only"
    read_only.mkdir()
    read_only.chmod(0o555)
    for folder in ["/sys"] * os.path.isdir("/sys") + [str(read_only)]:
        try:
            check_can_create_in(folder)
        except OSError:
            return folder
    pytest.skip("no folder here refuses a new file (root on a writable file system, no /sys)")


@pytest.mark.parametrize(
    "args,option",
    [
        (["report", RUN, "-o", "{ro}/x.html"], "-o"),
        (["report", RUN, "--no-html", "--json", "{ro}/x.json"], "--json"),
        (["report", RUN, "--no-html", "--md", "{ro}/x.md"], "--md"),
        (["check", RUN, "--json", "{ro}/x.json"], "--json"),
        (["check", RUN, "--md", "{ro}/x.md"], "--md"),
        (["diff", RUN, RUN, "-o", "{ro}/x.html"], "-o"),
        (["diff", RUN, RUN, "--json", "{ro}/x.json"], "--json"),
        (["profile", "-q", "-o", "{ro}/run", "--", "python3", "-c", "pass"], "-o"),
        (["sweep", "--no-profile", "--grid", "a=1", "-o", "{ro}/sweep", "--", "python3", "-c", "pass"], "-o"),
    ],
    ids=["report-o", "report-json", "report-md", "check-json", "check-md", "diff-o", "diff-json", "profile", "sweep"],
)
def test_unwritable_output_is_exit_2_before_any_work(args, option, tmp_path):
    ro = unwritable_folder(tmp_path)
    args = [str(a).replace("{ro}", ro) for a in args]
    target = next(a for a in args if a.startswith(ro))
    r = gpudiag(*args, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""  # refused before the summary, the analysis or the profiled command
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"gpudiag: error: {target}: cannot write {option} here: no file can be created in '{ro}' (")
    assert "Traceback" not in r.stderr
    assert not list(tmp_path.glob("gpudiag-*"))


def test_a_write_that_fails_after_the_check_is_exit_2_naming_the_file(tmp_path, monkeypatch):
    """The folder passed the check, then refused the file (it went read-only, the disk filled): still one line."""
    from click.testing import CliRunner

    import diagnose.outputs.atomic_write
    from diagnose.cli import main

    ro = unwritable_folder(tmp_path)
    monkeypatch.setattr(diagnose.outputs.atomic_write, "check_can_create_in", lambda folder: None)
    r = CliRunner().invoke(main, ["report", str(RUN), "--no-html", "--json", f"{ro}/x.json"])
    assert r.exit_code == 2, r.output
    assert r.output.splitlines()[-1].startswith(f"gpudiag: error: {ro}/x.json: cannot write --json: ")
    assert r.exception is None or isinstance(r.exception, SystemExit)
