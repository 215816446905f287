"""Renderers of a :class:`diagnose.comparison.runs.Diff`: the offline HTML page, the terminal summary, the JSON.

Render only: every number shown is in ``diff.metrics`` / ``diff.kernels`` / ``diff.tables``.
Same conventions as reports/html.py: plotly.js inlined once, figures as fragments, text escaped.
"""

from __future__ import annotations

import json
import math

from reports.figures import figure_html, table_html
from reports.format import share_human, value_human
from reports.templating import render_page

MAX_KERNEL_BARS = 20
MAX_STEP_POINTS = 2000  # steps drawn a run: past it, the run's box and its farthest outliers (reports/chart_budget.py)
_RUN_COLORS = {"A": "#636efa", "B": "#ef553b"}  # plotly's first two: a summarised run's box and its outliers alike
_COLORS = {"worse": "\x1b[31;1m", "better": "\x1b[32;1m"}
_RESET = "\x1b[0m"


def render_diff_json(diff) -> str:
    return json.dumps(diff.to_dict(), indent=2, allow_nan=False, default=str) + "\n"


def _fmt(value, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if unit == "share":
        return share_human(value)
    return value_human(value, unit)


def _change(pct) -> str:
    if pct is None or (isinstance(pct, float) and math.isnan(pct)):
        return ""
    if math.isinf(pct):
        return "from 0"
    return f"{pct:+.1f} %"


def _sig(significant, noise: str) -> str:
    if significant is None or significant != significant:
        return "noise unknown" if noise.startswith("unknown") else "too few samples"
    if bool(significant):
        return "significant"
    if not bool(significant):
        return "within noise"
    return "noise unknown" if noise.startswith("unknown") else "too few samples"


def render_diff_terminal(diff, color: bool = False, show_all: bool = False, kernel_limit: int = 10) -> str:
    lines = [
        f"gpudiag diff: A = {', '.join(diff.source_a.get('paths', []))}",
        f"              B = {', '.join(diff.source_b.get('paths', []))}",
    ]
    environment = _environment_warnings(diff)
    for w in environment:
        tag = f"{_COLORS['worse']}WARNING{_RESET}" if color else "WARNING"
        lines.append(f"{tag}: {w}")
    m = diff.metrics
    changed = m if show_all else m[~m["verdict"].isin(["unchanged"])]
    counts = m["verdict"].value_counts()
    lines.append(
        f"{len(m)} shared metrics: {int(counts.get('worse', 0))} worse, {int(counts.get('better', 0))} better, "
        f"{int(counts.get('within_noise', 0))} within noise, {int(counts.get('unchanged', 0))} unchanged, "
        f"{int(counts.get('changed', 0))} changed (neither way is better)"
    )
    for rec in changed.itertuples(index=False):
        tag = f"{rec.verdict:>12}"
        if color and rec.verdict in _COLORS:
            tag = f"{_COLORS[rec.verdict]}{tag}{_RESET}"
        undeclared = "" if getattr(rec, "declared", True) else " (undeclared: neither way is better)"
        lines.append(
            f"{tag}  {rec.key}: {_fmt(rec.a, rec.unit)} -> {_fmt(rec.b, rec.unit)} {_change(rec.change_pct)}"
            f"  [{_sig(rec.significant, rec.noise)}]{undeclared}"
        )
    k = diff.kernels
    if len(k):
        lines.append(
            f"kernels: {int((k['status'] == 'both').sum())} in both, {int((k['status'] == 'added').sum())} "
            f"only in B, {int((k['status'] == 'removed').sum())} only in A (by total time):"
        )
        for rec in k.head(kernel_limit).itertuples(index=False):
            if rec.status == "both":
                text = (
                    f"median {_fmt(rec.median_dur_a_ns, 'ns')} -> {_fmt(rec.median_dur_b_ns, 'ns')} "
                    f"{_change(rec.median_dur_change_pct)} [{rec.median_dur_verdict}]; L2 hit "
                    f"{_fmt(rec.l2_hit_a_pct, '%')} -> {_fmt(rec.l2_hit_b_pct, '%')} [{rec.l2_hit_verdict}]"
                )
            elif rec.status == "added":
                text = f"only in B: {rec.launches_b} launches, {_fmt(rec.total_time_b_ns, 'ns')}"
            else:
                text = f"only in A: {rec.launches_a} launches, {_fmt(rec.total_time_a_ns, 'ns')}"
            lines.append(f"  {rec.kernel_short[:60]:<60} {text}")
        if len(k) > kernel_limit:
            lines.append(f"   … and {len(k) - kernel_limit} more kernels in the HTML / JSON")
    for f in diff.findings_added:
        lines.append(f"  new finding      {f['severity']:>8}  {f['title']}  [{f['id']}]")
    for f in diff.findings_removed:
        lines.append(f"  gone finding     {f['severity']:>8}  {f['title']}  [{f['id']}]")
    for f in diff.findings_changed:
        lines.append(f"  finding {f['verdict']:<8} {f['severity_a']} -> {f['severity_b']}  {f['title_b']}  [{f['id']}]")
    for w in diff.warnings:
        if w not in environment:
            lines.append(f"  note: {w}")
    return "\n".join(lines) + "\n"


def _environment_warnings(diff) -> list[str]:
    """The diff's environment mismatches (GPU, driver, CUDA, torch/JAX), shown above everything else."""
    return list(getattr(diff, "environment_warnings", []) or [])


def _metric_rows(diff) -> list[dict]:
    rows = []
    for rec in diff.metrics.itertuples(index=False):
        declared = bool(getattr(rec, "declared", True))
        rows.append(
            {
                "key": rec.key,
                "label": rec.label if declared and getattr(rec, "label", rec.key) != rec.key else "",
                "declared": declared,
                "a": _fmt(rec.a, rec.unit),
                "b": _fmt(rec.b, rec.unit),
                "change": _change(rec.change_pct),
                "verdict": rec.verdict,
                "direction": rec.direction if declared else "undeclared",
                "significance": _sig(rec.significant, rec.noise),
                "noise": rec.noise,
            }
        )
    order = {"worse": 0, "better": 1, "changed": 2, "within_noise": 3, "unchanged": 4}
    return sorted(rows, key=lambda r: (order.get(r["verdict"], 5), r["key"]))


def _step_figure(diff) -> str:
    samples = diff.tables.get("step_samples")
    if samples is None or not len(samples):
        return ""
    import plotly.graph_objects as go

    fig = go.Figure()
    boxes = diff.tables.get("step_box")
    boxes = boxes.set_index("run") if boxes is not None else None
    summarised = []
    for run in ("A", "B"):
        s = samples[samples["run"] == run]
        name = f"run {run}"
        if not len(s):
            continue
        if len(s) <= MAX_STEP_POINTS or boxes is None or run not in boxes.index:
            fig.add_trace(
                go.Box(
                    y=s["step_ms"].tolist(),
                    name=name,
                    boxpoints="all",
                    jitter=0.4,
                    text=[f"rank {r} step {st}" for r, st in zip(s["rank"], s["step"])],
                )
            )
            continue
        # past the mark budget: the box of every step (diff.tables["step_box"]) and the steps farthest outside it
        b = boxes.loc[run]
        color = _RUN_COLORS[run]
        fig.add_trace(
            go.Box(
                x=[name],
                name=name,
                marker_color=color,
                q1=[b["q1_ms"]],
                median=[b["median_ms"]],
                q3=[b["q3_ms"]],
                lowerfence=[b["lower_fence_ms"]],
                upperfence=[b["upper_fence_ms"]],
            )
        )
        outside = s[(s["step_ms"] < b["lower_fence_ms"]) | (s["step_ms"] > b["upper_fence_ms"])]
        shown = outside.loc[(outside["step_ms"] - b["median_ms"]).abs().nlargest(MAX_STEP_POINTS).index]
        summarised.append(f"{name}: box of {len(s):,} steps, {len(shown):,} of {len(outside):,} outside it drawn")
        if len(shown):
            fig.add_trace(
                go.Scatter(
                    x=[name] * len(shown),
                    y=shown["step_ms"].tolist(),
                    mode="markers",
                    marker_color=color,
                    name=f"{name} outliers",
                    text=[f"rank {r} step {st}" for r, st in zip(shown["rank"], shown["step"])],
                )
            )
    fig.update_layout(
        title="Step time per measured step (warm-up left out)"
        + (f"<br><sub>{'; '.join(summarised)}</sub>" if summarised else ""),
        yaxis_title="step time (ms)",
        height=380,
        showlegend=False,
    )
    return figure_html(fig, "diff-steps")


def _kernel_figure(diff) -> str:
    k = diff.kernels
    if not len(k):
        return ""
    import plotly.graph_objects as go

    top = k.head(MAX_KERNEL_BARS)
    names = [n if len(n) <= 50 else n[:47] + "…" for n in top["kernel_short"]]
    fig = go.Figure(
        [
            go.Bar(y=names, x=(top["total_time_a_ns"] / 1e3).tolist(), name="A", orientation="h"),
            go.Bar(y=names, x=(top["total_time_b_ns"] / 1e3).tolist(), name="B", orientation="h"),
        ]
    )
    fig.update_layout(
        title="GPU time per kernel (profiled launches)",
        xaxis_title="total time (µs)",
        barmode="group",
        height=max(300, 40 * len(top) + 120),
        yaxis=dict(autorange="reversed"),
    )
    return figure_html(fig, "diff-kernels")


def _kernel_table(diff) -> str:
    k = diff.kernels
    if not len(k):
        return '<p class="muted">No ncu kernel table in either run.</p>'
    shown = k[
        [
            "kernel_short",
            "status",
            "launches_a",
            "launches_b",
            "total_time_a_ns",
            "total_time_b_ns",
            "median_dur_a_ns",
            "median_dur_b_ns",
            "median_dur_change_pct",
            "median_dur_p_value",
            "median_dur_verdict",
            "l2_hit_a_pct",
            "l2_hit_b_pct",
            "l2_hit_delta_pts",
            "l2_hit_p_value",
            "l2_hit_verdict",
        ]
    ].copy()
    return table_html(shown, "diff-kernel-table")


def render_diff_html(diff) -> str:
    data = diff.to_dict()
    return render_page(
        "diff.html",
        a=diff.source_a,
        b=diff.source_b,
        metrics=_metric_rows(diff),
        alpha=diff.options.alpha,
        added=diff.findings_added,
        removed=diff.findings_removed,
        changed=diff.findings_changed,
        only_a=diff.keys_only_in_a,
        only_b=diff.keys_only_in_b,
        environment_warnings=_environment_warnings(diff),
        warnings=[w for w in diff.warnings if w not in _environment_warnings(diff)],
        step_figure=_step_figure(diff),
        kernel_figure=_kernel_figure(diff),
        kernel_table=_kernel_table(diff),
        data=data,
    )
