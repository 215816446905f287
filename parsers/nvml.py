"""NVML samples (``nvml.csv`` of a run folder) → one typed table.

The sampler in ``gpudiag profile`` writes one row per GPU per tick, unix-epoch
nanoseconds first. A reading the driver did not report is an empty cell and
becomes NaN. A run killed mid-write can leave a last line without its newline;
that line is dropped with a warning (the rest of the run is still good), while
any other malformed line is an error that names its line number.
"""

from __future__ import annotations

import csv
import io
import math
import os
import warnings

import pandas as pd

from parsers.errors import InputError
from parsers.limits import read_input
from parsers.reader import NVML, TEXT, Reader, first_line, is_json
from parsers.schema import F64, I64, Schema, conform

NVML_COLUMNS = (
    "t_ns",
    "gpu",
    "gpu_util_pct",
    "mem_util_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "power_w",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
    "temperature_c",
)

NVML_SCHEMA = Schema(
    name="nvml",
    columns={c: (I64 if c == "gpu" else F64) for c in NVML_COLUMNS},
    docs={
        "t_ns": "sample time, unix epoch ns",
        "gpu": "NVML device index",
        "gpu_util_pct": "share of the sample period a kernel was running (nvmlDeviceGetUtilizationRates.gpu)",
        "mem_util_pct": "share of the sample period device memory was read or written (.memory)",
        "mem_used_bytes": "device memory in use (nvmlDeviceGetMemoryInfo.used)",
        "mem_total_bytes": "device memory installed",
        "sm_clock_mhz": "SM clock",
        "mem_clock_mhz": "memory clock",
        "power_w": "board power draw",
        "pcie_tx_bytes_per_s": "PCIe transmit throughput",
        "pcie_rx_bytes_per_s": "PCIe receive throughput",
        "temperature_c": "GPU temperature",
    },
)


def read_nvml(path: str | os.PathLike) -> pd.DataFrame:
    """Read ``nvml.csv`` into a frame with :data:`NVML_SCHEMA` (sorted by time, then GPU)."""
    text = _read_text(path)
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise InputError(path, f"is empty; expected an NVML sample CSV with header {','.join(NVML_COLUMNS)}")
    try:
        header = [h.strip() for h in next(csv.reader([lines[0].lstrip("\ufeff")]), [])]
    except csv.Error as e:
        raise InputError(path, f"line 1: not a CSV header ({e})") from None
    if tuple(header) != NVML_COLUMNS:
        missing = [c for c in NVML_COLUMNS if c not in header]
        found = ",".join(header)[:200]
        raise InputError(
            path,
            f"line 1: expected the NVML header {','.join(NVML_COLUMNS)}, found {found!r}"
            + (f" (missing {', '.join(missing)})" if missing else ""),
        )
    ends_cleanly = text.endswith("\n")
    rows: list[list[float]] = []
    for index, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        is_last = index == len(lines)
        try:
            rows.append(_parse_row(line))
        except ValueError as e:
            if is_last and not ends_cleanly:
                warnings.warn(
                    f"{os.fspath(path)}: line {index} is cut short (the run stopped mid-write); ignored", stacklevel=2
                )
                break
            raise InputError(path, f"line {index}: {e}") from None
    frame = pd.DataFrame(rows, columns=list(NVML_COLUMNS))
    frame = frame.sort_values(["t_ns", "gpu"], kind="stable").reset_index(drop=True)
    return conform(frame, NVML_SCHEMA)


def _parse_row(line: str) -> list[float]:
    try:
        cells = next(csv.reader([line]), [])
    except csv.Error as e:
        raise ValueError(f"not a CSV row ({e})") from None
    if len(cells) != len(NVML_COLUMNS):
        raise ValueError(f"expected {len(NVML_COLUMNS)} comma-separated values, found {len(cells)}")
    values: list[float] = []
    for column, cell in zip(NVML_COLUMNS, cells):
        cell = cell.strip()
        if not cell:
            if column in ("t_ns", "gpu"):
                raise ValueError(f"{column} is empty; every sample needs a time and a GPU index")
            values.append(math.nan)
            continue
        try:
            value = float(cell)
        except ValueError:
            raise ValueError(f"{column} should be a number, found {cell[:40]!r}") from None
        if math.isinf(value):
            raise ValueError(f"{column} should be a finite number, found {cell!r}")
        if column == "gpu" and (math.isnan(value) or value != int(value) or value < 0):
            raise ValueError(f"gpu should be a device index (0, 1, …), found {cell!r}")
        if column == "t_ns" and math.isnan(value):
            raise ValueError("t_ns should be a number, found 'nan'")
        values.append(value)
    return values


def _read_text(path: str | os.PathLike) -> str:
    try:
        raw = read_input(path, lines=True, gunzip=False)  # within the caps of parsers/limits.py
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from None
    if b"\x00" in raw[:4096]:
        raise InputError(path, "is binary; expected an NVML sample CSV (text)")
    try:
        return io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8", newline="").read()
    except UnicodeDecodeError as e:
        raise InputError(path, f"is not UTF-8 text (byte {e.start}); expected an NVML sample CSV") from None


def is_nvml(head: bytes) -> bool:
    """gpudiag's NVML samples CSV (nvml.csv)."""
    if is_json(head):
        return False
    line = first_line(head)
    return line.startswith("t_ns,") and "gpu_util_pct" in line


READERS = (Reader("nvml", NVML, is_nvml, read_nvml, "an NVML samples CSV (nvml.csv)", (TEXT,)),)
