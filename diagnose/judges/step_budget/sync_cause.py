"""How ``step_budget.sync`` names its sites: the sync analyzer's sites (diagnose.derive.sync_sites), ranked by its
cost over the traced steps, each with its share of this part of the median step."""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive.sync_sites import advice_for, group_syncs, where_words
from diagnose.findings import Subject
from diagnose.formatting import ms_human, share_human


def sync_words(
    calls: pd.DataFrame | None,
    what: str,
    where: str,
    rank_words: str,
    whole_ms: float = np.nan,
    n_traced: int | None = None,
) -> tuple[str, str, list[Subject]]:
    """The sync finding's title, fix and location subjects, costliest first.

    The sites are the sync analyzer's, ranked by its cost (rank_calls, group_syncs) over the traced steps
    and named as it names them (where_words); each is given its share of those syncs' GPU idle, and that share
    of this part (``whole_ms``, the median step's): a site never exceeds the whole it is part of (issue 28:
    "1.47 ms of the 17.8 ms median step … the costliest is aten::item at main.py:0 (13.8 ms a step)")."""
    title = f"Host syncs hold the GPU idle {what}{rank_words}{where}"
    if calls is None or not len(calls):
        return title, "Move the synchronising calls out of the step (see the sync section).", []
    n = n_traced or max(1, calls["step"].nunique())
    groups = group_syncs(calls, n, np.nan)  # the sync analyzer's rows per (location, op), costliest first
    idle_ms = np.nan_to_num(groups["gpu_idle_ms"].to_numpy(dtype=float))
    shares = idle_ms / idle_ms.sum() if idle_ms.sum() > 0 else np.full(len(groups), np.nan)
    part_ms = shares * whole_ms if np.isfinite(whole_ms) else np.full(len(groups), np.nan)
    top = groups.iloc[0]
    top_where = where_words(
        top["location"], top["function"], top["file"], bool(top["line_exact"]), top.get("library_location")
    )
    if np.isfinite(part_ms[0]):
        title += f"; the costliest, {top['op']} at {top_where}, holds {share_human(shares[0], 0)} of it ({ms_human(part_ms[0])})"
    else:
        title += f"; the costliest is {top['op']} at {top_where}"
    subjects = [
        Subject(
            "location",
            str(g.location),
            figures={
                "op": str(g.op),
                "share_of_sync_idle": None if not np.isfinite(sh) else float(sh),
                # this site's part of the part (its share of the syncs' idle in the traced steps), of the median
                # step; gpu_idle_ms_per_step is the sync analyzer's figure, per traced step, as in its own table
                "median_step_gpu_idle_ms": None if not np.isfinite(pm) else float(pm),
                "gpu_idle_ms_per_step": float(np.nan_to_num(g.gpu_idle_ms_per_step)),
                "blocked_ms_per_step": float(g.blocked_ms_per_step),
                "count_per_step": float(g.count_per_step),
                "line_exact": bool(g.line_exact),
            },
        )
        for g, sh, pm in zip(groups.head(10).itertuples(), shares, part_ms)
    ]
    fix = f"At {top_where}: {advice_for(str(top['op']), str(top['calls']), top.get('library_location'))}."
    return title, fix, subjects
