"""What changed between two runs: deltas, better/worse, and whether a change beats the noise.

``gpudiag diff A B`` compares two analysed runs (docs/diff.md). Whole-run numbers are the
``summary`` keys both Analyses have; per-kernel rows come from ``profile.kernels`` grouped by
``kernel_short``. Where a number has per-step or per-launch samples behind it, a two-sided
Mann-Whitney U test on those samples says whether the change is larger than the run-to-run
spread; where it is a single number, the noise is said to be unknown. Why Mann-Whitney:
rank-based (a checkpoint step or a slow first launch does not dominate it), no normality
assumption, it accounts for the number of samples (unlike a k x MAD band), and its exact
form stays honest at the 2-10 launches an ncu capture holds (unlike a bootstrap CI).

Which way is better, the unit and the resolution of a summary key come from its analyzer's
declaration (``Analysis.metrics``, :mod:`diagnose.metrics`), never from the key's name: an
undeclared key is neutral and the diff says so, and a change smaller than the declared resolution
(the granularity of the source: two exports of one capture differ by rounding) is "unchanged".
Runs from different GPUs, drivers, CUDA or framework versions are compared with a warning on top
(:mod:`diagnose.ingest.recorded_environment`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from diagnose.analysis import Analysis, analyze, declared_metrics
from diagnose.findings import jsonable
from diagnose.ingest.profile_data import Profile
from diagnose.ingest.recorded_environment import environment_of, mismatches
from diagnose.metrics import HIGHER, LOWER, NEUTRAL, Metric, describe
from diagnose.thresholds import Thresholds

SCHEMA = "gpudiag.diff/1"

VERDICTS = ("better", "worse", "changed", "unchanged", "within_noise", "added", "removed")

# per-kernel comparisons are not summary keys: their direction and resolution are fixed here
KERNEL_METRICS = {
    "median_dur": ("dur_ns", LOWER, 1.0),  # ncu durations: whole ns
    "l2_hit": ("l2_hit_pct", HIGHER, 0.01),  # ncu percentages: 2 decimals on the details page
}


def declaration(key: str, analysis_a: Analysis, analysis_b: Analysis) -> Metric | None:
    """The analyzer's declaration of a summary key: from the Analyses, else from the analyzers' own
    declarations (an Analysis built by hand); None when no analyzer declares it."""
    return analysis_b.metrics.get(key) or analysis_a.metrics.get(key) or describe(key, declared_metrics())


@dataclass(frozen=True)
class DiffOptions:
    """How a change is judged. ``alpha``: significance level of the Mann-Whitney U test (two-sided);
    0.01 because a diff tests many numbers at once and step times are autocorrelated, which makes
    p-values optimistic. ``min_samples``: fewer samples on either side than this → no test."""

    alpha: float = 0.01
    min_samples: int = 2


@dataclass(frozen=True)
class UTest:
    """A two-sided Mann-Whitney U test of sample B against sample A."""

    n_a: int
    n_b: int
    u: float
    p_value: float
    min_p_value: float  # the smallest p-value these sample sizes can give
    exact: bool


def mann_whitney_u(a, b) -> UTest | None:
    """Two-sided Mann-Whitney U: exact distribution when there are no ties and the samples are
    small (n_a * n_b <= 2500), else the normal approximation with tie and continuity correction."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    n_a, n_b = len(a), len(b)
    if n_a == 0 or n_b == 0:
        return None
    both = np.concatenate([a, b])
    ranks = pd.Series(both).rank(method="average").to_numpy()
    u_a = float(ranks[:n_a].sum() - n_a * (n_a + 1) / 2)
    min_p = min_two_sided_p(n_a, n_b)
    _, counts = np.unique(both, return_counts=True)
    counts = counts.astype(float)  # cubed below: 3 million equal launch times overflow int64
    ties = bool((counts > 1).any())
    if not ties and n_a * n_b <= 2500:
        dist = _u_distribution(n_a, n_b)
        total = dist.sum()
        k = int(round(min(u_a, n_a * n_b - u_a)))
        p = min(1.0, 2.0 * float(dist[: k + 1].sum()) / float(total))
        return UTest(n_a, n_b, u_a, p, min_p, True)
    n = n_a + n_b
    tie_term = float(((counts**3) - counts).sum()) / (n * (n - 1)) if n > 1 else 0.0
    var = n_a * n_b / 12.0 * ((n + 1) - tie_term)
    if var <= 0:
        return UTest(n_a, n_b, u_a, 1.0, min_p, False)  # every value the same: nothing changed
    z = max(0.0, abs(u_a - n_a * n_b / 2.0) - 0.5) / math.sqrt(var)
    return UTest(n_a, n_b, u_a, min(1.0, math.erfc(z / math.sqrt(2.0))), min_p, False)


def min_two_sided_p(n_a: int, n_b: int) -> float:
    """2 / C(n_a + n_b, n_a): the smallest two-sided p-value samples of these sizes can give (B wholly
    above or below A). In log space (lgamma): C(2060, 1030) is already beyond a float, and a diff of runs
    of 100,000 steps a side must not build a 60,000-digit integer to learn that the answer is 0."""
    log_arrangements = math.lgamma(n_a + n_b + 1) - math.lgamma(n_a + 1) - math.lgamma(n_b + 1)
    return min(1.0, math.exp(math.log(2.0) - log_arrangements))  # exp(-huge) is 0.0, never an error


def _u_distribution(n_a: int, n_b: int) -> np.ndarray:
    """Counts of arrangements giving U = 0..n_a*n_b: coefficients of the Gaussian binomial [n_a+n_b, n_a]_q."""
    # f[i][j] = f[i-1][j] shifted by j + f[i][j-1]; keep one row per i over j.
    rows = [np.ones(1, dtype=float) for _ in range(n_b + 1)]  # i = 0: only U = 0
    for i in range(1, n_a + 1):
        new = [np.ones(1, dtype=float)]  # j = 0
        for j in range(1, n_b + 1):
            left = np.concatenate([np.zeros(j), rows[j]])  # last of A larger than all j of B: adds j
            up = new[j - 1]
            out = np.zeros(i * j + 1)
            out[: len(left)] += left
            out[: len(up)] += up
            new.append(out)
        rows = new
    return rows[n_b]


# ---- samples behind summary keys -------------------------------------------------------------


def step_samples(profile: Profile, th: Thresholds) -> pd.DataFrame:
    """Measured (post-warm-up) whole steps of every rank, as the steps analyzer counts them."""
    from diagnose.derive.step_table import step_table

    steps = step_table(profile, th)
    if not len(steps):
        return pd.DataFrame(columns=["rank", "step", "step_ms", "host_ms", "gpu_ms"])
    return steps.loc[~steps["warmup"], ["rank", "step", "step_ms", "host_ms", "gpu_ms"]].reset_index(drop=True)


def step_box_table(step_ms: dict[str, np.ndarray]) -> pd.DataFrame:
    """Per run, the box of its step times as a box plot draws it (linear quartiles; whiskers at the farthest
    step within 1.5 x IQR of them): the HTML draws this box, not every step, past a few thousand steps."""
    rows = []
    for run, x in step_ms.items():
        if not len(x):
            continue
        q1, median, q3 = np.percentile(x, [25, 50, 75])
        reach = 1.5 * (q3 - q1)
        rows.append(
            {
                "run": run,
                "steps": len(x),
                "q1_ms": float(q1),
                "median_ms": float(median),
                "q3_ms": float(q3),
                "lower_fence_ms": float(x[x >= q1 - reach].min()),
                "upper_fence_ms": float(x[x <= q3 + reach].max()),
            }
        )
    columns = ["run", "steps", "q1_ms", "median_ms", "q3_ms", "lower_fence_ms", "upper_fence_ms"]
    return pd.DataFrame(rows, columns=columns)


# summary key → column of step_samples that the key is the median of
STEP_SAMPLE_KEYS = {
    "step_time_median_ms": "step_ms",
    "step_host_time_median_ms": "host_ms",
    "step_gpu_time_median_ms": "gpu_ms",
}


# ---- the diff ----------------------------------------------------------------------------------


@dataclass
class Diff:
    """Two runs compared. ``metrics``: one row per summary key both have; ``kernels``: one row per
    kernel short name in either; ``findings_*``: ids that appeared, disappeared or changed severity.
    ``tables`` holds what the HTML plots (per-step samples of both runs)."""

    source_a: dict[str, Any]
    source_b: dict[str, Any]
    metrics: pd.DataFrame
    kernels: pd.DataFrame
    findings_added: list[dict] = field(default_factory=list)
    findings_removed: list[dict] = field(default_factory=list)
    findings_changed: list[dict] = field(default_factory=list)
    keys_only_in_a: list[str] = field(default_factory=list)
    keys_only_in_b: list[str] = field(default_factory=list)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    options: DiffOptions = field(default_factory=DiffOptions)
    warnings: list[str] = field(default_factory=list)  # environment mismatches first, then each run's notes
    environment_a: dict[str, str] = field(default_factory=dict)
    environment_b: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The comparison as plain data (schema ``gpudiag.diff/1``, docs/diff.md); non-finite numbers → None."""

        def records(df: pd.DataFrame) -> list[dict]:
            return [{k: jsonable(v) for k, v in r.items()} for r in df.to_dict(orient="records")]

        return {
            "schema": SCHEMA,
            "a": jsonable(self.source_a),
            "b": jsonable(self.source_b),
            "options": {
                "alpha": self.options.alpha,
                "min_samples": self.options.min_samples,
                "test": "Mann-Whitney U, two-sided",
            },
            "metrics": records(self.metrics),
            "kernels": records(self.kernels),
            "findings": {
                "added": jsonable(self.findings_added),
                "removed": jsonable(self.findings_removed),
                "severity_changed": jsonable(self.findings_changed),
            },
            "keys_only_in_a": list(self.keys_only_in_a),
            "keys_only_in_b": list(self.keys_only_in_b),
            "undeclared_keys": self.undeclared_keys(),
            "environment": {
                "a": dict(self.environment_a),
                "b": dict(self.environment_b),
                "mismatches": self.environment_warnings,
            },
            "warnings": list(self.warnings),
        }

    @property
    def environment_warnings(self) -> list[str]:
        """A and B ran on different GPUs, drivers, CUDA or framework versions: one sentence each."""
        return mismatches(self.environment_a, self.environment_b)

    def undeclared_keys(self) -> list[str]:
        """Shared summary keys no analyzer declares: compared as neutral (docs/diff.md)."""
        if not len(self.metrics):
            return []
        return sorted(self.metrics.loc[~self.metrics["declared"].astype(bool), "key"])

    def regressions(self, pct: float, include_unknown_noise: bool = False) -> pd.DataFrame:
        """Worse-direction changes larger than ``pct`` % that are significant (or of unknown noise, if asked):
        summary metrics and per-kernel median launch time / L2 hit rate, one row each."""
        rows = []
        for rec in self.metrics.itertuples(index=False):
            if _is_regression(rec.verdict, rec.significant, rec.change_pct, rec.direction, pct, include_unknown_noise):
                rows.append(
                    {"what": rec.key, "a": rec.a, "b": rec.b, "change_pct": rec.change_pct, "p_value": rec.p_value}
                )
        for rec in self.kernels.itertuples(index=False):
            for metric, (_, direction, _) in KERNEL_METRICS.items():
                verdict, sig, change = (
                    getattr(rec, f"{metric}_verdict"),
                    getattr(rec, f"{metric}_significant"),
                    getattr(rec, f"{metric}_change_pct"),
                )
                if _is_regression(verdict, sig, change, direction, pct, include_unknown_noise):
                    unit = "ns" if metric == "median_dur" else "pct"
                    rows.append(
                        {
                            "what": f"kernel {rec.kernel_short}: {metric}_{unit}",
                            "a": getattr(rec, f"{metric}_a_{unit}"),
                            "b": getattr(rec, f"{metric}_b_{unit}"),
                            "change_pct": change,
                            "p_value": getattr(rec, f"{metric}_p_value"),
                        }
                    )
        return pd.DataFrame(rows, columns=["what", "a", "b", "change_pct", "p_value"])


def _is_regression(verdict, significant, change, direction, pct, include_unknown) -> bool:
    """Worse, by more than ``pct`` % (a change from 0 is infinite), and significant (or noise unknown, if asked)."""
    if verdict != "worse" or direction == NEUTRAL or change is None or change != change or not abs(change) > pct:
        return False
    if significant is None or (isinstance(significant, float) and math.isnan(significant)):
        return bool(include_unknown)
    return bool(significant)


def change_pct(a: float, b: float) -> float:
    """100 x (b - a) / |a|; 0 when both are 0; ±inf when only a is 0."""
    if a is None or b is None or not (np.isfinite(a) and np.isfinite(b)):
        return float("nan")
    if a == 0:
        return 0.0 if b == 0 else math.copysign(math.inf, b)
    return 100.0 * (b - a) / abs(a)


def judge(
    a: float,
    b: float,
    direction: str,
    test: UTest | None,
    options: DiffOptions,
    has_samples: bool,
    resolution: float = 0.0,
) -> tuple[str, bool | None, str]:
    """(verdict, significant, noise) for one number. ``significant`` is None when the noise is unknown;
    a change smaller than ``resolution`` (the source's granularity, in the number's unit) is "unchanged"."""
    if test is not None:
        if test.n_a < options.min_samples or test.n_b < options.min_samples or test.min_p_value > options.alpha:
            noise = (
                f"too few samples to tell (n={test.n_a} vs {test.n_b}; the smallest possible p is "
                f"{test.min_p_value:.2g} > alpha {options.alpha:g})"
            )
            significant = None
        else:
            significant = bool(test.p_value < options.alpha)
            noise = (
                f"Mann-Whitney U on {test.n_a} vs {test.n_b} samples, p = {test.p_value:.2g}"
                f"{'' if test.exact else ' (normal approx.)'}"
            )
    else:
        significant = None
        noise = "unknown (single numbers)" if not has_samples else "unknown (no samples on one side)"
    if not (np.isfinite(a) and np.isfinite(b)):
        return "changed", significant, noise
    if a == b or abs(b - a) < resolution:
        return "unchanged", (False if significant is not None else None), noise
    if significant is False:
        return "within_noise", False, noise
    if direction == NEUTRAL:
        return "changed", significant, noise
    better = (b > a) if direction == HIGHER else (b < a)
    return ("better" if better else "worse"), significant, noise


def compare(
    profile_a: Profile,
    profile_b: Profile,
    analysis_a: Analysis | None = None,
    analysis_b: Analysis | None = None,
    thresholds: Thresholds | None = None,
    options: DiffOptions | None = None,
) -> Diff:
    """Compare run B against run A (A is the baseline). Analyses are computed when not given."""
    th = thresholds or Thresholds()
    options = options or DiffOptions()
    analysis_a = analysis_a if analysis_a is not None else analyze(profile_a, th)
    analysis_b = analysis_b if analysis_b is not None else analyze(profile_b, th)
    steps_a, steps_b = step_samples(profile_a, th), step_samples(profile_b, th)
    metrics = _metrics(analysis_a, analysis_b, steps_a, steps_b, options)
    kernels = kernel_diff(profile_a.kernels, profile_b.kernels, options)
    added, removed, changed = _findings(analysis_a, analysis_b)
    env_a = analysis_a.source.get("environment") or environment_of(profile_a)
    env_b = analysis_b.source.get("environment") or environment_of(profile_b)
    tables = {}
    if len(steps_a) or len(steps_b):
        tables["step_samples"] = pd.concat([steps_a.assign(run="A"), steps_b.assign(run="B")], ignore_index=True)
        tables["step_box"] = step_box_table({"A": _col(steps_a, "step_ms"), "B": _col(steps_b, "step_ms")})
    return Diff(
        source_a=analysis_a.source,
        source_b=analysis_b.source,
        metrics=metrics,
        kernels=kernels,
        findings_added=added,
        findings_removed=removed,
        findings_changed=changed,
        keys_only_in_a=sorted(set(analysis_a.summary) - set(analysis_b.summary)),
        keys_only_in_b=sorted(set(analysis_b.summary) - set(analysis_a.summary)),
        tables=tables,
        options=options,
        warnings=mismatches(env_a, env_b)
        + [f"A: {w}" for w in analysis_a.warnings]
        + [f"B: {w}" for w in analysis_b.warnings],
        environment_a=env_a,
        environment_b=env_b,
    )


def diff_paths(path_a, path_b, thresholds: Thresholds | None = None, options: DiffOptions | None = None) -> Diff:
    """Load and compare two run folders or artifacts (anything ``diagnose.load`` reads)."""
    from diagnose.ingest.loading import load

    return compare(load(path_a), load(path_b), thresholds=thresholds, options=options)


METRIC_COLUMNS = [
    "key",
    "label",
    "unit",
    "direction",
    "resolution",
    "declared",
    "a",
    "b",
    "delta",
    "change_pct",
    "n_a",
    "n_b",
    "p_value",
    "significant",
    "verdict",
    "noise",
]


def _metrics(
    analysis_a: Analysis, analysis_b: Analysis, steps_a: pd.DataFrame, steps_b: pd.DataFrame, options: DiffOptions
) -> pd.DataFrame:
    sa, sb = analysis_a.summary, analysis_b.summary
    rows = []
    for key in sorted(set(sa) & set(sb)):
        a, b = _num(sa[key]), _num(sb[key])
        metric = declaration(key, analysis_a, analysis_b)
        direction = metric.direction if metric else NEUTRAL
        resolution = metric.resolution if metric else 0.0
        test, has_samples = None, False
        column = STEP_SAMPLE_KEYS.get(key)
        if column is not None:
            xa, xb = _col(steps_a, column), _col(steps_b, column)
            has_samples = len(xa) > 0 or len(xb) > 0
            if len(xa) and len(xb):
                test = mann_whitney_u(xa, xb)
        verdict, significant, noise = judge(a, b, direction, test, options, has_samples, resolution)
        rows.append(
            {
                "key": key,
                "label": metric.label if metric else key,
                "unit": metric.unit if metric else "",
                "direction": direction,
                "resolution": resolution,
                "declared": metric is not None,
                "a": a,
                "b": b,
                "delta": b - a if np.isfinite(a) and np.isfinite(b) else float("nan"),
                "change_pct": change_pct(a, b),
                "n_a": test.n_a if test else None,
                "n_b": test.n_b if test else None,
                "p_value": test.p_value if test else float("nan"),
                "significant": significant,
                "verdict": verdict,
                "noise": noise,
            }
        )
    out = pd.DataFrame(rows, columns=METRIC_COLUMNS)
    for count in ("n_a", "n_b"):  # sample counts stay integers (None without a test), not floats beside NaN
        out[count] = pd.Series([row[count] for row in rows], index=out.index, dtype=object)
    return out


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _col(df: pd.DataFrame, column: str) -> np.ndarray:
    if column not in df:
        return np.empty(0)
    x = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)
    return x[np.isfinite(x)]


# ---- per-kernel ------------------------------------------------------------------------------

KERNEL_COLUMNS = [
    "kernel_short",
    "status",
    "launches_a",
    "launches_b",
    "total_time_a_ns",
    "total_time_b_ns",
    "total_time_change_pct",
    "median_dur_a_ns",
    "median_dur_b_ns",
    "median_dur_change_pct",
    "median_dur_p_value",
    "median_dur_significant",
    "median_dur_verdict",
    "l2_hit_a_pct",
    "l2_hit_b_pct",
    "l2_hit_delta_pts",
    "l2_hit_change_pct",
    "l2_hit_p_value",
    "l2_hit_significant",
    "l2_hit_verdict",
]


def kernel_diff(ka: pd.DataFrame, kb: pd.DataFrame, options: DiffOptions) -> pd.DataFrame:
    """One row per kernel short name in A or B: launches, total and median time per launch, time-weighted
    L2 hit rate; median launch time and L2 hit per launch tested with Mann-Whitney U."""
    ga, gb = _kernel_groups(ka), _kernel_groups(kb)
    rows = []
    for name in sorted(set(ga) | set(gb)):
        da, db = ga.get(name), gb.get(name)
        row: dict[str, Any] = {
            "kernel_short": name,
            "status": "both" if da is not None and db is not None else ("removed" if db is None else "added"),
        }
        for side, d in (("a", da), ("b", db)):
            dur = _col(d, "dur_ns") if d is not None else np.empty(0)
            row[f"launches_{side}"] = int(len(d)) if d is not None else 0
            row[f"total_time_{side}_ns"] = float(dur.sum()) if len(dur) else float("nan")
            row[f"median_dur_{side}_ns"] = float(np.median(dur)) if len(dur) else float("nan")
            row[f"l2_hit_{side}_pct"] = _time_weighted_l2(d) if d is not None else float("nan")
        row["total_time_change_pct"] = change_pct(row["total_time_a_ns"], row["total_time_b_ns"])
        for metric, (column, direction, resolution) in KERNEL_METRICS.items():
            unit = "ns" if metric == "median_dur" else "pct"
            a, b = row[f"{metric}_a_{unit}"], row[f"{metric}_b_{unit}"]
            test = None
            if da is not None and db is not None:
                xa, xb = _col(da, column), _col(db, column)
                test = mann_whitney_u(xa, xb) if len(xa) and len(xb) else None
            verdict, significant, _ = judge(a, b, direction, test, options, test is not None, resolution)
            if row["status"] != "both":
                verdict = row["status"]
            row[f"{metric}_change_pct"] = change_pct(a, b)
            row[f"{metric}_p_value"] = test.p_value if test else float("nan")
            row[f"{metric}_significant"] = significant
            row[f"{metric}_verdict"] = verdict
        row["l2_hit_delta_pts"] = row["l2_hit_b_pct"] - row["l2_hit_a_pct"]
        rows.append(row)
    out = pd.DataFrame(rows, columns=KERNEL_COLUMNS)
    if len(out):
        weight = out[["total_time_a_ns", "total_time_b_ns"]].max(axis=1).fillna(0)
        out = out.iloc[np.argsort(-weight.to_numpy(), kind="stable")].reset_index(drop=True)
    return out


def _kernel_groups(kernels: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Each kernel's launches, only the columns the diff reads: an ncu table has hundreds of metric columns,
    and copying them all into every group took seconds at 100,000 launches."""
    if kernels is None or not len(kernels) or "kernel_short" not in kernels:
        return {}
    names = kernels["kernel_short"].fillna(kernels.get("kernel_name", pd.Series(index=kernels.index, dtype=object)))
    compared = kernels[[c for c in ("dur_ns", "l2_hit_pct") if c in kernels]]
    return {str(name): group for name, group in compared.groupby(names.astype(str).to_numpy(), sort=True)}


def _time_weighted_l2(d: pd.DataFrame) -> float:
    if "l2_hit_pct" not in d or "dur_ns" not in d:
        return float("nan")
    hit = pd.to_numeric(d["l2_hit_pct"], errors="coerce")
    dur = pd.to_numeric(d["dur_ns"], errors="coerce")
    ok = hit.notna() & dur.notna() & (dur > 0)
    if not ok.any():
        return float(hit.mean()) if hit.notna().any() else float("nan")
    return float((hit[ok] * dur[ok]).sum() / dur[ok].sum())


# ---- findings --------------------------------------------------------------------------------


def _findings(a: Analysis, b: Analysis) -> tuple[list[dict], list[dict], list[dict]]:
    def by_id(analysis):
        out = {}
        for f in analysis.findings:
            out.setdefault(f.id, f)  # ranked: the first of an id is its most severe
        return out

    fa, fb = by_id(a), by_id(b)

    def view(f) -> dict:
        return {"id": f.id, "severity": f.severity.label, "title": f.title, "cost_share": f.cost_share}

    added = [view(fb[i]) for i in sorted(set(fb) - set(fa))]
    removed = [view(fa[i]) for i in sorted(set(fa) - set(fb))]
    changed = []
    for i in sorted(set(fa) & set(fb)):
        if fa[i].severity != fb[i].severity:
            changed.append(
                {
                    "id": i,
                    "severity_a": fa[i].severity.label,
                    "severity_b": fb[i].severity.label,
                    "title_a": fa[i].title,
                    "title_b": fb[i].title,
                    "verdict": "worse" if fb[i].severity > fa[i].severity else "better",
                }
            )
    return added, removed, changed
