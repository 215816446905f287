"""Long steps whose sampled Python is the step's own code: slower, not doing more.

Light mode samples the Python of a step that runs long (diagnose/launch/runtime/long_step_code.py) and writes what
it ran as a ``host-code`` work record, which the step budget names as the work that makes those steps slow. That
holds for an evaluation, a save or a metric every N steps: called from lines of the loop the ordinary steps
are not at. It does not hold
for a step whose own code only ran slower: on a 2-core host busy with other processes, a Lightning run had 17
irregular steps 73 ms slower, every one sampled in ``_AutomaticOptimization.run()`` under the loop line every
ordinary step runs, and the report named Lightning's own step as critical periodic work. Each record says what
share of its samples were at a line of the loop where ordinary steps were (``ordinary_share``); where that is
``own_code_min_share`` or more, the record is left out of the work that explains slow steps, which then stay
unexplained."""

from __future__ import annotations

import pandas as pd

from diagnose.thresholds import Thresholds
from parsers.run_records import WORK_HOST_CODE

KEY = ["rank", "location", "name", "library_location"]  # one function's line, as a record names it


def step_own_code(work: pd.DataFrame, th: Thresholds) -> pd.Series:
    """Which rows of a work table are host-code records of a step's own code (bool, aligned with ``work``).

    A record written before 5 ordinary steps were sampled has no ``ordinary_share``; it counts as the step's own code
    when a record of the same rank, function and line has one that says so. A flax loop on the busy 2-core host had
    its first slow steps (25-30, at the jitted step's call line) without one and two later ones at that line with
    1.0: the periodic finding had listed those early steps beside the evaluation's."""
    if "ordinary_share" not in work:
        return pd.Series(False, index=work.index)
    host = work["what"] == WORK_HOST_CODE
    own = host & (work["ordinary_share"] >= th.step_budget.own_code_min_share)
    unknown = host & work["ordinary_share"].isna()
    if own.any() and unknown.any():
        keys = work.loc[own, KEY].fillna("").drop_duplicates()
        same = work.loc[unknown, KEY].fillna("").merge(keys, how="left", on=KEY, indicator=True)
        own.loc[unknown[unknown].index] = (same["_merge"] == "both").to_numpy()
    return own


def split_work(work: pd.DataFrame | None, th: Thresholds) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(``work`` less the host-code records of a step's own code: the records that can explain a slow step; those
    records, None when there are none: the steps that ran slower with no work of their own, which the steps analyzer
    puts down to the host). ``Derived.work_split`` keeps it per rank: the step and run budgets and the steps
    analyzer read it."""
    if work is None or not len(work):
        return work, None
    own = step_own_code(work, th)
    return (work[~own], work[own]) if own.any() else (work, None)
