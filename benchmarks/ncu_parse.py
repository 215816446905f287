"""Parse speed of ncu's raw CSV page, against reading the same data through ncu_report.

Builds a raw CSV of N launches (default 100,000) with the full column set of a
real H200 capture by replicating its rows: the shared convnet capture
(../shared/data/ncu/convnet_raw.csv: 40 different kernels, 567 columns, every metric of
the SpeedOfLight, MemoryWorkloadAnalysis, Occupancy and LaunchStats sections) when it is
there, else fixtures/ncu/tiny_kernels/raw.csv (48 launches, 569 columns). Lines end in
"\n" as ncu writes them. Parses it as gpudiag does (``parsers.ncu_csv.read_ncu_csv_tables``, the registry's
reader) and prints launches/s (target ≥ 50,000/s on the 2-core machine). The anchor: ncu_report's per-metric Python
API (metric_by_name, unit, value for every metric of every launch) on the real report of
the same capture, timed in the same run; its per-launch cost is extrapolated to N
launches (not replicated: a report cannot be made by copying rows).
The machine's load average is printed too: on a shared machine the absolute rate moves
with it, the ratio much less.

End to end: ``gpudiag report --no-html --json`` on the same file in a fresh process (parse, the kernels
table, every analyzer, the findings JSON), then the same with the HTML page (``-o``, as a user runs it), each
with its wall time and its own peak RSS (``os.wait4``), against the targets of issues 21 and 32 (≤ 5 s, ≤ 1 GB) and the anchor's extrapolated time (``--no-report`` skips it).
Each line names the reader it measured: gpudiag's (``df.attrs["reader"]``: "pyarrow, streamed" for a
plain raw page) and the anchor's.

    python benchmarks/ncu_parse.py [--launches 100000] [--no-report]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from parsers.ncu_csv import read_ncu_csv_tables  # noqa: E402

SHARED = REPO.parent / "shared" / "data" / "ncu"
TARGET_S, TARGET_RSS_BYTES = 5.0, 1e9  # issue 21: the whole report of 100,000 launches
FIXTURE = REPO / "fixtures" / "ncu" / "tiny_kernels"


def sources() -> tuple[str, Path, Path]:
    """(name, raw CSV, gzipped report of the same capture)."""
    if (SHARED / "convnet_raw.csv").exists() and (SHARED / "convnet.ncu-rep.gz").exists():
        return "convnet", SHARED / "convnet_raw.csv", SHARED / "convnet.ncu-rep.gz"
    return "tiny_kernels", FIXTURE / "raw.csv", FIXTURE / "report.ncu-rep.gz"


def build_csv(n: int, src: Path, out: Path) -> None:
    rows = list(csv.reader(open(src, newline="")))
    header, units, data = rows[0], rows[1], rows[2:]
    with open(out, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n")
        w.writerow(header)
        w.writerow(units)
        for i in range(n):
            r = list(data[i % len(data)])
            r[0] = str(i)
            w.writerow(r)


def time_ncu_report(report_gz: Path) -> tuple[float, int, int] | None:
    try:
        import ncu_report
    except ImportError:
        return None
    tmp = tempfile.mkdtemp()
    rep = os.path.join(tmp, "r.ncu-rep")
    with gzip.open(report_gz) as src, open(rep, "wb") as dst:
        shutil.copyfileobj(src, dst)
    t0 = time.perf_counter()
    ctx = ncu_report.load_report(rep)
    launches = values = 0
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            act = rng.action_by_idx(a)
            for name in act.metric_names():
                m = act.metric_by_name(name)
                m.unit()
                if m.kind() == ncu_report.IMetric.ValueKind_STRING:
                    m.as_string()
                else:
                    m.as_double()
                values += 1
            launches += 1
    dt = time.perf_counter() - t0
    shutil.rmtree(tmp)
    return dt, launches, values


def time_report(path: Path, html: bool = False) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of ``python -m diagnose report --no-html --json`` on ``path``; ``html``: with
    the HTML page written too (``-o``), the command as a user runs it."""
    with tempfile.TemporaryDirectory(prefix="gpudiag-ncu-report-") as tmp:
        cmd = [sys.executable, "-m", "diagnose", "report", "--json", os.path.join(tmp, "f.json")]
        cmd += ["-o", os.path.join(tmp, "r.html")] if html else ["--no-html"]
        t0 = time.perf_counter()
        proc = subprocess.Popen([*cmd, str(path)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"gpudiag report failed on {path} (exit {os.waitstatus_to_exitcode(status)})")
    return wall, usage.ru_maxrss * 1024


def _peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=100_000)
    ap.add_argument("--no-report", action="store_true", help="time the parse only, not the whole report")
    args = ap.parse_args()
    name, src, report = sources()
    scratch = REPO / "scratch"
    scratch.mkdir(exist_ok=True)
    path = scratch / f"bench_ncu_raw_{name}_{args.launches}.csv"
    if not path.exists():
        build_csv(args.launches, src, path)
    size_mb = path.stat().st_size / 1e6
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    df, _ = read_ncu_csv_tables(path)
    dt = time.perf_counter() - t0
    assert len(df) == args.launches, len(df)
    rate = args.launches / dt
    reader = df.attrs.get("reader", "?")
    print(f"source: {src} (rows replicated), load average {load:.1f} on {os.cpu_count()} cores")
    print(
        f"gpudiag read_ncu_csv_tables [{reader}]: {args.launches:,} launches × {df.shape[1]} columns ({size_mb:,.0f} MB CSV) "
        f"in {dt:.2f} s = {rate:,.0f} launches/s (target ≥ 50,000/s: {'met' if rate >= 50_000 else 'NOT met'}); "
        f"this process's peak RSS so far {_peak_rss_bytes() / 1e9:.2f} GB"
    )
    del df
    report_s = peak = None
    if not args.no_report:
        for html, what in ((False, "--no-html --json"), (True, "-o report.html --json")):
            load = os.getloadavg()[0]
            report_s, peak = time_report(path, html)
            print(
                f"gpudiag report {what} [{reader}], whole process: {report_s:.2f} s, peak RSS "
                f"{peak / 1e9:.2f} GB ({peak / 2**30:.2f} GiB); targets ≤ {TARGET_S:g} s: "
                f"{'met' if report_s <= TARGET_S else 'NOT met'}, ≤ {TARGET_RSS_BYTES / 1e9:g} GB: "
                f"{'met' if peak <= TARGET_RSS_BYTES else 'NOT met'} (load average {load:.1f} → {os.getloadavg()[0]:.1f})"
            )
    anchor = time_ncu_report(report)
    if anchor is None:
        print("ncu_report not installed: no anchor measured")
        return
    adt, alaunches, avalues = anchor
    per_launch = adt / alaunches
    print(
        f"anchor [ncu_report's per-metric Python API, the .ncu-rep]: {alaunches} launches, {avalues:,} metric reads in {adt:.2f} s = "
        f"{1 / per_launch:,.0f} launches/s (the real {alaunches}-launch report; "
        f"{args.launches:,} launches extrapolated: {per_launch * args.launches:,.0f} s)"
    )
    print(f"ratio gpudiag / ncu_report: {rate * per_launch:.1f}× faster")
    if report_s is not None:
        print(
            f"whole report vs the anchor's reads alone ({per_launch * args.launches:,.0f} s): "
            f"{per_launch * args.launches / report_s:,.0f}× faster"
        )


if __name__ == "__main__":
    main()
