"""`gpudiag report --json` on small real traces, as a whole process and in-process, against HTA's in-process load + analysis.

    python benchmarks/report_startup.py                  # the shared and fixture traces, 5 runs each
    python benchmarks/report_startup.py --runs 9 --html  # also time the HTML report (plotly and Jinja)

A user waits for the whole process: interpreter start, imports, parsing, analysis, the JSON. So ours is
timed as ``python -m diagnose report --no-html --json OUT TRACE`` in a fresh process, wall clock, and its
peak RSS is that process's (``os.wait4``). HTA is timed as ``benchmarks/hta_reference.py`` times it: in
its own venv (``--hta-python``, default /work/venvs/hta/bin/python), ``TraceAnalysis`` load plus the
temporal and idle breakdowns, its imports and interpreter start not counted; its whole process is shown
too. Ours is also timed the same way as HTA (the "ours in-process" column): in a fresh process, the
imports first (the analysis, every analyzer, every registered reader), then ``load`` + ``analyze`` +
``write_json`` timed once, the median over the runs; "HTA/ours in-proc" compares like with like. Each side
runs once to warm the file cache, then ``--runs`` times; medians are printed with the load average, which on
a shared machine moves the absolute times. Where HTA fails on a trace (it exits 1 on
fixtures/trace/input_generator/trace.json.gz) its columns say "HTA failed" and the next trace is measured.

Bytecode: an installed gpudiag has compiled ``.pyc`` files. Where ``PYTHONDONTWRITEBYTECODE`` is set (as on
the development machine) every run would recompile the project's ~90 modules (~0.1 s), so ours runs with
``PYTHONPYCACHEPREFIX=scratch/pycache`` and bytecode writing on, unless ``--no-bytecode-cache``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / "fixtures" / "shared"  # the shared starter data, committed (its PROVENANCE.md)


def default_traces() -> list[Path]:
    shared = sorted((SHARED / "hta").glob("*.json.gz")) + [SHARED / "torch" / "convnet.trace.json.gz"]
    fixtures = sorted((ROOT / "fixtures" / "trace").glob("*/trace.json.gz"))
    return [p for p in shared + fixtures if p.exists()]


# ours timed as hta_reference.py times HTA: imports first, then load + analysis (+ the JSON) once, in this process
OURS_IN_PROCESS = r"""
import importlib, json, pkgutil, sys, time
from diagnose.analysis import analyze
from diagnose.ingest.loading import load
from diagnose.outputs.report_files import write_json
from diagnose.thresholds import Thresholds
import diagnose.analyzers, diagnose.ingest.recorded_environment, diagnose.verdict, diagnose.version, reports.json_report
from parsers import registry
for module in pkgutil.iter_modules(diagnose.analyzers.__path__):
    importlib.import_module("diagnose.analyzers." + module.name)
registry.readers()  # imports every reader's module
t0 = time.perf_counter()
write_json(analyze(load(sys.argv[1], quiet=True), Thresholds()), sys.argv[2])
print("OURS_RESULT " + json.dumps({"inproc_s": time.perf_counter() - t0}))
"""


class ChildFailed(RuntimeError):
    """A measured process exited with an error."""


def peak_rss_of(cmd: list[str], env: dict | None) -> tuple[float, int, str]:
    """(wall seconds, peak RSS bytes, stdout) of one child process: its own peak, from ``wait4``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code:
        raise ChildFailed(f"{' '.join(cmd)} exited {code}")
    return wall, usage.ru_maxrss * 1024, out.decode()


def ours_env(bytecode_cache: bool) -> dict:
    env = dict(os.environ)
    if bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(ROOT / "scratch" / "pycache")
    return env


def measure_ours(trace: Path, runs: int, env: dict, html: bool, in_process: bool = True) -> dict:
    """Our whole-process medians (and, with ``in_process``, the in-process one measured as HTA's)."""
    with tempfile.TemporaryDirectory(prefix="gpudiag-startup-") as tmp:
        out = os.path.join(tmp, "findings.json")
        cmd = [sys.executable, "-m", "diagnose", "report", "--json", out]
        cmd += ["-o", os.path.join(tmp, "report.html")] if html else ["--no-html"]
        cmd.append(str(trace))
        peak_rss_of(cmd, env)  # warm: file cache, bytecode
        walls, peaks = [], []
        for _ in range(runs):
            wall, rss, _ = peak_rss_of(cmd, env)
            walls.append(wall)
            peaks.append(rss)
        findings = json.load(open(out))
        inproc = []
        if in_process:
            inproc_cmd = [sys.executable, "-c", OURS_IN_PROCESS, str(trace), out]
            peak_rss_of(inproc_cmd, env)  # warm, as the whole-process runs
            for _ in range(runs):
                _, _, stdout = peak_rss_of(inproc_cmd, env)
                line = next(ln for ln in stdout.splitlines() if ln.startswith("OURS_RESULT "))
                inproc.append(json.loads(line[len("OURS_RESULT ") :])["inproc_s"])
    return {
        "inproc_s": statistics.median(inproc) if inproc else float("nan"),
        "wall_s": statistics.median(walls),
        "min_s": min(walls),
        "peak_rss_bytes": max(peaks),
        "gpu_idle_pct": findings["summary"].get("gpu_idle_pct"),
    }


def measure_hta(trace: Path, runs: int, hta_python: str) -> dict | None:
    """HTA's medians on one trace; None when HTA fails on it."""
    try:
        return _measure_hta(trace, runs, hta_python)
    except ChildFailed:
        return None


def _measure_hta(trace: Path, runs: int, hta_python: str) -> dict:
    cmd = [hta_python, str(ROOT / "benchmarks" / "hta_reference.py"), str(trace)]
    peak_rss_of(cmd, None)
    inproc, walls = [], []
    idle = float("nan")
    for _ in range(runs):
        wall, _, out = peak_rss_of(cmd, None)
        line = next(ln for ln in out.splitlines() if ln.startswith("HTA_RESULT "))
        r = json.loads(line[len("HTA_RESULT ") :])
        inproc.append(r["load_s"] + r.get("breakdown_s", 0.0))
        walls.append(wall)
        if r.get("temporal"):
            idle = r["temporal"][0]["idle_time_pctg"]
    return {"inproc_s": statistics.median(inproc), "wall_s": statistics.median(walls), "gpu_idle_pct": idle}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--hta-python", default="/work/venvs/hta/bin/python")
    ap.add_argument("--html", action="store_true", help="also time the report with its HTML page")
    ap.add_argument("--no-bytecode-cache", action="store_true", help="run ours as the environment says")
    args = ap.parse_args()
    traces = args.traces or default_traces()
    have_hta = Path(args.hta_python).exists()
    if not have_hta:
        print(f"HTA's python not found at {args.hta_python}: ours only (see benchmarks/trace_load.py)")
    env = ours_env(not args.no_bytecode_cache)
    print(f"{args.runs} runs each, medians; {os.cpu_count()} cores; bytecode cache {not args.no_bytecode_cache}")
    print(
        f"{'trace':58s} {'MiB':>6s} {'ours s':>7s} {'peak MiB':>8s} {'ours in-proc s':>14s} {'HTA in-proc s':>13s} "
        f"{'HTA proc s':>10s} {'HTA/ours':>8s} {'HTA/ours in-proc':>16s} {'load':>5s}"
    )
    for trace in traces:
        load = os.getloadavg()[0]
        ours = measure_ours(trace, args.runs, env, html=False)
        hta = measure_hta(trace, args.runs, args.hta_python) if have_hta else None
        size = trace.stat().st_size / 2**20
        name = os.path.relpath(trace, ROOT)
        line = f"{name[-58:]:58s} {size:6.2f} {ours['wall_s']:7.2f} {ours['peak_rss_bytes'] / 2**20:8.0f}"
        line += f" {ours['inproc_s']:14.3f}"
        if hta:
            line += (
                f" {hta['inproc_s']:13.3f} {hta['wall_s']:10.2f} {hta['inproc_s'] / ours['wall_s']:8.2f}"
                f" {hta['inproc_s'] / ours['inproc_s']:16.2f}"
            )
        elif have_hta:
            line += f" {'HTA failed':>13s} {'HTA failed':>10s} {'-':>8s} {'-':>16s}"
        else:
            line += f" {'-':>13s} {'-':>10s} {'-':>8s} {'-':>16s}"
        print(line + f" {max(load, os.getloadavg()[0]):5.1f}", flush=True)
        if args.html:
            with_html = measure_ours(trace, args.runs, env, html=True, in_process=False)
            print(
                f"{'  with the HTML page':58s} {'':6s} {with_html['wall_s']:7.2f} "
                f"{with_html['peak_rss_bytes'] / 2**20:8.0f}"
            )


if __name__ == "__main__":
    main()
