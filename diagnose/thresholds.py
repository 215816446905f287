"""Every threshold gpudiag judges by, in one place, with why it has that value.

Override from the CLI (``--threshold l2.warning_pct=80``, repeatable) or a config
file (``--config gpudiag.toml`` with ``[l2] warning_pct = 80`` or the same in JSON).
``docs/thresholds.md`` is generated from the docstrings below.
"""
from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from parsers.errors import InputError


@dataclass(frozen=True)
class L2:
    """L2 hit rate (``lts__t_sector_hit_rate.pct``) bands.

    Healthy training kernels sit above 85 %; a sustained drop under 62 % is the sign
    of a working set that thrashes L2.
    """

    warning_pct: float = 85.0
    critical_pct: float = 62.0
    dram_bound_pct: float = 60.0  # DRAM throughput % of peak above which a low-hit kernel is DRAM-bound
    min_kernel_share: float = 0.005  # ignore kernels under 0.5 % of GPU time


@dataclass(frozen=True)
class Occupancy:
    """Achieved vs theoretical occupancy: a gap over 10 points means warps are not resident."""

    gap_pts: float = 10.0
    critical_gap_pts: float = 30.0
    min_kernel_share: float = 0.005


@dataclass(frozen=True)
class LaunchConfig:
    """Grid and block shape: fewer blocks than SMs leaves SMs idle; a partial last wave wastes a tail."""

    min_waves: float = 1.0  # grids under one full wave of SMs
    tail_waste_pct: float = 25.0  # share of the last wave left idle, for grids of few waves
    max_waves_for_tail: float = 4.0  # tails matter only when there are few waves
    min_kernel_share: float = 0.005


@dataclass(frozen=True)
class TinyKernels:
    """Launch-bound swarms: launches shorter than a few microseconds cost about as much to launch."""

    max_dur_us: float = 5.0
    min_launches: int = 20
    warning_share: float = 0.3  # tiny launches' share of all launches
    critical_share: float = 0.6


@dataclass(frozen=True)
class SpeedOfLight:
    """A kernel is memory- or compute-bound when its SOL throughput passes ``bound_pct``; latency-bound below ``latency_pct`` on both."""

    bound_pct: float = 60.0
    latency_pct: float = 40.0
    min_kernel_share: float = 0.005


@dataclass(frozen=True)
class Memory:
    """Allocator fragmentation and churn (torch caching allocator, JAX BFC)."""

    frag_warning_share: float = 0.25  # (reserved - allocated) / reserved at the peak
    frag_critical_share: float = 0.5
    ext_frag_warning_pct: float = 50.0  # 1 - largest free block / total free
    churn_segments_per_step: float = 1.0  # segment alloc+free per step
    min_reserved_bytes: float = 64 * 2**20  # ignore tiny processes


@dataclass(frozen=True)
class Sync:
    """Host synchronisations and GPU idle time."""

    min_idle_share: float = 0.02  # a sync location costing under 2 % of step time is info
    warning_idle_share: float = 0.05
    critical_idle_share: float = 0.2
    kernel_gap_us: float = 5.0  # gaps shorter than this are kernel-to-kernel, not idle causes
    launch_bound_share: float = 0.5  # share of kernels shorter than their launch call
    gpu_idle_warning_pct: float = 20.0
    gpu_idle_critical_pct: float = 50.0


@dataclass(frozen=True)
class Utilization:
    """NVML samples: memory-bandwidth utilisation that swings widely and peaks under 50 %."""

    mem_util_peak_pct: float = 50.0
    mem_util_swing_pct: float = 30.0
    gpu_util_low_pct: float = 60.0


@dataclass(frozen=True)
class Comm:
    """Multi-rank collectives."""

    wait_share_warning: float = 0.1
    wait_share_critical: float = 0.3
    overlap_low_pct: float = 50.0
    straggler_share: float = 0.5  # a rank last to arrive in more than this share of collectives


@dataclass(frozen=True)
class Thresholds:
    l2: L2 = field(default_factory=L2)
    occupancy: Occupancy = field(default_factory=Occupancy)
    launch_config: LaunchConfig = field(default_factory=LaunchConfig)
    tiny_kernels: TinyKernels = field(default_factory=TinyKernels)
    speed_of_light: SpeedOfLight = field(default_factory=SpeedOfLight)
    memory: Memory = field(default_factory=Memory)
    sync: Sync = field(default_factory=Sync)
    utilization: Utilization = field(default_factory=Utilization)
    comm: Comm = field(default_factory=Comm)

    def with_overrides(self, overrides: dict[str, dict[str, float]], origin: str = "--threshold") -> "Thresholds":
        """A copy with ``{"l2": {"warning_pct": 80}}`` applied; unknown names are an error."""
        groups = {}
        for gname, values in overrides.items():
            if not hasattr(self, gname) or not isinstance(values, dict):
                raise InputError(origin, f"unknown threshold group {gname!r}; known: {', '.join(_group_names())}")
            group = getattr(self, gname)
            known = {f.name: f for f in dataclasses.fields(group)}
            changes = {}
            for key, value in values.items():
                if key not in known:
                    raise InputError(origin, f"unknown threshold {gname}.{key}; known: {', '.join(sorted(known))}")
                try:
                    changes[key] = type(getattr(group, key))(value)
                except (TypeError, ValueError):
                    raise InputError(origin, f"threshold {gname}.{key} must be a number, got {value!r}") from None
            groups[gname] = dataclasses.replace(group, **changes)
        return dataclasses.replace(self, **groups)


def _group_names() -> list[str]:
    return [f.name for f in dataclasses.fields(Thresholds)]


def parse_assignments(items: list[str] | tuple[str, ...]) -> dict[str, dict[str, float]]:
    """``["l2.warning_pct=80"]`` → ``{"l2": {"warning_pct": "80"}}``."""
    out: dict[str, dict[str, float]] = {}
    for item in items:
        name, sep, value = item.partition("=")
        group, dot, key = name.strip().partition(".")
        if not sep or not dot or not key:
            raise InputError("--threshold", f"expected GROUP.NAME=VALUE (e.g. l2.warning_pct=80), got {item!r}")
        out.setdefault(group, {})[key] = value.strip()
    return out


def load_config(path: str | Path) -> dict[str, dict[str, float]]:
    """Threshold overrides from a TOML or JSON file (tables named like the groups)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(path, f"cannot read config file: {e.strerror}") from None
    try:
        if raw.lstrip().startswith(b"{"):
            data = json.loads(raw)
        else:
            data = tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(path, f"config is neither valid TOML nor JSON: {e}") from None
    data = data.get("thresholds", data)
    if not isinstance(data, dict):
        raise InputError(path, "config must map threshold groups to tables")
    return data


def describe() -> list[tuple[str, str, float, str]]:
    """(group, name, default, group doc) for every threshold: feeds ``docs/thresholds.md`` and ``--help``."""
    rows = []
    th = Thresholds()
    for f in dataclasses.fields(th):
        group = getattr(th, f.name)
        doc = (type(group).__doc__ or "").strip().splitlines()[0]
        for g in dataclasses.fields(group):
            rows.append((f.name, g.name, getattr(group, g.name), doc))
    return rows
