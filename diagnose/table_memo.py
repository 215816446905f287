"""Values derived from one table, worked out once per table and columns.

Every ncu analyzer asks for the same things about the kernels table: which kernel each launch belongs
to, the limiter breakdown's per-kernel means. On a 100,000-launch capture each costs tens of milliseconds
(hashing 100,000 kernel names of ~230 characters) and was asked for dozens of times per report.

An entry lives as long as its table (a weak reference) and holds only while the columns it was computed
from are the same arrays (their buffers' addresses, shapes and strides): assigning a column gives a new
array and a recomputation. Callers must not change what they get back; copy it first.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import TypeVar

import pandas as pd

T = TypeVar("T")
_MEMO: dict[tuple[int, str], tuple[weakref.ref, tuple, object]] = {}


def _columns_token(table: pd.DataFrame, columns: Iterable[str]) -> tuple:
    token = []
    for c in columns:
        if c not in table.columns:
            token.append((c, None))
            continue
        values = table[c].to_numpy()
        interface = getattr(values, "__array_interface__", None)
        if interface is None:  # an extension array: no stable buffer to compare, never reuse
            return (object(),)
        token.append((c, interface["data"][0], values.shape, values.strides, values.dtype.str))
    return (len(table), tuple(table.columns).__hash__(), tuple(token))


def memo(table: pd.DataFrame, name: str, columns: Iterable[str], compute: Callable[[], T]) -> T:
    """``compute()``, or what it returned for this ``table`` and ``name`` while ``columns`` are unchanged."""
    columns = tuple(columns)
    key = (id(table), name)
    token = _columns_token(table, columns)
    hit = _MEMO.get(key)
    if hit is not None and hit[0]() is table and hit[1] == token:
        return hit[2]  # type: ignore[return-value]
    value = compute()

    def forget(ref, key=key):
        if _MEMO.get(key, (None,))[0] is ref:
            del _MEMO[key]

    _MEMO[key] = (weakref.ref(table, forget), token, value)
    return value
