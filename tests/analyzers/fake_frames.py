"""Hand-made ncu kernels tables for unit tests (not captures): exactly the contract's columns.

``fake_kernels([...])`` takes one dict per launch; unspecified contract columns are NaN/None
(as the parser leaves metrics ncu did not collect). ``kernel_name`` defaults to ``kernel_short``.
"""

from __future__ import annotations

import pandas as pd

import diagnose
from parsers.ncu_kernels import KERNELS_SCHEMA
from parsers.schema import conform


def fake_kernels(launches: list[dict]) -> pd.DataFrame:
    rows = []
    for i, launch in enumerate(launches):
        row = {"launch_id": i, "sm_count": 132.0, **launch}
        row.setdefault("kernel_name", row.get("kernel_short"))
        rows.append(row)
    df = conform(pd.DataFrame(rows), KERNELS_SCHEMA)
    assert list(df.columns) == list(KERNELS_SCHEMA.columns), "fake frames carry only the contract's columns"
    return df


def fake_profile(launches: list[dict]) -> diagnose.Profile:
    return diagnose.Profile(sources=["fake"], kernels=fake_kernels(launches))


def repeat(n: int, **launch) -> list[dict]:
    return [dict(launch) for _ in range(n)]


def fake_kernels_with_metrics(launches: list[dict]) -> pd.DataFrame:
    """Like :func:`fake_kernels`, and a key that is no contract column is a raw metric column (named as the parsers
    name them: ``"<metric> [<base unit>]"`` or the bare metric), kept after the contract's columns."""
    rows = []
    for i, launch in enumerate(launches):
        row = {"launch_id": i, "sm_count": 132.0, **launch}
        row.setdefault("kernel_name", row.get("kernel_short"))
        rows.append(row)
    df = conform(pd.DataFrame(rows), KERNELS_SCHEMA)
    assert list(df.columns[: len(KERNELS_SCHEMA.columns)]) == list(KERNELS_SCHEMA.columns)
    return df


def fake_rules(rows: list[dict]) -> pd.DataFrame:
    """A hand-made ncu rules table (``RULES_SCHEMA``): one dict per fired rule; unspecified columns are NaN/None."""
    from parsers.ncu_kernels import RULES_SCHEMA

    return conform(pd.DataFrame(rows), RULES_SCHEMA)
