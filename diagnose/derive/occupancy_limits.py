"""What bounds a kernel's occupancy: the per-SM limit that allows the fewest resident blocks (the limiter), and
the occupancy its grid leaves room for.

Shared because the occupancy analyzer and ncu_rules (which sets ncu's AchievedOccupancy and TheoreticalOccupancy
rules against occupancy's criteria) must name the same limiter and the same grid ceiling for a kernel.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

LIMITS = {
    "registers": "occupancy_limit_registers",
    "shared_mem": "occupancy_limit_shared_mem",
    "warps": "occupancy_limit_warps",
    "blocks": "occupancy_limit_blocks",
}


def limiter(limits: pd.Series) -> str | None:
    """The limit(s) giving the fewest blocks per SM: ``registers``, or ``registers+blocks`` on a tie."""
    values = {name: limits[col] for name, col in LIMITS.items() if not pd.isna(limits[col])}
    if not values:
        return None
    low = min(values.values())
    return "+".join(name for name, v in values.items() if v == low)


def grid_ceiling_pct(stats: pd.DataFrame) -> pd.Series:
    """The occupancy the grid allows: an SM gets ceil(grid / SMs) blocks, at most the resident limit.

    Equal to theoretical when the grid fills every SM's slots; lower for grids of under one wave.
    """
    per_sm = np.ceil(stats["grid_size"] / stats["sm_count"])
    fill = (per_sm / stats["blocks_per_sm"]).clip(upper=1.0)
    return (stats["theoretical_occupancy_pct"] * fill).where(fill.notna(), stats["theoretical_occupancy_pct"])
