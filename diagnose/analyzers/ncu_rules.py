"""ncu's own rule results beside gpudiag's verdicts on the same kernels, and where the two disagree.

Nsight Compute runs its rules (NvRules) on every profiled launch and stores what fired with the report
(and the details page): a message, its type (OPT, WRN, INF) and for many an estimated speedup ("global":
a share of that launch's duration; "local": a gain in the efficiency of one unit, not a time). The
``rules`` table is every OPT/WRN result per kernel: the speedup is the duration-weighted mean over the
launches it fired on (each launch's largest message), and ``est_gpu_time_share`` turns a global
speedup into a share of all profiled GPU time.

The ``comparison`` table puts ncu's verdict and gpudiag's side by side where they speak of the same
thing, each computed from the Profile's tables here (no other analyzer's result is used):

- **bottleneck**: ncu's ``SOLBottleneck`` (its message names latency, balanced, a small grid, or the
  side and unit that is busiest) against the kernel's SOL class (speed_of_light's thresholds) and
  its limiter, the busiest metric of ncu's SOL breakdown (:mod:`diagnose.derive.kernel_limiter`);
- **uncoalesced**: ``UncoalescedGlobalAccess`` (excess sectors) and ``MemoryCacheAccessPattern`` for global
  loads / stores (bytes used per sector) against memory_access's excess sectors per kernel and access kind;
- **occupancy**: ``AchievedOccupancy`` and ``TheoreticalOccupancy`` against occupancy's criteria (the gap,
  the grid's ceiling, a limiter already at its peak; low theoretical occupancy alone is not flagged).

Each row says ``agree``, ``disagree`` (a different verdict: the ``why`` column says what each rests on),
``threshold`` (the same reading judged against a different bar), ``scope`` (gpudiag does not judge
the kernel: too little GPU time, or shorter than ``tiny_kernels.max_dur_us``) or ``not measured``. The
``ncu_rules.disagreement`` info finding lists the ``disagree`` rows whose ncu speedup is at least
``ncu_rules.min_speedup_pct`` (or that have none). Rules outside these three topics are listed as not
compared.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from diagnose.derive.derived import Derived
from diagnose.derive.kernel_access import BROADCAST_SECTORS_PER_REQUEST, access_kinds
from diagnose.derive.kernel_limiter import kernel_limiters
from diagnose.derive.kernel_stats import kernel_key, most_common, per_kernel, total_gpu_time_ns, weighted_mean
from diagnose.derive.occupancy_limits import LIMITS, grid_ceiling_pct, limiter
from diagnose.findings import Finding, Result, Severity, Subject, not_measured
from diagnose.formatting import count_human, n_things
from diagnose.metrics import NEUTRAL, Metric

NAME = "ncu_rules"
ORDER = 90
SECTION = "section-ncu_rules"
TITLE = "Ncu Rules"  # its report section's heading
JUDGES = "ncu's rule results"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "GPU time"  # its cost_share is a share of the profiled kernels' GPU time, as the verdict says it
COST_BASIS_BY_ID: dict[str, str] = {}  # no finding's basis differs
THRESHOLDS = (
    "ncu_rules",
    "launch_config",
    "memory_access",
    "occupancy",
    "speed_of_light",
    "tiny_kernels",
)  # the Thresholds groups it reads (diagnose/thresholds.py)
SUMMARY_METRICS = (  # what analyze() writes into Result.summary (diagnose.metrics)
    Metric("ncu_rule_results_count", "ncu rule results shown", "count", NEUTRAL, 1),
    # how often ncu's rules and gpudiag's findings disagree: about the tools, not the run
    Metric("ncu_rules_disagreement_count", "ncu rules that disagree with gpudiag's findings", "count", NEUTRAL, 1),
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "ncu_rules.disagreement",
    "ncu_rules.not_measured",
)
SHOWN_TYPES = ("OPT", "WRN")
TOPICS = {
    "SOLBottleneck": "bottleneck",
    "UncoalescedGlobalAccess": "uncoalesced",
    "MemoryCacheAccessPattern": "uncoalesced",
    "AchievedOccupancy": "occupancy",
    "TheoreticalOccupancy": "occupancy",
}
AGREEMENTS = ("agree", "disagree", "threshold", "scope", "not measured")
HOW_TO_MEASURE = (
    "ncu's rule results are in the .ncu-rep (read with the ncu-report package) and in the details page "
    "(`ncu --import report.ncu-rep --csv --page details`, ncu 2024 or later prints the rule columns); the raw page "
    "has none. `gpudiag report` on a run folder reads ncu/report.ncu-rep when ncu-report is installed."
)
RULE_COLUMNS = [
    "kernel",
    "section",
    "rule",
    "about",
    "type",
    "speedup_type",
    "estimated_speedup_pct",
    "est_gpu_time_share",
    "launches_fired",
    "launches",
    "share",
    "topic",
    "description",
    "kernel_short",
    "kernel_name",
]
COMPARISON_COLUMNS = [
    "kernel",
    "topic",
    "ncu_rule",
    "ncu_verdict",
    "ncu_speedup_pct",
    "speedup_type",
    "gpudiag_verdict",
    "agreement",
    "why",
    "share",
    "kernel_short",
    "kernel_name",
]
_ACCESS_PATTERN = re.compile(r"for (global|local|shared) (loads|stores) (?:from|to) (\S+?) might")
_BYTES_USED = re.compile(r"only ([\d.]+) of the ([\d.]+) bytes")
_ACHIEVED = re.compile(r"theoretical \(([\d.]+)%\) and measured achieved occupancy \(([\d.]+)%\)")
_EXCESS_PCT = re.compile(r"\((\d+(?:\.\d+)?)% of the total")
_LIMITED_BY = re.compile(
    r"is limited by (?:the number of required registers|the required amount of shared memory|"
    r"the number of warps within each block|the number of blocks)"
)
NCU_LIMITERS = {
    "the number of required registers": "registers",
    "the required amount of shared memory": "shared_mem",
    "the number of warps within each block": "warps",
    "the number of blocks": "blocks",
}


def analyze(profile, derived: Derived, th) -> Result:
    result = Result(NAME)
    kernels, rules = profile.kernels, profile.ncu_rules
    if not len(kernels) and not len(rules):
        return result
    if not len(rules):
        result.findings.append(not_measured(NAME, "ncu's own rule results", HOW_TO_MEASURE, SECTION, plural=True))
        return result
    rules = _with_kernels(rules, kernels, memo=derived.kernel_memo)
    stats = _kernel_stats(kernels, memo=derived.kernel_memo)
    table = rules_table(rules, stats, total_gpu_time_ns(kernels))
    comparison = compare(rules, kernels, stats, th, derived.kernel_access(), memo=derived.kernel_memo)
    result.tables["rules"] = table
    result.tables["comparison"] = comparison
    shown = rules[rules["type"].isin(SHOWN_TYPES)]
    compared = shown["topic"].notna()
    label = shown["rule"].where(shown["about"] == "", shown["rule"] + " (" + shown["about"] + ")")
    not_compared = label[~compared].value_counts()
    result.meta.update(
        {
            "compared_rules": sorted(shown.loc[compared, "rule"].unique()),
            "not_compared_rules": {str(k): int(v) for k, v in not_compared.items()},
            "min_speedup_pct": th.ncu_rules.min_speedup_pct,
        }
    )
    listed = _disagreements(comparison, th.ncu_rules.min_speedup_pct)
    result.summary["ncu_rule_results_count"] = float(len(shown))
    result.summary["ncu_rules_disagreement_count"] = float(len(listed))
    if len(listed):
        result.findings.append(_finding(listed, result.meta["not_compared_rules"]))
    return result


# --- the rules table ------------------------------------------------------------------------------------------


def _with_kernels(rules: pd.DataFrame, kernels: pd.DataFrame, memo=None) -> pd.DataFrame:
    """Rules with the kernel key of their launch (through launch_id where the kernels table has it once,
    else their own name), the launch's duration, a topic and what a MemoryCacheAccessPattern message is about."""
    rules = rules.copy()
    own = rules["kernel_name"].astype(object)
    own = own.where(own.notna() & (own.astype(str) != ""), rules["kernel_short"].astype(object)).fillna(
        "<unnamed kernel>"
    )
    key = own.astype(str)
    dur = pd.Series(np.nan, index=rules.index)
    if (
        len(kernels)
        and "launch_id" in kernels
        and kernels["launch_id"].notna().all()
        and kernels["launch_id"].is_unique
    ):
        by_launch = pd.Series(kernel_key(kernels, memo=memo).to_numpy(), index=kernels["launch_id"].to_numpy())
        durations = pd.Series(
            pd.to_numeric(kernels["dur_ns"], errors="coerce").to_numpy(), index=kernels["launch_id"].to_numpy()
        )
        mapped = rules["launch_id"].map(by_launch)
        key = mapped.where(mapped.notna(), key).astype(str)
        dur = rules["launch_id"].map(durations)
    rules["key"] = key.to_numpy()
    rules["dur_ns"] = pd.to_numeric(dur, errors="coerce").to_numpy()
    about = []
    for rule, desc in zip(rules["rule"], rules["description"].fillna("")):
        m = _ACCESS_PATTERN.search(desc) if rule == "MemoryCacheAccessPattern" else None
        about.append(f"{m.group(1)} {m.group(2)}" if m else "")
    rules["about"] = about
    topic = rules["rule"].map(TOPICS)
    local = (rules["rule"] == "MemoryCacheAccessPattern") & ~rules["about"].str.startswith("global")
    rules["topic"] = topic.where(~local, None).astype(object)
    return rules


def _kernel_stats(kernels: pd.DataFrame, memo=None) -> pd.DataFrame:
    stats = per_kernel(
        kernels,
        [
            "sm_throughput_pct",
            "memory_throughput_pct",
            "achieved_occupancy_pct",
            "theoretical_occupancy_pct",
            "sm_count",
            *LIMITS.values(),
        ],
        memo=memo,
    )
    for col in ("grid_size", "block_size"):
        stats[col] = most_common(kernels, col, stats, memo=memo) if len(kernels) else pd.Series(dtype=float)
    return stats


def rules_table(rules: pd.DataFrame, stats: pd.DataFrame, total_ns: float) -> pd.DataFrame:
    """One row per kernel and OPT/WRN rule (and what it is about): its speedup over the launches it fired on."""
    shown = rules[rules["type"].isin(SHOWN_TYPES)]
    if not len(shown):
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in RULE_COLUMNS})
    by_key = stats.set_index("kernel_name")
    group = ["key", "section", "rule", "about", "type", "speedup_type"]
    shown = shown.assign(speedup_type=shown["speedup_type"].fillna(""), section=shown["section"].fillna(""))
    # each launch's largest message of a rule (a rule may print several)
    per_launch = (
        shown.sort_values("estimated_speedup_pct", ascending=False, na_position="last", kind="stable")
        .groupby([*group, "launch_id"], sort=False, dropna=False)
        .first()
        .reset_index()
    )
    rows = []
    for values, g in per_launch.groupby(group, sort=False, dropna=False):
        k = dict(zip(group, values))
        w = g["dur_ns"].fillna(0.0)
        speedup = weighted_mean(g["estimated_speedup_pct"], w)
        heaviest = g.iloc[int(np.argmax(w.to_numpy()))] if len(g) else g.iloc[0]
        est = np.nan
        if k["speedup_type"] == "global" and total_ns > 0 and g["dur_ns"].notna().any():
            est = float((g["dur_ns"] * g["estimated_speedup_pct"] / 100.0).sum(min_count=1) / total_ns)
        info = by_key.loc[k["key"]] if k["key"] in by_key.index else None
        rows.append(
            {
                "kernel": info["kernel"] if info is not None else str(heaviest["kernel_short"]),
                "section": k["section"],
                "rule": k["rule"],
                "about": k["about"],
                "type": k["type"],
                "speedup_type": k["speedup_type"] or None,
                "estimated_speedup_pct": speedup,
                "est_gpu_time_share": est,
                "launches_fired": int(g["launch_id"].nunique()),
                "launches": int(info["launches"]) if info is not None and not pd.isna(info["launches"]) else np.nan,
                "share": float(info["share"]) if info is not None else np.nan,
                "topic": heaviest["topic"],
                "description": heaviest["description"],
                "kernel_short": info["kernel_short"] if info is not None else heaviest["kernel_short"],
                "kernel_name": k["key"],
            }
        )
    out = pd.DataFrame(rows, columns=RULE_COLUMNS)
    return out.sort_values(
        ["est_gpu_time_share", "estimated_speedup_pct", "kernel", "rule"],
        ascending=[False, False, True, True],
        na_position="last",
        kind="stable",
    ).reset_index(drop=True)


# --- the comparison -------------------------------------------------------------------------------------------


def compare(
    rules: pd.DataFrame, kernels: pd.DataFrame, stats: pd.DataFrame, th, access: pd.DataFrame, memo=None
) -> pd.DataFrame:
    """One row per kernel and compared rule (and MemoryCacheAccessPattern direction): both verdicts and whether
    they agree. ``access`` is the kernels' kernel_access table (the Derived's, shared with memory_access)."""
    rows: list[dict] = []
    if not len(kernels):
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in COMPARISON_COLUMNS})
    limits = kernel_limiters(kernels, stats, memo=memo).set_index(stats["kernel_name"])
    access = access.set_index("kernel_name")
    occ = _occupancy(stats, limits.reset_index(drop=True), th)
    tiny_ns = th.tiny_kernels.max_dur_us * 1000.0
    for _, k in stats.iterrows():
        name = k["kernel_name"]
        mine = rules[rules["key"] == name]
        if not len(mine) and not (access.loc[name, "flagged"] if name in access.index else False):
            continue
        base = {"kernel": k["kernel"], "share": k["share"], "kernel_short": k["kernel_short"], "kernel_name": name}
        tiny = bool(k["mean_dur_ns"] < tiny_ns)
        heaviest = _heaviest(mine)
        for row in _bottleneck(heaviest, k, limits.loc[name], th, tiny):
            rows.append({**base, **row})
        for row in _uncoalesced(heaviest, mine, access.loc[name] if name in access.index else None, th):
            rows.append({**base, **row})
        for row in _occupancy_rows(heaviest, occ.loc[name], th, tiny):
            rows.append({**base, **row})
    out = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    order = {a: i for i, a in enumerate(AGREEMENTS)}
    return (
        out.assign(_a=out["agreement"].map(order), _t=-out["share"].fillna(0.0))
        .sort_values(["_a", "_t", "kernel", "topic", "ncu_rule"], kind="stable")
        .drop(columns=["_a", "_t"])
        .reset_index(drop=True)
    )


def _heaviest(mine: pd.DataFrame) -> dict[tuple[str, str], pd.Series]:
    """(rule, about) → the message of that rule on the kernel's heaviest launch it fired on (largest speedup)."""
    out = {}
    ordered = mine.assign(_w=mine["dur_ns"].fillna(0.0)).sort_values(
        ["_w", "estimated_speedup_pct"], ascending=[False, False], na_position="last", kind="stable"
    )
    for _, r in ordered.iterrows():
        out.setdefault((r["rule"], r["about"]), r)
    return out


def _row(topic, rule, ncu_verdict, speedup, speedup_type, gpudiag, agreement, why) -> dict:
    return {
        "topic": topic,
        "ncu_rule": rule,
        "ncu_verdict": ncu_verdict,
        "ncu_speedup_pct": np.nan if speedup is None or pd.isna(speedup) else float(speedup),
        "speedup_type": speedup_type if isinstance(speedup_type, str) and speedup_type else None,
        "gpudiag_verdict": gpudiag,
        "agreement": agreement,
        "why": why,
    }


def ncu_bottleneck(description: str) -> tuple[str | None, str | None, str | None]:
    """(category, side, unit) of an SOLBottleneck message: latency, balanced, small grid, memory-heavy,
    compute-heavy or high throughput; side memory/compute; unit DRAM/L1/L2 where ncu names one."""
    d = description or ""
    if "grid is too small" in d:
        return "small grid", None, None
    if "low compute throughput and memory bandwidth" in d:
        return "latency", None, None
    if "well-balanced" in d:
        return "balanced", None, None
    if "Memory is more heavily utilized than Compute" in d:
        m = re.search(r"identify the (\w+) bottleneck", d)
        return "memory-heavy", "memory", m.group(1) if m else None
    if "Compute is more heavily utilized than Memory" in d:
        return "compute-heavy", "compute", None
    m = re.search(r"Start by analyzing (.+?) in the (Compute|Memory) Workload Analysis", d)
    if "utilizing greater than" in d and m:
        unit = m.group(1) if m.group(1) in ("DRAM", "L1", "L2") else None
        return "high throughput", m.group(2).lower(), unit
    return None, None, None


def unit_family(metric: str | None) -> str | None:
    """The memory unit of a breakdown metric as ncu's SOLBottleneck names it (by the metric's prefix)."""
    if not isinstance(metric, str):
        return None
    for prefix, unit in (("dram", "DRAM"), ("fbp", "DRAM"), ("l1tex", "L1"), ("lts", "L2"), ("ltc", "L2")):
        if metric.startswith(prefix):
            return unit
    return None


def sol_class(sm: float, mem: float, th) -> str:
    t = th.speed_of_light
    if pd.isna(sm) or pd.isna(mem):
        return "unknown"
    if max(sm, mem) >= t.bound_pct:
        return "memory-bound" if mem >= sm else "compute-bound"
    return "latency-bound" if max(sm, mem) < t.latency_pct else "balanced"


def _bottleneck(heaviest, k, lim, th, tiny: bool) -> list[dict]:
    r = heaviest.get(("SOLBottleneck", ""))
    if r is None:
        return []
    t = th.speed_of_light
    category, side, unit = ncu_bottleneck(r["description"])
    sm, mem = k["sm_throughput_pct"], k["memory_throughput_pct"]
    cls = sol_class(sm, mem, th)
    pct = lim["limiter_pct"]
    mine = f"{cls}; limiter {lim['limiter_unit']} at {pct:.0f} %" if not pd.isna(pct) else cls
    ncu_text = category if category else "(message not recognised)"
    if unit:
        ncu_text += f" ({unit})"
    elif side and category == "high throughput":
        ncu_text += f" ({side})"
    ours_family, ours_side = unit_family(lim["limiter_metric"]), lim["limiter_side"]
    figures = f"SM {sm:.0f} %, memory {mem:.0f} %"
    if category is None:
        agreement, why = "not measured", "gpudiag does not recognise this SOLBottleneck message"
    elif cls == "unknown":
        agreement, why = "not measured", "no SOL throughputs in this input"
    elif category == "latency":
        if cls == "latency-bound":
            agreement, why = "agree", f"{figures}: under both bars"
        elif cls == "balanced":
            agreement = "threshold"
            why = (
                f"{figures}: ncu calls a kernel under 60 % of peak on both units latency-bound; gpudiag's "
                f"speed_of_light.latency_pct is {t.latency_pct:g} % and calls {t.latency_pct:g}–{t.bound_pct:g} % balanced"
            )
        else:
            agreement = "disagree"
            why = f"per kernel (duration-weighted over its launches) {figures}; ncu judged its heaviest launch alone"
    elif category == "balanced":
        if cls == "balanced":
            agreement, why = "agree", figures
        else:
            agreement = "threshold"
            why = (
                f"{figures}: ncu calls two units within 10 points of each other between 60 and 80 % balanced; "
                f"gpudiag names the busier unit ({lim['limiter_unit']})"
            )
    elif category == "small grid":
        grid, sms = k.get("grid_size"), k.get("sm_count")
        small = not (pd.isna(grid) or pd.isna(sms)) and grid < sms * th.launch_config.min_waves
        if small:
            agreement, why = "agree", f"{n_things(grid, 'block')} for {count_human(sms)} SMs (launch_config.small_grid)"
        else:
            agreement, why = (
                "disagree",
                f"gpudiag sees {n_things(grid, 'block')} for {count_human(sms)} SMs in the launch carrying most time",
            )
    else:
        if ours_side and side and ours_side != side:
            agreement = "disagree"
            why = (
                f"ncu compares the SM and memory summaries ({figures}); gpudiag's limiter is the single busiest metric "
                f"of both SOL breakdowns, {lim['limiter_metric']} ({lim['limiter_unit']}, {pct:.0f} %)"
            )
        elif unit and ours_family and unit != ours_family:
            agreement = "disagree"
            why = (
                f"ncu names the busiest memory metric by its prefix ({unit}); gpudiag's busiest breakdown metric is "
                f"{lim['limiter_metric']} ({lim['limiter_unit']}, {pct:.0f} %)"
            )
        else:
            agreement, why = "agree", f"both: {side or ours_side} side" + (f", {unit}" if unit else "")
    if agreement in ("disagree", "threshold") and (tiny or k["share"] < t.min_kernel_share):
        agreement, why = "scope", _scope_why(k, t.min_kernel_share, tiny) + "; " + why
    return [
        _row(
            "bottleneck", "SOLBottleneck", ncu_text, r["estimated_speedup_pct"], r["speedup_type"], mine, agreement, why
        )
    ]


def _scope_why(k, min_share: float, tiny: bool) -> str:
    if tiny:
        return f"gpudiag leaves launch-bound micro-kernels to tiny_kernels ({k['mean_dur_ns'] / 1000:.1f} µs mean)"
    return f"under {100 * min_share:g} % of GPU time ({100 * k['share']:.2f} %)"


WHY_UNMEASURED = (
    "this input has ncu's verdict but not the sector counts gpudiag reads (a details page has neither the "
    "SourceCounters metrics nor the L1 sector counts: use the raw page or the .ncu-rep)"
)


def _uncoalesced(heaviest, mine: pd.DataFrame, acc, th) -> list[dict]:
    """ncu's UncoalescedGlobalAccess and MemoryCacheAccessPattern (global loads, stores) against memory_access."""
    t = th.memory_access
    measured = acc is not None and isinstance(acc["excess_source"], str)
    if measured:
        share_pct = acc["excess_share_pct"]
        access = acc["access"] if isinstance(acc["access"], str) else None
        gp = f"{share_pct:.1f} % of sectors excess" + (f" ({access})" if access else "")
        gp += "; flagged" if acc["flagged"] else ""
        tiny = acc["mean_dur_ns"] < th.tiny_kernels.max_dur_us * 1000.0
        unjudged = None if acc["judged"] else _scope_why(acc, t.min_kernel_share, tiny)
    else:
        share_pct, access, gp, unjudged = np.nan, None, "not measured", None
    rows = []

    def add(r, ncu_text, agreement, why):
        if agreement in ("disagree", "threshold") and unjudged:
            agreement, why = "scope", f"{unjudged}; {why}"
        rows.append(
            _row("uncoalesced", r["rule"], ncu_text, r["estimated_speedup_pct"], r["speedup_type"], gp, agreement, why)
        )

    r = heaviest.get(("UncoalescedGlobalAccess", ""))
    if r is not None and r["type"] in SHOWN_TYPES:
        m = _EXCESS_PCT.search(r["description"] or "")
        ncu_text = f"{m.group(1)} % of sectors excessive" if m else "excessive sectors"
        if not measured:
            add(r, ncu_text, "not measured", WHY_UNMEASURED)
        elif acc["flagged"]:
            add(r, ncu_text, "agree", "the same per-instruction sectors")
        elif share_pct >= t.excess_share_pct:
            add(r, ncu_text, "scope", unjudged or "")
        else:
            why = (
                f"ncu fires on any excess sector; gpudiag flags {t.excess_share_pct:g} % of a kernel's sectors or more"
            )
            add(r, ncu_text, "threshold", why)
    for direction, kind, prefix in (("global loads", "load", "ld"), ("global stores", "store", "st")):
        r = heaviest.get(("MemoryCacheAccessPattern", direction))
        if r is None or r["type"] not in SHOWN_TYPES:
            continue
        what = direction.split()[1]
        m = _BYTES_USED.search(r["description"] or "")
        where = _ACCESS_PATTERN.search(r["description"] or "")
        ncu_text = f"{direction}: {m.group(1)} of {m.group(2)} bytes per sector used" if m else direction
        if where:
            ncu_text += f" ({'at' if where.group(3) == 'L2' else 'in'} {where.group(3)})"
        if not measured:
            add(r, ncu_text, "not measured", WHY_UNMEASURED)
            continue
        dir_excess, sectors = acc[f"{prefix}_excess_sectors"], acc["sectors"]
        dir_pct = 100.0 * dir_excess / sectors if sectors and not pd.isna(dir_excess) else np.nan
        spr, bps = acc[f"{prefix}_sectors_per_request"], acc[f"{prefix}_bytes_per_sector"]
        if acc["flagged"] and kind in access_kinds(access):
            add(r, ncu_text, "agree", f"gpudiag's excess sectors are in the {what}")
        elif acc["flagged"]:
            why = (
                f"gpudiag finds the excess sectors in the {access} ({acc['access_source']}); ncu's bytes-per-sector "
                f"figure for the {what} averages over every access of that kind"
            )
            add(r, ncu_text, "disagree", why)
        elif share_pct >= t.excess_share_pct:
            add(r, ncu_text, "scope", unjudged or "")
        elif not pd.isna(spr) and spr > BROADCAST_SECTORS_PER_REQUEST and not pd.isna(dir_pct) and dir_pct > 0:
            why = (
                f"the {what} are uncoalesced ({spr:.0f} sectors per request, {bps:.1f} of 32 bytes used) but their "
                f"excess is {dir_pct:.1f} % of the kernel's global sectors: too little of its traffic to cost much "
                "time; ncu's estimate follows the bytes wasted per sector, not the share of the traffic"
            )
            add(r, ncu_text, "threshold", why)
        else:
            spr_text = f" ({spr:.1f} sectors per request)" if not pd.isna(spr) else ""
            if not share_pct:
                near = "no global access of this kernel fetches a sector beyond the ideal for its size"
            else:
                near = f"the excess sectors of these {what} are {0.0 if pd.isna(dir_pct) else dir_pct:.1f} % of the kernel's"
            why = (
                f"{near}{spr_text}: the few bytes used per sector come from accesses that already fetch the fewest "
                "sectors possible (threads of a warp reading one address, a broadcast), which coalescing cannot "
                "reduce; ncu's MemoryCacheAccessPattern counts the unused bytes as waste"
            )
            add(r, ncu_text, "disagree", why)
    if not rows and measured and acc["flagged"] and len(mine):
        why = (
            "ncu's UncoalescedGlobalAccess / MemoryCacheAccessPattern did not fire on this kernel (or their sections "
            "were not collected)"
        )
        rows.append(
            _row("uncoalesced", "(none fired)", "no uncoalescing rule fired", np.nan, None, gp, "disagree", why)
        )
    return rows


def _occupancy(stats: pd.DataFrame, limits: pd.DataFrame, th) -> pd.DataFrame:
    """occupancy's per-kernel criteria (its helpers, the same thresholds), with the SOL limiter of each kernel."""
    occ = stats.copy()
    occ["sol_limiter_unit"] = limits["limiter_unit"].to_numpy()
    occ["sol_limiter_pct"] = limits["limiter_pct"].to_numpy()
    occ["limiter"] = [limiter(row) for _, row in occ[list(LIMITS.values())].iterrows()]
    occ["blocks_per_sm"] = occ[list(LIMITS.values())].min(axis=1, skipna=True)
    occ["gap_pts"] = occ["theoretical_occupancy_pct"] - occ["achieved_occupancy_pct"]
    occ["grid_ceiling_pct"] = grid_ceiling_pct(occ)
    occ["grid_limited"] = (occ["grid_ceiling_pct"] - occ["achieved_occupancy_pct"]) <= th.occupancy.gap_pts
    return occ.set_index("kernel_name")


def _occupancy_rows(heaviest, o, th, tiny: bool) -> list[dict]:
    t = th.occupancy
    unjudged = _scope_why(o, t.min_kernel_share, tiny) if tiny or o["share"] < t.min_kernel_share else None
    saturated_pct = getattr(t, "saturated_unit_pct", None)  # occupancy's bar for a unit already at its peak
    saturated = (
        saturated_pct is not None and not pd.isna(o["sol_limiter_pct"]) and o["sol_limiter_pct"] >= saturated_pct
    )
    rows = []

    def add(r, ncu_text, mine, agreement, why):
        if agreement in ("disagree", "threshold") and unjudged:
            agreement, why = "scope", f"{unjudged}; {why}"
        rows.append(
            _row("occupancy", r["rule"], ncu_text, r["estimated_speedup_pct"], r["speedup_type"], mine, agreement, why)
        )

    r = heaviest.get(("AchievedOccupancy", ""))
    if r is not None and r["type"] in SHOWN_TYPES:
        gap = o["gap_pts"]
        m = _ACHIEVED.search(r["description"] or "")
        ncu_text = f"achieved {m.group(2)} % of theoretical {m.group(1)} %" if m else _first_sentence(r["description"])
        if pd.isna(gap):
            add(r, ncu_text, "not measured", "not measured", "no occupancy metrics in this input")
        else:
            mine = (
                f"achieved {o['achieved_occupancy_pct']:.0f} % of {o['theoretical_occupancy_pct']:.0f} % "
                f"({gap:.1f} points)"
            )
            if gap <= t.gap_pts:
                why = f"the kernel's duration-weighted gap is {gap:.1f} points; ncu judged a launch at the same {t.gap_pts:g}"
                add(r, ncu_text, mine, "threshold", why)
            elif o["grid_limited"]:
                per_sm = np.ceil(o["grid_size"] / o["sm_count"])
                why = (
                    f"the grid gives each SM {n_things(per_sm, 'block')} of the {count_human(o['blocks_per_sm'])} it "
                    "could hold: "
                    f"achieved occupancy is capped at {o['grid_ceiling_pct']:.0f} %; the gap is the grid's "
                    "(launch_config), not scheduling or imbalance"
                )
                add(r, ncu_text, mine, "disagree", why)
            elif saturated:
                why = (
                    f"its SOL limiter ({o['sol_limiter_unit']}) is at {o['sol_limiter_pct']:.0f} % of peak, over "
                    f"occupancy.saturated_unit_pct ({saturated_pct:g} %): more resident warps would not make it "
                    "faster, so gpudiag shows the gap as info and counts no cost"
                )
                add(r, ncu_text, mine + "; unit at peak", "disagree", why)
            else:
                add(r, ncu_text, mine, "agree", f"the same gap, over occupancy.gap_pts ({t.gap_pts:g})")
    r = heaviest.get(("TheoreticalOccupancy", ""))
    if r is not None and r["type"] in SHOWN_TYPES:
        m = _LIMITED_BY.search(r["description"] or "")
        theirs = NCU_LIMITERS.get(m.group(0).replace("is limited by ", "")) if m else None
        ours = o["limiter"] if isinstance(o["limiter"], str) else None
        same = theirs is not None and ours is not None and theirs in ours.split("+")
        mine = f"theoretical {o['theoretical_occupancy_pct']:.0f} %, limiter {ours or 'unknown'}; not flagged alone"
        why = (
            "gpudiag does not flag a low theoretical occupancy by itself (Hopper GEMMs run one large block per SM by "
            f"design); its limiter {'is the same' if same else 'is ' + str(ours)}"
        )
        ncu_text = f"theoretical occupancy limited by {theirs}" if theirs else _first_sentence(r["description"])
        add(r, ncu_text, mine, "disagree", why)
    return rows


def _first_sentence(text) -> str:
    text = str(text or "")
    end = text.find(". ")
    return text[: end + 1] if 0 <= end < 200 else text[:200]


# --- the finding ----------------------------------------------------------------------------------------------


def _disagreements(comparison: pd.DataFrame, min_speedup_pct: float) -> pd.DataFrame:
    if not len(comparison):
        return comparison
    speed = comparison["ncu_speedup_pct"]
    keep = (comparison["agreement"] == "disagree") & (speed.isna() | (speed >= min_speedup_pct))
    return comparison[keep]


def _finding(listed: pd.DataFrame, not_compared: dict[str, int]) -> Finding:
    subjects = []
    for _, r in listed.iterrows():
        subjects.append(
            Subject(
                "kernel",
                str(r["kernel_short"] if isinstance(r["kernel_short"], str) else r["kernel"]),
                Severity.INFO,
                {
                    "topic": r["topic"],
                    "ncu_rule": r["ncu_rule"],
                    "ncu_verdict": r["ncu_verdict"],
                    "ncu_estimated_speedup_pct": r["ncu_speedup_pct"],
                    "ncu_speedup_type": r["speedup_type"],
                    "gpudiag_verdict": r["gpudiag_verdict"],
                    "why": r["why"],
                    "share": r["share"],
                    "kernel_name": r["kernel_name"],
                },
            )
        )
    top = listed.iloc[0]
    speed = f" (+{top['ncu_speedup_pct']:.0f} %)" if not pd.isna(top["ncu_speedup_pct"]) else ""
    n = len(listed)
    title = (
        f"ncu and gpudiag disagree on {n_things(n, 'kernel verdict')}; first: {top['kernel']} "
        f"({top['topic']}: ncu {top['ncu_rule']}{speed} says {top['ncu_verdict']}, gpudiag {top['gpudiag_verdict']})"
    )
    rest = ", ".join(not_compared) if not_compared else "none"
    return Finding(
        id="ncu_rules.disagreement",
        analyzer=NAME,
        severity=Severity.INFO,
        title=title,
        subjects=tuple(subjects),
        evidence=(),
        cost_share=None,
        recommendation=(
            "Each subject says which measurement each verdict rests on (why). ncu's speedups are its own estimates "
            "('global': a share of that kernel's duration; 'local': a unit's efficiency, not a time). Compared: "
            "SOLBottleneck, UncoalescedGlobalAccess, MemoryCacheAccessPattern (global), AchievedOccupancy, "
            f"TheoreticalOccupancy; not compared: {rest}."
        ),
        section=SECTION,
    )
