"""Every threshold gpudiag judges by, in one place, with why it has that value.

Override from the CLI (``--threshold l2.warning_pct=80``, repeatable) or a config
file (``--config gpudiag.toml`` with ``[l2] warning_pct = 80`` or the same in JSON).
``docs/thresholds.md`` is generated from the docstrings below.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from parsers.errors import InputError
from parsers.limits import read_input


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
    # global-load sectors requested (at L1, or at L2) per DRAM sector read: the data's reuse. At or under
    # streaming_max each byte is read about once (a streaming kernel: 1.0 on the H200 captures), so its
    # misses are compulsory and no cache or tile removes them; at reuse_min or more the same bytes are
    # asked for again and again (a naive GEMM: 1023 at L1, 126 at L2), which tiling can serve.
    streaming_max: float = 1.5
    reuse_min: float = 4.0
    # a kernel limited by the L1/TEX load path (its SOL breakdown's top unit at speed_of_light.bound_pct or
    # more) whose global loads have that reuse misses it in registers and shared memory even when L2 hits;
    # it is flagged unless shared-memory wavefronts already carry this share of the L1 data pipe (a tiled kernel)
    shared_wavefront_share_max: float = 0.5
    # a kernel under the warning band whose recoverable time (the hits the warning band would add) is under this
    # share of all profiled GPU time is an info subject whatever its band: 1 %, memory_access's warning_loss_share
    info_loss_share: float = 0.01


@dataclass(frozen=True)
class Occupancy:
    """Achieved vs theoretical occupancy: a gap over 10 points means warps are not resident."""

    gap_pts: float = 10.0
    critical_gap_pts: float = 30.0
    min_kernel_share: float = 0.005
    critical_kernel_share: float = 0.1  # a gap over critical_gap_pts is critical only on a kernel this heavy
    # a kernel whose SOL limiter (diagnose.derive.kernel_limiter) is at this % of peak or more already runs at that
    # unit's speed: more resident warps would not make it faster, so its gap is info and costs nothing
    saturated_unit_pct: float = 80.0


@dataclass(frozen=True)
class LaunchConfig:
    """Grid and block shape: fewer blocks than SMs leaves SMs idle; a partial last wave wastes a tail."""

    min_waves: float = 1.0  # grids under one full wave of SMs
    tail_waste_pct: float = 25.0  # share of the last wave left idle, for grids of few waves
    max_waves_for_tail: float = 4.0  # tails matter only when there are few waves
    min_kernel_share: float = 0.005
    critical_idle_sm_pct: float = 75.0  # a small grid leaving this share of SMs idle ...
    critical_kernel_share: float = 0.1  # ... on a kernel this heavy is critical


@dataclass(frozen=True)
class TinyKernels:
    """Launch-bound swarms: launches shorter than a few microseconds cost about as much to launch."""

    max_dur_us: float = 5.0
    min_launches: int = 20
    warning_share: float = 0.3  # tiny launches' share of all launches
    critical_share: float = 0.6
    launch_overhead_us: float = (
        5.0  # host cost of one launch (cudaLaunchKernel + eager dispatch), for the cost estimate
    )


@dataclass(frozen=True)
class SpeedOfLight:
    """A kernel is memory- or compute-bound when its SOL throughput passes ``bound_pct``; latency-bound below ``latency_pct`` on both."""

    bound_pct: float = 60.0
    latency_pct: float = 40.0
    min_kernel_share: float = 0.005
    warning_kernel_share: float = 0.05  # a latency-bound kernel under this share of GPU time is info


@dataclass(frozen=True)
class OnchipBound:
    """Kernels limited by the L1/TEX load path or L2 far from their roofline (diagnose.derive.onchip_bound).

    Such a kernel is flagged when at its roofline (its FLOPs at peak, its DRAM bytes at peak bandwidth) it would
    take ``min_saving`` less of its time or more: nearer than that it is close enough to what the memory system
    allows (the tutorial's bank-conflict transpose on an RTX A4500 sits at 38 % above its roofline, its fixed
    version at 11 %). The saving is an upper bound (no kernel reaches the peaks), so the severity bands are wider
    than memory_access's: ``warning_loss_share`` (5 %) and ``critical_loss_share`` (20 %) of all profiled GPU time;
    under them a subject is info. ``conflict_share_min``: the share of shared-memory wavefronts that are
    bank-conflict replays from which conflicts are the cause (0.92 in that transpose, 0 in its fix).
    """

    min_saving: float = 0.25
    warning_loss_share: float = 0.05
    critical_loss_share: float = 0.20
    conflict_share_min: float = 0.5


@dataclass(frozen=True)
class MemoryAccess:
    """Uncoalesced global accesses: sectors fetched beyond what the accesses need.

    ncu's SourceCounters count, per instruction, the L2 sectors a warp's global accesses touch and the
    ideal for their size (``memory_l2_theoretical_sectors_global(_ideal)``); the difference is
    ``derived__memory_l2_theoretical_sectors_global_excessive``. A kernel is flagged when the excess is
    ``excess_share_pct`` or more of its sectors (a third more traffic than needed: at 25 % one sector in
    four carries nothing the warp asked for; the H200 captures' offenders sit at 78 %, coalesced kernels
    at 0) and it has ``min_kernel_share`` of GPU time. Severity follows the GPU time the fix could give back
    (share × excess share × memory throughput / 100): ``warning_loss_share`` (1 %) and
    ``critical_loss_share`` (5 %) of all profiled GPU time; under them the subject is info.
    """

    excess_share_pct: float = 25.0
    min_kernel_share: float = 0.005
    warning_loss_share: float = 0.01
    critical_loss_share: float = 0.05


@dataclass(frozen=True)
class NcuRules:
    """ncu's own rule results beside gpudiag's verdicts.

    A rule of ncu whose estimated speedup is under ``min_speedup_pct`` is listed in the rules table but
    not counted as a disagreement with gpudiag: ncu fires its uncoalescing rule on any excess sector
    (2 % of one kernel's traffic on the H200 capture, a 1 % speedup), which is no verdict to argue with.
    """

    min_speedup_pct: float = 5.0


@dataclass(frozen=True)
class Memory:
    """Allocator fragmentation and churn (torch caching allocator, JAX BFC).

    Fragmentation at the peak: the share of reserved memory that was never allocated
    even at the peak, (peak reserved - peak allocated) / peak reserved, passes 25 %
    (critical 50 %) while the allocator grew a segment although enough bytes were free,
    because no free block was as large as the request. Churn: cudaMalloc/cudaFree of
    segments (or map/unmap of expandable pages) at least once per step in the median
    steady step, creating and releasing in at least half of them; every one synchronises
    the device. An OOM is fragmentation's when reserved - allocated exceeds the failed
    request. The report bins the history to at most ``max_timeline_bins`` points per curve
    and ``max_heatmap_time_bins`` x ``max_heatmap_segment_rows`` heatmap cells, so a long
    history stays responsive in the browser.
    """

    frag_warning_share: float = 0.25  # (reserved - allocated) / reserved at the peak
    frag_critical_share: float = 0.5
    ext_frag_warning_pct: float = 50.0  # 1 - largest free block / total free
    churn_segments_per_step: float = 1.0  # segment alloc+free per step
    min_reserved_bytes: float = 64 * 2**20  # ignore tiny processes
    churn_warmup_steps: int = 3  # first steps grow the cache by design; churn is judged after them
    max_timeline_bins: int = 500  # points per timeline / fragmentation curve
    max_heatmap_time_bins: int = 200  # heatmap columns (steps when there are at most this many)
    max_heatmap_segment_rows: int = 64  # heatmap rows; neighbouring segments share a row beyond this
    top_allocations: int = 10  # largest allocations / source lines named in findings and tables


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
    stream_kernel_wait_us: float = 30.0  # per-stream gaps under this with the work already queued: HTA's kernel_wait
    sync_slack_us: float = 2.0  # a sync "holds" a gap when it was in progress within this of the gap's start
    launch_bound_host_wait_pct: float = 20.0  # launch-bound when host-wait idle passes this share of the span
    launch_top_ops: int = 10  # op names listed in the launch finding


@dataclass(frozen=True)
class Utilization:
    """NVML samples: memory-bandwidth utilisation that swings widely and peaks under 50 %, and low GPU util.

    NVML's ``memory`` utilisation is the share of time device memory was read or
    written. A busy training step keeps it steady; a p10→p90 swing of 30 points that
    never passes 50 % means memory traffic comes in bursts with idle gaps between
    (a starved or fragmented workload). GPU utilisation (share of time any kernel
    ran) under 60 % on average means the GPU waits a third of the time or more.
    """

    mem_util_peak_pct: float = 50.0
    mem_util_swing_pct: float = 30.0  # p90 - p10 of mem_util_pct, in points
    gpu_util_low_pct: float = 60.0
    gpu_util_critical_pct: float = 30.0
    min_samples: int = 10  # fewer samples (one GPU, in the window) say nothing reliable
    max_timeline_points: int = 3000  # per report, all GPUs together
    max_step_marks: int = 200


@dataclass(frozen=True)
class Steps:
    """Per-step host vs GPU time (CUDA events) and step-time stability.

    The first ``warmup_steps`` steps of each rank (compilation, cuDNN autotuning,
    allocator growth) are left out of medians, but never more than half the steps.
    Host time 1.25x the GPU time means the GPU waits on the host for a fifth of each
    step (data loading, Python overhead, syncs); 2x means it waits half the time.
    A p10→p90 spread of 30 % of the median means step time is not steady.
    gpudiag's own step-boundary work above 3 % of the median step is said in the report
    (the step times read that much high; the light-mode target is at most 3 %).
    Slow steps sampled in the loop's own lines whose main thread waited for a CPU ``busy_host_run_queue_pct`` (25 %)
    of their sampled time are put down to other processes holding the host's CPUs. The loop's thread waiting for a
    CPU ``cpu_wait_min_pct`` (5 %) of the time from its first step to its end is a finding, a warning from
    ``cpu_wait_warning_pct`` (10 %), critical from ``cpu_wait_critical_pct`` (30 %).
    """

    warmup_steps: int = 3
    host_bound_ratio: float = 1.25
    host_bound_critical_ratio: float = 2.0
    unstable_spread_pct: float = 30.0
    unstable_critical_spread_pct: float = 100.0
    outlier_factor: float = 1.5  # a step slower than 1.5x the median is an outlier
    min_steps: int = 3  # fewer measured steps (after warm-up) give no finding
    max_chart_steps: int = 3000
    own_overhead_pct: float = 3.0
    busy_host_run_queue_pct: float = 25.0
    cpu_wait_min_pct: float = 5.0  # the loop's thread waiting for a CPU, of the time from its first step to its end
    cpu_wait_warning_pct: float = 10.0
    cpu_wait_critical_pct: float = 30.0


@dataclass(frozen=True)
class Comm:
    """Collectives across ranks: time waiting for the last rank, a persistent straggler, comm/compute overlap.

    Waiting 10 % of the step in collectives is worth fixing, 30 % means the job runs at the
    pace of its slowest rank. A rank last to arrive at more than half of the collectives is a
    persistent straggler (with two ranks chance gives 50 %). Overlap under 50 % means most
    communication is exposed; it matters only when communication is 5 % or more of the trace,
    and is critical when exposed communication takes a quarter of it.
    """

    wait_share_warning: float = 0.1
    wait_share_critical: float = 0.3
    overlap_low_pct: float = 50.0
    straggler_share: float = 0.5  # a rank last to arrive in more than this share of collectives
    min_comm_share: float = 0.05  # overlap is judged only when comm kernels cover this share of the trace
    exposed_critical_share: float = 0.25  # exposed (non-overlapped) comm time / trace span


@dataclass(frozen=True)
class StepBudget:
    """Where the median and the slow steps' wall time goes, by named cause, and slow steps that recur.

    A cause (input wait, host syncs, launch-bound host work, the allocator) is a finding when it holds
    ``cause_min_share`` (5 %) of the median steady step, a warning from ``cause_warning_share`` (10 %: a
    tenth of every step) and critical from ``cause_critical_share`` (30 %). What no cause explains is
    reported when it reaches ``unexplained_share``. Slow steps recur with a period N when at least
    ``period_min_occurrences`` of them fall on the same step k mod N, those hold ``period_min_share`` of the
    slow steps' time over the median, and ``period_min_hit_share`` of the steady steps at k mod N are slow (so N = 2 does not
    claim every other step); a slow step is ``slow_factor`` x the median. Input wait explains a period
    when the slow steps wait on input for ``period_input_share`` of their excess over the median. A checkpoint
    save or an evaluation (light mode's work records) explains it when ``period_min_hit_share`` of the period's
    slow steps hold one and it takes ``period_work_share`` of their excess (its median time in them). The Python
    sampled in a long step is the step's own code run slower, not extra work, where ``own_code_min_share`` of its
    samples were at lines of the loop ordinary steps are at, or, sampled before the loop was known, when a record of
    the same line was (diagnose.derive.step_own_code).
    Steps after warm-up that compiled (light mode's compilation records) are kept out of the figures, and are a
    finding when their compilation holds ``compile_min_share`` of the run's time after warm-up (its severity by the
    cause shares above). Steps after warm-up that met a new input shape (light mode's new-shape records: cuDNN
    autotuning with cudnn.benchmark, allocator growth) are kept out of the figures too, and are a finding when one
    takes ``new_shape_slow_factor`` x the steady median.
    """

    cause_min_share: float = 0.05
    cause_warning_share: float = 0.1
    cause_critical_share: float = 0.3
    unexplained_share: float = 0.2
    slow_factor: float = 1.5
    period_min_occurrences: int = 3
    period_min_share: float = 0.6
    period_min_hit_share: float = 0.6
    period_input_share: float = 0.5
    period_work_share: float = 0.5
    own_code_min_share: float = 0.5
    max_slow_steps: int = 20  # slow steps listed per rank in the table and a finding
    compile_min_share: float = 0.01  # compilation after warm-up / the time of every step after warm-up
    new_shape_slow_factor: float = 1.5  # a step that met a new input shape / the steady median


@dataclass(frozen=True)
class RunBudget:
    """Where the run's wall time went, process start to exit (diagnose.derive.run_budget_table), and which parts of
    it are findings.

    Named work outside the steady steps (evaluation, checkpoints) is a finding when one kind holds
    ``named_work_min_share`` (5 %) of the run, periodic or not; compilation when it holds ``compile_min_share``
    (5 %); each a warning from its own minimum and critical from ``critical_share`` (30 %) of the run. The time
    before the first step (interpreter, imports, setup) is an info finding when it holds ``startup_min_share`` (20 %). Input wait is
    summed over every step (not the median step's): a finding from ``input_min_share`` (5 %) of the steps' time.
    Stalls are the steps that waited ``stall_factor`` x the median input wait and at least ``stall_min_ms``; they
    recur every num_workers steps when ``stall_period_hit_share`` of them sit on one residue of that period, or when
    the waits are cyclic with that period: over consecutive windows of ``stall_cycle_periods`` x num_workers steady
    steps that hold a stall (at least step_budget's ``period_min_occurrences`` of them), the median share of a
    window's wait variance explained by the step's residue mod num_workers (R²) reaches ``stall_cycle_r2`` (waits
    without a cycle give ~0.08 with windows of 10 periods; workers that drifted apart on an H100 gave 0.86).
    """

    named_work_min_share: float = 0.05
    compile_min_share: float = 0.05
    startup_min_share: float = 0.2
    critical_share: float = 0.3
    input_min_share: float = 0.05
    stall_factor: float = 10.0
    stall_min_ms: float = 1.0
    stall_period_hit_share: float = 0.6
    stall_cycle_r2: float = 0.5  # median R² of the waits against their step's residue mod num_workers
    stall_cycle_periods: int = 10  # a window of the cyclic rule: this many x num_workers steady steps


@dataclass(frozen=True)
class Thresholds:
    l2: L2 = field(default_factory=L2)
    occupancy: Occupancy = field(default_factory=Occupancy)
    launch_config: LaunchConfig = field(default_factory=LaunchConfig)
    tiny_kernels: TinyKernels = field(default_factory=TinyKernels)
    speed_of_light: SpeedOfLight = field(default_factory=SpeedOfLight)
    onchip_bound: OnchipBound = field(default_factory=OnchipBound)
    memory_access: MemoryAccess = field(default_factory=MemoryAccess)
    ncu_rules: NcuRules = field(default_factory=NcuRules)
    memory: Memory = field(default_factory=Memory)
    sync: Sync = field(default_factory=Sync)
    utilization: Utilization = field(default_factory=Utilization)
    steps: Steps = field(default_factory=Steps)
    comm: Comm = field(default_factory=Comm)
    step_budget: StepBudget = field(default_factory=StepBudget)
    run_budget: RunBudget = field(default_factory=RunBudget)

    def with_overrides(self, overrides: dict[str, dict[str, float]], origin: str = "--threshold") -> Thresholds:
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
        raw = read_input(path, json=True, gunzip=False)  # a regular file, nesting capped (parsers/limits.py)
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
