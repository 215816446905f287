"""ncu-rules section: ncu's verdicts beside gpudiag's on the same kernels, then every OPT/WRN rule ncu reported."""

from __future__ import annotations

import html

from reports.figures import table_html

COMPARISON_COLUMNS = [
    "kernel",
    "topic",
    "agreement",
    "ncu_rule",
    "ncu_verdict",
    "ncu_speedup_pct",
    "gpudiag_verdict",
    "why",
    "share",
    "kernel_name",
]
RULE_COLUMNS = [
    "kernel",
    "rule",
    "about",
    "type",
    "estimated_speedup_pct",
    "speedup_type",
    "est_gpu_time_share",
    "launches_fired",
    "launches",
    "topic",
    "section",
    "description",
    "kernel_name",
]


def render(result) -> str:
    comparison = result.tables.get("comparison")
    rules = result.tables.get("rules")
    if (comparison is None or not len(comparison)) and (rules is None or not len(rules)):
        if result.findings:
            return f'<p class="muted">{html.escape(result.findings[0].recommendation)}</p>'
        return '<p class="muted">No ncu rule results in this input.</p>'
    parts = []
    if comparison is not None and len(comparison):
        counts = comparison["agreement"].value_counts()
        tally = ", ".join(f"{int(n)} {html.escape(str(a))}" for a, n in counts.items())
        parts.append(
            "<h3>ncu beside gpudiag</h3>"
            f"<p class='muted'>Per kernel and compared rule: {tally}. <b>disagree</b>: a different verdict (why says "
            "what each rests on); <b>threshold</b>: the same reading against a different bar; <b>scope</b>: a kernel "
            "gpudiag does not judge (too little GPU time, or a launch-bound micro-kernel).</p>"
            "<div class='scroll'>"
            + table_html(comparison[[c for c in COMPARISON_COLUMNS if c in comparison.columns]], "ncu-rules-comparison")
            + "</div>"
        )
    not_compared = result.meta.get("not_compared_rules") or {}
    if not_compared:
        listed = ", ".join(f"{html.escape(str(rule))} ({n})" for rule, n in not_compared.items())
        parts.append(f"<p class='muted'>Not compared (gpudiag has no verdict on them): {listed}.</p>")
    if rules is not None and len(rules):
        parts.append(
            "<h3>ncu's rules (OPT and WRN)</h3>"
            "<p class='muted'>The speedup is ncu's estimate, duration-weighted over the launches the rule fired on "
            "(global: a share of the kernel's duration, turned into a share of all GPU time in est_gpu_time_share; "
            "local: a gain in one unit's efficiency, not a time).</p>"
            "<div class='scroll'>"
            + table_html(rules[[c for c in RULE_COLUMNS if c in rules.columns]], "ncu-rules-table")
            + "</div>"
        )
    return "".join(parts)
