"""Under gpudiag a script sees what plain `python` gives it, and the bootstrap stays out of its way."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.launch.launch_helpers import SCRIPTS, base_env, gpudiag

REPORT = SCRIPTS / "report_env.py"


def _report(text: str) -> dict:
    line = next(line for line in text.splitlines() if line.startswith("GPUDIAG-REPORT "))
    return json.loads(line.removeprefix("GPUDIAG-REPORT "))


def _plain(args, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, *map(str, args)],
        env=env or base_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_script_sees_plain_python_path_name_and_argv(tmp_path):
    args = [REPORT, "--lr", "3e-4", "pos arg"]
    plain = _report(_plain(args).stdout)
    r = gpudiag("profile", "-q", "--no-nvml", "-o", tmp_path / "r", "--", sys.executable, *args)
    profiled = _report(r.stdout)
    assert profiled["path0"] == str(SCRIPTS) == plain["path0"]
    assert profiled["name"] == "__main__"
    assert profiled["argv"] == [str(REPORT), "--lr", "3e-4", "pos arg"] == plain["argv"]
    assert profiled["path"] == plain["path"]  # the sitecustomize folder took itself off sys.path
    assert profiled["bootstrap_active"] and not plain["bootstrap_active"]
    assert profiled["heavy_modules"] == []  # no pandas/numpy/torch/diagnose imported by the bootstrap


def test_python_dash_m_package_module(tmp_path):
    pkg = tmp_path / "proj" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(REPORT.read_text())
    cwd = tmp_path / "proj"
    plain = _report(_plain(["-m", "mypkg.train", "--x", "1"], cwd=cwd).stdout)
    r = gpudiag(
        "profile",
        "-q",
        "--no-nvml",
        "-o",
        tmp_path / "r",
        "--",
        sys.executable,
        "-m",
        "mypkg.train",
        "--x",
        "1",
        cwd=cwd,
    )
    assert r.returncode == 0, r.stderr
    profiled = _report(r.stdout)
    assert profiled["name"] == "__main__" and profiled["argv"] == [str(pkg / "train.py"), "--x", "1"] == plain["argv"]
    assert profiled["path0"] == plain["path0"] == str(cwd)
    assert profiled["bootstrap_active"]


def test_default_run_folder_name_uses_the_module(tmp_path):
    r = gpudiag("profile", "-q", "--no-nvml", "--", sys.executable, REPORT, cwd=tmp_path)
    assert r.returncode == 0
    folders = list((tmp_path / "gpudiag-runs").iterdir())
    assert len(folders) == 1 and folders[0].name.endswith("-report_env")
    assert (folders[0] / "manifest.json").exists()


def test_users_own_sitecustomize_still_runs(tmp_path):
    user = tmp_path / "usersite"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = '1'\n")
    env = base_env(PYTHONPATH=f"{user}:{base_env()['PYTHONPATH']}")
    assert _report(_plain([REPORT], env=env).stdout)["user_sitecustomize_ran"]
    r = gpudiag("profile", "-q", "--no-nvml", "-o", tmp_path / "r", "--", sys.executable, REPORT, env=env)
    profiled = _report(r.stdout)
    assert profiled["user_sitecustomize_ran"] and profiled["bootstrap_active"]


def test_broken_user_sitecustomize_is_reported_and_the_script_runs(tmp_path):
    user = tmp_path / "usersite"
    user.mkdir()
    (user / "sitecustomize.py").write_text("raise RuntimeError('user sitecustomize is broken')\n")
    env = base_env(PYTHONPATH=f"{user}:{base_env()['PYTHONPATH']}")
    r = gpudiag("profile", "-q", "--no-nvml", "-o", tmp_path / "r", "--", sys.executable, REPORT, env=env)
    assert r.returncode == 0 and "user sitecustomize is broken" in r.stderr
    assert _report(r.stdout)["bootstrap_active"]


def test_non_python_command_runs_too(tmp_path):
    r = gpudiag("profile", "-q", "--no-nvml", "-o", tmp_path / "r", "--", "sh", "-c", "echo hello; exit 4")
    assert r.returncode == 4 and r.stdout.strip() == "hello"
    assert json.loads((tmp_path / "r" / "manifest.json").read_text())["missing"] == ["events/rank0.jsonl"]


def test_runtime_never_imports_the_diagnose_package_or_pandas_while_stepping(tmp_path):
    """Past the first step and the trace window the child holds diagnose.launch.runtime's modules and
    parsers/run_records.py (loaded by its file) only: not the diagnose package (its __init__ imports pandas),
    not the parsers package (its other modules import numpy and pandas), not pandas."""
    r = gpudiag(
        "profile",
        "-q",
        "--no-nvml",
        "-o",
        tmp_path / "r",
        "--",
        sys.executable,
        SCRIPTS / "steps_then_report_modules.py",
    )
    assert r.returncode == 0, r.stderr
    line = next(line for line in r.stdout.splitlines() if line.startswith("GPUDIAG-MODULES "))
    assert json.loads(line.removeprefix("GPUDIAG-MODULES ")) == {
        "pandas": False,
        "diagnose": False,
        "parsers": False,
        "run_records": True,
        "active": True,
    }
    steps = [
        json.loads(line)
        for line in (tmp_path / "r" / "events" / "rank0.jsonl").read_text().splitlines()
        if '"kind":"step"' in line
    ]
    assert len(steps) >= 15
