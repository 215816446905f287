"""Trace load (+ idle/sync/launch analysis) against HTA's TraceAnalysis, side by side in one run.

    python benchmarks/trace_load.py                       # the shared traces
    python benchmarks/trace_load.py --grow-mb 1000        # plus a ~1 GB trace grown from a real one
    python benchmarks/trace_load.py --no-hta scratch/grown_1000mb.trace.json   # ours only (HTA takes minutes)

Each side runs in its own subprocess, so peak RSS (ru_maxrss) is that side's alone. Ours is measured
twice: the whole ``gpudiag report FILE --json OUT --no-html`` process (wall clock and peak RSS taken by
this parent from ``os.wait4``: start-up, imports, reading, every analyzer, the JSON), and the API alone
(``read_trace`` + the idle, sync and launch analyzers, timed after imports, as HTA's side is). HTA runs
from its own venv (``--hta-python``, default /work/venvs/hta/bin/python; install with
``python -m venv /work/venvs/hta && /work/venvs/hta/bin/pip install holistictraceanalysis``).
The grown trace repeats the real trace's events, shifted in time by its span and with ids
offset per copy, into ``scratch/`` (git-ignored). Prints which JSON reader each side uses, the load
average around each timing (the machine may be shared), and time and peak-memory ratios.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / "fixtures" / "shared"  # the shared starter data, committed (its PROVENANCE.md)
ID_ARGS = ("correlation", "External id", "Python id", "Python parent id")

OURS = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
import pandas as pd
from parsers.trace import read_trace
from diagnose.ingest.profile_data import Profile
from diagnose.analyzers import idle, launch, sync
from diagnose.analysis import run_analyzer
t0 = time.perf_counter()  # after imports, as HTA's side starts its clock after importing HTA
trace = read_trace({path!r})
load_s = time.perf_counter() - t0
p = Profile(sources=[{path!r}], kernels=pd.DataFrame(), nvml=pd.DataFrame(), traces={{0: trace}})
r = run_analyzer(idle, p); run_analyzer(sync, p); run_analyzer(launch, p)
total_s = time.perf_counter() - t0
print("OURS_RESULT " + json.dumps({{"load_s": load_s, "total_s": total_s, "events": trace.metadata["events"],
      "gpu_idle_pct": r.summary.get("gpu_idle_pct"),
      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
      "helper_peak_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}}))
"""


def tree_rss_bytes(pid: int) -> int:
    """RSS of ``pid`` plus its children's (the trace reader's piece helper), from /proc; 0 once it is gone."""
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pids = [pid, *map(int, f.read().split())]
    except OSError:
        return 0
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * page  # resident pages
        except OSError:
            pass
    return total


def whole_process(path: Path) -> dict:
    """``gpudiag report PATH --json OUT --no-html`` in a child: wall seconds and peak RSS.

    The peak is given twice: the child's own (``os.wait4``: the largest single process of its tree) and the
    peak of the sum over the child and its children (the piece helper), sampled from /proc every 20 ms.
    """
    with tempfile.TemporaryDirectory(prefix="gpudiag-bench-") as tmp:
        out = Path(tmp) / "findings.json"
        cmd = [sys.executable, "-m", "diagnose", "report", str(path), "--json", str(out), "--no-html"]
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tree_peak = 0
        while True:
            done, status, usage = os.wait4(child.pid, os.WNOHANG)
            if done:
                break
            tree_peak = max(tree_peak, tree_rss_bytes(child.pid))
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            raise SystemExit(f"gpudiag report failed ({child.returncode}): run {' '.join(cmd)} to see why")
        summary = json.loads(out.read_text())["summary"]
    return {
        "wall_s": wall,
        "peak_rss_bytes": usage.ru_maxrss * 1024,
        "tree_peak_rss_bytes": tree_peak,
        "load": (load_before, os.getloadavg()[0]),
        "gpu_idle_pct": summary.get("gpu_idle_pct"),
    }


def our_reader() -> str:
    from parsers.trace_events import READER

    return (
        f"streamed in 16 MiB pieces, every other one built in a forked helper process (parsers/piece_helper.py); "
        f"{READER}, orjson (dicts) for a piece it does not take"
    )


def hta_reader(hta_python: str) -> str:
    probe = "from hta.common.trace_parser import get_default_trace_parsing_backend as b; print(b().value)"
    backend = subprocess.run([hta_python, "-c", probe], capture_output=True, text=True).stdout.strip() or "unknown"
    whole = " (the standard library's json.load of the whole file)" if backend == "json" else ""
    return f"ParserBackend {backend!r}{whole}"


def run(cmd: list[str], tag: str) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    for line in out.stdout.splitlines():
        if line.startswith(tag):
            return json.loads(line[len(tag) + 1 :])
    raise SystemExit(f"{cmd[0]} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def grow(src: Path, dst: Path, target_bytes: int) -> Path:
    """Write ``dst``: the events of ``src`` repeated (shifted by its span) until about ``target_bytes``."""
    import orjson

    with gzip.open(src) if src.suffix == ".gz" else open(src, "rb") as f:
        data = orjson.loads(f.read())
    events = data.pop("traceEvents")
    timed = [e for e in events if e.get("ph") in ("X", "s", "f") and isinstance(e.get("ts"), (int, float))]
    meta = [e for e in events if e not in timed]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - t0 + 1000
    one = sum(len(orjson.dumps(e)) + 2 for e in timed)
    copies = max(1, target_bytes // one)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(dst, "wb") as out:
        head = orjson.dumps(data)[:-1]
        out.write(head + (b", " if len(head) > 1 else b"") + b'"traceEvents": [\n')
        first = True
        for k in range(copies):
            shift, idoff = k * span, k * 10_000_000
            for e in timed:
                e2 = dict(e, ts=e["ts"] + shift)
                if "id" in e2 and isinstance(e2["id"], int):
                    e2["id"] += idoff
                a = e2.get("args")
                if isinstance(a, dict) and any(x in a for x in ID_ARGS):
                    a = dict(a)
                    for x in ID_ARGS:
                        if isinstance(a.get(x), int) and a[x] >= 0:
                            a[x] += idoff
                    if isinstance(a.get("Python parent id"), int):
                        pass
                    e2["args"] = a
                out.write((b"" if first else b",\n") + orjson.dumps(e2))
                first = False
        for e in meta:
            out.write(b",\n" + orjson.dumps(e))
        out.write(b"\n]}\n")
    return dst


def compare(path: Path, hta_python: str | None, hta_breakdown: bool = True) -> None:
    cli = whole_process(path)
    load_api = os.getloadavg()[0]
    ours = run([sys.executable, "-c", OURS.format(root=str(ROOT), path=str(path))], "OURS_RESULT")
    size = path.stat().st_size
    print(f"{path.name} ({size / 2**20:,.1f} MiB on disk, {ours['events']:,} events)")
    print(
        f"  ours, gpudiag report --json (whole process) {cli['wall_s']:8.2f} s  {cli['peak_rss_bytes'] / 2**20:6.0f} MiB"
        f"   load avg {cli['load'][0]:.2f} -> {cli['load'][1]:.2f}"
    )
    print(
        f"  ours, the process and its piece helper together, peak RSS sampled every 20 ms: "
        f"{cli['tree_peak_rss_bytes'] / 2**20:.0f} MiB"
    )
    print(
        f"  ours, API read_trace + idle/sync/launch     {ours['total_s']:8.2f} s  {ours['peak_rss_bytes'] / 2**20:6.0f} MiB"
        f"   (read {ours['load_s']:.2f} s; load avg {load_api:.2f}; piece helper peak "
        f"{ours['helper_peak_rss_bytes'] / 2**20:.0f} MiB)"
    )
    if hta_python is None:
        print(f"  gpu idle %   ours {ours['gpu_idle_pct']:.2f} (report {cli['gpu_idle_pct']:.2f})")
        return
    load_hta = os.getloadavg()[0]
    hta_cmd = [hta_python, str(ROOT / "benchmarks" / "hta_reference.py"), str(path)]
    hta = run(hta_cmd if hta_breakdown else hta_cmd + ["--load-only"], "HTA_RESULT")
    hta_total = hta["load_s"] + hta.get("breakdown_s", 0.0)
    hta_idle = hta["temporal"][0]["idle_time_pctg"] if "temporal" in hta else float("nan")
    print(
        f"  HTA TraceAnalysis + temporal/idle breakdown {hta_total:8.2f} s  {hta['peak_rss_bytes'] / 2**20:6.0f} MiB"
        f"   (load {hta['load_s']:.2f} s; load avg {load_hta:.2f} -> {os.getloadavg()[0]:.2f})"
    )
    print(
        f"  HTA / ours: time {hta_total / ours['total_s']:.1f}x (API), {hta_total / cli['wall_s']:.1f}x (whole report); "
        f"peak memory {hta['peak_rss_bytes'] / cli['peak_rss_bytes']:.1f}x"
    )
    print(f"  gpu idle %   ours {ours['gpu_idle_pct']:.2f}   HTA {hta_idle:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", default="/work/venvs/hta/bin/python")
    ap.add_argument("--grow-mb", type=int, default=0, help="also grow a trace of about this many MB and compare")
    ap.add_argument("--grow-from", default=str(SHARED / "hta" / "nccl_parser_config_nccl_data.json.gz"))
    ap.add_argument("--no-hta", action="store_true", help="ours only (HTA takes minutes on a 1 GB trace)")
    ap.add_argument("traces", nargs="*")
    args = ap.parse_args()
    hta_python = None if args.no_hta else args.hta_python
    if hta_python and not Path(hta_python).exists():
        raise SystemExit(f"HTA's python not found at {hta_python}; see this script's docstring")
    sys.path.insert(0, str(ROOT))
    print(f"JSON readers: ours {our_reader()}" + (f"; HTA {hta_reader(hta_python)}" if hta_python else ""))
    paths = [Path(p) for p in args.traces] or sorted((SHARED / "hta").glob("*.json.gz")) + [
        SHARED / "torch" / "convnet.trace.json.gz"
    ]
    for p in paths:
        if p.exists():
            compare(p, hta_python)
    if args.grow_mb:
        dst = ROOT / "scratch" / f"grown_{args.grow_mb}mb.trace.json"
        if not dst.exists() or dst.stat().st_size < args.grow_mb * 2**20 * 0.8:
            grow(Path(args.grow_from), dst, args.grow_mb * 2**20)
        compare(dst, hta_python)


if __name__ == "__main__":
    main()
