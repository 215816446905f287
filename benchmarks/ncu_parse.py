"""Parse speed of ncu's raw CSV page, against reading the same data through ncu_report.

Builds a raw CSV of N launches (default 100,000) with the full column set of a
real H200 capture (fixtures/ncu/tiny_kernels/raw.csv, 569 columns: every metric of
the four default sections) by replicating its rows, parses it with
``parsers.ncu.read_ncu``, and prints launches/s (target ≥ 50,000/s on the 2-core
CI machine). The anchor: ncu_report's per-metric Python API on the real 48-launch
report of the same capture, timed in the same run, per launch, scaled to N.

    python benchmarks/ncu_parse.py [--launches 100000]
"""
from __future__ import annotations

import argparse
import csv
import gzip
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from parsers.ncu import read_ncu  # noqa: E402

FIXTURE = REPO / "fixtures" / "ncu" / "tiny_kernels"


def build_csv(n: int, out: Path) -> None:
    rows = list(csv.reader(open(FIXTURE / "raw.csv", newline="")))
    header, units, data = rows[0], rows[1], rows[2:]
    with open(out, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(header)
        w.writerow(units)
        for i in range(n):
            r = list(data[i % len(data)])
            r[0] = str(i)
            w.writerow(r)


def time_ncu_report() -> tuple[float, int, int] | None:
    try:
        import ncu_report
    except ImportError:
        return None
    tmp = tempfile.mkdtemp()
    rep = os.path.join(tmp, "r.ncu-rep")
    with gzip.open(FIXTURE / "report.ncu-rep.gz") as src, open(rep, "wb") as dst:
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=100_000)
    args = ap.parse_args()
    scratch = REPO / "scratch"
    scratch.mkdir(exist_ok=True)
    path = scratch / f"bench_raw_{args.launches}.csv"
    if not path.exists():
        build_csv(args.launches, path)
    size_mb = path.stat().st_size / 1e6
    t0 = time.perf_counter()
    df = read_ncu(path)
    dt = time.perf_counter() - t0
    assert len(df) == args.launches, len(df)
    rate = args.launches / dt
    print(f"gpudiag read_ncu: {args.launches:,} launches × {df.shape[1]} columns ({size_mb:,.0f} MB CSV) "
          f"in {dt:.2f} s = {rate:,.0f} launches/s (target ≥ 50,000/s: {'met' if rate >= 50_000 else 'NOT met'})")
    anchor = time_ncu_report()
    if anchor is None:
        print("ncu_report not installed: no anchor measured")
        return
    adt, alaunches, avalues = anchor
    per_launch = adt / alaunches
    print(f"ncu_report per-metric API: {alaunches} launches, {avalues:,} metric reads in {adt:.2f} s = "
          f"{1 / per_launch:,.0f} launches/s (measured on the real 48-launch report, scaled)")
    print(f"ratio gpudiag / ncu_report: {rate * per_launch:.1f}× faster")


if __name__ == "__main__":
    main()
