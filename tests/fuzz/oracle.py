"""The fuzzing property, as one function: run a reader on a file and say what happened.

Every input must either load into the typed tables docs/contracts.md promises, or raise
:class:`parsers.errors.InputError` whose message names the file. Anything else is a failure:
another exception, a result that breaks its schema, running past the time limit, or code run
on the reader's behalf (seen by an audit hook: os.system, subprocess, exec of a code object that
is not a module's, the stock unpickler's find_class). An input that loads into a Profile (the
``load`` and ``run_folder`` readers) is also analysed, and its analysis must hold the report
invariants (diagnose/checks/report_invariants.py, docs/report-invariants.md): else ``broken_invariant``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd

from parsers.errors import InputError
from parsers.schema import BOOL, CAT, F64, I64, STR, Schema

# outcome kinds: the first three are fine, the rest are findings
CLEAR_ERROR, PARTIAL, ACCEPTED = "clear_error", "partial", "accepted"
UNCLEAR_ERROR, BAD_RESULT, UNCAUGHT, HANG, CODE_EXECUTION, BROKEN_INVARIANT = (
    "unclear_error",
    "bad_result",
    "uncaught",
    "hang",
    "code_execution",
    "broken_invariant",
)
# readers whose result is a Profile: the oracle analyses it and checks the report invariants
ANALYSED_READERS = ("run_folder", "load")
OK_KINDS = (CLEAR_ERROR, PARTIAL, ACCEPTED)


@dataclass
class Outcome:
    kind: str
    detail: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.kind in OK_KINDS


class Hang(BaseException):
    """Raised in the reader by the timer (a BaseException, so a reader's ``except Exception`` lets it through)."""


@contextmanager
def time_limit(seconds: float):
    """Interrupt the block with :class:`Hang` after ``seconds`` (main thread only; elsewhere no limit)."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum, frame):
        raise Hang(f"still running after {seconds:g} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# --- code execution --------------------------------------------------------------------------------------

_WATCHED = (
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "subprocess.Popen",
    "pty.spawn",
    "pickle.find_class",
    "ctypes.dlopen",
    "socket.connect",
    "webbrowser.open",
)
_audit = {"armed": False, "seen": []}


# library code that calls exec() on source it generated itself (an import, a dataclass's __init__)
_EXEC_CALLERS = ("<frozen importlib", "dataclasses.py", "collections/__init__.py", "typing.py", "enum.py")


# the trace reader's helper process, forked for any trace over one piece to share the parse (not input's doing)
_FORK_CALLERS = ("parsers/piece_helper.py",)
# the trace reader looks up glibc's malloc_trim in the process itself (ctypes.CDLL(None)) once, when first imported:
# no library is named by the input, so it is no code execution on the input's behalf
_DLOPEN_SELF_CALLERS = ("parsers/trace.py",)


def _hook(event: str, args) -> None:
    if not _audit["armed"]:
        return
    if event == "os.fork" and _called_from(_FORK_CALLERS):
        return
    if event == "ctypes.dlopen" and args and args[0] is None and _called_from(_DLOPEN_SELF_CALLERS):
        return
    if event.startswith(_WATCHED) or (event == "exec" and args and not _legitimate_exec(args[0])):
        _audit["seen"].append(f"{event} {str(args)[:120]}")


def _called_from(files: tuple[str, ...]) -> bool:
    frame = sys._getframe(2)
    for _ in range(40):
        if frame is None:
            return False
        if frame.f_code.co_filename.endswith(files):
            return True
        frame = frame.f_back
    return False


def _legitimate_exec(code) -> bool:
    """True for a module's code being imported or code that the standard library generates for itself."""
    name = getattr(code, "co_filename", "")
    if name.endswith(".py") or name.startswith("<frozen"):
        return True
    frame = sys._getframe(2)
    for _ in range(40):
        if frame is None:
            return False
        if frame.f_code.co_filename.endswith(_EXEC_CALLERS) or frame.f_code.co_filename.startswith(_EXEC_CALLERS[0]):
            return True
        frame = frame.f_back
    return False


def install_audit_hook() -> None:
    """Add the (process-wide, never removed) audit hook once; it only records while a reader runs."""
    if not _audit.get("installed"):
        sys.addaudithook(_hook)
        _audit["installed"] = True


@contextmanager
def watch_code_execution():
    """Collect the watched audit events raised inside the block into the yielded list."""
    install_audit_hook()
    _audit["seen"] = seen = []
    _audit["armed"] = True
    try:
        yield seen
    finally:
        _audit["armed"] = False


# --- readers ---------------------------------------------------------------------------------------------


def _read_trace_and_collectives(path):
    from parsers.trace import read_trace
    from parsers.trace_collectives import read_collectives

    return read_trace(path), read_collectives(path)


def _reader(name: str):
    if name == "ncu_csv":
        from parsers.ncu_csv import read_ncu_csv_tables

        return read_ncu_csv_tables
    if name == "ncu_rep":
        from parsers.ncu_rep import read_ncu_rep_tables

        return read_ncu_rep_tables
    if name == "trace":
        return _read_trace_and_collectives
    if name in ("snapshot_pickle", "snapshot_json"):
        from parsers.snapshot import read_snapshot

        return read_snapshot
    if name == "memory_stats":
        from parsers.memory_stats import read_memory_stats

        return read_memory_stats
    if name == "events":
        from parsers.events import read_event_tables

        return read_event_tables
    if name == "nvml":
        from parsers.nvml import read_nvml

        return read_nvml
    if name == "manifest":
        from parsers.run_folder import read_manifest

        return read_manifest
    if name in ("run_folder", "load"):
        import diagnose

        return diagnose.load
    raise KeyError(name)


def run_reader(reader: str, path, limit_s: float | None = 20.0) -> Outcome:
    """Run one reader on ``path`` and classify what happened (see the module docstring)."""
    fn = _reader(reader)
    path = os.fspath(path)
    t0 = time.perf_counter()
    result, error, hung, where = None, None, None, ""
    with warnings.catch_warnings(), watch_code_execution() as ran:
        warnings.simplefilter("ignore")
        try:
            with time_limit(limit_s):
                result = fn(path)
        except Hang as e:
            hung = str(e)
            where = _where(e)
        except InputError as e:
            error = e
        except Exception as e:  # noqa: BLE001 - the point is to classify every exception
            seconds = time.perf_counter() - t0
            return Outcome(UNCAUGHT, f"{type(e).__name__}: {str(e)[:300]} at {_where(e)}", seconds)
    seconds = time.perf_counter() - t0
    if ran:
        return Outcome(CODE_EXECUTION, "; ".join(ran[:3]), seconds)
    if hung is not None:
        return Outcome(HANG, f"{hung} at {where}", seconds)
    if error is not None:
        if path not in str(error):
            return Outcome(UNCLEAR_ERROR, f"InputError does not name {path}: {error}", seconds)
        return Outcome(CLEAR_ERROR, str(error)[:300], seconds)
    problems = check_result(reader, result)
    if problems:
        return Outcome(BAD_RESULT, "; ".join(problems[:4]), seconds)
    if reader in ANALYSED_READERS:
        failed = analyse_and_check(result, limit_s)
        if failed is not None:
            return Outcome(failed.kind, failed.detail, seconds + failed.seconds)
    return Outcome(PARTIAL if _has_warnings(reader, result) else ACCEPTED, "", seconds)


def analyse_and_check(profile, limit_s: float | None = 20.0) -> Outcome | None:
    """Analyse a loaded Profile and check the report invariants; None when it holds them, else the failure
    (an exception or a hang in the analysis, code run on its behalf, or the broken invariants)."""
    import diagnose
    from diagnose.checks.report_invariants import check_analysis

    t0 = time.perf_counter()
    violations, hung = [], None
    with warnings.catch_warnings(), watch_code_execution() as ran:
        warnings.simplefilter("ignore")
        try:
            with time_limit(limit_s):
                violations = check_analysis(diagnose.analyze(profile))
        except Hang as e:
            hung = f"analyze: {e} at {_where(e)}"
        except Exception as e:  # noqa: BLE001 - an analysis must not raise on a Profile the loader accepted
            return Outcome(UNCAUGHT, f"analyze: {type(e).__name__}: {str(e)[:300]} at {_where(e)}", 0.0)
    seconds = time.perf_counter() - t0
    if ran:
        return Outcome(CODE_EXECUTION, "; ".join(ran[:3]), seconds)
    if hung is not None:
        return Outcome(HANG, hung, seconds)
    if violations:
        return Outcome(BROKEN_INVARIANT, "; ".join(str(v)[:300] for v in violations[:4]), seconds)
    return None


def _where(e: BaseException) -> str:
    """The innermost frame of gpudiag's own code (else the innermost frame) of an exception."""
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if "/parsers/" in f.filename or "/diagnose/" in f.filename] or frames
    if not ours:
        return "?"
    f = ours[-1]
    return f"{os.path.relpath(f.filename)}:{f.lineno} ({f.name})"


def _has_warnings(reader: str, result) -> bool:
    if reader == "trace":
        return bool(result[0].warnings)
    if reader in ("snapshot_pickle", "snapshot_json"):
        return bool(result.warnings)
    if reader == "events":
        return bool(result[0].attrs.get("warnings"))
    if reader == "memory_stats":
        return bool(result.attrs.get("warnings"))
    if reader in ("run_folder", "load"):
        return bool(result.warnings) or any(bool(t.warnings) for t in result.traces.values())
    return False


# --- what a result must look like -----------------------------------------------------------------------

_DTYPES = {F64: "float64", I64: "int64", BOOL: "bool", CAT: "category", STR: "object"}


def check_frame(df, schema: Schema, where: str) -> list[str]:
    """Problems of ``df`` against its declared schema: not a frame, a missing column, a wrong dtype."""
    if not isinstance(df, pd.DataFrame):
        return [f"{where}: expected a DataFrame, got {type(df).__name__}"]
    out = []
    for col, dtype in schema.columns.items():
        if col not in df.columns:
            out.append(f"{where}: missing column {col}")
        elif str(df[col].dtype) != _DTYPES[dtype]:
            out.append(f"{where}.{col}: dtype {df[col].dtype}, declared {dtype}")
    if list(df.columns[: len(schema.columns)]) != list(schema.columns) and not out:
        out.append(f"{where}: declared columns not first and in order")
    return out


def _index_ok(df: pd.DataFrame, col: str, target_len: int, where: str) -> list[str]:
    v = df[col].to_numpy()
    bad = (v < -1) | (v >= target_len)
    return [f"{where}.{col}: {int(bad.sum())} index values outside [-1, {target_len})"] if bad.any() else []


def check_trace(t) -> list[str]:
    from parsers import trace as T

    out = []
    tables = {
        "gpu": T.GPU_SCHEMA,
        "runtime": T.RUNTIME_SCHEMA,
        "cuda_sync": T.CUDA_SYNC_SCHEMA,
        "cpu_ops": T.CPU_OP_SCHEMA,
        "python": T.PYTHON_SCHEMA,
        "annotations": T.ANNOTATION_SCHEMA,
        "flows": T.FLOW_SCHEMA,
        "other": T.OTHER_SCHEMA,
    }
    for name, schema in tables.items():
        out += check_frame(getattr(t, name), schema, f"trace.{name}")
    if out:
        return out
    for name in tables:
        df = getattr(t, name)
        if "dur_ns" in df and len(df):
            if (df["dur_ns"] < 0).any():
                out.append(f"trace.{name}: negative dur_ns")
            if (df["end_ns"] != df["ts_ns"] + df["dur_ns"]).any():
                out.append(f"trace.{name}: end_ns != ts_ns + dur_ns")
    n = {k: len(getattr(t, k)) for k in tables}
    for table, col, target in (
        ("gpu", "runtime_index", "runtime"),
        ("runtime", "gpu_index", "gpu"),
        ("runtime", "cpu_op_index", "cpu_ops"),
        ("runtime", "python_index", "python"),
        ("cpu_ops", "parent_index", "cpu_ops"),
        ("cpu_ops", "top_index", "cpu_ops"),
        ("cpu_ops", "python_index", "python"),
        ("python", "parent_index", "python"),
        ("python", "user_index", "python"),
    ):
        out += _index_ok(getattr(t, table), col, n[target], f"trace.{table}")
    if not isinstance(t.warnings, list) or not all(isinstance(w, str) for w in t.warnings):
        out.append("trace.warnings: not a list of str")
    return out


def check_snapshot(s) -> list[str]:
    from parsers import snapshot as S

    out = []
    for name, schema in (
        ("segments", S.SEGMENTS_SCHEMA),
        ("blocks", S.BLOCKS_SCHEMA),
        ("trace", S.TRACE_SCHEMA),
        ("stacks", S.STACKS_SCHEMA),
        ("frames", S.FRAMES_SCHEMA),
    ):
        out += check_frame(getattr(s, name), schema, f"snapshot.{name}")
    if not out:
        out += _index_ok(s.blocks, "stack_id", len(s.stacks), "snapshot.blocks")
        out += _index_ok(s.trace, "stack_id", len(s.stacks), "snapshot.trace")
    return out


def check_steps(result) -> list[str]:
    from parsers.events import STEPS_SCHEMA, SYNCS_SCHEMA

    if not isinstance(result, tuple) or len(result) < 2:
        return [f"events: expected (steps, syncs[, work]), got {type(result).__name__}"]
    steps, syncs = result[0], result[1]
    out = check_frame(steps, STEPS_SCHEMA, "steps") + check_frame(syncs, SYNCS_SCHEMA, "syncs")
    for col in ("host_ms", "gpu_ms"):
        if not out and ((steps[col] < 0) | np.isinf(steps[col])).any():
            out.append(f"steps.{col}: negative or infinite duration")
    if not out and ((syncs["dur_ns"] < 0) | np.isinf(syncs["dur_ns"])).any():
        out.append("syncs.dur_ns: negative or infinite duration")
    return out


def check_ncu(df) -> list[str]:
    from parsers.ncu_kernels import HIT_RATE_COLUMNS, KERNELS_SCHEMA

    out = check_frame(df, KERNELS_SCHEMA, "kernels")
    if not out and not len(df):
        out.append("kernels: empty table returned instead of an InputError")
    for col in HIT_RATE_COLUMNS if not out else ():
        if (df[col] > 100).any():
            out.append(f"kernels.{col}: above 100 %")
    return out


def check_manifest(m) -> list[str]:
    from parsers.run_folder import _DICTS, _LISTS

    if not isinstance(m, dict):
        return [f"manifest: expected a dict, got {type(m).__name__}"]
    return [f"manifest.{k}: not a list" for k in _LISTS if not isinstance(m.get(k), list)] + [
        f"manifest.{k}: not a dict" for k in _DICTS if not isinstance(m.get(k), dict)
    ]


def check_profile(p) -> list[str]:
    from diagnose.ingest.profile_data import Profile
    from parsers.memory_stats import MEMORY_STATS_SCHEMA
    from parsers.ncu_kernels import KERNELS_SCHEMA
    from parsers.nvml import NVML_SCHEMA

    if not isinstance(p, Profile):
        return [f"load: expected a Profile, got {type(p).__name__}"]
    out = check_frame(p.kernels, KERNELS_SCHEMA, "kernels")
    out += check_frame(p.nvml, NVML_SCHEMA, "nvml")
    out += check_manifest(p.manifest) if p.manifest else []
    for rank, t in p.traces.items():
        out += [f"rank {rank}: {m}" for m in check_trace(t)]
    for rank, s in p.snapshots.items():
        out += [f"rank {rank}: {m}" for m in check_snapshot(s)]
    for rank, df in p.memory_stats.items():
        out += check_frame(df, MEMORY_STATS_SCHEMA, f"memory_stats[{rank}]")
    for rank, steps in p.step_events.items():
        out += check_steps((steps, p.sync_records.get(rank, _empty_syncs())))
    if not all(isinstance(w, str) for w in p.warnings):
        out.append("profile.warnings: not all str")
    return out


def _empty_syncs():
    from parsers.events import SYNCS_SCHEMA

    return SYNCS_SCHEMA.empty()


def check_result(reader: str, result) -> list[str]:
    """Problems of a reader's result against docs/contracts.md (empty when it is as promised)."""
    if reader in ("ncu_csv", "ncu_rep"):
        from parsers.ncu_kernels import RULES_SCHEMA

        kernels, rules = result
        return check_ncu(kernels) + check_frame(rules, RULES_SCHEMA, "rules")
    if reader == "trace":
        from parsers.trace_collectives import COLLECTIVES_SCHEMA

        trace, collectives = result
        return check_trace(trace) + check_frame(collectives, COLLECTIVES_SCHEMA, "collectives")
    if reader in ("snapshot_pickle", "snapshot_json"):
        return check_snapshot(result)
    if reader == "memory_stats":
        from parsers.memory_stats import MEMORY_STATS_SCHEMA

        return check_frame(result, MEMORY_STATS_SCHEMA, "memory_stats")
    if reader == "events":
        return check_steps(result)
    if reader == "nvml":
        from parsers.nvml import NVML_SCHEMA

        out = check_frame(result, NVML_SCHEMA, "nvml")
        if not out and np.isinf(result.select_dtypes("number").to_numpy(dtype=float)).any():
            out.append("nvml: infinite value")
        return out
    if reader == "manifest":
        return check_manifest(result)
    if reader in ("run_folder", "load"):
        return check_profile(result)
    raise KeyError(reader)
