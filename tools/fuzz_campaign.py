"""A longer fuzzing campaign over every gpudiag reader, on mutated real fixtures.

    python tools/fuzz_campaign.py --seconds 420 --json fuzz.json          # ~7 minutes, 2 workers
    python tools/fuzz_campaign.py --count 50 --readers trace,events       # a fixed number of cases each
    python tools/fuzz_campaign.py --replay trace:bad_numbers:17           # one case again, with its traceback
    python tools/fuzz_campaign.py --seconds 60 --atheris 30               # plus coverage-guided libFuzzer time

For each reader × mutation kind (tests/fuzz/mutations.py) it writes mutated inputs, each one
made from a real fixture (tests/fuzz/seeds.py) by ``random.Random(f"{seed}:{reader}:{kind}:{i}")``,
so case ``i`` is the same bytes on every machine. Each input is read in-process under a time
limit, classified by tests/fuzz/oracle.py, and the worker's peak resident memory during it
measured (Linux: VmHWM, reset before each input through /proc/self/clear_refs; elsewhere
tracemalloc's peak of Python and numpy allocations). One worker process per reader; when a worker dies or stops
answering (a hang the in-process timer could not break), the parent counts that case as a hang
and starts a new worker from the next case. ``--save DIR`` keeps every failing input.

It prints one markdown table: reader | kind of input | count | clear error | partial/accepted |
uncaught exceptions | hangs | code execution | max memory MiB. ``partial/accepted`` is
``P/A``: P inputs loaded with a warning (something skipped or dropped), A loaded cleanly.
``uncaught`` also counts results that break their declared schema, InputErrors that do not
name the file, and analyses that break a report invariant (diagnose/checks/report_invariants.py). Results as JSON with ``--json OUT``. docs/fuzzing.md has the last run's table.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

READERS = (
    "ncu_csv",
    "ncu_rep",
    "trace",
    "snapshot_pickle",
    "snapshot_json",
    "memory_stats",
    "events",
    "nvml",
    "manifest",
    "load",
    "run_folder",
)
COLUMNS = (
    "reader",
    "kind of input",
    "count",
    "clear error",
    "partial/accepted",
    "uncaught exceptions",
    "hangs",
    "code execution",
    "max memory MiB",
)


def case_rng(seed: int, reader: str, kind: str, index: int) -> random.Random:
    return random.Random(f"{seed}:{reader}:{kind}:{index}")


def kinds_of(reader: str) -> tuple[str, ...]:
    from tests.fuzz.mutations import reader_kinds

    return reader_kinds(reader)


# --- the worker: one reader, its cases in order ---------------------------------------------------------


def worker(args) -> None:
    """Run cases of one reader, one JSON line per case on stdout; the line ``start`` before each."""
    from tests.fuzz.mutations import RandomChooser, build_case
    from tests.fuzz.oracle import run_reader

    reader = args.worker
    kinds = kinds_of(reader)
    start_at = json.loads(args.start_at) if args.start_at else {}
    _warm_up(reader)
    peak = PeakMemory()
    tmp = Path(tempfile.mkdtemp(prefix=f"gpudiag-fuzz-{reader}-"))
    try:
        for kind in kinds:
            cell_end = time.monotonic() + args.cell_seconds if args.cell_seconds else None
            for i in range(start_at.get(kind, 0), args.count):
                if cell_end and time.monotonic() > cell_end:
                    break
                _emit({"event": "start", "kind": kind, "index": i})
                dest = tmp / f"{kind}-{i}"
                path, seed_name = build_case(
                    reader, kind, RandomChooser(case_rng(args.seed, reader, kind, i)), dest, full=args.full
                )
                peak.reset()
                outcome = run_reader(reader, path, limit_s=args.limit_s)
                record = {
                    "event": "case",
                    "reader": reader,
                    "kind": kind,
                    "index": i,
                    "seed": seed_name,
                    "outcome": outcome.kind,
                    "detail": outcome.detail,
                    "seconds": round(outcome.seconds, 4),
                    "peak_mib": round(peak.mib(), 1),
                }
                if not outcome.ok and args.save:
                    record["saved"] = _save(Path(args.save), reader, kind, i, path)
                _emit(record)
                shutil.rmtree(dest, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _emit({"event": "done", "maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)})


class PeakMemory:
    """Peak memory since the last ``reset()``: resident (VmHWM) where Linux lets it be reset, else tracemalloc's."""

    def __init__(self):
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.rss = True
        except OSError:
            self.rss = False
            tracemalloc.start()

    def reset(self) -> None:
        if self.rss:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # VmHWM := current RSS
        else:
            tracemalloc.reset_peak()

    def mib(self) -> float:
        if not self.rss:
            return tracemalloc.get_traced_memory()[1] / 2**20
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return 0.0


def _warm_up(reader: str) -> None:
    """Read each seed once unmutated, so lazy imports happen before the audit hook watches for code."""
    from tests.fuzz.mutations import case_seeds, write_tree
    from tests.fuzz.oracle import run_reader
    from tests.fuzz.seeds import RUNS, run_files

    tmp = Path(tempfile.mkdtemp(prefix="gpudiag-fuzz-warm-"))
    try:
        if reader == "run_folder":
            for run in RUNS:
                write_tree(tmp / run, run_files(run))
                run_reader(reader, tmp / run)
        else:
            for n, s in enumerate(case_seeds(reader)):
                p = tmp / f"seed{n}{s.suffix}"
                p.write_bytes(s.data)
                run_reader(reader, p)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _save(root: Path, reader: str, kind: str, index: int, path: str) -> str:
    dest = root / f"{reader}-{kind}-{index}{''.join(Path(path).suffixes)}"
    root.mkdir(parents=True, exist_ok=True)
    if Path(path).is_dir():
        shutil.copytree(path, dest, dirs_exist_ok=True)
    else:
        shutil.copyfile(path, dest)
    return str(dest)


def _emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# --- the parent: workers, restarts, the table ------------------------------------------------------------


def run_reader_cases(reader: str, args, results: list, rss: dict) -> None:
    """Run one reader's worker to the end, restarting it after a case that killed or froze it."""
    start_at: dict[str, int] = {}
    budget = (args.cell_seconds * len(kinds_of(reader)) if args.cell_seconds else 3600) + 120
    while True:
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            reader,
            "--count",
            str(args.count),
            "--seed",
            str(args.seed),
            "--limit-s",
            str(args.limit_s),
            "--start-at",
            json.dumps(start_at),
        ]
        cmd += ["--cell-seconds", str(args.cell_seconds)] if args.cell_seconds else []
        cmd += ["--save", args.save] if args.save else []
        cmd += ["--full"] if args.full else []
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=REPO)
        current, done, t0 = None, False, time.monotonic()
        for line in proc.stdout:
            rec = json.loads(line)
            if rec["event"] == "start":
                current = rec
            elif rec["event"] == "case":
                results.append(rec)
                current = None
                start_at[rec["kind"]] = rec["index"] + 1
            elif rec["event"] == "done":
                rss[reader] = rec["maxrss_mib"]
                done = True
            if time.monotonic() - t0 > budget:
                proc.kill()
                break
        proc.wait()
        if done or current is None:
            return
        # the worker died or froze inside a case: that case is a hang (or a crash of the process)
        results.append(
            {
                "event": "case",
                "reader": reader,
                "kind": current["kind"],
                "index": current["index"],
                "seed": "?",
                "outcome": "hang" if proc.returncode in (-9, None) else "uncaught",
                "detail": f"worker exited {proc.returncode} inside the case",
                "seconds": None,
                "peak_mib": None,
            }
        )
        start_at[current["kind"]] = current["index"] + 1


def table(results: list, readers) -> str:
    cells: dict[tuple, dict] = defaultdict(lambda: defaultdict(int))
    peak: dict[tuple, float] = defaultdict(float)
    order = {r: i for i, r in enumerate(readers)}
    for r in results:
        key = (r["reader"], r["kind"])
        c = cells[key]
        c["count"] += 1
        c[r["outcome"]] += 1
        peak[key] = max(peak[key], r.get("peak_mib") or 0.0)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    from tests.fuzz.mutations import KINDS

    for key in sorted(cells, key=lambda k: (order.get(k[0], 99), KINDS.index(k[1]) if k[1] in KINDS else 99)):
        c = cells[key]
        uncaught = c["uncaught"] + c["bad_result"] + c["unclear_error"] + c["broken_invariant"]
        lines.append(
            f"| {key[0]} | {key[1]} | {c['count']} | {c['clear_error']} | {c['partial']}/{c['accepted']} | "
            f"{uncaught} | {c['hang']} | {c['code_execution']} | {peak[key]:.1f} |"
        )
    total = defaultdict(int)
    for c in cells.values():
        for k, v in c.items():
            total[k] += v
    lines.append(
        f"| **all** | | {total['count']} | {total['clear_error']} | {total['partial']}/{total['accepted']} | "
        f"{total['uncaught'] + total['bad_result'] + total['unclear_error'] + total['broken_invariant']} | "
        f"{total['hang']} | "
        f"{total['code_execution']} | {max(peak.values(), default=0):.1f} |"
    )
    return "\n".join(lines)


def replay(spec: str, args) -> int:
    """Rebuild one case (reader:kind:index), run it with the traceback shown, keep its input."""
    from tests.fuzz.mutations import RandomChooser, build_case
    from tests.fuzz.oracle import _reader

    reader, kind, index = spec.split(":")
    dest = Path(tempfile.mkdtemp(prefix="gpudiag-replay-")) / "case"
    path, seed_name = build_case(
        reader, kind, RandomChooser(case_rng(args.seed, reader, kind, int(index))), dest, full=args.full
    )
    print(f"case {spec} from seed {seed_name!r}: {path}", file=sys.stderr)
    _reader(reader)(path)  # a failure raises here, with its traceback
    print("read without an uncaught exception", file=sys.stderr)
    return 0


# --- atheris: coverage-guided byte mutations on the same seeds -----------------------------------------------


def atheris_worker(args, argv) -> None:
    import atheris

    from tests.fuzz.mutations import RandomChooser, case_seeds, kinds_for, mutate

    with atheris.instrument_imports(include=["parsers", "diagnose.ingest.loading"]):
        import diagnose.ingest.loading  # noqa: F401
        import parsers.events  # noqa: E401,F401
        import parsers.memory_stats
        import parsers.ncu_csv
        import parsers.ncu_rep
        import parsers.nvml
        import parsers.run_folder
        import parsers.snapshot  # noqa: E401,F401
    from tests.fuzz.oracle import run_reader

    reader = args.atheris_worker
    seeds = case_seeds(reader)
    tmp = Path(tempfile.mkdtemp(prefix="gpudiag-atheris-"))
    suffix = seeds[0].suffix
    stats: dict[str, int] = defaultdict(int)
    state = {"peak": 0.0, "n": 0}
    out_path = Path(args.stats)
    peak = PeakMemory()

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rnd = random.Random(seed)
        if rnd.random() < 0.5 or not data:
            base = rnd.choice(seeds)
            kind = rnd.choice(kinds_for(base))
            from tests.fuzz.seeds import Seed

            s = Seed(
                base.name, data or base.data, base.fmt, base.suffix, gz=data[:2] == b"\x1f\x8b" if data else base.gz
            )
            try:
                return mutate(s, kind, RandomChooser(rnd))[:max_size]
            except Exception:  # a mutation of an already mutated input may not apply: fall back to libFuzzer's
                pass
        return atheris.Mutate(data, max_size)

    def one(data: bytes) -> None:
        p = tmp / ("fake_atheris" + suffix)
        p.write_bytes(data)
        peak.reset()
        o = run_reader(reader, p, limit_s=args.limit_s)
        state["peak"] = max(state["peak"], peak.mib())
        stats[o.kind] += 1
        state["n"] += 1
        if not o.ok and args.save:
            d = Path(args.save)
            d.mkdir(parents=True, exist_ok=True)
            (d / f"atheris-{reader}-{state['n']}{suffix}").write_bytes(data)
            (d / f"atheris-{reader}-{state['n']}.txt").write_text(f"{o.kind}: {o.detail}\n")
        if state["n"] % 25 == 0 or not o.ok:  # libFuzzer ends the process without notice: keep counts current
            out_path.write_text(json.dumps({"stats": stats, "peak_mib": state["peak"]}))

    corpus = tmp / "corpus"
    corpus.mkdir()
    for n, s in enumerate(seeds):
        (corpus / f"seed{n}").write_bytes(s.data)
    atheris.Setup([sys.argv[0], *argv, str(corpus)], one, custom_mutator=custom_mutator)
    atheris.Fuzz()


def run_atheris(reader: str, seconds: int, args, results: list) -> None:
    stats = Path(tempfile.mkdtemp(prefix="gpudiag-atheris-stats-")) / "stats.json"
    cmd = [
        sys.executable,
        __file__,
        "--atheris-worker",
        reader,
        "--stats",
        str(stats),
        "--limit-s",
        str(args.limit_s),
        "--",
        f"-max_total_time={seconds}",
        "-max_len=300000",
        "-rss_limit_mb=4096",
        "-timeout=60",
    ]
    cmd[-5:-5] = ["--save", args.save] if args.save else []
    subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=seconds + 300)
    if not stats.exists():
        results.append(
            {
                "reader": reader,
                "kind": "libfuzzer",
                "outcome": "uncaught",
                "peak_mib": None,
                "detail": "the atheris worker wrote no statistics",
            }
        )
        return
    data = json.loads(stats.read_text())
    for kind, n in data["stats"].items():
        results.extend(
            {"reader": reader, "kind": "libfuzzer", "outcome": kind, "peak_mib": data["peak_mib"]} for _ in range(n)
        )


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=None, help="total wall-clock budget, split over reader x kind")
    ap.add_argument("--count", type=int, default=1000, help="most cases per reader x kind (default 1000)")
    ap.add_argument("--readers", default=",".join(READERS), help="comma-separated subset of " + ",".join(READERS))
    ap.add_argument("--seed", type=int, default=0, help="campaign seed: case i of a cell is the same for a seed")
    ap.add_argument("--limit-s", type=float, default=10.0, help="time limit of one input (a hang past it)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--full", action="store_true", help="also mutate the whole (large) fixture files")
    ap.add_argument("--json", dest="json_out", default=None, help="write every case's result and the table here")
    ap.add_argument("--save", default=None, help="copy every failing input into this folder")
    ap.add_argument(
        "--atheris",
        type=int,
        default=0,
        metavar="SECONDS",
        help="after the loop, this many seconds of atheris (libFuzzer) per reader, if installed",
    )
    ap.add_argument("--replay", default=None, metavar="READER:KIND:INDEX")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--start-at", help=argparse.SUPPRESS)
    ap.add_argument("--cell-seconds", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--atheris-worker", help=argparse.SUPPRESS)
    ap.add_argument("--stats", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if args.atheris_worker:
        atheris_worker(args, extra)
        return 0
    if args.replay:
        return replay(args.replay, args)
    readers = [r for r in args.readers.split(",") if r]
    unknown = set(readers) - set(READERS)
    if unknown:
        ap.error(f"unknown readers: {', '.join(sorted(unknown))}")
    if args.seconds:
        cells = sum(len(kinds_of(r)) for r in readers)
        loop_seconds = args.seconds - args.atheris * len(set(readers) - {"run_folder"}) / max(1, args.workers)
        args.cell_seconds = max(1.0, loop_seconds * args.workers / cells - 0.5)
    results: list = []
    rss: dict[str, float] = {}
    started = time.time()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        list(pool.map(lambda r: run_reader_cases(r, args, results, rss), readers))
        if args.atheris:
            try:
                import atheris  # noqa: F401
            except ImportError:
                print("atheris is not installed: skipping the libFuzzer stage", file=sys.stderr)
            else:
                byte_readers = [r for r in readers if r != "run_folder"]  # a folder is not one byte string
                list(pool.map(lambda r: run_atheris(r, args.atheris, args, results), byte_readers))
    text = table(results, readers)
    elapsed = time.time() - started
    print(text)
    print(
        f"\n{len(results)} inputs in {elapsed:.0f} s; peak RSS per reader worker (MiB): "
        + ", ".join(f"{r} {v:.0f}" for r, v in sorted(rss.items()))
    )
    failures = [r for r in results if r["outcome"] not in ("clear_error", "partial", "accepted")]
    for f in failures[:40]:
        print(
            f"FAIL {f['reader']}:{f['kind']}:{f.get('index', '?')} {f['outcome']}: {f.get('detail', '')[:200]}",
            file=sys.stderr,
        )
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps(
                {
                    "command": " ".join([Path(sys.executable).name, "tools/fuzz_campaign.py", *sys.argv[1:]]),
                    "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                    "seconds": round(elapsed, 1),
                    "seed": args.seed,
                    "table": text,
                    "peak_rss_mib": rss,
                    "results": results,
                },
                indent=1,
            )
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
