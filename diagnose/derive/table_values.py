"""Values worked out once from one table of a Profile, held by that Profile's Derived (never a global memo).

Every ncu analyzer asks the same things of the kernels table: which kernel each launch belongs to, the short
names, the limiter breakdown's per-kernel means. On a 100,000-launch capture each costs tens of milliseconds
(hashing 100,000 kernel names of ~230 characters) and was asked for dozens of times per report.

A ``TableValues`` belongs to one Profile's Derived and lives as long as it. A value is found again for any table
whose columns it was computed from are the same arrays (their buffers' addresses, shapes and strides): the
Profile's kernels table, or the narrower frame an analyzer cut from it once and asks about ten times. The entry
holds those arrays, so no buffer is freed and its address reused while the entry lives; assigning a column gives a
new array and a recomputation. Callers must not change what they get back; copy it first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import pandas as pd

T = TypeVar("T")


class TableValues:
    """What was worked out from the tables of one Profile, by name and the arrays of the columns it read."""

    def __init__(self):
        self._values: dict[tuple, tuple[list, object]] = {}

    def get(self, table: pd.DataFrame, name: str, columns: Iterable[str], compute: Callable[[], T]) -> T:
        """``compute()``, or what it returned for ``name`` and a table with the same ``columns`` arrays."""
        token, arrays = _columns_token(table, tuple(columns))
        if token is None:
            return compute()
        hit = self._values.get((name, token))
        if hit is not None:
            return hit[1]  # type: ignore[return-value]
        value = compute()
        self._values[(name, token)] = (arrays, value)
        return value


def values_of(values: TableValues | None, table: pd.DataFrame, name: str, columns: Iterable[str], compute):
    """``values.get(...)``, or ``compute()`` without a TableValues."""
    return compute() if values is None else values.get(table, name, columns, compute)


def _columns_token(table: pd.DataFrame, columns: tuple[str, ...]) -> tuple[tuple | None, list]:
    """(the columns' buffers, shapes and strides; the arrays themselves), or (None, []) where a column has no
    stable buffer (an extension array): never reused then."""
    token, arrays = [], []
    for c in columns:
        if c not in table.columns:
            token.append((c, None))
            continue
        array = table[c].to_numpy()
        interface = getattr(array, "__array_interface__", None)
        if interface is None:
            return None, []
        arrays.append(array)
        token.append((c, interface["data"][0], array.shape, array.strides, array.dtype.str))
    return (len(table), tuple(token)), arrays
