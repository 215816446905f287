"""How numbers, counts, bytes and names read: the one formatting layer of every title, table and summary.

Values stay in base units everywhere (``dur_ns``, ``bytes``, ``share`` 0..1); this module turns them
into text, and only for people: finding titles, the HTML tables and evidence, the Markdown and the
terminal. One place, so a title and the table under it say ``17.8 ms`` alike, and no path prints
``1.18e+03 ms``, ``0.796 share``, ``16,384.00`` blocks or ``1 host syncs``.

- durations pick ns, µs, ms or s and keep 3 significant digits (``850 ns``, ``17.8 ms``, ``1.18 s``);
- numbers keep 3 significant digits with thousands separators, never an exponent (``0.0123``, ``12,050``);
- counts are whole numbers with separators (``16,384``); bytes are binary units (``1.5 GiB``);
- shares (0..1) and percentages read as ``12.5 %``;
- ``n_things(1, "host sync")`` is ``1 host sync``, ``n_things(3, "host sync")`` ``3 host syncs``;
- table columns and evidence keys (``gpu_time_ns``) read as labels (``GPU time``), with the unit their
  name carries deciding how a value is written (:func:`unit_of_column`, :func:`cell_text`).

Standard library only: analyzers and ``reports/`` both use it (``diagnose.findings`` re-exports it).
Missing values (None, NaN, pandas' NA) read as ``–``.
"""

from __future__ import annotations

import functools
import math
import numbers
import re

MISSING = "–"
SIG_DIGITS = 3
MAX_DECIMALS = 6  # a non-zero value smaller than this many decimals show reads "< 0.000001"


def is_missing(value) -> bool:
    """None, NaN, an infinity, or pandas' NA / NaT: a value with nothing to show."""
    if value is None:
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Real):
        try:
            return not math.isfinite(float(value))
        except (TypeError, ValueError):
            return True
    return type(value).__name__ in ("NAType", "NaTType")


def _real(value) -> float | None:
    """``value`` as a float, or None when it is missing or not a number."""
    if is_missing(value) or isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# --- numbers ----------------------------------------------------------------------------------------


def number_human(value, digits: int = SIG_DIGITS) -> str:
    """``value`` with ``digits`` significant digits, thousands separators and no exponent; trailing zeros dropped.

    12,345.6 → ``12,346``; 17.84 → ``17.8``; 0.012345 → ``0.0123``; 2.0 → ``2``.
    """
    x = _real(value)
    if x is None:
        return MISSING
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - magnitude)
    if decimals > MAX_DECIMALS:
        if round(x, MAX_DECIMALS) == 0:
            return f"{'-' if x < 0 else ''}< {10**-MAX_DECIMALS:.{MAX_DECIMALS}f}"
        decimals = MAX_DECIMALS
    text = f"{round(x, decimals):,.{decimals}f}"
    if decimals:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def count_human(value) -> str:
    """A count: ``16,384``. A count that is not whole (a mean per step) keeps 3 significant digits: ``12.9``."""
    x = _real(value)
    if x is None:
        return MISSING
    if float(x).is_integer():
        return f"{int(x):,}"
    return number_human(x)


def pct_human(pct, decimals: int = 1) -> str:
    """A percentage (0..100): ``12.5 %``; a non-zero value that would read 0 reads ``< 0.1 %``."""
    x = _real(pct)
    if x is None:
        return MISSING
    text = f"{x:,.{decimals}f}"
    if x != 0 and float(text.replace(",", "")) == 0:
        return f"< {10**-decimals:.{decimals}f} %" if x > 0 else f"> -{10**-decimals:.{decimals}f} %"
    if text.startswith("-") and float(text.replace(",", "")) == 0:
        text = text[1:]
    return f"{text} %"


def share_human(share, decimals: int = 1) -> str:
    """A share (0..1) as a percentage: 0.796 → ``79.6 %``."""
    x = _real(share)
    return MISSING if x is None else pct_human(100.0 * x, decimals)


# --- durations --------------------------------------------------------------------------------------

_DURATION_UNITS = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns"))


def ns_human(ns) -> str:
    """A duration in ns, in the unit that reads best: ``850 ns``, ``12.3 µs``, ``17.8 ms``, ``1.18 s``, ``3,725 s``."""
    x = _real(ns)
    if x is None:
        return MISSING
    if x == 0:
        return "0 s"
    for scale, unit in _DURATION_UNITS:
        if abs(x) >= scale * 0.9995 or unit == "ns":
            text = number_human(x / scale)
            if unit != "s" and text.replace(",", "").lstrip("-") == "1000":  # 999.96 µs rounds up to 1 ms
                continue
            return f"{text} {unit}"
    return f"{number_human(x)} ns"  # unreachable: "ns" always matches


def us_human(us) -> str:
    x = _real(us)
    return MISSING if x is None else ns_human(x * 1e3)


def ms_human(ms) -> str:
    """A duration in ms: 1180.4 → ``1.18 s``, 17.84 → ``17.8 ms``, 0.0123 → ``12.3 µs``."""
    x = _real(ms)
    return MISSING if x is None else ns_human(x * 1e6)


def s_human(s) -> str:
    x = _real(s)
    return MISSING if x is None else ns_human(x * 1e9)


def offset_human(ns) -> str:
    """A time since a start, in ns: ``+1.23 s`` (timestamps read relative to the run's start, never as epoch)."""
    x = _real(ns)
    if x is None:
        return MISSING
    return ("+" if x >= 0 else "-") + ns_human(abs(x))


# --- bytes ------------------------------------------------------------------------------------------


def bytes_human(n) -> str:
    """Bytes in binary units with 3 significant digits: ``512 B``, ``1.5 KiB``, ``422 MiB``, ``140 GiB``."""
    x = _real(n)
    if x is None:
        return MISSING
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{count_human(round(x)) if unit == 'B' else number_human(x)} {unit}"
        x /= 1024
    return f"{number_human(x)} TiB"  # unreachable


# --- words ------------------------------------------------------------------------------------------

_IRREGULAR_PLURALS = {
    "is": "are",
    "was": "were",
    "has": "have",
    "does": "do",
    "this": "these",
    "that": "those",
    "it": "they",
    "its": "their",
    "child": "children",
    "index": "indices",
    "matrix": "matrices",
    "SM": "SMs",
    "GPU": "GPUs",
    "CPU": "CPUs",
    "op": "ops",
}


def plural_of(thing: str) -> str:
    """English plural of a noun or noun phrase (its last word): ``host sync`` → ``host syncs``, ``process`` →
    ``processes``, ``entry`` → ``entries``."""
    head, _, word = thing.rpartition(" ")
    prefix = head + " " if head else ""
    if word in _IRREGULAR_PLURALS:
        return prefix + _IRREGULAR_PLURALS[word]
    lower = word.lower()
    if re.search(r"(s|x|z|ch|sh)$", lower) and not lower.endswith(("ms", "ns", "µs")):
        return prefix + word + "es"
    if re.search(r"[^aeiou]y$", lower):
        return prefix + word[:-1] + "ies"
    return prefix + word + "s"


def singular_of(things: str) -> str:
    """The singular of a plural unit word: ``launches`` → ``launch``, ``SMs`` → ``SM``, ``entries`` → ``entry``."""
    head, _, word = things.rpartition(" ")
    prefix = head + " " if head else ""
    for one, many in _IRREGULAR_PLURALS.items():
        if word == many:
            return prefix + one
    if word.endswith("ies") and len(word) > 3:
        return prefix + word[:-3] + "y"
    if re.search(r"(ss|x|z|ch|sh)es$", word):
        return prefix + word[:-2]
    if word.endswith("s") and not word.endswith("ss") and len(word) > 1:
        return prefix + word[:-1]
    return things


def n_things(n, thing: str, plural: str | None = None) -> str:
    """``n`` and ``thing`` agreeing in number: ``1 host sync``, ``3 host syncs``, ``2,175 kernels``, ``12.9 syncs``."""
    x = _real(n)
    if x is None:
        return f"{MISSING} {plural or plural_of(thing)}"
    text = count_human(x)
    return f"{text} {thing if text == '1' else (plural or plural_of(thing))}"


def agree(n, singular: str, plural: str) -> str:
    """The form of a verb (or any word) that agrees with ``n``: ``agree(1, "takes", "take")`` → ``takes``."""
    x = _real(n)
    return singular if x == 1 else plural


# --- values with a unit ----------------------------------------------------------------------------

DURATION_SCALE_NS = {"ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}
_MEASURE_UNITS = frozenset({"ns", "µs", "us", "ms", "s", "%", "pct", "share", "bytes", "byte", "B", "MHz", "W", "/s"})


def value_human(value, unit: str) -> str:
    """``value`` in ``unit`` (a metric's or an evidence's unit) as text: ``17.8 ms``, ``79.6 %``, ``1.5 GiB``,
    ``16,384 blocks``, ``1 launch``, ``4,980 /s``."""
    if isinstance(value, bool) or type(value).__name__ in ("bool_", "bool"):
        return "yes" if value else "no"
    x = _real(value)
    if x is None:
        return MISSING if not isinstance(value, str) else value
    unit = (unit or "").strip()
    if unit in DURATION_SCALE_NS:
        return ns_human(x * DURATION_SCALE_NS[unit])
    if unit in ("%", "pct"):
        return pct_human(x)
    if unit == "share":
        return share_human(x)
    if unit in ("bytes", "byte", "B"):
        return bytes_human(x)
    if unit in ("count", ""):
        return count_human(x)
    if unit in ("/s", "1/s"):
        return f"{count_human(round(x)) if abs(x) >= 100 else number_human(x)} /s"
    if unit == "step":  # a step's number, not a count of steps ("steps"): "step 10", never "10 steps"
        return f"step {count_human(x)}"
    if unit in ("ratio", "x", "×"):  # a factor: "1.5×", never "1.5 xes"
        return f"{number_human(x)}×"
    if unit in _MEASURE_UNITS:
        return f"{number_human(x)} {unit}"
    if re.fullmatch(r"[A-Za-z]+", unit):  # a countable thing: blocks, SMs, waves, launches, points, sectors
        text = count_human(x)
        word = singular_of(unit) if text == "1" else (unit if unit.endswith("s") else plural_of(unit))
        return f"{text} {word}"
    return f"{number_human(x)} {unit}"


# --- names of columns and keys ---------------------------------------------------------------------

# the unit a column's or key's name ends in (CONTRIBUTING: units in names), longest suffix first
_UNIT_SUFFIXES = (
    ("_per_s", "/s"),
    ("_bytes", "bytes"),
    ("_share", "share"),
    ("_pct", "%"),
    ("_mhz", "MHz"),
    ("_gib", "GiB"),
    ("_mb", "MB"),
    ("_ns", "ns"),
    ("_us", "µs"),
    ("_ms", "ms"),
    ("_s", "s"),
    ("_w", "W"),
)
_UNIT_SUFFIX_INSIDE = re.compile(r"_(ns|us|ms|s|pct|bytes|share)_(per_step|mean|median|max|min|p10|p90|peak)$")
_COUNT_NAMES = re.compile(
    r"^(n_.*|num_.*|.*_count|count|launches|calls|steps|ranks|samples|segments|entries|kernels|collectives|"
    r"allocations|allocs|sectors|.*_sectors|.*_launches|.*_steps|outliers|bin|row|grid_size|block_size|"
    r"grid_blocks|block_threads|sm_count|registers_per_thread|blocks_per_sm|distinct_sizes|.*_entry|"
    r"occupancy_limit_.*|first_launch|last_launch|launch_id|step|first_step|last_step|trace_step|run_step|"
    r"rank|stream|line|kernel_rank|sync_index|runtime_index|next_gpu_index|last_count)$"
)
_TIMESTAMP_NAMES = re.compile(r"^(t|ts|t0|t_start|t_end|start|end|launch_ts|time)_(ns|us|ms|s)$")

# words spelled as people write them
_WORDS = {
    "gpu": "GPU",
    "cpu": "CPU",
    "sm": "SM",
    "sms": "SMs",
    "l1": "L1",
    "l2": "L2",
    "dram": "DRAM",
    "nvml": "NVML",
    "sol": "SOL",
    "id": "id",
    "ld": "load",
    "st": "store",
    "dur": "duration",
    "est": "est.",
    "mem": "memory",
    "util": "utilisation",
    "pct": "%",
    "pts": "points",
    "p10": "p10",
    "p90": "p90",
    "msg": "message",
    "oom": "OOM",
    "ooms": "OOMs",
    "num": "number of",
    "p2p": "P2P",
    "sass": "SASS",
    "mhz": "MHz",
    "ts": "time",
    "t": "time",
    "t0": "start",
    "fn": "function",
    "us": "µs",
    "ns": "ns",
    "ms": "ms",
}
# labels a word-by-word reading would get wrong
COLUMN_LABELS = {
    "kernel": "Kernel",
    "kernel_name": "Kernel (full name)",
    "kernel_short": "Kernel",
    "share": "Share of GPU time",
    "gpu_time_ns": "GPU time",
    "mean_dur_ns": "Mean duration",
    "dur_ns": "Duration",
    "launches": "Launches",
    "grid_size": "Grid (blocks)",
    "block_size": "Block (threads)",
    "grid_blocks": "Grid (blocks)",
    "block_threads": "Block (threads)",
    "sm_count": "SMs",
    "waves_per_sm": "Waves",
    "idle_sm_pct": "SMs idle",
    "last_wave_idle_pct": "Last wave idle",
    "wasted_lane_pct": "Lanes idle",
    "gap_pts": "Gap (points)",
    "est_loss_share": "Est. loss",
    "small_grid_loss_share": "Loss: small grid",
    "tail_loss_share": "Loss: last wave",
    "lane_loss_share": "Loss: idle lanes",
    "grid_ceiling_pct": "Grid's occupancy ceiling",
    "grid_limited": "Limited by the grid",
    "grid_limited_launches": "Limited by the grid",
    "configs": "Launch shapes",
    "config_launches": "Launches of that shape",
    "config_share": "That shape's share of GPU time",
    "judged_launches": "Launches judged",
    "l2_hit_pct": "L2 hit rate",
    "l2_read_hit_pct": "L2 read hit rate",
    "l2_write_hit_pct": "L2 write hit rate",
    "miss_rate_pct": "L2 miss rate",
    "miss_cost_ns": "Miss cost (time × miss rate)",
    "reuse_l1": "Reuse at L1 (sectors / DRAM sector)",
    "reuse_l2": "Reuse at L2 (sectors / DRAM sector)",
    "limiter_unit": "Limiting unit",
    "limiter_pct": "Limiting unit's load",
    "next_unit": "Next unit",
    "next_pct": "Next unit's load",
    "flop_rate_pct": "FLOP rate, of its precision's peak",
    "dram_bytes_per_flop": "DRAM bytes per FLOP",
    "l1_bytes_per_flop": "Global bytes through L1 per FLOP",
    "l2_bytes_per_flop": "Bytes through L2 per FLOP",
    "saving_share": "Time above its roofline",
    "saving_basis": "Saving measured from",
    "ridge_bytes_per_flop": "GPU's ridge (DRAM bytes per FLOP)",
    "roofline_ns": "Time at its roofline",
    "roofline_saving_share": "Time above its roofline",
    "sol_limiter_unit": "SOL limiting unit",
    "sol_limiter_pct": "SOL limiting unit's load",
    "launch_share": "Share of launches",
    "share_of_all_gpu_time": "Share of all GPU time",
    "host_over_gpu_ratio": "Host / GPU time",
    "wall_ms": "Wall time",
    "step_ms": "Step time",
    "t_s": "Time",
    "t_ms": "Time",
    "warmup_excluded": "Warm-up left out",
    "measured_in": "Measured in",
    "line_exact": "Exact line",
    "times_median": "× median",
    # keys of evidence rows that are not summary metrics (those read their declared label)
    "allocated_at_oom_bytes": "Allocated at the OOM",
    "driver_free_at_oom_bytes": "Free on the device at the OOM",
    "reserved_at_oom_bytes": "Reserved at the OOM",
    "reserved_unallocated_at_oom_bytes": "Reserved but unallocated at the OOM",
    "largest_free_block_at_oom_bytes": "Largest free block at the OOM",
    "oom_request_bytes": "Request that failed",
    "fragmented_growth_bytes": "Segments added while fragmented memory was free",
    "fragmented_growth_segments": "Segments added while fragmented memory was free",
    "free_before_worst_growth_bytes": "Free before the worst growth",
    "largest_free_block_before_worst_growth_bytes": "Largest free block before the worst growth",
    "request_at_worst_growth_bytes": "Request at the worst growth",
    "reserved_unused_at_peak_pct": "Reserved, never allocated at the peak",
    "caused_wait_ms_per_step": "Wait it causes per step",
    "caused_wait_step_share": "Wait it causes, of the step",
    "straggler_arrival_lag_ms": "Arrival lag behind the first rank",
    "straggler_last_share": "Collectives it arrives last at",
    "exposed_comm_share": "Exposed communication, of the trace",
    "idle_host_pct": "GPU idle waiting for the host",
    "idle_input_pct": "GPU idle waiting for input",
    "idle_sync_pct": "GPU idle held by host syncs",
    "idle_short_pct": "GPU idle between short kernels",
    "idle_other_pct": "GPU idle, other",
    "idle_unlinked_pct": "GPU idle, kernels not linked to launches",
    "excess_share_pct": "Excess sectors, of the kernel's",
    "latency_bound_gpu_time_share": "GPU time in latency-bound kernels",
    "occupancy_gap_pts": "Occupancy gap",
    "sync_gpu_idle_share": "GPU idle held by host syncs, of the step",
    "tiny_launch_share": "Launches that are tiny",
    "tiny_launches": "Tiny launches",
    "step_budget_compile_share": "Compilation, of the run after warm-up",
    "step_budget_input_share": "Input wait, of the median step",
    "step_budget_launch_bound_share": "Launch-bound idle, of the median step",
    "step_budget_sync_share": "Host syncs, of the median step",
    "step_budget_unexplained_share": "Unexplained, of the median step",
    "step_budget_period_occurrences": "Occurrences of the slow step",
}


@functools.lru_cache(maxsize=4096)
def unit_of_column(name: str) -> str:
    """The unit a column or key name carries: ``gpu_time_ns`` → ``ns``, ``share`` → ``share``,
    ``launches`` → ``count``, ``t_us`` → ``timestamp µs``; ``""`` when it carries none."""
    key = str(name).lower()
    stamp = _TIMESTAMP_NAMES.match(key)
    if stamp:
        return "timestamp " + {"us": "µs"}.get(stamp[2], stamp[2])
    if key == "share" or key.startswith("share_of"):
        return "share"
    if key.endswith("_ratio"):
        return "ratio"
    inside = _UNIT_SUFFIX_INSIDE.search(key)
    if inside:
        return {"us": "µs", "pct": "%"}.get(inside[1], inside[1])
    for suffix, unit in _UNIT_SUFFIXES:
        if key.endswith(suffix):
            return unit
    if _COUNT_NAMES.match(key) or key.endswith("_per_step") and key.split("_")[0] in ("kernels", "count"):
        return "count"
    return ""


@functools.lru_cache(maxsize=4096)
def label_of_key(name: str) -> str:
    """What a person reads for a column or key name: ``gpu_time_ns`` → ``GPU time``, ``achieved_occupancy_pct`` →
    ``Achieved occupancy``, ``kernels_per_step`` → ``Kernels per step``. The unit shows in each value, not here."""
    key = str(name)
    if key in COLUMN_LABELS:
        return COLUMN_LABELS[key]
    if "_" not in key and " " in key:
        return key  # already words
    low = key.lower()
    stamp = _TIMESTAMP_NAMES.match(low)
    if stamp:
        low = stamp[1] if stamp[1] not in ("t", "ts", "time") else "time"
    else:
        inside = _UNIT_SUFFIX_INSIDE.search(low)
        if inside:
            low = low[: inside.start()] + "_" + inside[2]
        else:
            for suffix, _unit in _UNIT_SUFFIXES:
                if low.endswith(suffix) and len(low) > len(suffix):
                    low = low[: -len(suffix)]
                    break
    words = [w for w in re.split(r"[_\s]+", low) if w]
    if not words:
        return key
    text = " ".join(_WORDS.get(w, w) for w in words)
    return text[0].upper() + text[1:]


def cell_text(value, column: str = "", unit: str | None = None) -> str:
    """A table cell: ``value`` written for the unit its ``column`` name carries (or ``unit``), whole numbers
    as integers, missing values as ``–``, booleans as yes/no, text as it is."""
    if isinstance(value, bool) or type(value).__name__ in ("bool_", "bool"):  # numpy's bool too
        return "yes" if value else "no"
    if is_missing(value):
        return MISSING
    if isinstance(value, str):
        return value
    if not isinstance(value, numbers.Real):
        x = _real(value)
        if x is None:
            return str(value)
        value = x
    unit = unit_of_column(column) if unit is None else unit
    if unit.startswith("timestamp"):
        return number_human(value)  # raw: a table says where its timestamps start (see reports.figures)
    if unit in ("MB", "GiB"):
        return f"{number_human(value)} {unit}"
    if unit == "":
        return count_human(value) if float(value).is_integer() else number_human(value)
    return value_human(value, unit)
