"""ncu CSV exports → the kernels table (raw page, details page, or ncu's stdout).

- raw (``--page raw``): wide, one row per launch; the second row holds each
  metric's unit. Values are converted to base units column by column.
- details (``--page details``, also the default of ``ncu --csv --metrics …``): long,
  one row per (launch, section, metric label), optionally with rule columns
  (Rule Name/Type/Description, Estimated Speedup). Labels are human ("L2 Hit Rate");
  the ones analyzers need are mapped to standard columns (``DETAILS_LABELS``), the
  rest kept as ``"<Section>: <Label> [<unit>]"``. Rule rows go to :func:`read_ncu_rules`.
- stdout: either page with ncu's ``==PROF==``/``==WARNING==`` lines and the profiled
  program's own output between the rows; only lines that start with ``"`` are CSV.
Thousands separators, ``n/a``, ``no data`` and empty cells are handled; a partial
last row (a copy cut short) is dropped with a warning in ``df.attrs["warnings"]``.
"""
from __future__ import annotations

import csv
import io
import re
import zlib
import os

import numpy as np
import pandas as pd

from parsers.errors import InputError
from parsers.ncu import ID_COLUMNS, STANDARD_METRICS, finish, open_maybe_gzip, parse_dims
from parsers.ncu_units import column_name, to_base

NA = ["", "n/a", "N/A", "no data", "nan", "-"]
MAX_BYTES = 2 * 1024**3

# (section, label) → standard column, for the details page
DETAILS_LABELS = {
    ("GPU Speed Of Light Throughput", "Duration"): "dur_ns",
    ("GPU Speed Of Light Throughput", "DRAM Throughput"): "dram_throughput_pct",
    ("GPU Speed Of Light Throughput", "Memory Throughput"): "memory_throughput_pct",
    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput"): "sm_throughput_pct",
    ("Memory Workload Analysis", "L2 Hit Rate"): "l2_hit_pct",
    ("Occupancy", "Achieved Occupancy"): "achieved_occupancy_pct",
    ("Occupancy", "Theoretical Occupancy"): "theoretical_occupancy_pct",
    ("Occupancy", "Block Limit Registers"): "occupancy_limit_registers",
    ("Occupancy", "Block Limit Shared Mem"): "occupancy_limit_shared_mem",
    ("Occupancy", "Block Limit Warps"): "occupancy_limit_warps",
    ("Occupancy", "Block Limit SM"): "occupancy_limit_blocks",
    ("Launch Statistics", "Registers Per Thread"): "registers_per_thread",
    ("Launch Statistics", "Waves Per SM"): "waves_per_sm",
    ("Launch Statistics", "# SMs"): "sm_count",
    ("Launch Statistics", "Grid Size"): "grid_size",
    ("Launch Statistics", "Block Size"): "block_size",
}
SHARED_MEM_LABELS = ("Driver Shared Memory Per Block", "Dynamic Shared Memory Per Block",
                     "Static Shared Memory Per Block")
RULE_COLUMNS = ["Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup"]


def read_ncu_csv(path: str | os.PathLike) -> pd.DataFrame:
    text, warnings = _csv_text(path)
    header = next(csv.reader([text.split("\n", 1)[0]]))
    if "Metric Name" in header and "Metric Value" in header:
        df = _details(path, text, header)
    else:
        df = _raw(path, text, header)
    df = finish(df, path)
    df.attrs["warnings"] = warnings
    df.attrs["source_format"] = "details" if "Metric Name" in header else "raw"
    return df


def read_ncu_rules(path: str | os.PathLike) -> pd.DataFrame:
    """The details page's rule results: one row per (launch, rule) with its estimated speedup."""
    text, _ = _csv_text(path)
    header = next(csv.reader([text.split("\n", 1)[0]]))
    cols = ["launch_id", "kernel_name", "section", "rule", "type", "description", "speedup_type", "estimated_speedup_pct"]
    if "Rule Name" not in header:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in cols})
    df = _read_frame(path, text, dtype=str)
    df = df[df["Rule Name"].fillna("") != ""]
    out = pd.DataFrame({
        "launch_id": pd.to_numeric(df["ID"], errors="coerce"), "kernel_name": df["Kernel Name"],
        "section": df["Section Name"], "rule": df["Rule Name"], "type": df["Rule Type"],
        "description": df["Rule Description"], "speedup_type": df.get("Estimated Speedup Type"),
        "estimated_speedup_pct": _numbers(df["Estimated Speedup"]) if "Estimated Speedup" in df else np.nan})
    return out.reset_index(drop=True)


def _csv_text(path) -> tuple[str, list[str]]:
    """The CSV lines of the file (ncu's own lines and program output removed), and warnings."""
    try:
        with open_maybe_gzip(path) as f:
            raw = f.read(MAX_BYTES + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(path, f"cannot read: {e}") from None
    if len(raw) > MAX_BYTES:
        raise InputError(path, f"is larger than {MAX_BYTES // 1024**3} GiB; export fewer launches or use the .ncu-rep")
    if not raw[:65536].strip() and not raw.strip():
        raise InputError(path, "is empty; expected an Nsight Compute CSV export (ncu --csv --page raw|details)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(path, "is not UTF-8 text; expected an Nsight Compute CSV export") from None
    warnings = []
    if text.startswith('"') and not re.search(r'\n[^"\n]', text):
        # every line is a CSV record (the usual raw page): check the ends, skip the per-line pass
        if not text.endswith("\n"):
            text += "\n"
        header = next(csv.reader([text[: text.find("\n")]]))
        _check_header(path, header)
        last_start = text.rfind("\n", 0, len(text) - 1) + 1
        last = text[last_start:-1]
        if last_start > 0 and len(next(csv.reader([last]), [])) != len(header):
            text = text[:last_start]
            warnings.append(f"{path}: dropped a partial last row (the file looks cut short)")
        return text, warnings
    csv_lines, dropped, cut = _csv_records(text.splitlines())
    if cut:
        warnings.append(f"{path}: dropped a partial last row (a quoted field is never closed: the file looks cut short)")
    if not csv_lines:
        raise InputError(path, "has no CSV rows; expected an Nsight Compute CSV export (ncu --csv --page raw|details)")
    header = next(csv.reader([csv_lines[0]]))
    _check_header(path, header)
    # a partial last row: fewer fields than the header, or a quote left open
    last = csv_lines[-1]
    if len(csv_lines) > 1:
        fields = next(csv.reader([last]), [])
        if len(fields) != len(header):
            csv_lines.pop()
            warnings.append(f"{path}: dropped a partial last row (the file looks cut short)")
    if dropped:
        warnings.append(f"{path}: skipped {dropped} non-CSV lines (ncu's ==PROF== lines or program output)")
    return "\n".join(csv_lines) + "\n", warnings


def _check_header(path, header: list[str]) -> None:
    if header[:2] != ["ID", "Process ID"] or "Kernel Name" not in header:
        raise InputError(path, f"is a CSV but not an Nsight Compute export: its header starts {header[:4]!r}, "
                               "expected \"ID\",\"Process ID\",…,\"Kernel Name\"")


def _csv_records(lines: list[str]) -> tuple[list[str], int, bool]:
    """Whole CSV records (a quoted field may span lines, as rule descriptions do), the count of
    non-CSV lines skipped, and whether the last record was cut inside a quoted field."""
    records, dropped, buf = [], 0, None
    for ln in lines:
        if buf is not None:
            buf += "\n" + ln
            if buf.count('"') % 2 == 0:
                records.append(buf)
                buf = None
            continue
        if ln.startswith('"'):
            if ln.count('"') % 2:
                buf = ln
            else:
                records.append(ln)
        else:
            dropped += 1
    return records, dropped, buf is not None


def _read_frame(path, text: str, **kw) -> pd.DataFrame:
    try:
        return pd.read_csv(io.StringIO(text), na_values=NA, keep_default_na=False, low_memory=False, **kw)
    except (pd.errors.ParserError, ValueError) as e:
        raise InputError(path, f"is not a well-formed ncu CSV: {str(e).splitlines()[0]}") from None


def _read_frame_fast(path, text: str, header: list[str], skip_units: bool) -> pd.DataFrame | None:
    """The raw page through pyarrow's multi-threaded CSV reader (about 5× pandas' on wide pages).

    Columns that pyarrow reads as text because of thousands separators become numbers here;
    real text columns (names, enums) stay text. None when pyarrow is not installed.
    """
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyarrow import csv as pacsv
    except ImportError:
        return None
    if len(set(header)) != len(header):
        return None
    try:
        table = pacsv.read_csv(
            io.BytesIO(text.encode("utf-8")),
            read_options=pacsv.ReadOptions(skip_rows_after_names=1 if skip_units else 0, block_size=1 << 24),
            convert_options=pacsv.ConvertOptions(
                null_values=NA, strings_can_be_null=True,
                column_types={c: pa.string() for c in ("Process Name", "Host Name", "Kernel Name", "CC",
                                                       "Block Size", "Grid Size") if c in header}))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise InputError(path, f"is not a well-formed ncu CSV: {str(e).splitlines()[0]}") from None
    keep_text = {"Process Name", "Host Name", "Kernel Name", "CC", "Block Size", "Grid Size"}
    cols = {}
    for name, col in zip(table.column_names, table.columns):
        if pa.types.is_string(col.type) and name not in keep_text:
            try:
                col = pc.cast(pc.replace_substring(col, ",", ""), pa.float64())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
        cols[name] = col
    return pa.table(cols).to_pandas(types_mapper=None, strings_to_categorical=False)


def _numbers(s: pd.Series) -> pd.Series:
    if s.dtype.kind in "fiu":
        return s.astype(float)
    return pd.to_numeric(s.astype(str).str.replace(",", "", regex=False).str.strip()
                         .replace({"n/a": None, "no data": None, "": None, "nan": None}), errors="coerce")


def _raw(path, text: str, header: list[str]) -> pd.DataFrame:
    first_end = text.find("\n")
    second_end = text.find("\n", first_end + 1)
    units_line = next(csv.reader([text[first_end + 1: second_end]])) if second_end > first_end >= 0 else []
    has_units = len(units_line) == len(header) and (units_line[0] == "" and units_line[4] == "")
    units = units_line if has_units else [""] * len(header)
    df = _read_frame_fast(path, text, header, skip_units=has_units)
    if df is None:
        df = _read_frame(path, text, skiprows=[1] if has_units else None, thousands=",", dtype={c: str for c in ("Process Name", "Host Name", "Kernel Name",
                                                                            "CC", "Block Size", "Grid Size")})
    if not len(df):
        raise InputError(path, "holds an ncu header but no kernel rows")
    out = {std: df[col] for col, std in ID_COLUMNS.items() if col in df}
    for c in ("launch_id", "process_id", "context", "stream", "device"):
        if c in out:
            out[c] = _numbers(out[c])
    for prefix, col in (("grid", "Grid Size"), ("block", "Block Size")):
        dims = _dims_columns(df[col] if col in df else pd.Series([None] * len(df)))
        for axis in "xyz":
            out[f"{prefix}_{axis}"] = dims[axis]
    metrics = {}
    for col, unit in zip(header, units):
        if col in ID_COLUMNS or col in ("Block Size", "Grid Size"):
            continue
        s = df[col]
        scale, base = to_base(unit)
        if s.dtype.kind in "fiu":
            values = s.astype(float) * scale if scale != 1.0 else s.astype(float)
        else:
            num = _numbers(s)
            # keep strings (names, enums) as they are
            values = num * scale if num.notna().sum() >= s.notna().sum() and s.notna().any() else s
        metrics[col] = (values, base)
    for std, names in STANDARD_METRICS.items():
        for name in names:
            if name in metrics:
                out[std] = metrics[name][0]
                break
    if "dram_bytes" not in out and "dram__bytes_read.sum" in metrics and "dram__bytes_write.sum" in metrics:
        out["dram_bytes"] = metrics["dram__bytes_read.sum"][0] + metrics["dram__bytes_write.sum"][0]
    out["nvtx_range"] = _nvtx(df)
    extra = {column_name(col, base): values for col, (values, base) in metrics.items()}
    frame = pd.DataFrame(out)
    return pd.concat([frame, pd.DataFrame(extra)], axis=1)


def _dims_columns(s: pd.Series) -> dict[str, np.ndarray]:
    """``"(16, 1, 1)"`` strings → x, y, z arrays, parsing each distinct value once."""
    uniq = {v: parse_dims(v) for v in pd.unique(s.astype(object))}
    parsed = np.array([uniq[v] for v in s.astype(object)], dtype=float).reshape(len(s), 3)
    return {"x": parsed[:, 0], "y": parsed[:, 1], "z": parsed[:, 2]}


def _nvtx(df: pd.DataFrame) -> list:
    cols = [c for c in df.columns if "push_pop_ranges" in c or "start_end_ranges" in c or c.lower().startswith("nvtx")]
    if not cols:
        return [None] * len(df)
    joined = df[cols].astype(object).where(df[cols].notna(), "")
    return ["/".join(str(v) for v in row if str(v)) or None for row in joined.itertuples(index=False)]


def _details(path, text: str, header: list[str]) -> pd.DataFrame:
    df = _read_frame(path, text, dtype=str)
    if "Rule Name" in df:
        df = df[df["Metric Name"].fillna("") != ""]  # rule rows carry no metric
    if not len(df):
        raise InputError(path, "holds an ncu details header but no metric rows")
    ids = _numbers(df["ID"])
    if ids.isna().any():
        raise InputError(path, f"has a non-numeric launch ID in row {int(np.flatnonzero(ids.isna())[0]) + 2}")
    df = df.assign(_id=ids)
    values = _numbers(df["Metric Value"])
    scales = df["Metric Unit"].fillna("").map(lambda u: to_base(u)[0])
    bases = df["Metric Unit"].fillna("").map(lambda u: to_base(u)[1])
    df = df.assign(_value=values * scales, _base=bases)
    first = df.drop_duplicates("_id").set_index("_id")
    out = pd.DataFrame({std: first[col] for col, std in ID_COLUMNS.items() if col in first})
    out["launch_id"] = first.index.to_numpy(dtype=float)
    for c in ("process_id", "context", "stream", "device"):
        if c in out:
            out[c] = _numbers(out[c])
    grid = [parse_dims(v) for v in first.get("Grid Size", pd.Series([None] * len(first)))]
    block = [parse_dims(v) for v in first.get("Block Size", pd.Series([None] * len(first)))]
    for i, axis in enumerate("xyz"):
        out[f"grid_{axis}"] = [g[i] for g in grid]
        out[f"block_{axis}"] = [b[i] for b in block]
    section = df["Section Name"].fillna("")
    label = df["Metric Name"].fillna("")
    is_cli = section == "Command line profiler metrics"
    key = np.where(is_cli, label, section + ": " + label)
    df = df.assign(_key=[column_name(k, b) if not c else column_name(k, b)
                         for k, b, c in zip(key, df["_base"], is_cli)], _label=label, _section=section)
    wide = df.pivot_table(index="_id", columns="_key", values="_value", aggfunc="first", dropna=False)
    wide = wide.reindex(out.index)
    std_from_labels = {}
    for (sec, lab), std in DETAILS_LABELS.items():
        m = (df["_section"] == sec) & (df["_label"] == lab)
        if m.any():
            std_from_labels[std] = df[m].drop_duplicates("_id").set_index("_id")["_value"].reindex(out.index)
    shared = [df[(df["_section"] == "Launch Statistics") & (df["_label"] == lab)]
              .drop_duplicates("_id").set_index("_id")["_value"].reindex(out.index) for lab in SHARED_MEM_LABELS]
    shared = [s for s in shared if s.notna().any()]
    if shared:
        std_from_labels["shared_mem_per_block_bytes"] = sum(s.fillna(0) for s in shared)
    # metric-name rows (ncu --csv --metrics …) map like the raw page
    cli = df[is_cli].assign(_name=lambda d: d["_label"])
    for std, names in STANDARD_METRICS.items():
        for name in names:
            m = cli["_name"] == name
            if m.any():
                std_from_labels.setdefault(std, cli[m].drop_duplicates("_id").set_index("_id")["_value"]
                                           .reindex(out.index))
                break
    for std, s in std_from_labels.items():
        out[std] = s.to_numpy()
    out["nvtx_range"] = None
    out = out.reset_index(drop=True)
    return pd.concat([out, wide.reset_index(drop=True)], axis=1)
