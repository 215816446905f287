"""Launch statistics: per-rank figures, the ops that issue the most tiny kernels, the longest launch queues."""

from __future__ import annotations

from reports.figures import table_html


def render(result) -> str:
    stats = result.tables.get("stats")
    if stats is None or not len(stats):
        return '<p class="muted">No kernel launches in the trace.</p>'
    parts = [table_html(stats, "launch-stats", float_fmt="{:,.1f}")]
    ops = result.tables.get("ops")
    if ops is not None and len(ops):
        parts.append("<h3>Ops by kernels shorter than their launch (per step)</h3>")
        parts.append(f"<div class='scroll'>{table_html(ops.head(30), 'launch-ops', float_fmt='{:,.2f}')}</div>")
    queues = result.tables.get("queues")
    if queues is not None and len(queues):
        parts.append("<h3>Longest launch queues (launch call start → kernel start)</h3>")
        view = queues.assign(queue_ms=queues["queue_ns"] / 1e6)[["rank", "op", "kernel", "queue_ms", "stream"]]
        parts.append(f"<div class='scroll'>{table_html(view, 'launch-queues', float_fmt='{:,.3f}')}</div>")
    return "\n".join(parts)
