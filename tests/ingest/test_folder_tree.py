"""Folders without a manifest (issue 28 item 9): `check DIR` reads what `report DIR` reads; a folder is read as a tree
(the folder `jax.profiler.trace(dir)` writes holds its trace four folders down); each file left out is listed with
its reason on the terminal too, wrapped to the terminal's width, never cut."""

from __future__ import annotations

import json
import shutil

import pytest

from diagnose.analysis import analyze
from diagnose.ingest.loading import load
from parsers.errors import InputError
from reports.terminal import note_lines, render_terminal
from tests.cli_run import gpudiag
from tests.paths import FIXTURES

JAX_TRAIN = FIXTURES / "runs" / "jax_train"
JAX_PROFILE = JAX_TRAIN / "trace" / "jax-rank0"  # what jax.profiler.start_trace(dir, create_perfetto_trace=True) wrote
JAX_RUN = "plugins/profile/2026_12_02_20_05_56"
HTA = FIXTURES / "comm" / "hta"

FOLDERS = [
    FIXTURES / "trace" / "hta",
    HTA,
    JAX_PROFILE,
    JAX_TRAIN / "trace",
    FIXTURES / "memory" / "churn",
    FIXTURES / "memory" / "jax",
    FIXTURES / "trace" / "no_profilerstep",
]


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.relative_to(FIXTURES).as_posix() for f in FOLDERS])
def test_check_reads_every_folder_report_reads(folder, tmp_path):
    """Before, `check` sent a folder to format detection first, which refused any folder without a manifest."""
    report_json, check_json = tmp_path / "report.json", tmp_path / "check.json"
    r = gpudiag("report", folder, "--no-html", "--json", report_json)
    assert r.returncode == 0, r.stderr
    c = gpudiag("check", folder, "--fail-on", "critical", "--json", check_json)
    assert c.returncode in (0, 1), c.stderr
    ids = [[f["id"] for f in json.loads(p.read_text())["findings"]] for p in (report_json, check_json)]
    assert ids[0] == ids[1] and ids[0]
    critical = [f["id"] for f in json.loads(check_json.read_text())["findings"] if f["severity"] == "critical"]
    assert c.returncode == (1 if critical else 0)


def test_jax_profile_folder_reads_the_trace_four_folders_down():
    profile = load(JAX_PROFILE, workers=1, quiet=True)
    assert sorted(profile.traces) == [0]
    assert profile.traces[0].path == str(JAX_PROFILE / JAX_RUN / "perfetto_trace.json.gz")
    assert len(profile.traces[0].gpu) == 141 and profile.traces[0].gpu["dur_ns"].sum() == 211_554
    assert profile.warnings == [
        f"{JAX_PROFILE}: 1 file left out, XLA's XPlane protobuf, which gpudiag does not read (the trace jax.profiler "
        f"wrote beside it holds the same capture): {JAX_RUN}/vm.xplane.pb",
        f"{JAX_PROFILE}: 1 file left out, the same jax.profiler capture as {JAX_RUN}/perfetto_trace.json.gz "
        f"(JAX wrote both): {JAX_RUN}/vm.trace.json.gz",
    ]
    # the same figures as the trace the run folder copied out of it
    assert (
        analyze(profile).summary == analyze(load(JAX_TRAIN / "trace" / "rank0.json.gz", workers=1, quiet=True)).summary
    )


def test_jax_profile_folder_as_jax_writes_it_by_default(tmp_path):
    """`jax.profiler.trace(dir)` without create_perfetto_trace: <host>.trace.json.gz and <host>.xplane.pb only."""
    folder = tmp_path / "jax-trace"
    shutil.copytree(JAX_PROFILE, folder, ignore=shutil.ignore_patterns("perfetto_trace.json.gz"))
    profile = load(folder, workers=1, quiet=True)
    assert profile.traces[0].path == str(folder / JAX_RUN / "vm.trace.json.gz")
    assert len(profile.traces[0].gpu) == 141 and profile.traces[0].gpu["dur_ns"].sum() == 211_554
    assert profile.warnings == [
        f"{folder}: 1 file left out, XLA's XPlane protobuf, which gpudiag does not read (the trace jax.profiler "
        f"wrote beside it holds the same capture): {JAX_RUN}/vm.xplane.pb"
    ]
    r = gpudiag("report", folder, "--no-html")
    assert r.returncode == 0, r.stderr
    assert f"  note: {folder}: 1 file left out, XLA's XPlane protobuf" in r.stdout


def test_left_out_files_are_wrapped_on_a_terminal_not_cut():
    """At 80 columns the note used to end "not a format gpudiag reads…", without the file's name."""
    analysis = analyze(load(HTA, workers=1, quiet=True))
    text = render_terminal(analysis, width=80)
    notes = text[text.index("  note: ") :]
    assert "…" not in notes and all(len(line) <= 80 for line in notes.splitlines())
    squeezed = "".join(notes.split())  # a path wider than the line is split inside it
    assert "".join(f"note: {HTA}: 1 file left out, not a format gpudiag reads: LICENSE".split()) in squeezed
    assert "".join("each rank's trace is read once".split()) in squeezed
    assert render_terminal(analysis).count("\n  note: ") == 2  # no width (CI logs, pipes): one line each


def test_a_path_wider_than_the_terminal_is_split_not_left_to_overflow():
    """CI's clone lives deeper (/check/work/main/...): its fixture path alone passed 80 columns and overflowed."""
    path = "/check/" + "/".join(f"level{i:02d}" for i in range(12)) + "/hta_traces"
    lines = note_lines(f"{path}: 1 file left out, not a format gpudiag reads: LICENSE", width=80)
    assert all(len(line) <= 80 for line in lines) and len(lines) >= 2
    assert "".join("".join(lines).split()).startswith("note:" + path)


def test_run_folders_inside_a_folder_are_listed_not_mixed(tmp_path):
    runs = tmp_path / "runs"
    for name in ("repeat_a", "repeat_b"):
        shutil.copytree(FIXTURES / "runs" / name, runs / name)
    (runs / ".cache").mkdir()
    (runs / "notes.txt").write_text("two repeats of one script\n")
    with pytest.raises(InputError) as e:
        load(runs, workers=1, quiet=True)
    assert str(e.value) == (
        f"{runs}: is a folder but not a gpudiag run folder (no manifest.json in it), and no file under it is a "
        "format gpudiag reads (1 folder left out, hidden: .cache; 2 folders left out, a gpudiag run folder "
        "(report each on its own): repeat_a, repeat_b; 1 file left out, not a format gpudiag reads: notes.txt)"
    )
    r = gpudiag("check", runs)
    assert r.returncode == 2 and r.stderr == f"gpudiag: error: {e.value}\n"
