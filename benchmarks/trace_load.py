"""Trace load (+ idle/sync/launch analysis) against HTA's TraceAnalysis, side by side in one run.

    python benchmarks/trace_load.py                       # the shared traces
    python benchmarks/trace_load.py --grow-mb 1000        # plus a ~1 GB trace grown from a real one

Each side runs in its own subprocess, so peak RSS (ru_maxrss) is that side's alone. HTA runs
from its own venv (``--hta-python``, default /work/venvs/hta/bin/python; install with
``python -m venv /work/venvs/hta && /work/venvs/hta/bin/pip install holistictraceanalysis``).
The grown trace repeats the real trace's events, shifted in time by its span and with ids
offset per copy, into ``scratch/`` (git-ignored). Prints time and peak-memory ratios.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
ID_ARGS = ("correlation", "External id", "Python id", "Python parent id")

OURS = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
import pandas as pd
from parsers.trace import read_trace
from diagnose.profile_data import Profile
from diagnose.analyzers import idle, launch, sync
t0 = time.perf_counter()  # after imports, as HTA's side starts its clock after importing HTA
trace = read_trace({path!r})
load_s = time.perf_counter() - t0
p = Profile(sources=[{path!r}], kernels=pd.DataFrame(), nvml=pd.DataFrame(), traces={{0: trace}})
r = idle.analyze(p); sync.analyze(p); launch.analyze(p)
total_s = time.perf_counter() - t0
print("OURS_RESULT " + json.dumps({{"load_s": load_s, "total_s": total_s, "events": trace.metadata["events"],
      "gpu_idle_pct": r.summary.get("gpu_idle_pct"),
      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""


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


def compare(path: Path, hta_python: str, hta_breakdown: bool = True) -> None:
    ours = run([sys.executable, "-c", OURS.format(root=str(ROOT), path=str(path))], "OURS_RESULT")
    hta_cmd = [hta_python, str(ROOT / "benchmarks" / "hta_reference.py"), str(path)]
    hta = run(hta_cmd if hta_breakdown else hta_cmd + ["--load-only"], "HTA_RESULT")
    hta_total = hta["load_s"] + hta.get("breakdown_s", 0.0)
    hta_idle = hta["temporal"][0]["idle_time_pctg"] if "temporal" in hta else float("nan")
    size = path.stat().st_size
    print(f"{path.name} ({size / 2**20:,.1f} MiB on disk, {ours['events']:,} events)")
    print(
        f"  time   ours {ours['total_s']:8.2f} s (load {ours['load_s']:.2f} s)   HTA {hta_total:8.2f} s "
        f"(load {hta['load_s']:.2f} s)   HTA/ours = {hta_total / ours['total_s']:.1f}x"
    )
    print(
        f"  peak   ours {ours['peak_rss_bytes'] / 2**20:8.0f} MiB   HTA {hta['peak_rss_bytes'] / 2**20:8.0f} MiB   "
        f"ours/HTA = {ours['peak_rss_bytes'] / hta['peak_rss_bytes']:.2f}"
    )
    print(f"  gpu idle %   ours {ours['gpu_idle_pct']:.2f}   HTA {hta_idle:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", default="/work/venvs/hta/bin/python")
    ap.add_argument("--grow-mb", type=int, default=0, help="also grow a trace of about this many MB and compare")
    ap.add_argument("--grow-from", default=str(SHARED / "hta" / "nccl_parser_config_nccl_data.json.gz"))
    ap.add_argument("traces", nargs="*")
    args = ap.parse_args()
    if not Path(args.hta_python).exists():
        raise SystemExit(f"HTA's python not found at {args.hta_python}; see this script's docstring")
    paths = [Path(p) for p in args.traces] or sorted((SHARED / "hta").glob("*.json.gz")) + [
        SHARED / "torch" / "convnet.trace.json.gz"
    ]
    for p in paths:
        if p.exists():
            compare(p, args.hta_python)
    if args.grow_mb:
        dst = ROOT / "scratch" / f"grown_{args.grow_mb}mb.trace.json"
        if not dst.exists() or dst.stat().st_size < args.grow_mb * 2**20 * 0.8:
            grow(Path(args.grow_from), dst, args.grow_mb * 2**20)
        compare(dst, args.hta_python)


if __name__ == "__main__":
    main()
