"""Two ncu files of one report, read once: their launches merged, not counted twice.

A user exports the pages of one report into one folder (``raw.csv``, ``details.csv``, the ``.ncu-rep`` itself)
and points gpudiag at it. Appending them would count every launch twice: each kernel's GPU time, launch count
and share of GPU time would be wrong. Two tables describe the same launches when one's launches are all among
the other's, a launch named by its ID in the report, its kernel's short name (a ``.ncu-rep`` names kernels with
their namespaces, ``at::native::vectorized_elementwise_kernel<(int)4, …>``, the CSV pages without) and its grid
and block, and when every matched launch agrees on its process (where both tables know it: the ``.ncu-rep``
reader does not) and on its duration within ``DURATION_TOLERANCE`` (the details page rounds to 3 digits; two runs
of one script, whose IDs, kernels and grids are the same, differ more, and their CSV pages name their processes).
Then the launches are kept once: the values of the table with more columns, completed from the other.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

KEY = ("launch_id", "kernel_short", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
DURATION_TOLERANCE = 0.005


def _keys(kernels: pd.DataFrame) -> pd.MultiIndex | None:
    """The launches' keys, or None where a key column is missing or empty, or a key repeats (not one report)."""
    if not all(c in kernels.columns for c in KEY) or kernels[list(KEY[:2])].isna().any().any():
        return None
    index = pd.MultiIndex.from_frame(kernels[list(KEY)].astype(object).where(kernels[list(KEY)].notna(), None))
    return None if index.has_duplicates else index


def same_launches(old: pd.DataFrame, new: pd.DataFrame) -> bool:
    """Whether every launch of one table is a launch of the other (pages of one report)."""
    a, b = _keys(old), _keys(new)
    if a is None or b is None or not len(a) or not len(b):
        return False
    if not (b.isin(a).all() or a.isin(b).all()):
        return False
    x, y = old.set_axis(a), new.set_axis(b)
    common = a.intersection(b)
    x, y = x.loc[common], y.loc[common]
    pid_x, pid_y = (pd.to_numeric(t["process_id"], errors="coerce") for t in (x, y))
    both = pid_x.notna() & pid_y.notna()
    if (pid_x[both] != pid_y[both]).any():
        return False
    dur_x, dur_y = (pd.to_numeric(t["dur_ns"], errors="coerce").to_numpy(dtype=float) for t in (x, y))
    return bool(np.all(np.abs(dur_x - dur_y) <= DURATION_TOLERANCE * np.maximum(dur_x, dur_y)))


def merge(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """The launches of both once, in ``old``'s order then ``new``'s others; each value from the table with more
    columns where it has one."""
    a, b = old.set_axis(_keys(old)), new.set_axis(_keys(new))
    first, second = (a, b) if a.shape[1] >= b.shape[1] else (b, a)
    merged = first.combine_first(second)
    order = a.index.append(b.index[~b.index.isin(a.index)])
    columns = list(dict.fromkeys([*old.columns, *new.columns]))
    merged = merged.reindex(index=order, columns=columns)
    for c in columns:  # combine_first widens a column one table lacks to object: give it its own dtype back
        source = old[c] if c in old.columns else new[c]
        if merged[c].dtype != source.dtype:
            try:
                merged[c] = merged[c].astype(source.dtype)
            except (TypeError, ValueError):
                pass
    return merged.reset_index(drop=True)


def merge_rules(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Rule results of both, each launch's from one table: ``new``'s rows only for launches ``old`` has none for
    (a launch may hold several rows of one rule, so rows are not deduplicated one by one)."""
    key = [c for c in ("launch_id", "kernel_short") if c in old.columns and c in new.columns]
    if not len(old) or not key:
        return new if not len(old) else pd.concat([old, new], ignore_index=True)
    have = pd.MultiIndex.from_frame(old[key].astype(object))
    fresh = ~pd.MultiIndex.from_frame(new[key].astype(object)).isin(have)
    return pd.concat([old, new[fresh]], ignore_index=True)
