"""Does ncu crash under an unchanged JAX script without gpudiag too? (a diagnostic for issue 17, not a test)

On the H200 (2026-12-04) ncu's wrapper printed "Segmentation fault" and exited 139 in 11 of 16
``gpudiag profile --ncu`` runs of examples/jax_unchanged.py. This runs ncu's exact command line
(ncu_command.build_command) on the same script in variants, each ``--repeats`` times, and prints one line per
run (exit code, wall seconds, whether ncu said "Segmentation fault", launches profiled):

    bare-step    ncu with gpudiag's step window, the script without gpudiag's bootstrap: no NVTX range
                 is ever pushed, so ncu profiles nothing; only ncu's interception of the script is left
    no-filter    bare-step as gpudiag ran it before ncu_command.HELPER_PROCESSES: ncu follows ptxas and nvlink too
    bare-launch  ncu with a launch window (skip 300, 20 launches), no bootstrap: ncu profiles JAX's
                 kernels with gpudiag absent
    gpudiag      gpudiag profile --ncu (the bootstrap, NVTX step ranges, step 5), as tests/gpu does
    no-ncu       the script alone: which child processes JAX starts by itself

Workarounds tried, each no-filter with one change: ``app-only`` (``--target-processes application-only``: ncu
follows no child process), ``no-cmdbuf`` (XLA without CUDA graphs), ``no-autotune`` (no XLA autotuning),
``one-compile-thread`` (XLA compiles on one thread). Each with XLA_PYTHON_CLIENT_PREALLOCATE=false, as gpudiag
sets it under ncu. Each run is in its own session; when its first process ends, what it left running (the
script that ncu's crash orphaned) is killed, and the names of the child processes seen are printed.

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
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from diagnose.launch import ncu_command  # noqa: E402

SCRIPT = [sys.executable, str(REPO / "examples" / "jax_unchanged.py"), "--epochs", "1", "--batches", "20"]
# variant: (ncu options beyond gpudiag's, extra environment, drop gpudiag's helper-process exclusion) for the bare runs
BARE = {
    "bare-step": ([], {}, False),
    "no-filter": ([], {}, True),
    "app-only": (["--target-processes", "application-only"], {}, True),
    "no-cmdbuf": ([], {"XLA_FLAGS": "--xla_gpu_enable_command_buffer="}, True),
    "no-autotune": ([], {"XLA_FLAGS": "--xla_gpu_autotune_level=0"}, True),
    "one-compile-thread": ([], {"XLA_FLAGS": "--xla_gpu_force_compilation_parallelism=1"}, True),
}
VARIANTS = (*BARE, "bare-launch", "gpudiag", "no-ncu")


def _env(bootstrap: bool, extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDIAG_")}
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if not bootstrap:  # the sitecustomize folder must not be on the path
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in env.get("PYTHONPATH", "").split(os.pathsep) if "sitecustomize" not in p
        )
    return {**env, **extra}


def command_of(variant: str, out: Path) -> tuple[list[str], dict]:
    if variant == "no-ncu":
        return SCRIPT, {}
    if variant == "gpudiag":
        command = [sys.executable, "-m", "diagnose", "profile", "--ncu", "--ncu-timeout", "120", "-o", str(out), "--"]
        return [*command, *SCRIPT], {}
    if variant == "bare-launch":
        options, (more, env, unfiltered) = ncu_command.NcuOptions(launch_skip=300, launch_count=20), ([], {}, False)
    else:
        options, (more, env, unfiltered) = ncu_command.NcuOptions(), BARE[variant]
    if unfiltered:  # ncu follows every child process, as gpudiag's command did before HELPER_PROCESSES
        options = replace(options, exclude_processes=())
    (out / "ncu").mkdir(parents=True, exist_ok=True)
    command = ncu_command.build_command(ncu_command.find_ncu(), options, out, SCRIPT)
    if more:  # replaces gpudiag's own --target-processes all
        at = command.index(more[0])
        command[at : at + len(more)] = more
    return command, env


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, name) of every process below ``pid`` (from /proc's children lists)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                try:
                    name = Path(f"/proc/{child}/comm").read_text().strip()
                except OSError:
                    name = "?"
                found.append((child, name))
                todo.append(child)
    return found


def run_variant(variant: str, work: Path, index: int, timeout_s: float) -> str:
    """Runs one variant in its own session; when its first process ends, whatever it left running is killed."""
    out = work / f"{variant}-{index}"
    out.mkdir(parents=True, exist_ok=True)
    command, extra = command_of(variant, out)
    log_path = out / "output.txt"
    seen: dict[str, int] = {}
    t0 = time.monotonic()
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            command,
            env=_env(variant == "gpudiag", extra),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        code = None
        while code is None:
            for pid, name in descendants(proc.pid):
                seen.setdefault(name, pid)
            if time.monotonic() - t0 > timeout_s:
                code = "timeout"
                break
            time.sleep(0.05)
            code = proc.poll()
        wall = time.monotonic() - t0
        left = descendants(proc.pid) if code == "timeout" else []
        try:
            os.killpg(proc.pid, 9)  # the orphaned script too: it stays in the session
        except ProcessLookupError:
            pass
        proc.wait()
    text = log_path.read_text(errors="replace")
    ncu_log = out / "ncu" / "ncu.log"
    log_text = ncu_log.read_text(errors="replace") if ncu_log.exists() else ""
    segv = "Segmentation fault" in text or "Segmentation fault" in log_text or code == -11
    launches = len(re.findall(r"==PROF== Profiling", log_text + text))
    tail = " | ".join(line.strip() for line in (log_text + text).strip().splitlines()[-3:])[-300:]
    return (
        f"{variant:<18} run {index}: exit {code}, {wall:6.1f} s, segfault {segv}, launches profiled {launches}; "
        f"child processes seen {sorted(seen)}{'; left ' + str(left) if left else ''}; last lines: {tail}"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--timeout-s", type=float, default=150)
    p.add_argument("--budget-s", type=float, default=480, help="no new run starts after this many seconds")
    p.add_argument("--keep", type=Path, help="keep each run's output under this folder")
    args = p.parse_args(argv)
    variants = args.variants.split(",")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ncu-probe-") as temporary:
        work = args.keep or Path(temporary)
        for index in range(args.repeats):
            for variant in variants:  # interleaved, so a bad minute of the machine hits every variant
                if time.monotonic() - t0 > args.budget_s:
                    print("budget spent", flush=True)
                    return 0
                print(run_variant(variant, work, index, args.timeout_s), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
