"""ncu mode: the command line for every option, its errors, and the whole flow with a fake ncu."""

from __future__ import annotations

import os
import sys

import pytest

from diagnose.launch import ncu_command as ncu
from diagnose.launch.ncu_command import NcuOptions, build_command, supports_process_filter
from parsers.errors import InputError
from tests.launch.launch_helpers import SCRIPTS, base_env, gpudiag, manifest

APP = ["python", "train.py", "--lr", "3e-4"]


def _cmd(**kw):
    return build_command("/x/ncu", NcuOptions(**kw), "/runs/r", APP)


def _value(cmd, flag):
    return [cmd[i + 1] for i, a in enumerate(cmd) if a == flag]


def test_default_command_is_the_documented_one():
    cmd = _cmd()
    assert cmd[:5] == ["/x/ncu", "--target-processes", "all", "--clock-control", "none"]
    assert _value(cmd, "--target-processes-filter") == [
        "exclude-tree:ptxas,exclude-tree:nvlink,exclude-tree:fatbinary,exclude-tree:nvdisasm,exclude-tree:cuobjdump,"
        "exclude-tree:gcc,exclude-tree:cc,exclude-tree:ld,exclude-tree:nvidia-smi"
    ]
    assert _value(cmd, "--section") == [
        "SpeedOfLight",
        "MemoryWorkloadAnalysis",
        "Occupancy",
        "LaunchStats",
        "SourceCounters",
    ]
    assert _value(cmd, "--metrics") == [
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,"
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio,"
        "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,"
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio,"
        "dram__sectors_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,"
        "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed"
    ]
    assert "--set" not in cmd
    assert _value(cmd, "--replay-mode") == ["kernel"]
    assert _value(cmd, "--import-source") == ["no"]
    assert "--nvtx" in cmd and _value(cmd, "--nvtx-include") == ["gpudiag.step_5"]
    assert _value(cmd, "--launch-count") == ["100"] and "--launch-skip" not in cmd
    assert _value(cmd, "-o") == ["/runs/r/ncu/report"] and "-f" in cmd
    assert _value(cmd, "--log-file") == ["/runs/r/ncu/ncu.log"]
    assert cmd[-4:] == APP


@pytest.mark.parametrize(
    "kw, flag, expected",
    [
        ({"full_set": True}, "--set", ["full"]),
        ({"sections": ("SpeedOfLight",)}, "--section", ["SpeedOfLight"]),
        ({"replay_mode": "application"}, "--replay-mode", ["application"]),
        ({"clock_control": "base"}, "--clock-control", ["base"]),
        ({"step": 12}, "--nvtx-include", ["gpudiag.step_12"]),
        ({"nvtx_include": "regex:gpudiag\\.step_(5|6)"}, "--nvtx-include", ["regex:gpudiag\\.step_(5|6)"]),
        ({"kernel_name": "gemm"}, "--kernel-name", ["regex:gemm"]),
        ({"kernel_name": "regex:^ampere"}, "--kernel-name", ["regex:^ampere"]),
        ({"launch_skip": 20, "launch_count": 40}, "--launch-skip", ["20"]),
        ({"launch_skip": 20, "launch_count": 40}, "--launch-count", ["40"]),
        ({"max_launches": 7}, "--launch-count", ["7"]),
    ],
)
def test_each_option_lands_in_the_command(kw, flag, expected):
    assert _value(_cmd(**kw), flag) == expected


def test_full_set_drops_the_sections_and_launch_window_drops_nvtx():
    assert "--section" not in _cmd(full_set=True) and "--metrics" not in _cmd(full_set=True)
    cmd = _cmd(launch_skip=20, launch_count=40)
    assert "--nvtx" not in cmd and "--nvtx-include" not in cmd


def test_default_capture_has_what_memory_access_reads():
    """SourceCounters gives the excess sectors per instruction (and their source lines); the metrics tell loads from
    stores on the CSV page. Own sections keep the metrics unless they are emptied too."""
    from diagnose.derive import kernel_access

    cmd = _cmd()
    assert "SourceCounters" in _value(cmd, "--section")
    metrics = _value(cmd, "--metrics")[0].split(",")
    for d in ("ld", "st"):
        assert kernel_access.L1_SECTORS[d] in metrics and kernel_access.L1_REQUESTS[d] in metrics
        assert kernel_access.BYTES_PER_SECTOR[d] + ".ratio" in metrics
    assert _value(_cmd(sections=("SpeedOfLight",)), "--metrics") == _value(cmd, "--metrics")
    assert "--metrics" not in _cmd(sections=("SpeedOfLight",), metrics=())


def test_uncapped_step_window_and_extra_args():
    cmd = _cmd(max_launches=0, extra_args=("--cache-control", "none"))
    assert "--launch-count" not in cmd
    i = cmd.index("--cache-control")
    assert cmd[i + 1] == "none" and i < cmd.index("-o")


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"step": 3, "launch_count": 10}, "not both"),
        ({"replay_mode": "range"}, "replay-mode"),
        ({"clock_control": "max"}, "clock-control"),
        ({"launch_count": 0}, "at least 1"),
    ],
)
def test_bad_option_combinations_raise_input_error(kw, words):
    with pytest.raises(InputError, match=words):
        NcuOptions(**kw)


def test_ncu_not_found_says_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    if os.path.exists("/usr/local/cuda/bin/ncu"):
        pytest.skip("this machine has ncu")
    with pytest.raises(InputError) as e:
        ncu.find_ncu()
    assert "/usr/local/cuda/bin" in str(e.value) and "--ncu-path" in str(e.value)
    with pytest.raises(InputError, match="--ncu-path"):
        ncu.find_ncu(str(tmp_path / "nope"))


def test_ncu_log_parsing_on_hand_made_lines():
    log = ncu.NcuLog()
    lines = [
        "==PROF== Connected to process 12 (/usr/bin/python3)",
        '==PROF== Profiling "ampere_sgemm_64x32" - 0: 0%....50%....100% - 11 passes',
        '==PROF== Profiling "elementwise_kernel" - 1: 0%....50%....100% - 11 passes',
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission",
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission",
        "==WARNING== No kernels were profiled.",
    ]
    shown = [log.feed(line) for line in lines]
    assert log.launches == 2 and log.last_kernel == "elementwise_kernel"
    assert log.permission_denied and log.no_kernels
    assert shown == [None, None, None, lines[3], None, lines[5]]


def test_no_kernel_message_names_the_option_to_change():
    step_msg = ncu.no_kernel_message(NcuOptions(step=50), steps_seen=20)
    assert "--ncu-step" in step_msg and "20 step(s)" in step_msg and "gpudiag.step_50" in step_msg
    assert "diagnose.step()" in ncu.no_kernel_message(NcuOptions(), steps_seen=0)
    launch_msg = ncu.no_kernel_message(NcuOptions(launch_skip=10**6, launch_count=5, kernel_name="x"), None)
    assert "--launch-skip" in launch_msg and "--kernel-name" in launch_msg


def test_cli_rejects_ncu_options_without_ncu(tmp_path):
    r = gpudiag("profile", "--ncu-step", "3", "--", sys.executable, "-c", "pass")
    assert r.returncode == 2 and "--ncu-step only apply with --ncu" in r.stderr and "Traceback" not in r.stderr


def test_cli_ncu_not_found_exits_2_without_traceback(tmp_path):
    if os.path.exists("/usr/local/cuda/bin/ncu"):
        pytest.skip("this machine has ncu")
    env = base_env(PATH=os.path.dirname(sys.executable), CUDA_HOME=str(tmp_path))
    r = gpudiag("profile", "--ncu", "-o", tmp_path / "r", "--", sys.executable, "-c", "pass", env=env)
    assert r.returncode == 2 and "ncu (Nsight Compute CLI) is not on PATH" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "r").exists()


@pytest.mark.parametrize("mode", ["ok", "perm", "none"])
def test_ncu_flow_with_a_fake_ncu(tmp_path, mode):
    run = tmp_path / "r"
    env = base_env(FAKE_NCU_MODE=mode)
    r = gpudiag(
        "profile",
        "--ncu",
        "--ncu-path",
        SCRIPTS / "fake_ncu.py",
        "--ncu-step",
        "2",
        "-o",
        run,
        "--",
        sys.executable,
        SCRIPTS / "marker_loop.py",
        "5",
        "0.01",
        env=env,
    )
    m = manifest(run)
    assert r.returncode == 0 and m["exit_code"] == 0 and m["mode"] == "ncu"
    assert "gpudiag.step_2" in m["ncu_command"]
    if mode == "ok":
        assert (run / "ncu" / "report.ncu-rep").read_bytes().startswith(b"NVR\x00")
        assert "fake_kernel" in (run / "ncu" / "raw.csv").read_text()
        assert "ncu profiled 3 kernel launches" in r.stderr and "slowdown" in r.stderr
        assert m["missing"] == []
    elif mode == "perm":
        assert "ERR_NVGPUCTRPERM" in r.stderr and "NVreg_RestrictProfilingToAdminUsers=0" in r.stderr
        assert "ncu/report.ncu-rep" in m["missing"]
    else:
        assert "--ncu-step" in r.stderr and "The script ran 4 step(s)" in r.stderr
        assert "ncu/report.ncu-rep" in m["missing"] and any("--ncu-step" in n for n in m["notes"])


def _no_step_script(tmp_path):
    script = tmp_path / "no_steps.py"
    script.write_text("import time\nfor _ in range(3):\n    time.sleep(0.01)\nprint('done')\n")
    return script


def test_no_step_seen_runs_again_under_a_launch_window(tmp_path):
    """Issue 17: --ncu on a script where no step is seen falls back to a launch window by itself, and says so."""
    run, runs_file = tmp_path / "r", tmp_path / "ncu_runs.txt"
    env = base_env(FAKE_NCU_MODE="launches-only", FAKE_NCU_RUNS_FILE=str(runs_file))
    r = gpudiag(
        "profile", "--ncu", "--ncu-path", SCRIPTS / "fake_ncu.py", "-o", run, "--",
        sys.executable, _no_step_script(tmp_path), env=env,
    )  # fmt: skip
    m = manifest(run)
    assert r.returncode == 0 and m["exit_code"] == 0, r.stderr
    # two runs: the step window (bootstrap on, marks steps), then the first 100 launches with the bootstrap off
    assert runs_file.read_text().splitlines() == [
        "gpudiag.step_5 bootstrap-disabled=False",
        "launches 100 bootstrap-disabled=True",
    ]
    assert r.stdout.count("done") == 2
    assert "no step was seen under ncu" in r.stderr and "runs again under ncu with a launch window" in r.stderr
    assert "100 launches after skipping 0" in r.stderr and "error" not in r.stderr
    fallback = m["ncu_fallback"]
    assert fallback["reason"] == "no step seen" and fallback["window"] == "100 launches after skipping 0"
    assert "--nvtx-include" in fallback["first_command"] and "--launch-count" in m["ncu_command"]
    assert "No kernels were profiled" in (run / fallback["first_log"]).read_text()
    assert "fake_kernel" in (run / "ncu" / "raw.csv").read_text()
    assert "ncu/report.ncu-rep" not in m["missing"] and "ncu/raw.csv" not in m["missing"]
    assert any(n.startswith("no step was seen under ncu") for n in m["notes"])


def test_no_fallback_when_steps_were_seen_or_the_window_was_named(tmp_path):
    runs_file = tmp_path / "ncu_runs.txt"
    env = base_env(FAKE_NCU_MODE="launches-only", FAKE_NCU_RUNS_FILE=str(runs_file))
    r = gpudiag(
        "profile", "--ncu", "--ncu-path", SCRIPTS / "fake_ncu.py", "--ncu-step", "9", "-o", tmp_path / "a", "--",
        sys.executable, SCRIPTS / "marker_loop.py", "5", "0.01", env=env,
    )  # fmt: skip
    assert "The script ran 4 step(s)" in r.stderr and "ncu_fallback" not in manifest(tmp_path / "a")
    r = gpudiag(
        "profile", "--ncu", "--ncu-path", SCRIPTS / "fake_ncu.py", "--ncu-nvtx-include", "mine/", "-o",
        tmp_path / "b", "--", sys.executable, _no_step_script(tmp_path), env=env,
    )  # fmt: skip
    assert "Check the --ncu-nvtx-include expression" in r.stderr or "No step boundary" in r.stderr
    assert "ncu_fallback" not in manifest(tmp_path / "b")
    assert len(runs_file.read_text().splitlines()) == 2  # one run each


def test_launch_fallback_needs_budget_left():
    assert ncu.launch_fallback(NcuOptions(timeout_s=600), elapsed_s=590) is None
    assert ncu.launch_fallback(NcuOptions(timeout_s=0), elapsed_s=5000).launch_count == 100
    assert (
        ncu.launch_fallback(NcuOptions(max_launches=7), elapsed_s=1).describe_window() == "7 launches after skipping 0"
    )
    assert ncu.launch_fallback(NcuOptions(launch_count=5), elapsed_s=1) is None


def test_a_users_own_process_filter_replaces_the_helper_exclusion():
    cmd = _cmd(extra_args=("--target-processes-filter", "regex:python"))
    assert _value(cmd, "--target-processes-filter") == ["regex:python"]


def test_no_process_filter_for_an_ncu_without_the_option(tmp_path):
    """An ncu whose --help lacks --target-processes-filter (before it existed) gets the command without it."""
    old_ncu = tmp_path / "ncu"
    old_ncu.write_text("#!/bin/sh\necho '  --target-processes arg (=all)'\n")
    old_ncu.chmod(0o755)
    assert supports_process_filter(str(old_ncu)) is False
    assert supports_process_filter(str(SCRIPTS / "fake_ncu.py")) is True
    assert supports_process_filter(str(tmp_path / "missing")) is False
    assert "--target-processes-filter" not in _cmd(exclude_processes=())
