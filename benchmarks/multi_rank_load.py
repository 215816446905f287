"""Many ranks: a run folder of N rank traces read serially and in worker processes, side by side in one run.

    python benchmarks/multi_rank_load.py                          # 8 ranks x 80 MB
    python benchmarks/multi_rank_load.py --ranks 4 --rank-mb 60

The ranks are grown from real traces (the HTA sampled NCCL traces of ranks 0 and 1, taken in
turn; ``--from`` for others, e.g. fixtures/comm/gloo_straggler/trace/rank*.json.gz) with
benchmarks/trace_load.py's ``grow`` (events repeated, shifted by the trace's span, ids offset), each
rank's ``distributedInfo`` set to its own rank, into ``scratch/multi_rank/`` (git-ignored; kept
for the next run). Each side runs in its own child process, so its peak RSS is its own: the parent's
(RUSAGE_SELF), its workers' (RUSAGE_CHILDREN, and each worker's own ru_maxrss as it reported it),
then the comm analyzer on the loaded ranks. Also prints what one rank's tables cost to send back
pickled against Arrow IPC files, and the machine's cores and load (the workers share them).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from trace_load import grow  # noqa: E402

DEFAULT_SOURCES = [
    ROOT / "fixtures" / "comm" / "hta" / "trace_filter_sampled_rank-0.json.gz",
    ROOT / "fixtures" / "comm" / "hta" / "trace_filter_sampled_rank-1.json.gz",
]

SIDE = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
from diagnose.ingest.loading import load
from diagnose.analyzers import comm
from diagnose.analysis import run_analyzer
t0 = time.perf_counter()
profile = load({folder!r}, workers={workers}, quiet=True)
load_s = time.perf_counter() - t0
result = run_analyzer(comm, profile)
total_s = time.perf_counter() - t0
out = {{"load_s": load_s, "total_s": total_s, "ingest": profile.ingest, "warnings": profile.warnings,
        "parent_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "children_peak_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
        "summary": result.summary, "findings": sorted(f.id for f in result.findings),
        "gpu_rows": {{r: len(t.gpu) for r, t in profile.traces.items()}},
        "checksum": {{r: int(t.gpu["ts_ns"].sum() + t.cpu_ops["dur_ns"].sum()) for r, t in profile.traces.items()}}}}
if {transport}:
    import os, pickle, tempfile, dataclasses
    import pandas as pd, pyarrow.feather as feather
    trace = profile.traces[min(profile.traces)]
    frames = {{f.name: getattr(trace, f.name) for f in dataclasses.fields(trace)
              if isinstance(getattr(trace, f.name), pd.DataFrame)}}
    t = time.perf_counter(); blob = pickle.dumps(trace, protocol=5); back = pickle.loads(blob)
    pickle_s = time.perf_counter() - t
    with tempfile.TemporaryDirectory(dir={scratch!r}) as d:
        t = time.perf_counter(); size = 0
        for name, frame in frames.items():
            feather.write_feather(frame.reset_index(drop=True), os.path.join(d, name), compression="uncompressed")
            size += os.path.getsize(os.path.join(d, name))
        again = {{name: feather.read_feather(os.path.join(d, name)) for name in frames}}
        arrow_s = time.perf_counter() - t
    same = all(frames[n].reset_index(drop=True).equals(again[n]) for n in frames)
    out["transport"] = {{"pickle_s": pickle_s, "pickle_bytes": len(blob), "arrow_s": arrow_s, "arrow_bytes": size,
                        "arrow_identical": same}}
print("SIDE_RESULT " + json.dumps(out))
"""


def build(folder: Path, ranks: int, rank_mb: int, sources: list[Path]) -> Path:
    """A run folder of ``ranks`` traces of about ``rank_mb`` MB each, grown from ``sources`` in turn."""
    trace_dir = folder / "trace"
    trace_dir.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        dst = trace_dir / f"rank{rank}.json"
        if dst.exists() and dst.stat().st_size >= rank_mb * 2**20 * 0.8:
            continue
        src = sources[rank % len(sources)]
        with gzip.open(src) if src.suffix == ".gz" else open(src, "rb") as f:
            data = json.loads(f.read())
        data["distributedInfo"] = dict(data.get("distributedInfo") or {}, rank=rank, world_size=ranks)
        seed = folder / f"seed_rank{rank}.json"
        seed.write_text(json.dumps(data))
        grow(seed, dst, rank_mb * 2**20)
        seed.unlink()
    for extra in sorted(trace_dir.glob("rank*.json")):
        if int(extra.name[4:].split(".")[0]) >= ranks:
            extra.unlink()
    manifest = {"schema": "gpudiag.run/1", "command": ["benchmarks/multi_rank_load.py"], "exit_code": 0}
    (folder / "manifest.json").write_text(json.dumps(dict(manifest, ranks=list(range(ranks)))))
    return folder


def side(folder: Path, workers: int, transport: bool) -> dict:
    code = SIDE.format(root=str(ROOT), folder=str(folder), workers=workers, transport=transport, scratch=str(folder))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    for line in out.stdout.splitlines():
        if line.startswith("SIDE_RESULT "):
            return json.loads(line[len("SIDE_RESULT ") :])
    raise SystemExit(f"the side with {workers} worker(s) failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def per_worker_peaks(ingest: dict) -> dict[int, int]:
    """Each reading process's peak RSS: the largest it reported (it reports its peak so far, per file)."""
    peaks: dict[int, int] = {}
    for f in ingest["files"]:
        peaks[f["pid"]] = max(peaks.get(f["pid"], 0), f["peak_rss_bytes"])
    return peaks


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--rank-mb", type=int, default=80)
    ap.add_argument("--workers", type=int, default=0, help="workers of the parallel side (default: as load chooses)")
    ap.add_argument("--from", dest="sources", nargs="*", default=[str(p) for p in DEFAULT_SOURCES])
    ap.add_argument("--folder", default=str(ROOT / "scratch" / "multi_rank"))
    ap.add_argument("--repeat", type=int, default=2, help="runs of each side (in ABBA order; the best is shown)")
    args = ap.parse_args()
    folder = build(Path(args.folder), args.ranks, args.rank_mb, [Path(s) for s in args.sources])
    sizes = [p.stat().st_size for p in sorted((folder / "trace").glob("rank*.json"))]
    from diagnose.ingest import parallel as parallel_ingest

    auto = parallel_ingest.worker_count(sizes)
    workers = args.workers or auto
    cores = len(os.sched_getaffinity(0))
    print(f"{len(sizes)} ranks x {mib(sum(sizes) / len(sizes))} = {mib(sum(sizes))} of JSON traces in {folder}")
    print(
        f"machine: {cores} cores, {mib(parallel_ingest.available_memory_bytes())} available, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} before (shared with other work); "
        f"worker_count() = {auto}, parallel side uses {workers}"
    )
    # ABBA order, best of each side: the other work on the machine comes and goes
    runs: dict[int, list[dict]] = {1: [], workers: []}
    for k in range(args.repeat):
        for w in (1, workers) if k % 2 == 0 else (workers, 1):
            runs[w].append(side(folder, w, transport=(w == 1 and not runs[1])))
            print(f"  {w} worker(s): load {runs[w][-1]['load_s']:.2f} s, load average now {os.getloadavg()[0]:.2f}")
    serial = dict(min(runs[1], key=lambda r: r["load_s"]), transport=runs[1][0]["transport"])
    parallel = min(runs[workers], key=lambda r: r["load_s"])
    after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    peaks = per_worker_peaks(parallel["ingest"])
    print(f"{'best of ' + str(args.repeat):28}{'serial':>14}{'parallel':>14}")
    print(f"{'load wall time':28}{serial['load_s']:>12.2f} s{parallel['load_s']:>12.2f} s")
    print(f"{'load + comm analysis':28}{serial['total_s']:>12.2f} s{parallel['total_s']:>12.2f} s")
    print(
        f"{'parent peak RSS':28}{mib(serial['parent_peak_rss_bytes']):>14}{mib(parallel['parent_peak_rss_bytes']):>14}"
    )
    print(f"{'largest child peak RSS':28}{'-':>14}{mib(parallel['children_peak_rss_bytes']):>14}")
    print(
        f"per worker peak RSS: {', '.join(mib(v) for v in peaks.values())} "
        f"({len(peaks)} workers for {len(sizes)} ranks; the bound is one rank's parse, whatever the ranks or cores)"
    )
    for n, pid in enumerate(peaks, 1):
        so_far = [mib(f["peak_rss_bytes"]) for f in parallel["ingest"]["files"] if f["pid"] == pid]
        print(f"  worker {n}: peak RSS after each rank it read: {', '.join(so_far)}")
    per_file = sorted(f["read_s"] for f in serial["ingest"]["files"])
    print(f"serial read per rank: {per_file[0]:.2f} .. {per_file[-1]:.2f} s; load average after: {after}")
    same = all(serial[k] == parallel[k] for k in ("summary", "findings", "gpu_rows", "checksum", "warnings"))
    print(f"identical comm summary, findings and tables: {'yes' if same else 'NO'}")
    t = serial["transport"]
    print(
        f"one rank's tables back to the parent: pickle {t['pickle_s']:.3f} s ({mib(t['pickle_bytes'])}), "
        f"Arrow IPC files {t['arrow_s']:.3f} s ({mib(t['arrow_bytes'])}, identical: {t['arrow_identical']})"
    )
    if not same:
        raise SystemExit("serial and parallel ingest differ")


if __name__ == "__main__":
    main()
