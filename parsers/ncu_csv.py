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
Thousands separators, ``n/a``, ``no data`` and empty cells are handled. A copy cut
short (a partial last row, a quote never closed) keeps its whole rows with a warning in
``df.attrs["warnings"]``; with no whole kernel row left it is an :class:`InputError`. The raw page is
streamed by pyarrow block by block (:mod:`parsers.ncu_raw_stream`; strictly: every line a whole record),
so neither the file nor a whole arrow table is held; anything irregular falls back to the whole-file
paths (pyarrow on the bytes, then line by line, which skips non-CSV lines, noted in
``df.attrs["warnings"]``). ``df.attrs["reader"]`` says which path read the file.
"""

from __future__ import annotations

import csv
import io
import os
import zlib

import numpy as np
import pandas as pd

from parsers.errors import InputError
from parsers.limits import human_bytes, limit, open_input
from parsers.ncu_kernels import (
    ID_COLUMNS,
    RULES_COLUMNS,
    RULES_SCHEMA,
    STANDARD_METRICS,
    finish,
    finish_rules,
    parse_dims,
)
from parsers.ncu_raw_stream import NA, TEXT_COLUMNS, stream_raw_columns
from parsers.ncu_units import column_name, to_base
from parsers.reader import KERNELS, TEXT, Reader, head_text, is_json

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
SHARED_MEM_LABELS = (
    "Driver Shared Memory Per Block",
    "Dynamic Shared Memory Per Block",
    "Static Shared Memory Per Block",
)
RULE_COLUMNS = ["Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup"]


def read_ncu_csv(path: str | os.PathLike) -> pd.DataFrame:
    df = _raw_streamed(path)
    if df is not None:
        return df
    data = _csv_bytes(path)
    if data.startswith(b'"'):
        header = _header(path, data)
        if "Metric Name" not in header:
            # the usual raw page, parsed straight from the bytes with no per-line pass; anything
            # irregular (ncu's log lines, a cut-short last row) makes the strict parse fail and
            # falls through to the line-by-line path below, which says what is wrong
            try:
                if not data[-4096:].rstrip(b"\r\n").endswith(b'"'):  # the tail only: no copy of the file
                    raise _NotPlain()  # cut inside the last field: pyarrow would accept the open quote
                df = _raw(path, data, header, strict=True)
            except _NotPlain:
                pass
            else:
                df = finish(df, path)
                df.attrs["warnings"] = []
                df.attrs["source_format"] = "raw"
                df.attrs["reader"] = "pyarrow, whole file" if _has_pyarrow() else "pandas, whole file"
                return df
    text, warnings = _csv_text(path, data)
    header = _fields(path, text.split("\n", 1)[0])
    if "Metric Name" in header and "Metric Value" in header:
        df = _details(path, text, header)
    else:
        df = _raw(path, text.encode("utf-8"), header)
    df = finish(df, path)
    df.attrs["warnings"] = warnings
    df.attrs["source_format"] = "details" if "Metric Name" in header else "raw"
    arrow = "Metric Name" not in header and _has_pyarrow() and len(set(header)) == len(header)  # as _raw_columns
    df.attrs["reader"] = "line by line, " + ("pyarrow" if arrow else "pandas")
    return df


HEAD_BYTES = 1 << 20  # read for the header and unit rows before streaming; ~30 KB with four sections


def _raw_streamed(path) -> pd.DataFrame | None:
    """The raw page streamed block by block (:mod:`parsers.ncu_raw_stream`), or None for anything else: a
    details page, ncu's stdout, a page pyarrow rejects, or one whose head the whole-file path must judge
    (its errors stay the whole-file path's)."""
    try:
        with open_input(path, lines=True) as f:
            head = bytearray()
            while head.count(b"\n") < 2 and len(head) < MAX_BYTES:
                piece = f.read(HEAD_BYTES)
                if not piece:
                    break
                head += piece
    except (OSError, EOFError, zlib.error, InputError):
        return None
    if head.startswith(b"\xef\xbb\xbf"):
        del head[:3]
    lines = bytes(head).split(b"\n", 2)
    if not head.startswith(b'"') or b"\x00" in head[:4096] or b"\r" in head or len(lines) < 2:
        return None  # the whole-file path reads (or refuses) it
    try:
        header = _fields(path, lines[0].decode("utf-8"))
        _check_header(path, header)
        units_line = _fields(path, lines[1].decode("utf-8"))
    except (InputError, UnicodeDecodeError):
        return None
    if "Metric Name" in header or len(set(header)) != len(header):
        return None
    has_units = _is_units(units_line, header)
    cols = stream_raw_columns(path, header, skip_units=has_units, max_bytes=MAX_BYTES)
    if cols is None:
        return None
    df = finish(_raw_table(path, cols, units_line if has_units else [""] * len(header)), path)
    df.attrs["warnings"] = []
    df.attrs["source_format"] = "raw"
    df.attrs["reader"] = "pyarrow, streamed"
    return df


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


class _NotPlain(Exception):
    """The strict raw-page parse met a line that is not a whole record."""


def read_ncu_rules(path: str | os.PathLike) -> pd.DataFrame:
    """The details page's rule results: one row per (launch, rule) with its estimated speedup.

    A raw page, or a details page exported without the rule columns, gives the empty table.
    """
    text, _ = _csv_text(path, _csv_bytes(path))
    header = _fields(path, text.split("\n", 1)[0])
    if "Rule Name" not in header:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in RULES_COLUMNS})
    df = _read_frame(path, text, dtype=str)
    df = df[df["Rule Name"].fillna("") != ""]
    out = pd.DataFrame(
        {
            "launch_id": _numbers(df["ID"]),
            "kernel_name": df["Kernel Name"],
            "section": df["Section Name"],
            "rule_name": df["Rule Name"],
            "rule_type": df["Rule Type"],
            "description": df["Rule Description"],
            "speedup_type": df["Estimated Speedup Type"] if "Estimated Speedup Type" in df else None,
            "estimated_speedup_pct": _numbers(df["Estimated Speedup"]) if "Estimated Speedup" in df else np.nan,
        }
    )
    return out.reset_index(drop=True)


def _fields(path, line: str) -> list[str]:
    """One CSV record's fields; a record the csv module cannot split (a stray quote that swallows a
    line end) is bad input, not a crash."""
    try:
        return next(csv.reader([line]), [])
    except csv.Error as e:
        raise InputError(path, f"is not a well-formed CSV: {e} (a stray or unclosed quote?)") from None


def _read_at_most(f, limit: int, chunk: int = 16 << 20) -> bytearray:
    """Up to ``limit`` bytes in 16 MiB reads: one ``read(limit)`` would ask for a 2 GiB buffer per file.

    The bytearray itself, not a ``bytes`` copy of it: on a 500 MB page the copy doubled the peak memory.
    """
    buf = bytearray()
    while len(buf) < limit:
        part = f.read(min(chunk, limit - len(buf)))
        if not part:
            break
        buf += part
    return buf


def _csv_bytes(path) -> bytearray:
    """The file's bytes, gunzipped when it is gzip, with a UTF-8 byte-order mark removed.

    Changed in place where it can be (no second copy of a file of hundreds of MB); the raw page's fast
    path empties it once pyarrow has parsed it (:func:`_raw_columns`)."""
    try:
        with open_input(path, lines=True) as f:
            raw = _read_at_most(f, MAX_BYTES + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(path, f"cannot be read as an Nsight Compute CSV export: {e}") from None
    if len(raw) > MAX_BYTES:
        raise InputError(path, f"is larger than {MAX_BYTES // 1024**3} GiB; export fewer launches or use the .ncu-rep")
    if not raw[:65536].strip() and not raw.strip():
        raise InputError(path, "is empty; expected an Nsight Compute CSV export (ncu --csv --page raw|details)")
    if raw.startswith(b"\xef\xbb\xbf"):
        del raw[:3]
    if b"\x00" in raw[:4096]:
        raise InputError(path, "is a binary file, not an Nsight Compute CSV export (it holds NUL bytes)")
    try:
        if not raw.isascii():  # ncu's pages are ASCII but for kernel names: no decoded copy of an ASCII file
            raw.decode("utf-8")  # once here, so no later step meets a byte that is not UTF-8
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise InputError(
            path,
            f"is not UTF-8 text (byte {e.start}, line {line}); ncu writes UTF-8 CSV: "
            "was it converted to another encoding?",
        ) from None
    if b"\r" in raw:  # Windows CRLF, or bare CR (old Mac) line ends: the readers below split on LF
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return raw


def _header(path, data: bytes) -> list[str]:
    end = data.find(b"\n")
    first = data[: end if end >= 0 else len(data)]
    header = _fields(path, first.decode("utf-8"))  # _csv_bytes checked the bytes are UTF-8
    _check_header(path, header)
    return header


def _csv_text(path, raw: bytes) -> tuple[str, list[str]]:
    """The CSV lines of the file (ncu's own lines and program output removed), and warnings."""
    text = raw.decode("utf-8")  # _csv_bytes checked the bytes are UTF-8
    warnings = []
    csv_lines, dropped, cut = _csv_records(path, text.splitlines())
    if not csv_lines:
        if "==PROF==" in text or "==WARNING==" in text or "==ERROR==" in text:
            lines = text.splitlines()
            report = next(
                (ln.split("Report:", 1)[1].strip() for ln in lines if ln.startswith("==PROF== Report:")), None
            )
            if report:  # ncu -o: the results went to a report file, not to this console
                raise InputError(
                    path,
                    f"holds ncu's console output, no CSV rows: ncu wrote its results to {report}; read that report "
                    "(or its CSV pages: ncu --import REPORT --csv --page raw)",
                )
            said = [ln for ln in lines if ln.startswith(("==WARNING==", "==ERROR=="))]
            raise InputError(
                path,
                "holds ncu's console output but no CSV rows: no kernel was profiled"
                + (f" (ncu said: {said[-1][:200]!r})" if said else "")
                + "; check ncu's --launch-skip/--launch-count/--kernel-name filters",
            )
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
        raise InputError(
            path,
            "is not an Nsight Compute export: no line is a quoted ncu CSV row "
            f'("ID","Process ID",…); its first line is {first[:120]!r}',
        )
    header = _fields(path, csv_lines[0])
    _check_header(path, header)
    partial = None
    if cut:
        partial = "a quoted field that is never closed"
    elif len(csv_lines) > 1:
        # raw rows have every header field; details rows at least up to "Metric Value" (ncu leaves
        # the rule columns off metric rows)
        fields = _fields(path, csv_lines[-1])
        needed = header.index("Metric Value") + 1 if "Metric Value" in header else len(header)
        if len(fields) < needed or ("Metric Value" not in header and len(fields) != len(header)):
            partial = f"{len(fields)} of the {needed} fields a row needs"
    if partial:
        # a copy cut short (a killed export, a capture that ran out of disk): keep the whole rows
        # (_csv_records already left out a record whose quote never closed)
        if not cut:
            csv_lines = csv_lines[:-1]
        data_rows = [ln for ln in csv_lines[1:] if not _is_units_row(ln)]
        if not data_rows:
            raise InputError(
                path,
                f"is cut short: its only kernel row is partial ({partial}) and no complete "
                "kernel rows remain; export or capture it again",
            )
        warnings.append(
            f"{path}: is cut short: dropped its partial last row ({partial}); the launches before it are read"
        )
    if dropped:
        warnings.append(f"{path}: skipped {dropped} non-CSV lines (ncu's ==PROF== lines or program output)")
    return "\n".join(csv_lines) + "\n", warnings


def _is_units_row(line: str) -> bool:
    """The raw page's second row: units, with the identity fields ("ID", …) empty."""
    return line.startswith('"",""')


def _check_header(path, header: list[str]) -> None:
    if header[:2] != ["ID", "Process ID"] or "Kernel Name" not in header:
        raise InputError(
            path,
            f"is a CSV but not an Nsight Compute export: its header starts {header[:4]!r}, "
            'expected "ID","Process ID",…,"Kernel Name"',
        )
    max_columns = limit("MAX_CSV_COLUMNS")
    if len(header) > max_columns:
        raise InputError(
            path,
            f"has {len(header):,} columns, more than {max_columns:,} (MAX_CSV_COLUMNS; ncu's raw page "
            "has ~570 with four sections, a few thousand with --set full); export fewer metrics, or raise GPUDIAG_MAX_CSV_COLUMNS "
            "(docs/input-limits.md)",
        )


def _csv_records(path, lines: list[str]) -> tuple[list[str], int, bool]:
    """Whole CSV records (a quoted field may span lines, as rule descriptions do), the count of
    non-CSV lines skipped, and whether the last record was cut inside a quoted field.

    A record is held to MAX_LINE_BYTES like a line: a quote never closed would otherwise make
    the rest of the file one record.
    """
    max_chars = limit("MAX_LINE_BYTES")
    records, dropped, parts, size = [], 0, None, 0
    for number, ln in enumerate(lines, start=1):
        if parts is not None:
            parts.append(ln)
            size += len(ln) + 1
            if size > max_chars:
                raise InputError(
                    path,
                    f"line {number - len(parts) + 1:,}: a quoted CSV field runs on for more than "
                    f"{human_bytes(max_chars)} (MAX_LINE_BYTES) without its closing quote; a damaged "
                    "export? If it is real, raise GPUDIAG_MAX_LINE_BYTES (docs/input-limits.md)",
                )
            if ln.count('"') % 2:  # this line closes the open quote
                records.append("\n".join(parts))
                parts = None
            continue
        if ln.startswith('"'):
            if ln.count('"') % 2:
                parts, size = [ln], len(ln)
            else:
                records.append(ln)
        else:
            dropped += 1
    return records, dropped, parts is not None


def _read_frame(path, text: str, **kw) -> pd.DataFrame:
    try:
        return pd.read_csv(io.StringIO(text), na_values=NA, keep_default_na=False, low_memory=False, **kw)
    except (pd.errors.ParserError, ValueError) as e:
        raise InputError(path, f"is not a well-formed ncu CSV: {str(e).splitlines()[0]}") from None


def _raw_columns(path, data: bytes, header: list[str], skip_units: bool, strict: bool = False) -> dict[str, np.ndarray]:
    """Every column of the raw page as a numpy array: float64 where every value is a number
    (thousands separators removed), object (str / None) where not.

    pyarrow's multi-threaded reader when it is installed (several times pandas' speed on wide
    pages), pandas' C reader otherwise.
    """
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyarrow import csv as pacsv
    except ImportError:
        pa = None
    if pa is None or len(set(header)) != len(header):
        if strict:
            raise _NotPlain()
        df = _read_frame(
            path,
            data.decode("utf-8"),
            skiprows=[1] if skip_units else None,
            thousands=",",
            dtype={c: str for c in TEXT_COLUMNS if c in header},
        )
        out = {}
        for name in df.columns:
            s = df[name]
            out[name] = s.to_numpy(dtype=float) if s.dtype.kind in "fiub" else _maybe_numbers(s)
        return out
    source = pa.BufferReader(pa.py_buffer(data))
    try:
        table = pacsv.read_csv(
            source,
            read_options=pacsv.ReadOptions(skip_rows_after_names=1 if skip_units else 0, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(newlines_in_values=False),
            convert_options=pacsv.ConvertOptions(
                null_values=NA,
                strings_can_be_null=True,
                column_types={c: pa.string() for c in TEXT_COLUMNS if c in header},
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        if strict:
            raise _NotPlain() from None
        raise InputError(path, f"is not a well-formed ncu CSV: {str(e).splitlines()[0]}") from None
    del source
    if isinstance(data, bytearray):
        try:
            data.clear()  # the caller's copy of the file: parsed, no longer needed (as large as the table)
        except BufferError:  # still exported somewhere: keep it
            pass
    # each column's buffers go back as soon as it is converted: the arrow table and the numpy columns
    # are not both held whole
    names, columns = table.column_names, table.columns
    del table
    out = {}
    for i, name in enumerate(names):
        col, columns[i] = columns[i], None  # the last reference: its buffers are freed after this column
        t = col.type
        if name in TEXT_COLUMNS:
            out[name] = _shared_text(col.to_numpy(zero_copy_only=False))
        elif pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_boolean(t):
            out[name] = col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        elif pa.types.is_null(t):
            out[name] = np.full(len(col), np.nan)
        else:
            try:
                out[name] = pc.cast(pc.replace_substring(col, ",", ""), pa.float64()).to_numpy(zero_copy_only=False)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                out[name] = _shared_text(col.to_numpy(zero_copy_only=False))  # names, enums: text as it is
        del col
    return out


def _shared_text(values: np.ndarray) -> np.ndarray:
    """Text values with one ``str`` object per distinct value (100,000 launches name a few dozen kernels:
    ~25 MB of copies of ~230-character names otherwise); missing values stay None."""
    codes, distinct = pd.factorize(values)
    if len(distinct) * 2 > len(values):
        return values
    return np.append(distinct.astype(object), None)[codes]


def _maybe_numbers(s: pd.Series) -> np.ndarray:
    """Numbers when every present value is one, else the text unchanged (object array)."""
    num = _numbers(s)
    if s.notna().any() and num.notna().sum() >= s.notna().sum():
        return num.to_numpy(dtype=float)
    return s.astype(object).where(s.notna(), None).to_numpy()


def _numbers(s: pd.Series) -> pd.Series:
    if s.dtype.kind in "fiu":
        return s.astype(float)
    return pd.to_numeric(
        s.astype(str)
        .str.replace(",", "", regex=False)
        .str.strip()
        .replace({"n/a": None, "no data": None, "": None, "nan": None}),
        errors="coerce",
    )


def _raw(path, data: bytes, header: list[str], strict: bool = False) -> pd.DataFrame:
    first_end = data.find(b"\n")
    second_end = data.find(b"\n", first_end + 1)
    second = data[first_end + 1 : second_end if second_end >= 0 else len(data)].decode("utf-8", errors="replace")
    units_line = _fields(path, second) if first_end >= 0 else []
    has_units = _is_units(units_line, header)
    units = units_line if has_units else [""] * len(header)
    cols = _raw_columns(path, data, header, skip_units=has_units, strict=strict)
    return _raw_table(path, cols, units)


def _is_units(line: list[str], header: list[str]) -> bool:
    """Whether the raw page's second row holds units: as many fields as the header, the identity fields empty."""
    return len(line) == len(header) and line[0] == "" and line[header.index("Kernel Name")] == ""


def _raw_table(path, cols: dict[str, np.ndarray], units: list[str]) -> pd.DataFrame:
    """The raw page's columns (in header order) and each one's unit → the kernels table's columns."""
    n = len(next(iter(cols.values()))) if cols else 0
    if n == 0:
        raise InputError(
            path,
            "holds an ncu header but no kernel rows (nothing was profiled, or the export is cut "
            "short after its header)",
        )
    out: dict[str, object] = {}
    for col, std in ID_COLUMNS.items():
        if col in cols:
            v = cols[col]
            out[std] = v if std in ("process_name", "host", "kernel_name", "cc") else _as_float(v)
    for prefix, col in (("grid", "Grid Size"), ("block", "Block Size")):
        dims = _dims_columns(pd.Series(cols[col] if col in cols else [None] * n, dtype=object))
        for axis in "xyz":
            out[f"{prefix}_{axis}"] = dims[axis]
    metrics: dict[str, tuple[np.ndarray, str]] = {}
    for col, unit in zip(list(cols), units):  # cols: the header, duplicates renamed by pandas' fallback
        if col in ID_COLUMNS or col in ("Block Size", "Grid Size"):
            continue
        values = cols[col]
        scale, base = to_base(unit)
        if values.dtype.kind == "f" and scale != 1.0:
            if values.flags.writeable:  # the readers' own arrays (not pyarrow's zero-copy ones): no copy
                np.multiply(values, scale, out=values)
            else:
                values = values * scale
        metrics[col] = (values, base)
    for std, names in STANDARD_METRICS.items():
        for name in names:
            if name in metrics and metrics[name][0].dtype.kind == "f":
                out[std] = metrics[name][0]
                break
    if "dram_bytes" not in out and "dram__bytes_read.sum" in metrics and "dram__bytes_write.sum" in metrics:
        out["dram_bytes"] = metrics["dram__bytes_read.sum"][0] + metrics["dram__bytes_write.sum"][0]
    out["nvtx_range"] = _nvtx(pd.DataFrame({c: cols[c] for c in cols if _is_nvtx_column(c)}, index=range(n)))
    for col, (values, base) in metrics.items():
        out[column_name(col, base)] = values
    # text stays object: pandas would infer its string dtype, and finish() would turn that back into
    # object with a new str per row (~80 MB for 100,000 launches) instead of the readers' shared ones
    return pd.DataFrame({c: _object_series(v) for c, v in out.items()}, copy=False)


def _object_series(values):
    if isinstance(values, list):
        values = np.array(values, dtype=object)
    if isinstance(values, np.ndarray) and values.dtype == object:
        return pd.Series(values, dtype=object, copy=False)
    return values


def _as_float(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind == "f":
        return values
    return _numbers(pd.Series(values)).to_numpy(dtype=float)


def _is_nvtx_column(c: str) -> bool:
    return "push_pop_ranges" in c or "start_end_ranges" in c or c.lower().startswith("nvtx")


def _dims_columns(s: pd.Series) -> dict[str, np.ndarray]:
    """``"(16, 1, 1)"`` strings → x, y, z arrays, parsing each distinct value once (missing: NaN)."""
    codes, distinct = pd.factorize(s.to_numpy(dtype=object))
    table = np.array([parse_dims(v) for v in distinct] + [(np.nan, np.nan, np.nan)], dtype=float).reshape(-1, 3)
    parsed = table[codes]  # code -1 (missing): the last row
    return {"x": parsed[:, 0], "y": parsed[:, 1], "z": parsed[:, 2]}


def _nvtx(df: pd.DataFrame) -> list:
    cols = [c for c in df.columns if _is_nvtx_column(c)]
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
    df = df.assign(
        _key=[column_name(k, b) if not c else column_name(k, b) for k, b, c in zip(key, df["_base"], is_cli)],
        _label=label,
        _section=section,
    )
    wide = df.pivot_table(index="_id", columns="_key", values="_value", aggfunc="first", dropna=False)
    wide = wide.reindex(out.index)
    std_from_labels = {}
    for (sec, lab), std in DETAILS_LABELS.items():
        m = (df["_section"] == sec) & (df["_label"] == lab)
        if m.any():
            std_from_labels[std] = df[m].drop_duplicates("_id").set_index("_id")["_value"].reindex(out.index)
    shared = [
        df[(df["_section"] == "Launch Statistics") & (df["_label"] == lab)]
        .drop_duplicates("_id")
        .set_index("_id")["_value"]
        .reindex(out.index)
        for lab in SHARED_MEM_LABELS
    ]
    shared = [s for s in shared if s.notna().any()]
    if shared:
        std_from_labels["shared_mem_per_block_bytes"] = sum(s.fillna(0) for s in shared)
    # metric-name rows (ncu --csv --metrics …) map like the raw page
    cli = df[is_cli].assign(_name=lambda d: d["_label"])
    for std, names in STANDARD_METRICS.items():
        for name in names:
            m = cli["_name"] == name
            if m.any():
                std_from_labels.setdefault(
                    std, cli[m].drop_duplicates("_id").set_index("_id")["_value"].reindex(out.index)
                )
                break
    for std, s in std_from_labels.items():
        out[std] = s.to_numpy()
    out["nvtx_range"] = None
    out = out.reset_index(drop=True)
    return pd.concat([out, wide.reset_index(drop=True)], axis=1)


def read_ncu_csv_tables(path: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The registry's read: (kernels table, rules table :data:`RULES_SCHEMA`).

    Only a details page carries rules: the header is looked at first (its first CSV line, read on its
    own), so a raw page, which can be hundreds of MB, is parsed once.
    """
    kernels = read_ncu_csv(path)
    if not has_rule_columns(path):
        return kernels, RULES_SCHEMA.empty()
    try:
        rules = read_ncu_rules(path)
    except KeyError as e:
        raise InputError(path, f"has ncu's rule columns but no {e} column: a damaged details page?") from None
    return kernels, finish_rules(rules)


def has_rule_columns(path: str | os.PathLike) -> bool:
    """Whether the CSV's header (its first line that starts with a quote: ncu's stdout has log lines and the
    program's output before it) holds ncu's rule columns. Reads up to the header line only."""
    try:
        with open_input(path, lines=True) as f:
            buf = b""
            while len(buf) < MAX_BYTES:
                piece = f.read(1 << 16)
                if not piece:
                    break
                buf += piece
                start = 0
                while (end := buf.find(b"\n", start)) >= 0:
                    line = buf[start:end].lstrip(b"\xef\xbb\xbf")
                    if line.startswith(b'"'):
                        return b'"Rule Name"' in line
                    start = end + 1
                buf = buf[start:]
            return buf.lstrip(b"\xef\xbb\xbf").startswith(b'"') and b'"Rule Name"' in buf
    except (OSError, EOFError, zlib.error, InputError):
        return False


def is_ncu_csv(head: bytes) -> bool:
    """A CSV page of ncu (its ID columns), or ncu's stdout (its ``==PROF==`` lines)."""
    if is_json(head):
        return False
    text = head_text(head)
    return '"ID","Process ID"' in text or "==PROF==" in text or '"Kernel Name"' in text


# read: (kernels, rules), as the events reader gives (steps, syncs); Profile.add puts each in its table
READERS = (
    Reader(
        "ncu-csv",
        KERNELS,
        is_ncu_csv,
        read_ncu_csv_tables,
        "an ncu CSV export (--csv --page raw or details, or ncu's stdout)",
        (TEXT,),
    ),
)
