"""Declared table schemas: what every parser promises its analyzers.

A schema is an ordered mapping of column name to pandas dtype. Column names carry
their unit (``dur_ns``, ``bytes``, ``l2_hit_pct``). Parsers end with
:func:`conform`, which adds missing declared columns as NaN / empty, casts to the
declared dtypes and keeps any extra columns (e.g. every ncu metric) after them.
:func:`empty` gives the typed empty frame an absent input stands for.

Each parser module declares its own ``*_SCHEMA`` next to the code that fills it,
built with :class:`Schema` from here, so a schema and its parser change together.
``docs/tables.md`` lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# dtypes used in schemas. Strings are object columns so pandas 2 and 3 behave alike.
STR = "object"
F64 = "float64"
I64 = "int64"  # only for columns that are never missing
BOOL = "bool"
CAT = "category"


@dataclass(frozen=True)
class Schema:
    """Name, ordered columns and a one-line description of each."""

    name: str
    columns: dict[str, str]
    docs: dict[str, str] = field(default_factory=dict)

    def empty(self) -> pd.DataFrame:
        return empty(self)


_EMPTY: dict[tuple, pd.DataFrame] = {}  # one zero-row frame per declared schema, copied out


def empty(schema: Schema) -> pd.DataFrame:
    """A zero-row frame with every declared column at its declared dtype (a copy of one built once per schema:
    building it column by column cost ~1.5 ms, asked for several times a report)."""
    key = (schema.name, tuple(schema.columns.items()))
    template = _EMPTY.get(key)
    if template is None:
        template = _EMPTY[key] = pd.DataFrame({c: _no_rows(d) for c, d in schema.columns.items()}, copy=False)
    return template.copy()


def _no_rows(dtype: str):
    """A zero-length column of ``dtype``, as ``pd.Series([], dtype=dtype)`` holds it (a Series each cost ~0.15 ms)."""
    return pd.Categorical([]) if dtype == CAT else np.empty(0, dtype=dtype)


def conform(df: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    """Give ``df`` the declared columns (first, in order, at their dtypes); keep extras after."""
    out = {}
    n = len(df)
    for col, dtype in schema.columns.items():
        if col in df.columns:
            s = df[col]
            if dtype == F64:
                s = pd.to_numeric(s, errors="coerce").astype(F64)
            elif dtype == I64:
                s = pd.to_numeric(s, errors="raise").astype(I64)
            elif dtype == BOOL:
                s = s.fillna(False).astype(BOOL)
            elif dtype == CAT:
                s = s.astype("category")
            elif dtype == STR:
                s = s.astype(object).where(s.notna(), None)
            out[col] = s.reset_index(drop=True)
        else:
            if dtype == F64:
                out[col] = pd.Series(np.full(n, np.nan), dtype=F64)
            elif dtype == I64:
                out[col] = pd.Series(np.zeros(n, dtype=np.int64))
            elif dtype == BOOL:
                out[col] = pd.Series(np.zeros(n, dtype=bool))
            elif dtype == CAT:
                out[col] = pd.Series([None] * n, dtype="category")
            else:
                out[col] = pd.Series([None] * n, dtype=object)
    extras = [c for c in df.columns if c not in schema.columns]
    result = pd.DataFrame(out)
    if extras:
        result = pd.concat([result, df[extras].reset_index(drop=True)], axis=1)
    return result


def missing_columns(df: pd.DataFrame, schema: Schema) -> list[str]:
    """Declared columns that ``df`` lacks (used by tests and validators)."""
    return [c for c in schema.columns if c not in df.columns]
