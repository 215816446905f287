"""Per-kernel aggregates of the ncu kernels table, shared by the ncu analyzers.

ncu gives one row per launch; findings speak of kernels. A kernel here is one
demangled function instance (``kernel_name``): ``vectorized_elementwise_kernel``
filling a buffer and the same template clamping a tensor are different kernels with
different behaviour, so they are not merged although they share a short name.
Launches of one kernel are summed in time and their metrics averaged weighted by
duration, so a 2 ms launch counts 1000 times a 2 µs one. Launches without a
reading (NaN) leave that metric's mean and its weights alone.

Each aggregate row carries ``kernel`` (a label unique in the capture: the short
name, with `` #2``, `` #3`` … for further instances sharing it, heaviest first),
``kernel_short`` (what findings name as the subject), ``kernel_name`` (full) and ``kernel_note`` (for a ``#k``
label, which template arguments and launch shape tell it from the first of its name: diagnose.derive.kernel_instances).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive.kernel_instances import instance_notes
from diagnose.derive.table_values import TableValues, values_of
from diagnose.formatting import count_human

# kernel_note: what tells a "#2" label from the first kernel of its short name (diagnose.derive.kernel_instances)
KEY_COLUMNS = [
    "kernel",
    "kernel_short",
    "kernel_name",
    "launches",
    "gpu_time_ns",
    "mean_dur_ns",
    "share",
    "kernel_note",
]


def total_gpu_time_ns(kernels: pd.DataFrame) -> float:
    """All profiled GPU time (sum of gpu__time_duration.sum); 0 when no launch has a duration."""
    return float(kernels["dur_ns"].sum(skipna=True)) if len(kernels) else 0.0


def weighted_mean(values: pd.Series, weights: pd.Series) -> float:
    """Duration-weighted mean ignoring NaN values (and their weights); NaN when nothing is left."""
    v = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    w = pd.to_numeric(weights, errors="coerce").to_numpy(dtype=float)
    return weighted_mean_of_arrays(v, w)


def weighted_mean_of_arrays(v: np.ndarray, w: np.ndarray) -> float:
    """:func:`weighted_mean` on float arrays: the same arithmetic without the pandas conversions."""
    ok = ~np.isnan(v) & ~np.isnan(w)
    if not ok.any():
        v_ok = v[~np.isnan(v)]
        return float(np.mean(v_ok)) if len(v_ok) else float("nan")
    if w[ok].sum() <= 0:
        return float(np.mean(v[ok]))
    return float(np.average(v[ok], weights=w[ok]))


def kernel_key(kernels: pd.DataFrame, memo: TableValues | None = None) -> pd.Series:
    """The grouping key of each launch: the full name, else the short name, else a placeholder (object str)."""
    key = values_of(memo, kernels, "kernel_key", ("kernel_name", "kernel_short"), lambda: _kernel_key(kernels))
    return pd.Series(key, index=kernels.index, dtype=object, copy=True)


def _kernel_key(kernels: pd.DataFrame) -> np.ndarray:
    key = _text_where_present(kernels["kernel_name"])
    missing = pd.isna(key)
    if missing.any():
        shorts = kernels["kernel_short"].to_numpy(dtype=object)[missing]
        key[missing] = ["<unnamed kernel>" if pd.isna(s) else str(s) for s in shorts]
    return key


def kernel_groups(kernels: pd.DataFrame, memo: TableValues | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(each launch's group code, the kernel keys in sorted order): ``keys[codes]`` is :func:`kernel_key`.

    Every ncu analyzer groups launches by kernel; grouping by these int codes gives pandas' results in the
    same sorted order without hashing the 100,000 key strings again per groupby (1.3 s of a report).
    """
    return values_of(
        memo, kernels, "kernel_groups", ("kernel_name", "kernel_short"), lambda: _kernel_groups(kernels, memo)
    )


def _kernel_groups(kernels: pd.DataFrame, memo: TableValues | None) -> tuple[np.ndarray, np.ndarray]:
    codes, keys = pd.factorize(kernel_key(kernels, memo).to_numpy(), sort=True)
    return codes, np.asarray(keys, dtype=object)


def by_kernel(grouped: pd.Series | pd.DataFrame, keys: np.ndarray):
    """A result grouped by :func:`kernel_groups` codes, indexed by the kernel keys instead."""
    return grouped.set_axis(pd.Index(keys[grouped.index.to_numpy()], dtype=object), axis=0)


def short_names(kernels: pd.DataFrame, memo: TableValues | None = None) -> pd.Series:
    """kernel_short of each launch, falling back to the key when the parser had none."""
    short = values_of(
        memo, kernels, "short_names", ("kernel_name", "kernel_short"), lambda: _short_names(kernels, memo)
    )
    return pd.Series(short, index=kernels.index, dtype=object, copy=True)


def _short_names(kernels: pd.DataFrame, memo: TableValues | None) -> np.ndarray:
    short = _text_where_present(kernels["kernel_short"])
    missing = pd.isna(short)
    if missing.any():
        short[missing] = kernel_key(kernels, memo).to_numpy()[missing]
    return short


def _text_where_present(values: pd.Series) -> np.ndarray:
    """Each value as ``str``, None where it is missing or empty. Worked out once per distinct value: a
    100,000-launch table has a few dozen kernel names, and these keys are asked for by every ncu analyzer."""
    codes, distinct = pd.factorize(values.to_numpy(dtype=object))
    text = [str(v) for v in distinct]
    lookup = np.array([t if t != "" else None for t in text] + [None], dtype=object)
    return lookup[codes]


def slim(kernels: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """The naming columns, dur_ns and ``columns`` only: ncu tables carry hundreds of metrics, so work on fewer."""
    keep = ["kernel_name", "kernel_short", "dur_ns", *[c for c in columns if c in kernels.columns]]
    return kernels[list(dict.fromkeys(keep))]


def per_kernel(kernels: pd.DataFrame, metrics: list[str] = (), memo: TableValues | None = None) -> pd.DataFrame:
    """One row per kernel: KEY_COLUMNS, then each metric's duration-weighted mean.

    ``share`` is the kernel's share of all profiled GPU time in ``kernels``. Sorted by
    GPU time, largest first (ties by name). Metrics absent from the table come out NaN.
    """
    metrics = list(metrics)
    cols = KEY_COLUMNS + metrics
    if not len(kernels):
        return pd.DataFrame(
            {c: pd.Series([], dtype=object if c in ("kernel", "kernel_short", "kernel_name") else float) for c in cols}
        )
    codes, keys = kernel_groups(kernels, memo)
    dur = pd.to_numeric(kernels["dur_ns"], errors="coerce").astype(float)
    frame = pd.DataFrame({"key": codes, "short": short_names(kernels, memo).to_numpy(), "dur": dur.to_numpy()})
    g = frame.groupby("key")
    out = pd.DataFrame(
        {
            "kernel_short": g["short"].first(),
            "launches": g.size().astype(int),
            "gpu_time_ns": g["dur"].sum(min_count=1).fillna(0.0),
            "mean_dur_ns": g["dur"].mean(),
        }
    )
    total = total_gpu_time_ns(kernels)
    out["share"] = out["gpu_time_ns"] / total if total > 0 else np.nan
    # weights: the launch's duration; where no launch of a kernel has one, every launch counts the same
    w = frame["dur"].fillna(0.0)
    for m in metrics:
        if m not in kernels.columns:
            out[m] = np.nan
            continue
        v = pd.to_numeric(kernels[m], errors="coerce").astype(float).to_numpy()
        ok = ~np.isnan(v)
        num = pd.Series(np.where(ok, v * w, 0.0)).groupby(frame["key"]).sum()
        den = pd.Series(np.where(ok, w, 0.0)).groupby(frame["key"]).sum()
        plain = pd.Series(np.where(ok, v, np.nan)).groupby(frame["key"]).mean()
        mean = (num / den).where(den > 0, plain)
        out[m] = mean.reindex(out.index)
    out = by_kernel(out, keys)
    out = out.rename_axis("kernel_name").reset_index()
    out = out.sort_values(["gpu_time_ns", "kernel_name"], ascending=[False, True], kind="stable").reset_index(drop=True)
    out.insert(0, "kernel", unique_labels(out["kernel_short"]))
    out["kernel_note"] = _notes(kernels, out, codes, keys)
    return out[cols]


def _notes(kernels: pd.DataFrame, out: pd.DataFrame, codes: np.ndarray, keys: np.ndarray) -> list[str | None]:
    """Each ``#k`` label's note (diagnose.derive.kernel_instances); the launch shapes are worked out only for
    kernels whose short name repeats (a handful)."""
    shorts = [str(s) for s in out["kernel_short"]]
    repeated = {s for s in shorts if shorts.count(s) > 1}
    if not repeated:
        return [None] * len(out)
    configs: list[str | None] = [None] * len(out)
    if "grid_size" in kernels.columns and "block_size" in kernels.columns:
        # by the launches' group codes, only the repeated kernels' launches: no per-launch Python or string work
        code_of_key = {k: c for c, k in enumerate(keys)}
        row_of_code = {code_of_key[k]: i for i, (k, s) in enumerate(zip(out["kernel_name"], shorts)) if s in repeated}
        mask = np.isin(codes, np.fromiter(row_of_code, dtype=np.int64, count=len(row_of_code)))
        frame = pd.DataFrame(
            {
                "code": codes[mask],
                "grid": pd.to_numeric(kernels["grid_size"].to_numpy()[mask], errors="coerce"),
                "block": pd.to_numeric(kernels["block_size"].to_numpy()[mask], errors="coerce"),
                "dur": np.nan_to_num(pd.to_numeric(kernels["dur_ns"].to_numpy()[mask], errors="coerce")),
            }
        ).dropna(subset=["grid", "block"])
        if len(frame):
            top = frame.groupby(["code", "grid", "block"])["dur"].sum().reset_index()
            top = top.sort_values(["code", "dur"], ascending=[True, False]).drop_duplicates("code")
            for c, g, b in zip(top["code"], top["grid"], top["block"]):
                configs[row_of_code[int(c)]] = f"grid {count_human(g)} × {count_human(b)} threads"
    labels, fulls = list(out["kernel"]), [str(n) for n in out["kernel_name"]]
    return instance_notes(labels, shorts, fulls, configs)


def unique_labels(short: pd.Series) -> list[str]:
    """Short names made unique in order: the first keeps the name, later ones get `` #2``, `` #3`` …"""
    seen: dict[str, int] = {}
    labels = []
    for name in short:
        seen[name] = seen.get(name, 0) + 1
        labels.append(name if seen[name] == 1 else f"{name} #{seen[name]}")
    return labels


def label_of_launch(kernels: pd.DataFrame, stats: pd.DataFrame, memo: TableValues | None = None) -> pd.Series:
    """Each launch's kernel label (``stats["kernel"]``), matched through its full-name key."""
    codes, keys = kernel_groups(kernels, memo)
    label_of_key = dict(zip(stats["kernel_name"], stats["kernel"]))
    labels = np.array([label_of_key.get(k, np.nan) for k in keys] + [np.nan], dtype=object)
    return pd.Series(labels[codes], index=kernels.index, dtype=object)


def per_kernel_sum(
    kernels: pd.DataFrame, values: pd.Series, stats: pd.DataFrame, memo: TableValues | None = None
) -> pd.Series:
    """A per-launch quantity (e.g. ns lost) summed per kernel, aligned with ``stats`` rows."""
    codes, keys = kernel_groups(kernels, memo)
    summed = by_kernel(pd.Series(values.to_numpy(dtype=float)).groupby(codes).sum(min_count=1), keys)
    return stats["kernel_name"].map(summed).astype(float)


def most_common(kernels: pd.DataFrame, column: str, stats: pd.DataFrame, memo: TableValues | None = None) -> pd.Series:
    """The value of ``column`` that carries the most GPU time per kernel (its typical grid, block …)."""
    if column not in kernels.columns:
        return pd.Series(np.nan, index=stats.index)
    codes, keys = kernel_groups(kernels, memo)
    frame = pd.DataFrame(
        {
            "key": codes,
            "v": pd.to_numeric(kernels[column], errors="coerce").to_numpy(dtype=float),
            "w": pd.to_numeric(kernels["dur_ns"], errors="coerce").fillna(0.0).to_numpy() + 1e-9,
        }
    )
    frame = frame[frame["v"].notna()]
    if not len(frame):
        return pd.Series(np.nan, index=stats.index)
    weight = frame.groupby(["key", "v"])["w"].sum().reset_index()
    top = weight.sort_values(["key", "w", "v"], ascending=[True, False, True]).drop_duplicates("key")
    return stats["kernel_name"].map(dict(zip(keys[top["key"].to_numpy()], top["v"]))).astype(float)


def sm_count(kernels: pd.DataFrame) -> float:
    """The GPU's SM count from the capture (device attribute), NaN when ncu did not record it."""
    if "sm_count" in kernels and kernels["sm_count"].notna().any():
        return float(kernels["sm_count"].dropna().iloc[0])
    return float("nan")


def launches_figure(row: pd.Series) -> dict:
    """The figures every kernel subject carries (the full name tells same-named instances apart)."""
    figures = {
        "launches": int(row["launches"]),
        "gpu_time_ns": float(row["gpu_time_ns"]),
        "mean_dur_ns": float(row["mean_dur_ns"]),
        "share": float(row["share"]),
        "kernel_name": str(row["kernel_name"]),
    }
    note = row.get("kernel_note")
    if isinstance(note, str):
        figures["kernel_note"] = note
    return figures


def kernel_subject_name(row: pd.Series) -> str:
    """The subject name of a kernel row: its short name (docs/contracts.md)."""
    return str(row["kernel_short"])


def names_list(rows: pd.DataFrame, limit: int = 3) -> str:
    """``a, b and 2 more``: kernels named in a recommendation."""
    names = list(rows["kernel"])
    head = ", ".join(names[:limit])
    return head + (f" and {len(names) - limit} more" if len(names) > limit else "")
