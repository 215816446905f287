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


def step_own_code(work: pd.DataFrame, th: Thresholds) -> pd.Series:
    """Which rows of a work table are host-code records of a step's own code (bool, aligned with ``work``)."""
    if "ordinary_share" not in work:
        return pd.Series(False, index=work.index)
    return (work["what"] == WORK_HOST_CODE) & (work["ordinary_share"] >= th.step_budget.own_code_min_share)


def extra_work(work: pd.DataFrame | None, th: Thresholds) -> pd.DataFrame | None:
    """``work`` less the host-code records of a step's own code: the work records that can explain a slow step."""
    if work is None or not len(work):
        return work
    own = step_own_code(work, th)
    return work[~own] if own.any() else work


def own_code_records(work: pd.DataFrame | None, th: Thresholds) -> pd.DataFrame | None:
    """The host-code records of a step's own code (None when there are none): the steps that ran slower with no
    work of their own, which the steps analyzer puts down to the host, not the script."""
    if work is None or not len(work):
        return None
    own = step_own_code(work, th)
    return work[own] if own.any() else None
