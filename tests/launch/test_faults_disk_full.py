"""Fault: the disk fills up during `gpudiag profile` (issue 8, faults in `gpudiag profile`).

Modelled with a file-size limit (RLIMIT_FSIZE, `ulimit -f`) on the whole `gpudiag profile`
process tree, with SIGXFSZ ignored so a write past it fails with EFBIG as on a full disk
(ENOSPC). The parent is under the limit too: its manifest is a few KB and fits; the case where
even the manifest cannot be written is tested on its own below. The training must finish with
its own exit code and its own output files byte-identical to a run without gpudiag.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import sys

import pytest

from diagnose.launch import event_log, launcher, run_manifest
from diagnose.launch.capture_mode import ProfileOptions
from diagnose.launch.event_log import JsonlAppender
from diagnose.launch.nvml_sampler import HEADER, NvmlSampler
from parsers import run_folder
from parsers.errors import InputError
from tests.launch.fault_helpers import assert_valid_run_folder, report_no_html, use_fake_pynvml, wait_until
from tests.launch.launch_helpers import SCRIPTS, base_env

LIMIT_BYTES = 16 * 1024
TRAIN = SCRIPTS / "train_with_outputs.py"
OUTPUTS = ("losses.txt", "checkpoint.pt")


def _file_size_limit():  # runs in the gpudiag process between fork and exec; its children inherit both
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT_BYTES, LIMIT_BYTES))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def test_disk_full_mid_run_stops_gpudiag_writing_not_the_training(tmp_path):
    plain_cwd, cwd, run = tmp_path / "plain", tmp_path / "cwd", tmp_path / "r"
    plain_cwd.mkdir()
    cwd.mkdir()
    plain = subprocess.Popen(
        [sys.executable, TRAIN, "150", "--exit-code", "3"], cwd=plain_cwd, env=base_env(), stdout=subprocess.DEVNULL
    )  # meanwhile, the same training without gpudiag
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "diagnose",
            "profile",
            "--no-nvml",
            "--trace-start",
            "2",
            "--trace-steps",
            "2",
            "-o",
            str(run),
            "--",
            sys.executable,
            str(TRAIN),
            "150",
            "--exit-code",
            "3",
        ],
        cwd=cwd,
        env=base_env(),
        preexec_fn=_file_size_limit,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 3 and plain.wait(timeout=120) == 3, r.stderr  # the script's own exit code
    assert r.stdout == "done 150 steps\n"
    for name in OUTPUTS:  # the script's own results, untouched
        assert (cwd / name).read_bytes() == (plain_cwd / name).read_bytes(), name
    said = [line for line in r.stderr.splitlines() if line.startswith("gpudiag:") and "disk full" in line]
    assert len(said) == 2, r.stderr  # the failed trace export, then writing switched off, once
    assert "profiler trace not written, probably disk full: the file-size limit (ulimit -f) is 16384 bytes" in said[0]
    assert said[1].startswith("gpudiag: disk full (EFBIG: File too large) writing events/rank0.jsonl at step ")
    assert said[1].endswith("gpudiag writes nothing more in this process (rank 0), training goes on")

    m = assert_valid_run_folder(run)
    assert (m["status"], m["exit_code"]) == ("failed", 3)
    assert m["missing"] == ["trace/rank0.json.gz"]
    assert "probably disk full" in m["missing_reasons"]["trace/rank0.json.gz"]
    assert m["incomplete"]["events/rank0.jsonl"].startswith("cut short at step ")
    assert "disk full (EFBIG: File too large); every line before is whole" in m["incomplete"]["events/rank0.jsonl"]
    (fault,) = [f for f in m["faults"] if f["kind"] == "disk-full"]
    assert fault["artifact"] == "events/rank0.jsonl" and fault["rank"] == 0
    events = (run / "events" / "rank0.jsonl").read_bytes()
    assert len(events) <= LIMIT_BYTES and events.endswith(b"\n")  # cut back to its last whole line
    steps = [json.loads(line)["step"] for line in events.splitlines() if b'"kind":"step"' in line]
    # every whole line that fitted is kept, in order; the step log is written in batches, so the step in
    # progress when the write failed can be a batch (at most 100 ms of steps) past the last line kept
    assert steps == list(range(len(steps))) and len(steps) < fault["step"] <= 150
    assert len(events) > LIMIT_BYTES - 300  # the batch that did not fit left its whole lines in the file
    assert any(n.startswith("rank 0 stopped writing at step") for n in m["notes"])

    rep, notes = report_no_html(run)
    assert rep.returncode == 0, rep.stderr
    assert any(n.startswith("events/rank0.jsonl is incomplete: cut short") for n in notes)
    assert any(
        n.startswith("trace/rank0.json.gz is missing: profiler trace not written, probably disk full") for n in notes
    )


def _short_write_then_full(after_calls: int):
    calls = []

    def write_all(fd, data):
        calls.append(len(data))
        if len(calls) > after_calls:
            os.write(fd, data[:7])  # a short write, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        os.write(fd, data)

    return write_all


def test_a_failed_append_is_cut_back_to_whole_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(event_log, "write_all", _short_write_then_full(2))
    log = JsonlAppender(str(tmp_path / "rank0.jsonl"))
    log.append({"step": 0})
    log.append({"step": 1})
    with pytest.raises(OSError) as e:
        log.append({"step": 2})
    assert e.value.errno == errno.ENOSPC and e.value.filename == log.path
    log.append({"step": 3})  # takes nothing more: no line after a gap
    assert (tmp_path / "rank0.jsonl").read_text() == '{"step":0}\n{"step":1}\n'
    assert log.failed is e.value and not log.opened


def test_nvml_csv_on_a_full_disk_keeps_its_whole_rows(tmp_path, monkeypatch):
    use_fake_pynvml(monkeypatch)
    monkeypatch.setattr(event_log, "write_all", _short_write_then_full(3))  # the header and two ticks fit
    sampler = NvmlSampler(tmp_path / "nvml.csv", hz=100)
    assert sampler.start()
    wait_until(lambda: sampler.stopped)
    sampler.stop()
    assert sampler.stopped["kind"] == "disk-full" and sampler.rows == 2
    assert sampler.stopped["error"] == "disk full (ENOSPC: No space left on device)"
    lines = (tmp_path / "nvml.csv").read_text().split("\n")
    assert lines[0] == HEADER and len(lines) == 4 and lines[-1] == ""


def test_unwritable_final_manifest_keeps_the_exit_code_and_says_so(tmp_path, monkeypatch, capsys):
    written = []

    def write_manifest(folder, manifest):
        if written:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(manifest["status"])
        return real(folder, manifest)

    real = run_manifest.write_manifest
    monkeypatch.setattr(run_manifest, "write_manifest", write_manifest)
    result = launcher.run_profiled(
        [sys.executable, "-c", "raise SystemExit(4)"], ProfileOptions(out=str(tmp_path / "r"), nvml=False)
    )
    assert result.exit_code == 4
    err = capsys.readouterr().err
    assert (
        "gpudiag: error: the final manifest.json could not be written (disk full (ENOSPC: No space left on device)); "
    ) in err and "keeps the one written at the start (status 'running'): the script ended with exit code 4" in err
    on_disk = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert on_disk["status"] == "running"
    assert run_folder.report_notes(on_disk)[0].startswith("the manifest still says 'running'")


def test_unwritable_start_manifest_is_refused_before_the_script_runs(tmp_path, monkeypatch):
    def full(folder, manifest):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run_manifest, "write_manifest", full)
    marker = tmp_path / "ran"
    with pytest.raises(InputError, match=r"manifest.json: cannot be written \(disk full \(ENOSPC"):
        launcher.run_profiled(
            [sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
            ProfileOptions(out=str(tmp_path / "r"), nvml=False),
        )
    assert not marker.exists()
