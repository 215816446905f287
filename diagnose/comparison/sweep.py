"""`gpudiag sweep`: run a training script once per grid combination and find the memory/throughput trade-off.

Each combination runs under ``gpudiag profile`` (light mode) into its own run folder of the
sweep folder; peak memory comes from the run folder's memory stats and samples/s from its step
times and the samples-per-step contract (docs/sweep.md). A combination that fails (OOM, crash,
nonzero exit, timeout) is recorded with its exit code and the tail of its stderr, and the sweep
goes on. The Pareto front (least peak memory for the most samples/s) marks the configurations
worth choosing between.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import operator
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from diagnose.launch.supervisor import end_process_group
from parsers.errors import InputError

SCHEMA = "gpudiag.sweep/1"
SAMPLES_LINE = re.compile(r"gpudiag:\s*samples_per_step\s*=\s*([0-9.eE+-]+)")
STDERR_TAIL_LINES = 25
# light mode without the profiler trace window and allocator history: step times and memory stats
# only, so the sweep's timings are not slowed by tracing (docs/sweep.md)
DEFAULT_PROFILE_ARGS = ("--trace-steps", "0", "--history-entries", "0", "--memory-stats-interval-ms", "0")
OOM_PATTERNS = re.compile(r"out of memory|OutOfMemoryError|RESOURCE_EXHAUSTED|CUBLAS_STATUS_ALLOC_FAILED", re.I)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ---- the grid --------------------------------------------------------------------------------


def parse_grid(options: list[str] | tuple[str, ...]) -> list[tuple[str, list[str]]]:
    """``["accum=1,2,4", "precision=fp32,bf16"]`` → ``[("accum", ["1","2","4"]), ("precision", [...])]``."""
    grid: list[tuple[str, list[str]]] = []
    for text in options:
        name, sep, values = text.partition("=")
        name = name.strip()
        if not sep or not _NAME.match(name):
            raise InputError(None, f"--grid {text!r}: expected NAME=V1,V2,... with NAME a letter/underscore word")
        vals = [v.strip() for v in values.split(",")]
        if not values.strip() or any(v == "" for v in vals):
            raise InputError(None, f"--grid {text!r}: empty value")
        if len(set(vals)) != len(vals):
            raise InputError(None, f"--grid {text!r}: a value is repeated")
        if name in {n for n, _ in grid}:
            raise InputError(None, f"--grid {name}: given twice")
        grid.append((name, vals))
    if not grid:
        raise InputError(None, "no --grid given: e.g. --grid accum=1,2,4,8")
    return grid


def expand_grid(grid: list[tuple[str, list[str]]]) -> list[dict[str, str]]:
    """Every combination, the first grid varying slowest (as the user listed them)."""
    names = [n for n, _ in grid]
    return [dict(zip(names, values)) for values in itertools.product(*(v for _, v in grid))]


def fill_command(template: list[str], combo: dict[str, str]) -> list[str]:
    """Replace ``{name}`` of each grid name in every argument; other braces are left alone."""
    out = []
    for arg in template:
        for name, value in combo.items():
            arg = arg.replace("{" + name + "}", value)
        out.append(arg)
    return out


def check_template(template: list[str], grid: list[tuple[str, list[str]]]) -> list[str]:
    """Warnings for grid names the command never uses (each value then runs the same command)."""
    if not template:
        raise InputError(None, "no command to sweep: gpudiag sweep --grid a=1,2 -- python train.py --a {a}")
    joined = " ".join(template)
    return [
        f"grid {name} is not used in the command ({{{name}}} appears nowhere): its runs are repeats"
        for name, _ in grid
        if "{" + name + "}" not in joined
    ]


def label_of(index: int, combo: dict[str, str]) -> str:
    """A folder-safe name: ``03-accum=4-precision=bf16``."""
    parts = [f"{k}={re.sub(r'[^A-Za-z0-9_.+-]', '_', v)}" for k, v in combo.items()]
    return "-".join([f"{index:02d}", *parts])


# ---- samples per step ------------------------------------------------------------------------

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def eval_samples_expr(expr: str, combo: dict[str, str]) -> float:
    """``--samples-per-step`` after ``{name}`` substitution: a number or + - * / // of numbers."""
    text = fill_command([expr], combo)[0]
    try:
        return float(_eval(ast.parse(text, mode="eval").body))
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError) as e:
        raise InputError(None, f"--samples-per-step {expr!r} → {text!r}: not arithmetic on numbers ({e})") from None


def _eval(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ValueError(f"unsupported {type(node).__name__}")


def samples_per_step_from_output(text: str) -> float | None:
    """The last ``gpudiag: samples_per_step=N`` line the script printed, or None."""
    found = SAMPLES_LINE.findall(text)
    if not found:
        return None
    try:
        value = float(found[-1])
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


# ---- running one combination -----------------------------------------------------------------


@dataclass
class Attempt:
    """How one command ended: exit code (None = timed out), and where its output went."""

    exit_code: int | None
    stdout_path: Path
    stderr_path: Path
    wall_s: float


# A runner takes (command, run_dir, stdout_path, stderr_path, timeout_s) and returns an Attempt.
Runner = Callable[[list[str], Path, Path, Path, "float | None"], Attempt]


def profile_runner(profile_args: tuple[str, ...] = DEFAULT_PROFILE_ARGS) -> Runner:
    """The default runner: ``python -m diagnose profile -o RUN_DIR -q ARGS -- COMMAND`` as a subprocess.

    A subprocess rather than ``diagnose.profile()`` in this process: the script's stdout/stderr must be
    captured (the samples-per-step line, the failure reason) and a crash or hang of one combination must
    not take the sweep with it. It is the same code path (the CLI calls ``run_profiled``)."""

    def run(command, run_dir, stdout_path, stderr_path, timeout_s):
        argv = [sys.executable, "-m", "diagnose", "profile", "-o", str(run_dir), "-q", *profile_args, "--", *command]
        return run_logged(argv, stdout_path, stderr_path, timeout_s, env=_env_with_gpudiag())

    return run


def plain_runner(command, run_dir, stdout_path, stderr_path, timeout_s) -> Attempt:
    """Runs the command without gpudiag (no run folder): for a quick check of the grid and the command."""
    return run_logged(list(command), stdout_path, stderr_path, timeout_s)


def run_logged(
    argv: list[str], stdout_path: Path, stderr_path: Path, timeout_s: float | None, env: dict | None = None
) -> Attempt:
    """Run ``argv`` with stdout/stderr to files; on timeout kill its whole process group."""
    stdout_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        try:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )
        except OSError as e:
            err.write(f"cannot start {argv[0]}: {e}\n".encode())
            return Attempt(127, stdout_path, stderr_path, 0.0)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code = None
        except KeyboardInterrupt:
            _kill_group(proc)
            raise
    return Attempt(code, stdout_path, stderr_path, time.monotonic() - t0)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the run's process group, SIGKILL it when the run has not ended 10 s later."""
    end_process_group(proc.pid, ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)), ended=lambda: proc.poll() is not None)


def _env_with_gpudiag() -> dict:
    """This environment, plus gpudiag's source root on PYTHONPATH when it is not pip-installed."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    if "site-packages" not in root and "dist-packages" not in root:
        parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if root not in parts:
            env["PYTHONPATH"] = os.pathsep.join([root, *parts])
    return env


# ---- measuring one run folder ----------------------------------------------------------------

PEAK_RESERVED_KEYS = ("peak_reserved_bytes", "memory_peak_reserved_bytes")
PEAK_ALLOCATED_KEYS = ("peak_allocated_bytes", "memory_peak_allocated_bytes")
_STATS_RESERVED = re.compile(r"reserved_bytes\.all\.peak|peak_reserved|reserved.*peak")
_STATS_ALLOCATED = re.compile(r"allocated_bytes\.all\.peak|peak_allocated|allocated.*peak|peak_bytes_in_use")


def measure_run(run_dir: Path) -> dict:
    """Step time, peak memory and step count of one finished run folder (diagnose.load + analyze)."""
    from diagnose.analysis import analyze
    from diagnose.ingest.loading import load

    profile = load(run_dir)
    summary = analyze(profile).summary
    out = {
        "step_count": int(summary.get("step_count", 0) or 0),
        "step_time_median_ms": float(summary.get("step_time_median_ms", float("nan"))),
        "peak_reserved_bytes": _first(summary, PEAK_RESERVED_KEYS),
        "peak_allocated_bytes": _first(summary, PEAK_ALLOCATED_KEYS),
        "warnings": list(profile.warnings),
    }
    if not math.isfinite(out["peak_reserved_bytes"]):
        out["peak_reserved_bytes"] = _stats_peak(profile, _STATS_RESERVED)
    if not math.isfinite(out["peak_allocated_bytes"]):
        out["peak_allocated_bytes"] = _stats_peak(profile, _STATS_ALLOCATED)
    return out


def _first(summary: dict, keys) -> float:
    for k in keys:
        v = summary.get(k)
        if v is not None and math.isfinite(float(v)):
            return float(v)
    return float("nan")


def _stats_peak(profile, pattern: re.Pattern) -> float:
    """The largest value of a peak column of the per-step memory stats of any rank (NaN when absent)."""
    best = float("nan")
    for frame in profile.memory_stats.values():
        for column in frame.columns:
            if pattern.search(str(column)):
                values = pd.to_numeric(frame[column], errors="coerce").dropna()
                if len(values):
                    best = float(values.max()) if not math.isfinite(best) else max(best, float(values.max()))
    return best


# ---- the sweep -------------------------------------------------------------------------------

ROW_COLUMNS = [
    "index",
    "label",
    "status",
    "exit_code",
    "reason",
    "samples_per_step",
    "step_count",
    "step_time_median_ms",
    "steps_per_s",
    "samples_per_s",
    "peak_reserved_bytes",
    "peak_allocated_bytes",
    "pareto",
    "wall_s",
    "run_dir",
    "command",
]


@dataclass
class Sweep:
    """A finished sweep: one row per combination (``rows``, see ROW_COLUMNS) plus what produced it."""

    folder: Path
    grid: list[tuple[str, list[str]]]
    template: list[str]
    rows: pd.DataFrame
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> pd.DataFrame:
        return self.rows[self.rows["status"] == "ok"]

    def to_dict(self) -> dict:
        from diagnose.findings import jsonable

        return {
            "schema": SCHEMA,
            "folder": str(self.folder),
            "command": list(self.template),
            "grid": [{"name": n, "values": v} for n, v in self.grid],
            "rows": [jsonable(r) for r in self.rows.to_dict(orient="records")],
            "warnings": list(self.warnings),
        }


def run_sweep(
    template: list[str],
    grid: list[tuple[str, list[str]]],
    folder,
    *,
    runner: Runner | None = None,
    samples_per_step: str | None = None,
    timeout_s: float | None = None,
    progress: Callable[[str], None] | None = None,
    measure: Callable[[Path], dict] | None = measure_run,
) -> Sweep:
    """Run ``template`` once per combination of ``grid`` into ``folder``; write sweep.json/.csv; return the Sweep.

    ``measure=None`` skips reading run folders (for ``plain_runner``): a combination is then ok when it exits 0."""
    folder = Path(folder)
    warnings = check_template(template, grid)
    combos = expand_grid(grid)
    if samples_per_step is not None:
        for combo in combos:  # a bad expression is an error before anything runs
            eval_samples_expr(samples_per_step, combo)
    folder.mkdir(parents=True, exist_ok=True)
    runner = runner or profile_runner()
    say = progress or (lambda _m: None)
    rows = []
    for index, combo in enumerate(combos):
        label = label_of(index, combo)
        command = fill_command(template, combo)
        run_dir = folder / label
        say(f"[{index + 1}/{len(combos)}] {label}: {' '.join(command)}")
        attempt = runner(
            command,
            run_dir,
            folder / "logs" / f"{label}.stdout.log",
            folder / "logs" / f"{label}.stderr.log",
            timeout_s,
        )
        row = _row(index, label, combo, command, run_dir, attempt, samples_per_step, timeout_s, measure)
        say(
            f"    {row['status']}"
            + (
                f": {row['reason'].splitlines()[-1]}"
                if row["reason"]
                else f", {row['samples_per_s']:.4g} samples/s"
                if math.isfinite(row["samples_per_s"])
                else ""
            )
        )
        rows.append(row)
    table = pd.DataFrame(rows)
    ordered = ["index", "label", *[n for n, _ in grid], *[c for c in ROW_COLUMNS if c not in ("index", "label")]]
    table["pareto"] = pareto_front(table)
    table = table[ordered]
    sweep = Sweep(folder=folder, grid=grid, template=list(template), rows=table, warnings=warnings)
    write_tables(sweep)
    return sweep


def _row(index, label, combo, command, run_dir, attempt: Attempt, samples_expr, timeout_s, measure) -> dict:
    stdout = _read(attempt.stdout_path)
    stderr = _read(attempt.stderr_path)
    row = {
        "index": index,
        "label": label,
        **combo,
        "status": "ok",
        "exit_code": attempt.exit_code,
        "reason": "",
        "samples_per_step": float("nan"),
        "step_count": 0,
        "step_time_median_ms": float("nan"),
        "steps_per_s": float("nan"),
        "samples_per_s": float("nan"),
        "peak_reserved_bytes": float("nan"),
        "peak_allocated_bytes": float("nan"),
        "wall_s": attempt.wall_s,
        "run_dir": str(run_dir),
        "command": " ".join(command),
    }
    if attempt.exit_code is None:
        row.update(status="timeout", reason=f"killed after {timeout_s:g} s\n" + tail(stderr))
        return row
    if attempt.exit_code != 0:
        row.update(
            status="oom" if OOM_PATTERNS.search(stderr) else "failed",
            reason=f"exit code {attempt.exit_code}\n" + tail(stderr),
        )
        return row
    sps = (
        eval_samples_expr(samples_expr, combo)
        if samples_expr is not None
        else samples_per_step_from_output(stdout + "\n" + stderr)
    )
    if measure is None:
        row["samples_per_step"] = float("nan") if sps is None else sps
        return row
    try:
        measured = measure(run_dir)
    except InputError as e:
        row.update(status="failed", reason=f"run folder unreadable: {e}")
        return row
    step_ms = measured["step_time_median_ms"]
    row.update(
        step_count=measured["step_count"],
        step_time_median_ms=step_ms,
        peak_reserved_bytes=measured["peak_reserved_bytes"],
        peak_allocated_bytes=measured["peak_allocated_bytes"],
    )
    if math.isfinite(step_ms) and step_ms > 0:
        row["steps_per_s"] = 1000.0 / step_ms
        if sps is not None:
            row["samples_per_step"] = sps
            row["samples_per_s"] = sps * 1000.0 / step_ms
    if not measured["step_count"]:
        row.update(
            status="no_steps",
            reason="the script exited 0 but no training step was measured "
            "(no optimizer.step(), no backward() and no diagnose.step() call?)",
        )
    elif sps is None:
        row["reason"] = (
            "samples per step unknown: print 'gpudiag: samples_per_step=N' once, "
            "or pass --samples-per-step; steps_per_s is given"
        )
    return row


def tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    kept = [line for line in text.rstrip().splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def _read(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def pareto_front(table: pd.DataFrame, memory: str = "peak_reserved_bytes", speed: str = "samples_per_s") -> pd.Series:
    """True for ok rows no other ok row beats: at most as much memory and at least as fast, better in one.

    Memory is peak reserved (what must fit on the GPU); speed is samples/s, or steps/s when no row knows
    its samples per step."""
    if not len(table):
        return pd.Series([], dtype=bool)
    if speed not in table or not np.isfinite(pd.to_numeric(table[speed], errors="coerce")).any():
        speed = "steps_per_s"
    mem = pd.to_numeric(table.get(memory), errors="coerce").to_numpy(dtype=float)
    spd = pd.to_numeric(table.get(speed), errors="coerce").to_numpy(dtype=float)
    ok = (table["status"] == "ok").to_numpy() & np.isfinite(mem) & np.isfinite(spd)
    front = np.zeros(len(table), dtype=bool)
    for i in np.flatnonzero(ok):
        others = ok.copy()
        others[i] = False
        dominated = others & (mem <= mem[i]) & (spd >= spd[i]) & ((mem < mem[i]) | (spd > spd[i]))
        front[i] = not dominated.any()
    return pd.Series(front, index=table.index)


def write_tables(sweep: Sweep) -> tuple[Path, Path]:
    """sweep.csv and sweep.json in the sweep folder (strict JSON: non-finite numbers are null)."""
    from diagnose.outputs.atomic_write import atomic_write_text

    csv_path, json_path = sweep.folder / "sweep.csv", sweep.folder / "sweep.json"
    atomic_write_text(csv_path, sweep.rows.to_csv(index=False))
    atomic_write_text(json_path, json.dumps(sweep.to_dict(), indent=2, allow_nan=False, default=str) + "\n")
    return csv_path, json_path
