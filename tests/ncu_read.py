"""An Nsight Compute file's tables in a test, read as `gpudiag report` reads them: :mod:`parsers.registry`
recognises the form from the content, and that form's reader (parsers/ncu_csv.py, parsers/ncu_rep.py) returns
(kernels, rules)."""

from __future__ import annotations

import os

import pandas as pd

from parsers import registry
from parsers.errors import InputError
from parsers.reader import KERNELS


def ncu_tables(path: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kernels, rules) of an ncu CSV page, ncu's stdout or a .ncu-rep, gzipped or not."""
    reader = registry.detect(path)
    if reader is None or reader.table != KERNELS:
        raise InputError(path, f"is read as {reader.kind if reader else 'a run folder'}, not as Nsight Compute output")
    return reader.read(path)


def ncu_kernels(path: str | os.PathLike) -> pd.DataFrame:
    """The kernels table (parsers.ncu_kernels.KERNELS_SCHEMA first) of one ncu file."""
    return ncu_tables(path)[0]


def ncu_rules(path: str | os.PathLike) -> pd.DataFrame:
    """ncu's rule results (parsers.ncu_kernels.RULES_SCHEMA) of one ncu file; empty for a raw page."""
    return ncu_tables(path)[1]
