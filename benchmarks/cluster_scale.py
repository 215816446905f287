"""The cluster read at 8 and 64 ranks: parent and worker memory, first and second report, a killed worker.

    python benchmarks/cluster_scale.py                      # 64 ranks x 80 MB, LocalCluster of 2 x 1 GiB
    python benchmarks/cluster_scale.py --ranks 16 --rank-mb 20

The ranks are grown from the HTA sampled NCCL traces (benchmarks/multi_rank_load.py's ``build``) into
``scratch/cluster_scale/`` (git-ignored; kept for the next run). Every side runs in its own child process, so
its peak RSS (RUSAGE_SELF, printed by the child: the parent of the cluster, its scheduler included) is its own;
each worker's peak is what the rank job reported (ru_maxrss of the worker process, after each rank).

Sides, in order: the 8-rank folder read locally (the reference findings JSON); the same on the cluster, first
(empty cache) and second (unchanged folder); a killed worker (the 8 ranks with a fresh cache, one worker
SIGKILLed while it parses); then 64 ranks on the cluster, first and second. Each cluster side writes the same
findings JSON a local read writes, compared with the reference where the folder is the same.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from multi_rank_load import DEFAULT_SOURCES, build, mib  # noqa: E402

SIDE = r"""
import json, os, resource, signal, sys, threading, time
sys.path.insert(0, {root!r})
from diagnose.ingest.loading import load, ClusterOptions
from diagnose.analysis import analyze
from diagnose.outputs.report_files import write_json

def killer():  # SIGKILL one worker process while it parses a rank
    import psutil
    me = psutil.Process()
    while True:
        time.sleep(0.2)
        workers = [p for p in me.children(recursive=True) if "spawn_main" in " ".join(p.cmdline())]
        if len(workers) >= 2 and time.perf_counter() - t0 > {kill_after_s}:
            workers[0].send_signal(signal.SIGKILL)
            print("KILLED", workers[0].pid, file=sys.stderr)
            return

cluster = {cluster!r}
t0 = time.perf_counter()
if {kill}:
    threading.Thread(target=killer, daemon=True).start()
if cluster:
    from diagnose.cluster.cluster_report import load_and_analyze
    profile, analysis = load_and_analyze({folder!r}, ClusterOptions(cluster, cache_dir={cache!r}, worker_memory="1GiB"), quiet=True)
else:
    profile = load({folder!r}, quiet=True)
    analysis = analyze(profile)
write_json(analysis, {out!r})
total_s = time.perf_counter() - t0
ingest = profile.ingest.get("cluster") or {{}}
out = {{"total_s": total_s, "parent_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "cached": ingest.get("cached"), "workers": ingest.get("workers"), "analysis": ingest.get("analysis"),
        "worker_peaks": sorted({{f["pid"]: f["peak_rss_bytes"] for f in ingest.get("files", []) if not f.get("cached")}}.values()),
        "rank_reads": getattr(profile.traces, "reads", None), "ranks": len(profile.traces), "warnings": profile.warnings}}
print("SIDE_RESULT " + json.dumps(out))
"""


def side(folder: Path, out: Path, cluster: str | None, cache: Path | None, kill: bool = False) -> dict:
    code = SIDE.format(
        root=str(ROOT),
        folder=str(folder),
        out=str(out),
        cluster=cluster,
        cache=None if cache is None else str(cache),
        kill=kill,
        kill_after_s=3.0,
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    for line in done.stdout.splitlines():
        if line.startswith("SIDE_RESULT "):
            result = json.loads(line[len("SIDE_RESULT ") :])
            result["killed"] = [ln for ln in done.stderr.splitlines() if ln.startswith("KILLED")]
            return result
    raise SystemExit(f"a side failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")


def subset(folder: Path, ranks: int, into: Path) -> Path:
    """A run folder of the first ``ranks`` ranks of ``folder`` (links to its files, a manifest of its own)."""
    (into / "trace").mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        link = into / "trace" / f"rank{rank}.json"
        if not link.exists():
            link.symlink_to(folder / "trace" / f"rank{rank}.json")
    manifest = json.loads((folder / "manifest.json").read_text())
    (into / "manifest.json").write_text(json.dumps(dict(manifest, ranks=list(range(ranks)))))
    return into


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--rank-mb", type=int, default=80)
    ap.add_argument("--folder", default=str(ROOT / "scratch" / "cluster_scale"))
    ap.add_argument(
        "--small-ranks",
        type=int,
        default=0,
        help="instead: N small ranks (the HTA sampled traces as they are, ~0.5 MB each), first and second report",
    )
    args = ap.parse_args()
    base = Path(args.folder)
    if args.small_ranks:
        return small(base, args.small_ranks)
    full = build(base / f"r{args.ranks}", args.ranks, args.rank_mb, DEFAULT_SOURCES)
    eight = subset(full, 8, base / "r8")
    caches = base / "caches"
    shutil.rmtree(caches, ignore_errors=True)
    outs = base / "out"
    outs.mkdir(exist_ok=True)
    cluster = "local:2"
    print(
        f"{args.ranks} ranks x {args.rank_mb} MB (grown from the HTA sampled NCCL traces); {cluster}, 1 GiB a worker;"
    )
    print(f"cores {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.1f}")
    rows = [
        ("8 ranks, local read", side(eight, outs / "local8.json", None, None), "local8.json"),
        ("8 ranks, cluster, first", side(eight, outs / "c8a.json", cluster, caches / "c8"), "c8a.json"),
        ("8 ranks, cluster, second", side(eight, outs / "c8b.json", cluster, caches / "c8"), "c8b.json"),
        (
            "8 ranks, cluster, a worker killed",
            side(eight, outs / "kill.json", cluster, caches / "kill", kill=True),
            "kill.json",
        ),
        (f"{args.ranks} ranks, cluster, first", side(full, outs / "cNa.json", cluster, caches / "cN"), "cNa.json"),
        (f"{args.ranks} ranks, cluster, second", side(full, outs / "cNb.json", cluster, caches / "cN"), "cNb.json"),
    ]
    reference = json.loads((outs / "local8.json").read_text())
    print("\n| side | wall s | parent peak | worker peaks | ranks | cached | rank reads | findings = local 8 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r, out in rows:
        same = json.loads((outs / out).read_text()) == reference
        peaks = ", ".join(mib(p) for p in r["worker_peaks"]) or "-"
        print(
            f"| {name} | {r['total_s']:.1f} | {mib(r['parent_peak_rss_bytes'])} | {peaks} | {r['ranks']} | "
            f"{r['cached']} | {r['rank_reads']} | {same} |"
        )
        if r["killed"] or r["warnings"]:
            print(f"|   ({'; '.join(r['killed'] + r['warnings'])[:300]}) |")
        if r.get("analysis"):
            print(f"|   (analysis parts: {r['analysis']}) |")
    by = {name: r for name, r, _ in rows}
    p8, pN = by["8 ranks, cluster, first"], by[f"{args.ranks} ranks, cluster, first"]
    print(
        f"\nparent peak {args.ranks} ranks / 8 ranks: {pN['parent_peak_rss_bytes'] / p8['parent_peak_rss_bytes']:.2f}"
    )
    for n in (8, args.ranks):
        a, b = by[f"{n} ranks, cluster, first"], by[f"{n} ranks, cluster, second"]
        print(
            f"second report / first at {n} ranks: {b['total_s'] / a['total_s']:.2f} "
            f"({b['total_s']:.1f} s / {a['total_s']:.1f} s)"
        )
    worst = max(p for _, r, _ in rows for p in r["worker_peaks"])
    print(f"largest worker peak: {mib(worst)} (cap 1,024 MiB)")


def small(base: Path, ranks: int) -> None:
    """The 1,000-rank simulation: as many real ranks as a big job has, each small, so the per-rank overheads
    (a task, a cache folder, the parent's reads of each rank) show at that count."""
    import gzip

    folder = base / f"small{ranks}"
    (folder / "trace").mkdir(parents=True, exist_ok=True)
    seeds = [json.loads(gzip.open(s).read()) for s in DEFAULT_SOURCES]
    for rank in range(ranks):
        dst = folder / "trace" / f"rank{rank}.json.gz"
        if not dst.exists():
            data = dict(seeds[rank % 2])
            data["distributedInfo"] = dict(data.get("distributedInfo") or {}, rank=rank, world_size=ranks)
            with gzip.open(dst, "wt", compresslevel=1) as f:
                json.dump(data, f)
    manifest = {"schema": "gpudiag.run/1", "command": ["benchmarks/cluster_scale.py"], "exit_code": 0}
    (folder / "manifest.json").write_text(json.dumps(dict(manifest, ranks=list(range(ranks)))))
    cache = base / "caches" / f"small{ranks}"
    shutil.rmtree(cache, ignore_errors=True)
    outs = base / "out"
    outs.mkdir(parents=True, exist_ok=True)
    size = sum(p.stat().st_size for p in (folder / "trace").iterdir())
    print(
        f"{ranks} small ranks, {mib(size)} of gzip traces in all; local:2, 1 GiB a worker; load {os.getloadavg()[0]:.1f}"
    )
    for name in ("first", "second"):
        r = side(folder, outs / f"small_{name}.json", "local:2", cache)
        print(
            f"{name}: {r['total_s']:.1f} s, parent peak {mib(r['parent_peak_rss_bytes'])}, "
            f"workers' peaks {', '.join(mib(p) for p in r['worker_peaks']) or '-'}, cached {r['cached']}, "
            f"rank reads {r['rank_reads']}, notes {len(r['warnings'])}"
        )


if __name__ == "__main__":
    main()
