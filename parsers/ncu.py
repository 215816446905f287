"""Nsight Compute output → the kernels table: one row per profiled kernel launch, base units.

``read_ncu(path)`` takes any form ncu writes — a ``.ncu-rep`` (through NVIDIA's
``ncu_report``), ``--csv --page raw`` (human or ``--print-units base`` units),
``--csv --page details`` (with or without rule columns), or ncu's stdout with its
``==PROF==`` lines interleaved — gzip-compressed or not, and detects which from
the content. The standard columns analyzers use come first (``parsers.ncu_kernels.KERNELS_SCHEMA``);
every other metric follows as ``"<metric> [<base unit>]"``. Formats: docs/ncu-formats.md.
"""

from __future__ import annotations

import os
import zlib

import pandas as pd

from parsers.errors import InputError
from parsers.limits import open_input
from parsers.ncu_csv import read_ncu_csv
from parsers.ncu_csv import read_ncu_rules as read_csv_rules
from parsers.ncu_kernels import RULES_SCHEMA, short_name
from parsers.ncu_rep import is_ncu_rep, read_ncu_rep, read_ncu_rep_rules
from parsers.schema import conform


def read_ncu(path: str | os.PathLike) -> pd.DataFrame:
    """Any Nsight Compute output at ``path`` → the kernels table."""
    head = _head(path)
    return read_ncu_rep(path) if is_ncu_rep(head) else read_ncu_csv(path)


def read_ncu_rules(path: str | os.PathLike) -> pd.DataFrame:
    """ncu's rule results per launch (:data:`RULES_SCHEMA`): name, type, description, estimated speedup.

    A details CSV with the rule columns and a ``.ncu-rep`` carry them; a raw page gives the typed
    empty table (ncu does not export rules there).
    """
    head = _head(path)
    rules = read_ncu_rep_rules(path) if is_ncu_rep(head) else read_csv_rules(path)
    rules = rules.rename(columns={"rule_name": "rule", "rule_type": "type"})
    names = rules["kernel_name"].astype(object)
    rules["kernel_short"] = names.map({n: short_name(n) for n in pd.unique(names)})
    return conform(rules, RULES_SCHEMA)


def _head(path) -> bytes:
    try:
        with open_input(path) as f:
            return f.read(8)
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(path, f"cannot read as Nsight Compute output: {e}") from None
