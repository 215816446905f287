"""One report, two trees, side by side in one run: is a refactor's report no slower and no hungrier?

    python benchmarks/report_before_after.py                         # the ~1 GB grown trace, base = BASE_COMMIT
    python benchmarks/report_before_after.py --base 6afc345 --repeats 3 scratch/grown_1000mb.trace.json

The base tree is a git worktree of ``--base`` in scratch/ (git-ignored), made once. Each run is the whole
``python -m diagnose report FILE --json OUT --no-html -q`` process (start-up, reading, every analyzer, the JSON),
its wall clock and peak RSS taken from ``os.wait4`` by this parent; the trees alternate (base, new, base, new …)
so a busy machine slows both alike. Prints each run, the medians and the ratios new / base, and whether the two
findings JSONs are the same once their ``source`` blocks (paths, timings) are left out.
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
BASE_COMMIT = "6afc345"  # main before issue 29's Derived object (2026-12-05)
GROWN = ROOT / "scratch" / "grown_1000mb.trace.json"


def worktree(commit: str) -> Path:
    path = ROOT / "scratch" / f"base-{commit}"
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), commit], check=True)
    return path


def run_report(tree: Path, trace: Path, out: Path) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of one report process run from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "diagnose", "report", str(trace), "--json", str(out), "--no-html", "-q"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # 1: a finding at or above --fail-on is no failure of the run
        raise SystemExit(f"{tree}: report exited {code}: {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss * 1024


def findings_of(path: Path) -> dict:
    data = json.loads(path.read_text())
    data.pop("source", None)
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=BASE_COMMIT, help="the commit to compare with (a worktree is made)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("trace", nargs="?", default=str(GROWN))
    args = ap.parse_args()
    trace = Path(args.trace)
    if not trace.exists():
        sys.path.insert(0, str(ROOT))
        from benchmarks.trace_load import SHARED, grow

        grow(SHARED / "hta" / "nccl_parser_config_nccl_data.json.gz", trace, 1000 * 2**20)
    trees = {"base": worktree(args.base), "new": ROOT}
    print(f"{trace} ({trace.stat().st_size / 1e9:.2f} GB); base {args.base}, new = this tree; {time.strftime('%F %T')}")
    runs: dict[str, list[tuple[float, int]]] = {"base": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        outs = {name: Path(tmp) / f"{name}.json" for name in trees}
        for i in range(args.repeats):
            for name, tree in trees.items():
                wall, rss = run_report(tree, trace, outs[name])
                runs[name].append((wall, rss))
                load = os.getloadavg()[0]
                print(f"  run {i + 1} {name:>4}: {wall:6.1f} s, peak RSS {rss / 2**30:.2f} GiB (load {load:.1f})")
        same = findings_of(outs["base"]) == findings_of(outs["new"])
    med = {name: (statistics.median(w for w, _ in r), statistics.median(m for _, m in r)) for name, r in runs.items()}
    for name, (wall, rss) in med.items():
        print(f"median {name:>4}: {wall:.1f} s, {rss / 2**30:.2f} GiB")
    print(
        f"new / base: time {med['new'][0] / med['base'][0]:.3f}, peak RSS {med['new'][1] / med['base'][1]:.3f}; "
        f"findings JSON (without source) {'identical' if same else 'DIFFERENT'}"
    )


if __name__ == "__main__":
    main()
