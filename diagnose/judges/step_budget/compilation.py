"""``step_budget.compilation``: a function that compiled after warm-up (light mode's compilation records: a JAX jit
or torch.compile compiling for a new shape), named with its line, when the compiles cost ``compile_min_share`` of
the run after warm-up. The steps that compiled are kept out of the budget's figures
(diagnose.derive.kept_apart_steps).

A compile is said as a recompile only where the function compiled more than once after warm-up; one that compiled
once there (for the first time, or for shapes it had not met: an evaluation's eager ``dot_general`` of a new batch
size) is one-off work, not a function that keeps compiling. So is one that compiled several times in one step only
(each eager operation compiles once per shape it meets). A first compile after warm-up is
code that ran for the first time there: JAX compiles jnp operations run outside jit one executable per operation
and shape (an epoch-end ``accuracy()`` of plain jnp ops compiled ``jit(matmul)``, ``jit(_argmax)``, ``jit(equal)``
and ``jit(_mean)`` in one step on CPU, issue 34). Several first compiles in one step from one file are said as that,
with their lines, and get the advice that fits them instead of the static-shape one."""

from __future__ import annotations

from diagnose.derive.kept_apart_steps import COMPILATION
from diagnose.findings import Evidence, Finding, Subject
from diagnose.formatting import ms_human, n_things
from diagnose.judges.step_budget.common import NAME, SECTION, severity_of, short_location
from diagnose.thresholds import Thresholds

STATIC_SHAPES = (
    "Keep input shapes static so the function compiles once: pad batches to one length or to a few bucket sizes, "
)
ADVICE = {
    "jax": STATIC_SHAPES + "drop or pad the last partial batch of an epoch, and mark arguments that select code "
    "paths as static (jax.jit(static_argnames=...)). To see why it compiled: "
    "`jax.config.update('jax_explain_cache_misses', True)`, or JAX_LOG_COMPILES=1 to list each compile.",
    "torch": STATIC_SHAPES + "drop or pad the last partial batch of an epoch (drop_last=True in the DataLoader), "
    "and keep Python values that select code paths constant. With torch.compile, compile once for varying sizes "
    "with torch.compile(dynamic=True) or torch._dynamo.mark_dynamic(tensor, dim). To see why it compiled: "
    "TORCH_LOGS=recompiles.",
}
FIRST_ADVICE = {
    "jax": "These are first compiles, not recompiles: code that runs for the first time after warm-up compiles "
    "once (an evaluation, a checkpoint's conversion). jnp operations run outside jit compile one executable per "
    "operation and input shape: put that code under jax.jit, so it compiles once as one executable and runs fused, "
    "or run it once during warm-up. JAX_LOG_COMPILES=1 lists what compiles.",
    "torch": "These are first compiles, not recompiles: code that runs for the first time after warm-up compiles "
    "once (an evaluation under model.eval() or torch.no_grad() is a new graph for torch.compile). Run it once "
    "during warm-up, or leave code that runs rarely out of torch.compile. TORCH_LOGS=recompiles says what "
    "triggered each compile.",
}


def framework_of(name: str | None) -> str:
    """``torch`` for a torch.compile record's name (``torch.compile(forward)``), else ``jax`` (``jit(update)``,
    ``pjit(step)``, an eager op's ``jit(matmul)``): the two recorders that write compilation records."""
    return "torch" if str(name or "").startswith("torch.compile(") else "jax"


OUTSIDE_JIT_MIN = 3  # first compiles in one step from one file from which they are said as jnp ops outside jit


def function_words(name: str | None) -> str:
    """``update (jit)`` of ``jit(update)``, ``forward (torch.compile)`` of ``torch.compile(forward)``."""
    if not name:
        return "A function"
    head, paren, rest = name.partition("(")
    if paren and rest.endswith(")") and head in ("jit", "pjit", "torch.compile"):
        return f"{rest[:-1]} ({head})"
    return name


def compile_findings(meta: dict, th: Thresholds) -> list[Finding]:
    """``step_budget.compilation``: compiles after warm-up that cost ``compile_min_share`` of the run after it."""
    findings = []
    ranks = [(rank, m) for rank, m in sorted(meta.items()) if m.get("compile_functions")]
    for rank, m in ranks:
        after_ms = (m.get("steady_total_ms") or 0.0) + m.get("compile_steps_wall_ms", 0.0)
        total_ms = m["compile_ms"]
        share = min(1.0, total_ms / after_ms) if after_ms > 0 else None
        if share is None or share < th.step_budget.compile_min_share:
            continue
        top = m["compile_functions"][0]
        steps = sorted({s for f in m["compile_functions"] for s in f["steps"]})
        where = short_location(top["locations"][0][0]) if top["locations"] else "an unknown line"
        others = len(m["compile_functions"]) - 1
        step_list = f"{', '.join(str(s) for s in top['steps'][:6])}{', …' if len(top['steps']) > 6 else ''}"
        if top.get("first_step") is None and top.get("once_step") is not None:
            times = "" if top["count"] == 1 else f" ({top['count']} shapes)"
            title = (
                f"{function_words(top['name'])} compiled in one step after warm-up, step {top['once_step']}, for "
                f"shapes it had not met{times}: {ms_human(top['ms'])} ({where})"
            )
        elif top.get("first_step") is None:
            title = (
                f"{function_words(top['name'])} compiled again in {n_things(len(top['steps']), 'step')} after warm-up "
                f"(steps {step_list}): {ms_human(top['ms'])} in all, {ms_human(top['ms'] / top['count'])} each "
                f"({where})"
            )
        else:
            title = (
                f"{function_words(top['name'])} compiled for the first time after warm-up, in step "
                f"{top['first_step']}: {ms_human(top['ms'])} ({where})"
            )
        outside = outside_jit(m["compile_functions"], top)
        extra_evidence = [Evidence("step_budget_compile_top_ms", float(top["ms"]), "ms")]
        if outside:
            words, n_functions, lines = outside
            title += f"; {words}, {ms_human(total_ms)} of compilation in all"
            extra_evidence += [
                Evidence("step_budget_compile_functions_in_step", float(n_functions), "count"),
                Evidence("step_budget_compile_first_line", float(lines[0]), "line"),
                Evidence("step_budget_compile_last_line", float(lines[-1]), "line"),
            ]
        elif others:
            title += f"; {n_things(others, 'other function')} too, {ms_human(total_ms)} of compilation in all"
        if len(meta) > 1:
            title += f" on rank {rank}"
        title += f", {100 * share:.1f} % of the run after warm-up"
        subjects = [
            Subject(
                "location",
                location,
                figures={"what": COMPILATION, "name": f["name"] or "", "calls": calls, "ms": ms},
            )
            for f in m["compile_functions"]
            for location, calls, ms in f["locations"]
            if location
        ]
        subjects += [
            Subject("step", str(s), figures={"rank": rank, "compile_ms": m["compile_ms_by_step"].get(s, 0.0)})
            for s in steps[: th.step_budget.max_slow_steps]
        ]
        findings.append(
            Finding(
                id="step_budget.compilation",
                analyzer=NAME,
                severity=severity_of(share, th),
                title=title,
                subjects=tuple(subjects),
                evidence=(
                    Evidence("step_budget_compile_ms", total_ms, "ms"),
                    Evidence("step_budget_compile_steps", float(len(steps)), "count"),
                    Evidence("step_budget_compile_each_ms", total_ms / max(1, m["compile_count"]), "ms"),
                    Evidence("step_budget_compile_share", share, "share", th.step_budget.compile_min_share),
                    *extra_evidence,
                ),
                cost_share=share,
                recommendation=f"At {where}: {advice_for(top)}",
                section=SECTION,
            )
        )
    return findings


def advice_for(function: dict) -> str:
    """The advice for the top function's framework, for a first compile or a recompile."""
    return (FIRST_ADVICE if once_only(function) else ADVICE)[framework_of(function["name"])]


def once_only(function: dict) -> bool:
    """True when the function compiled in one step after warm-up (for the first time, or for shapes it had not
    met)."""
    return function.get("first_step") is not None or function.get("once_step") is not None


def outside_jit(functions: list[dict], top: dict) -> tuple[str, int, list[int]] | None:
    """(``4 functions compiled for the first time in step 33 at eval.py:11–12: jnp operations outside jit, one
    executable per operation and shape``, how many, their lines), where ``OUTSIDE_JIT_MIN`` functions or more first
    compiled in the top's step from the top's file; else None."""
    step = top.get("first_step") if top.get("first_step") is not None else top.get("once_step")
    if step is None or not top["locations"] or not top["locations"][0][0]:
        return None
    file = str(top["locations"][0][0]).rpartition(":")[0]
    firsts = [
        f
        for f in functions
        if step in (f.get("first_step"), f.get("once_step"))
        and f["locations"]
        and str(f["locations"][0][0]).rpartition(":")[0] == file
    ]
    if len(firsts) < OUTSIDE_JIT_MIN:
        return None
    lines = sorted(
        {
            int(loc.rpartition(":")[2])
            for f in firsts
            for loc, _, _ in f["locations"]
            if loc and loc.rpartition(":")[2].isdigit()
        }
    )
    span = f"{lines[0]}" if len(lines) == 1 else f"{lines[0]}–{lines[-1]}"
    names = ", ".join(str(f["name"]) for f in firsts[:4]) + (", …" if len(firsts) > 4 else "")
    words = (
        f"{n_things(len(firsts), 'function')} compiled "
        f"{'for the first time' if all(f.get('first_step') == step for f in firsts) else 'for new shapes'} in step "
        f"{step} at {short_location(file + ':' + span)} ({names}): jnp operations run outside jit, one executable per "
        "operation and shape"
    )
    return words, len(firsts), lines
