"""Replay 1,000,000 allocator-history entries and report them; compare with torch's own trace_plot.

The history is the real churn capture (fixtures/memory/churn, 4,026 entries on an H200) repeated
with every address shifted past the previous copy and every timestamp shifted past its end, so
each copy is an independent allocator state and the grown snapshot stays consistent (its final
segments are the shifted copies of the real ones). Frame lists are shared between copies, as
they would be in a pickle of the same code paths.

Measured side by side in one run, on the same pickle:
  ours:   read_snapshot → fragmentation.analyze (the replay inside it, timed alone too) → report HTML
  torch:  python -m torch.cuda._memory_viz trace_plot snapshot.pickle -o out.html
          (its page fetches its script from a CDN; ours is self-contained and works offline)

    python benchmarks/memory_replay.py [--entries 1000000] [--keep DIR]

Targets (issue 4): replay ≤ 10 s on the 2-core machine; our report < 10 MB.
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parsers.restricted_pickle import loads_plain  # noqa: E402

SOURCE = ROOT / "fixtures" / "memory" / "churn" / "snapshot.pickle.gz"
REPLAY_TARGET_S = 10.0
REPORT_TARGET_BYTES = 10 * 2**20


def grown_snapshot(entries: int) -> dict:
    """The churn snapshot with its history repeated until it has at least ``entries`` entries."""
    raw = loads_plain(gzip.decompress(SOURCE.read_bytes()), SOURCE)
    trace = raw["device_traces"][0]
    addrs = [s["address"] for s in raw["segments"]] + [e["addr"] for e in trace if e.get("addr")]
    ends = [s["address"] + s["total_size"] for s in raw["segments"]] + [
        e["addr"] + e["size"] for e in trace if e.get("addr")
    ]
    lo, hi = min(addrs), max(ends)
    shift = 1 << math.ceil(math.log2(hi - lo + (1 << 30)))
    t0, t1 = trace[0]["time_us"], trace[-1]["time_us"]
    t_shift = t1 - t0 + 1000
    copies = math.ceil(entries / len(trace))
    new_trace, new_segments = [], []
    for k in range(copies):
        da, dt = k * shift, k * t_shift
        for e in trace:
            e2 = dict(e)
            if e2.get("addr"):
                e2["addr"] += da
            e2["time_us"] += dt
            new_trace.append(e2)  # e2["frames"] is the same list object as e["frames"]
        for s in raw["segments"]:
            s2 = dict(s, address=s["address"] + da)
            s2["blocks"] = [dict(b, address=b["address"] + da) for b in s["blocks"]]
            new_segments.append(s2)
    return dict(raw, segments=new_segments, device_traces=[new_trace])


def run_ours(pickle_path: Path, html_path: Path) -> dict:
    import pandas as pd

    from diagnose.analysis import Analysis, run_analyzer
    from diagnose.analyzers import fragmentation
    from diagnose.derive.memory_replay import replay
    from diagnose.ingest.profile_data import Profile
    from parsers.snapshot import read_snapshot
    from reports.html import render_html

    t = time.perf_counter()
    snap = read_snapshot(pickle_path)
    parse_s = time.perf_counter() - t
    t = time.perf_counter()
    replayed = replay(snap, 0)
    replay_s = time.perf_counter() - t
    t = time.perf_counter()
    profile = Profile(kernels=pd.DataFrame(), snapshots={0: snap})
    result = run_analyzer(fragmentation, profile)
    analyze_s = time.perf_counter() - t
    t = time.perf_counter()
    analysis = Analysis(results={"fragmentation": result}, findings=list(result.findings), summary=dict(result.summary))
    html_path.write_text(render_html(analysis))
    render_s = time.perf_counter() - t
    return {
        "parse_s": parse_s,
        "replay_s": replay_s,
        "analyze_s": analyze_s,
        "render_s": render_s,
        "total_s": parse_s + analyze_s + render_s,
        "entries": len(snap.trace),
        "bytes": html_path.stat().st_size,
        "agreement_pct": result.summary.get("snapshot_agreement_pct"),
        "mismatches": replayed.meta["mismatches"],
        "findings": [f.id for f in result.findings],
        "offline": not re.search(r"<script[^>]+src=[\"']https?://", html_path.read_text()),
    }


def run_torch(pickle_path: Path, html_path: Path) -> dict | None:
    cmd = [sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", str(pickle_path), "-o", str(html_path)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0 or not html_path.exists():
        print(f"torch trace_plot failed (rc {proc.returncode}): {proc.stderr[-400:]}")
        return None
    text = html_path.read_text(errors="replace")
    cdn = sorted(set(re.findall(r"(?:src=|from\s+)[\"'](https?://[^\"']+)", text)))
    return {"total_s": wall, "bytes": html_path.stat().st_size, "cdn": cdn}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, default=None, help="keep the pickle and both pages in this folder")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="gpudiag-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    snapshot = grown_snapshot(args.entries)
    pickle_path = work / "snapshot.pickle"
    with open(pickle_path, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)
    print(
        f"built {len(snapshot['device_traces'][0]):,} entries, {len(snapshot['segments']):,} segments, "
        f"pickle {pickle_path.stat().st_size / 2**20:.1f} MiB in {time.perf_counter() - t:.1f} s ({os.cpu_count()} CPUs)"
    )
    del snapshot
    ours = run_ours(pickle_path, work / "gpudiag.html")
    print(
        f"gpudiag: parse {ours['parse_s']:.2f} s, replay {ours['replay_s']:.2f} s (target ≤ {REPLAY_TARGET_S:.0f} s: "
        f"{'OK' if ours['replay_s'] <= REPLAY_TARGET_S else 'MISSED'}), analyze incl. replay {ours['analyze_s']:.2f} s, "
        f"render {ours['render_s']:.2f} s, total {ours['total_s']:.2f} s"
    )
    print(
        f"gpudiag: report {ours['bytes'] / 2**20:.2f} MiB (target < 10 MiB: "
        f"{'OK' if ours['bytes'] < REPORT_TARGET_BYTES else 'MISSED'}), offline {ours['offline']}, "
        f"snapshot agreement {ours['agreement_pct']} %, mismatches {ours['mismatches']}, findings {ours['findings']}"
    )
    theirs = run_torch(pickle_path, work / "torch_trace_plot.html")
    if theirs:
        print(
            f"torch trace_plot: {theirs['total_s']:.2f} s, {theirs['bytes'] / 2**20:.2f} MiB, scripts from network: {theirs['cdn']}"
        )
        print(f"ratio time ours/theirs (parse+analyze+render vs trace_plot): {ours['total_s'] / theirs['total_s']:.2f}")
        print(f"ratio size ours/theirs: {ours['bytes'] / theirs['bytes']:.3f}")
    print(f"files in {work}")


if __name__ == "__main__":
    main()
