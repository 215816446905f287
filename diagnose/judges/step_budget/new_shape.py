"""``step_budget.new_shape``: steps after warm-up that met a new input shape (light mode's new-shape records: cuDNN
autotuning with cudnn.benchmark, allocator growth) and took ``new_shape_slow_factor`` x the steady median. The
steps are kept out of the budget's figures (diagnose.derive.kept_apart_steps)."""

from __future__ import annotations

from diagnose.findings import Evidence, Finding, Subject
from diagnose.formatting import ms_human
from diagnose.judges.step_budget.common import NAME, SECTION, severity_of
from diagnose.thresholds import Thresholds

# with cudnn.benchmark on (it times its algorithms again for every new shape), and with it off
ADVICE_CUDNN_BENCHMARK = (
    "Keep input shapes static so each step reuses what the first ones set up: drop_last=True in the DataLoader "
    "or pad the last batch of an epoch to the batch size, resize or crop images to fixed sizes (or to a few bucket "
    "sizes). When shapes must vary a lot, set torch.backends.cudnn.benchmark = False: cuDNN then picks its "
    "algorithms by heuristics instead of timing them for every new shape."
)
ADVICE = (
    "Keep input shapes static so each step reuses what the first ones set up: drop_last=True in the DataLoader "
    "or pad the last batch of an epoch to the batch size, resize or crop images to fixed sizes (or to a few bucket "
    "sizes), so the caching allocator and the kernels chosen for the first shape serve every step."
)


def new_shape_findings(meta: dict, th: Thresholds) -> list[Finding]:
    """``step_budget.new_shape``: steps after warm-up that met a new input shape and took ``new_shape_slow_factor``
    x the steady median; cost share: their time over the median / the time of every step after warm-up."""
    findings = []
    for rank, m in sorted(meta.items()):
        slow = [s for s in m.get("new_shapes", ()) if s["slow"]]
        if not slow:
            continue
        n, median = len(slow), m["median_step_ms"]
        excess_ms = sum(s["over_median_ms"] for s in slow)
        after_ms = (m.get("steady_total_ms") or 0.0) + m.get("new_shape_steps_wall_ms", 0.0)
        share = min(1.0, max(0.0, excess_ms) / after_ms) if after_ms > 0 else None
        numbers = ", ".join(str(s["step"]) for s in slow[:6]) + (", …" if n > 6 else "")
        shapes = list(dict.fromkeys(s["shape"] or "unknown" for s in slow))
        shape_words = "; ".join(shapes[:2]) + (f"; {len(shapes) - 2} more" if len(shapes) > 2 else "")
        each, each_words = excess_ms / n, " each" if n > 1 else ""
        cost = (  # below the median only when new_shape_slow_factor is set under 1
            f"{ms_human(each)} slower than the median {ms_human(median)}{each_words}"
            if each > 0
            else f"{ms_human(sum(s['wall_ms'] for s in slow) / n)}{each_words} against the median {ms_human(median)}"
        )
        cudnn = any(s["cudnn_benchmark"] for s in slow)
        why = (
            "cudnn.benchmark=True re-tunes convolutions for each new shape"
            if cudnn
            else "a new shape costs allocator growth and new kernels (cudnn.benchmark is off)"
        )
        title = (
            f"{n} step{'s' if n != 1 else ''} met a new input shape after warm-up "
            f"(step{'s' if n != 1 else ''} {numbers}: batch {shape_words}): {cost}"
            + (f" on rank {rank}" if len(meta) > 1 else "")
            + f"; {why}"
        )
        findings.append(
            Finding(
                id="step_budget.new_shape",
                analyzer=NAME,
                severity=severity_of(share, th),  # info when no share is known
                title=title,
                subjects=tuple(
                    Subject(
                        "step",
                        str(s["step"]),
                        figures={
                            "rank": rank,
                            "shape": s["shape"] or "",
                            "wall_ms": s["wall_ms"],
                            "over_median_ms": s["over_median_ms"],
                            "cudnn_benchmark": s["cudnn_benchmark"],
                        },
                    )
                    for s in slow[: th.step_budget.max_slow_steps]
                ),
                evidence=(
                    Evidence("step_budget_new_shape_steps", float(n), "count"),
                    Evidence("step_budget_new_shape_over_median_ms", each, "ms"),
                    Evidence("step_budget_step_ms", median, "ms"),
                    Evidence(
                        "step_budget_new_shape_step_factor",
                        sum(s["wall_ms"] for s in slow) / n / median if median > 0 else float("nan"),
                        "x",
                        th.step_budget.new_shape_slow_factor,
                    ),
                ),
                cost_share=share,
                recommendation=ADVICE_CUDNN_BENCHMARK if cudnn else ADVICE,
                section=SECTION,
            )
        )
    return findings
