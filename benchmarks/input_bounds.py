"""Every hostile input, and a 10 MB valid-ish input of each format, through the CLI: what happens,
how long it takes and how much memory it needs (issue 8: no 10 MB input may take more than a
minute or 2 GB).

    python benchmarks/input_bounds.py                    # every case, bombs inflating to 10 GiB (~10 MB)
    python benchmarks/input_bounds.py --bomb-gib 1       # the tests' size (~1 MB on disk)
    python benchmarks/input_bounds.py --only "10 MB"     # the cases whose name holds this text

The cases are tests/bounds/cases.py (the tests run the same ones with 1 GiB bombs). Each runs
``gpudiag report PATH -o …`` (``check`` where the case says so) in its own child process, one
at a time; peak RSS is that child's (os.wait4). Inputs are written to a temporary folder by
streaming and deleted after their run. Prints a Markdown table (docs/input-limits.md keeps one)
and exits 1 if any case was not refused/read as expected or went over the budget.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.bounds.cases import BOMB_RSS_BYTES, BUDGET_RSS_BYTES, BUDGET_WALL_S, CASES, Case, Sizes  # noqa: E402
from tests.bounds.measure import gpudiag  # noqa: E402

COLUMNS = ("input", "size MB", "outcome", "wall s", "peak RSS MiB", "limit")


def input_bytes(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.is_file() else 0


def run(case: Case, folder: Path, sizes: Sizes) -> tuple[list[str], bool]:
    folder.mkdir()
    try:
        path = case.make(folder, sizes)
        size = input_bytes(path)
        args = [case.command, path] + (["-o", folder / "fake_out.html"] if case.command == "report" else [])
        r = gpudiag(*args, timeout_s=max(BUDGET_WALL_S, case.max_wall_s) * 2)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if r.timed_out:
        outcome, ok = "killed (time)", False
    elif "Traceback" in r.stderr:
        outcome, ok = f"traceback (exit {r.returncode})", False
    elif r.returncode == 2:
        outcome = "refused (exit 2)"
        ok = case.refuse is not None and case.refuse in r.stderr and r.stderr.startswith(f"gpudiag: error: {path}")
    elif r.returncode in (0, 1):
        outcome, ok = f"read (exit {r.returncode})", case.refuse is None
    else:
        outcome, ok = f"exit {r.returncode}", False
    within = r.wall_s < case.max_wall_s and r.peak_rss_bytes < case.max_rss_bytes
    if not within:
        outcome += " OVER BUDGET"
    name = case.name
    if case.group == "gzip bomb":
        name += f", inflates to {sizes.bomb_inflated_bytes / 2**30:.0f} GiB"
    row = [
        name,
        f"{size / 1e6:.1f}",
        outcome if ok else outcome + " UNEXPECTED",
        f"{r.wall_s:.1f}",
        f"{r.peak_rss_bytes / 2**20:.0f}",
        case.refuse or "(budget)",
    ]
    return row, ok and within


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bomb-gib", type=float, default=10.0, help="what each gzip bomb inflates to (GiB)")
    ap.add_argument("--only", default=None, help="run only the cases whose name holds this text")
    args = ap.parse_args()
    sizes = Sizes(bomb_inflated_bytes=int(args.bomb_gib * 2**30))
    cases = [c for c in CASES if args.only is None or args.only in c.name]
    print(
        f"budget per input: {BUDGET_WALL_S:.0f} s, {BUDGET_RSS_BYTES / 2**30:.0f} GiB peak RSS "
        f"(gzip bombs: {BOMB_RSS_BYTES / 2**30:.0f} GiB); {time.strftime('%Y-%m-%d')}",
        file=sys.stderr,
    )
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "|".join(" --- " for _ in COLUMNS) + "|")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="gpudiag-bounds-") as tmp:
        for i, case in enumerate(cases):
            row, ok = run(case, Path(tmp) / f"case{i}", sizes)
            failed += not ok
            print("| " + " | ".join(row) + " |", flush=True)
    if failed:
        print(f"{failed} case(s) not as expected or over budget", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
