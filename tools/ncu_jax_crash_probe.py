"""Does ncu crash under an unchanged JAX script without gpudiag too? (a diagnostic for issue 17, not a test)

On the H200 (2026-12-04) ncu's wrapper printed "Segmentation fault" and exited 139 in 11 of 16
``gpudiag profile --ncu`` runs of examples/jax_unchanged.py. This runs ncu's exact command line
(ncu.build_command) on the same script in variants, each ``--repeats`` times, and prints one line per
run (exit code, wall seconds, whether ncu said "Segmentation fault", launches profiled):

    bare-step    ncu with gpudiag's step window, the script without gpudiag's bootstrap: no NVTX range
                 is ever pushed, so ncu profiles nothing; only ncu's interception of the script is left
    bare-launch  ncu with a launch window (skip 300, 20 launches), no bootstrap: ncu profiles JAX's
                 kernels with gpudiag absent
    gpudiag      gpudiag profile --ncu (the bootstrap, NVTX step ranges, step 5), as tests/gpu does

Each with XLA_PYTHON_CLIENT_PREALLOCATE=false, as gpudiag sets it under ncu.

    PYTHONPATH=$PWD python3 tools/ncu_jax_crash_probe.py --repeats 2 --variants bare-step,bare-launch,gpudiag
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from diagnose.launch import ncu as ncu_mode  # noqa: E402

SCRIPT = [sys.executable, str(REPO / "examples" / "jax_unchanged.py"), "--epochs", "1", "--batches", "20"]
VARIANTS = ("bare-step", "bare-launch", "gpudiag")


def _env(bootstrap: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDIAG_")}
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if not bootstrap:  # the sitecustomize folder must not be on the path
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in env.get("PYTHONPATH", "").split(os.pathsep) if "sitecustomize" not in p
        )
    return env


def command_of(variant: str, out: Path) -> list[str]:
    if variant == "gpudiag":
        return [
            sys.executable,
            "-m",
            "diagnose",
            "profile",
            "--ncu",
            "--ncu-timeout",
            "120",
            "-o",
            str(out),
            "--",
            *SCRIPT,
        ]
    options = ncu_mode.NcuOptions() if variant == "bare-step" else ncu_mode.NcuOptions(launch_skip=300, launch_count=20)
    (out / "ncu").mkdir(parents=True, exist_ok=True)
    return ncu_mode.build_command(ncu_mode.find_ncu(), options, out, SCRIPT)


def run_variant(variant: str, work: Path, index: int, timeout_s: float) -> str:
    out = work / f"{variant}-{index}"
    command = command_of(variant, out)
    t0 = time.monotonic()
    try:
        r = subprocess.run(command, env=_env(variant == "gpudiag"), capture_output=True, text=True, timeout=timeout_s)
        code, text = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        code, text = "timeout", (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        subprocess.run(["pkill", "-9", "-f", "jax_unchanged.py --epochs 1 --batches 20"], check=False)
    wall = time.monotonic() - t0
    log = out / "ncu" / "ncu.log"
    log_text = log.read_text(errors="replace") if log.exists() else ""
    segv = "Segmentation fault" in text or "Segmentation fault" in log_text
    launches = len(re.findall(r"==PROF== Profiling", log_text + text))
    return f"{variant:<12} run {index}: exit {code}, {wall:6.1f} s, segfault {segv}, launches profiled {launches}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--timeout-s", type=float, default=150)
    p.add_argument("--budget-s", type=float, default=480, help="no new run starts after this many seconds")
    args = p.parse_args(argv)
    variants = args.variants.split(",")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ncu-probe-") as work:
        for index in range(args.repeats):
            for variant in variants:  # interleaved, so a bad minute of the machine hits every variant
                if time.monotonic() - t0 > args.budget_s:
                    print("budget spent", flush=True)
                    return 0
                print(run_variant(variant, Path(work), index, args.timeout_s), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
