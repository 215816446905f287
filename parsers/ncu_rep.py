"""``.ncu-rep`` → the kernels table, through NVIDIA's ``ncu_report`` package.

The report holds every metric of every profiled launch with its unit; each is
read once per launch (the Python API costs microseconds per call) and converted
to the same base units as the CSV path, so a report and its raw CSV export give
the same columns. ``ncu_report`` ships Linux x86_64 wheels only; without it a
clear error says how to export CSV instead. A file that is not a report loads as
a context with zero ranges: that is an error, not an empty result.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import warnings
import zlib

import numpy as np
import pandas as pd

from parsers.errors import InputError
from parsers.limits import open_input
from parsers.ncu_kernels import EXCESS_SOURCES_MAX, RULES_COLUMNS, STANDARD_METRICS, finish, finish_rules
from parsers.ncu_units import column_name, to_base
from parsers.reader import BINARY, KERNELS, Reader

NEEDS_PACKAGE = (
    ".ncu-rep needs NVIDIA's ncu-report package (pip install ncu-report; NVIDIA ships Linux x86_64 "
    "wheels only); CSV exports work without it: ncu --import report.ncu-rep --csv --page raw > raw.csv"
)


MAGIC = b"NVR\x00"
# the SOL breakdown lists a report stores (the CSV pages do not export them) → their kernels-table column
BREAKDOWN_LISTS = {
    "breakdown:sm__throughput.avg.pct_of_peak_sustained_elapsed": "sol_breakdown_sm",
    "breakdown:gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "sol_breakdown_memory",
}


def is_ncu_rep(head: bytes) -> bool:
    return head[:4] == MAGIC


def read_ncu_rep_tables(path: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The registry's read: (kernels table, rules table :data:`RULES_SCHEMA`) from one pass over the report."""
    ncu_report = _ncu_report(path)
    rows, rules, failed = [], [], 0
    with _plain_file(path) as plain:
        for launch_id, action in _actions(ncu_report, path, plain):
            row = _action_row(ncu_report, action)
            row["launch_id"] = float(launch_id)
            rows.append(row)
            try:
                rules.extend(_action_rules(ncu_report, launch_id, action))
            except Exception:  # the rules are secondary: a launch whose results ncu_report cannot give keeps its row
                failed += 1
    if not rows:
        raise InputError(path, "is an Nsight Compute report with no profiled kernel launches")
    if failed:
        warnings.warn(
            f"{path}: ncu_report could not give the rule results of {failed} of {len(rows)} launches", stacklevel=2
        )
    return finish(pd.DataFrame(rows), path), finish_rules(pd.DataFrame(rules, columns=RULES_COLUMNS))


def _action_rules(ncu_report, launch_id: int, action) -> list[dict]:
    """The rules that fired on one launch (a rule that did not fire has no message: the details page has no row
    for it either)."""
    types = {
        ncu_report.MsgType_OPTIMIZATION: "OPT",
        ncu_report.MsgType_WARNING: "WRN",
        ncu_report.MsgType_ERR: "ERR",
        ncu_report.MsgType_OK: "INF",
        ncu_report.MsgType_NONE: "",
    }
    speedups = {ncu_report.SpeedupType_LOCAL: "local", ncu_report.SpeedupType_GLOBAL: "global"}
    name = action.name(ncu_report.IAction.NameBase_DEMANGLED)
    rows = []
    for rule in action.rule_results_as_dicts() or []:
        msg = rule.get("rule_message") or {}
        if not msg.get("message"):
            continue
        speed = rule.get("speedup_estimation") or {}
        rows.append(
            {
                "launch_id": float(launch_id),
                "kernel_name": name,
                "section": rule.get("section_identifier"),
                "rule_name": rule.get("rule_identifier"),
                "rule_type": types.get(msg.get("type"), str(msg.get("type"))),
                "description": plain_rule_text(msg["message"]),
                "speedup_type": speedups.get(speed.get("type")) if speed else None,
                "estimated_speedup_pct": float(speed["speedup"]) if "speedup" in speed else np.nan,
            }
        )
    return rows


_MARKUP = re.compile(r"@(section|url|metric|table|image):([^@]*)@")


def plain_rule_text(message: str) -> str:
    """ncu's rule markup as the details page prints it: ``@section:Id:Label@`` → ``Label``,
    ``@url:Text:https://…@`` → ``Text (https://…)``."""

    def sub(m: re.Match) -> str:
        kind, body = m.group(1), m.group(2)
        if kind == "url":
            text, _, url = body.partition(":")
            return f"{text} ({url})" if url else text
        return body.split(":", 1)[-1]

    return _MARKUP.sub(sub, message)


def _ncu_report(path):
    try:
        import ncu_report
    except ImportError:
        raise InputError(path, NEEDS_PACKAGE) from None
    return ncu_report


def _actions(ncu_report, path, plain: str):
    """(launch id, action) for every profiled launch, numbered in report order like the CSV's "ID"."""
    try:
        ctx = ncu_report.load_report(plain)
    except Exception as e:  # the extension raises plain RuntimeErrors
        raise InputError(path, f"ncu_report could not load it: {e}") from None
    if ctx is None or ctx.num_ranges() == 0:
        raise InputError(
            path,
            "is not a readable Nsight Compute report: ncu_report loads it with zero ranges "
            "(a damaged or foreign file with the report's magic bytes)",
        )
    launch_id = 0
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            yield launch_id, rng.action_by_idx(a)
            launch_id += 1


class _plain_file:
    """ncu_report needs a real, uncompressed file: gunzip to a temporary one when needed."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.tmp = None

    def __enter__(self) -> str:
        try:
            src = open_input(self.path)
        except OSError as e:
            raise InputError(self.path, f"cannot read: {e.strerror}") from None
        with src:
            if not src.compressed:
                return self.path
            fd, self.tmp = tempfile.mkstemp(suffix=".ncu-rep")
            try:
                with os.fdopen(fd, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)  # the decompressed-size cap holds while copying
            except BaseException as e:
                self.__exit__()
                if isinstance(e, (OSError, EOFError, zlib.error)):
                    raise InputError(self.path, f"gzip stream is broken: {e}") from None
                raise
        return self.tmp

    def __exit__(self, *exc):
        if self.tmp:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass


def _value(ncu_report, m):
    kind = m.kind()
    if kind in (ncu_report.IMetric.ValueKind_STRING,):
        return (m.as_string() or None), ""  # an empty string is an empty cell in the CSV pages
    if kind in (ncu_report.IMetric.ValueKind_UINT32, ncu_report.IMetric.ValueKind_UINT64):
        v = float(m.as_uint64())
    elif kind in (ncu_report.IMetric.ValueKind_DOUBLE, ncu_report.IMetric.ValueKind_FLOAT):
        v = float(m.as_double())
    else:
        try:
            v = float(m.as_double())
        except Exception:
            return m.as_string(), ""
    scale, base = to_base(m.unit())
    return v * scale, base


def _action_row(ncu_report, action) -> dict:
    row: dict = {}
    metrics: dict = {}
    for name in action.metric_names():
        if name.startswith("breakdown:"):  # the per-unit lists behind the SOL summary: kept whole, not as metrics
            if name in BREAKDOWN_LISTS:
                m = action.metric_by_name(name)
                row[BREAKDOWN_LISTS[name]] = (m.as_string() or None) if m is not None and m.has_value() else None
            continue
        m = action.metric_by_name(name)
        if m is None:
            continue
        if not m.has_value():
            # ncu's CSV prints "no data" for these: keep the column, NaN, so both paths have the same columns
            metrics[name] = (np.nan, to_base(m.unit())[1])
            continue
        try:
            value, base = _value(ncu_report, m)
        except Exception:
            continue
        metrics[name] = (value, base)
    iaction = ncu_report.IAction
    row["kernel_name"] = action.name(iaction.NameBase_DEMANGLED)
    row["kernel_short"] = action.name(iaction.NameBase_FUNCTION)
    row["kernel_mangled"] = action.name(iaction.NameBase_MANGLED)
    for std, names in STANDARD_METRICS.items():
        for n in names:
            if n in metrics:
                row[std] = metrics[n][0]
                break
    get = lambda n: metrics.get(n, (np.nan, ""))[0]  # noqa: E731
    # the report's actions carry no process id through this API: process_id stays NaN here
    row.update(
        {
            "context": get("launch__context_id"),
            "stream": get("launch__stream_id"),
            "device": get("launch__device_id"),
            "grid_x": get("launch__grid_dim_x"),
            "grid_y": get("launch__grid_dim_y"),
            "grid_z": get("launch__grid_dim_z"),
            "block_x": get("launch__block_dim_x"),
            "block_y": get("launch__block_dim_y"),
            "block_z": get("launch__block_dim_z"),
        }
    )
    major, minor = get("device__attribute_compute_capability_major"), get("device__attribute_compute_capability_minor")
    row["cc"] = f"{int(major)}.{int(minor)}" if not (np.isnan(major) or np.isnan(minor)) else None
    row["nvtx_range"] = _nvtx(action)
    row["global_excess_sources"] = excess_sources(action)
    for name, (value, base) in metrics.items():
        row[column_name(name, base)] = value
    return row


EXCESS_METRIC = "derived__memory_l2_theoretical_sectors_global_excessive"
SECTORS_METRIC = "memory_l2_theoretical_sectors_global"
_OPCODE = re.compile(r"^\s*(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def access_of(sass: str) -> str:
    """What a SASS memory instruction does: load (LDG, LD, LDGSTS), store (STG, ST), atomic, reduction, or other."""
    m = _OPCODE.match(sass or "")
    op = m.group(1) if m else ""
    if op.startswith("ATOM"):
        return "atomic"
    if op.startswith("RED"):
        return "reduction"
    if op.startswith("LD"):
        return "load"
    if op.startswith("ST"):
        return "store"
    return "other"


def _instances(metric) -> dict[int, float]:
    """An instanced (per-instruction) metric as {PC: value}; empty when it has no correlation ids."""
    if metric is None or not metric.has_correlation_ids():
        return {}
    ids = metric.correlation_ids()
    out = {}
    for i in range(metric.num_instances()):
        out[int(ids.as_uint64(i))] = float(metric.as_double(i))  # as_double converts integer instances too
    return out


def excess_sources(action) -> str | None:
    """The source lines with the most excessive global sectors (ncu's SourceCounters, per instruction), as the
    JSON of ``global_excess_sources`` (parsers.ncu_kernels); None when the report has no per-instruction data.

    Instructions are grouped by file:line (by instruction where the code has no line info); a line's
    ``access`` is what its instructions with excess sectors do (``load``, ``store``, ``load+store``, …).
    """
    try:
        excess = _instances(action.metric_by_name(EXCESS_METRIC))
        if not excess:
            return None
        sectors = _instances(action.metric_by_name(SECTORS_METRIC))
        lines: dict[tuple, dict] = {}
        by_access: dict[str, float] = {}
        for pc, value in excess.items():
            if not value > 0:
                continue
            sass = (action.sass_by_pc(pc) or "").strip()
            access = access_of(sass)
            by_access[access] = by_access.get(access, 0.0) + value
            info = action.source_info(pc)
            key = (info.file_name(), int(info.line())) if info is not None else (None, pc)
            entry = lines.setdefault(
                key,
                {
                    "file": key[0],
                    "line": key[1] if info is not None else None,
                    "access": set(),
                    "excess_sectors": 0.0,
                    "sectors": 0.0,
                    "sass": sass,
                    "_top": -1.0,
                },
            )
            entry["access"].add(access)
            entry["excess_sectors"] += value
            entry["sectors"] += sectors.get(pc, np.nan)
            if value > entry["_top"]:
                entry["sass"], entry["_top"] = sass, value
        top = sorted(lines.values(), key=lambda e: (-e["excess_sectors"], str(e["file"]), e["line"] or 0))
        out = []
        for e in top[:EXCESS_SOURCES_MAX]:
            e.pop("_top")
            e["access"] = "+".join(sorted(e["access"]))
            e["sectors"] = None if np.isnan(e["sectors"]) else e["sectors"]
            out.append(e)
        return json.dumps({"lines": out, "excess_by_access": by_access}, sort_keys=True)
    except Exception:  # the per-instruction API varies between ncu_report versions: the column is optional
        return None


def _nvtx(action) -> str | None:
    try:
        state = action.nvtx_state()
        if state is None:
            return None
        names = []
        for d in state.domains():
            dom = state.domain_by_id(d)
            names.extend(dom.push_pop_ranges())
            names.extend(dom.start_end_ranges())
        return "/".join(names) or None
    except Exception:
        return None


# read: (kernels, rules), as the events reader gives (steps, syncs); Profile.add puts each in its table
READERS = (
    Reader("ncu-rep", KERNELS, is_ncu_rep, read_ncu_rep_tables, "an Nsight Compute report (.ncu-rep)", (BINARY,)),
)
