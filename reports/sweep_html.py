"""Renderers of a :class:`diagnose.comparison.sweep.Sweep`: the offline HTML page (peak memory against samples/s,
Pareto front marked, failed combinations with their reason) and the terminal table. Render only:
every number is a column of ``sweep.rows``."""

from __future__ import annotations

import pandas as pd

from reports.figures import figure_html, table_html
from reports.format import bytes_human, number_human
from reports.templating import render_page

TABLE_COLUMNS = (
    "status",
    "samples_per_s",
    "steps_per_s",
    "step_time_median_ms",
    "peak_reserved_bytes",
    "peak_allocated_bytes",
    "pareto",
    "exit_code",
)


def _speed_column(rows: pd.DataFrame) -> str:
    sps = pd.to_numeric(rows.get("samples_per_s"), errors="coerce")
    return "samples_per_s" if sps is not None and sps.notna().any() else "steps_per_s"


def _grid_names(sweep) -> list[str]:
    return [n for n, _ in sweep.grid]


def _figure(sweep) -> str:
    rows = sweep.rows
    ok = rows[rows["status"] == "ok"]
    speed = _speed_column(rows)
    mem = pd.to_numeric(ok.get("peak_reserved_bytes"), errors="coerce") if len(ok) else pd.Series(dtype=float)
    if not len(ok) or not mem.notna().any():
        return (
            '<p class="muted">No peak memory to plot: no combination succeeded, or the runs recorded no memory '
            "stats (a CPU run has none).</p>"
        )
    import plotly.graph_objects as go

    names = _grid_names(sweep)
    labels = [", ".join(f"{n}={r[n]}" for n in names) for _, r in ok.iterrows()]
    gib = (mem / 2**30).tolist()
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=gib,
            y=ok[speed].tolist(),
            mode="markers+text",
            text=labels,
            textposition="top center",
            name="combination",
            marker=dict(size=11, color="#2471a3"),
        )
    )
    front = ok[ok["pareto"].astype(bool)].assign(gib=lambda d: pd.to_numeric(d["peak_reserved_bytes"]) / 2**30)
    front = front.sort_values("gib")
    if len(front):
        fig.add_trace(
            go.Scatter(
                x=front["gib"].tolist(),
                y=front[speed].tolist(),
                mode="lines+markers",
                name="Pareto front",
                line=dict(color="#c0392b", dash="dot"),
                marker=dict(size=15, symbol="circle-open", color="#c0392b", line=dict(width=2)),
            )
        )
    fig.update_layout(
        title=f"Peak reserved memory against {speed.replace('_', ' ')}",
        xaxis_title="peak reserved memory (GiB)",
        yaxis_title=speed.replace("_per_s", " per second"),
        height=480,
    )
    return figure_html(fig, "sweep-pareto")


def _table(sweep) -> pd.DataFrame:
    cols = ["label", *_grid_names(sweep), *[c for c in TABLE_COLUMNS if c in sweep.rows]]
    return sweep.rows[cols]


def render_sweep_html(sweep) -> str:
    rows = sweep.rows
    failed = rows[rows["status"] != "ok"]
    return render_page(
        "sweep.html",
        folder=str(sweep.folder),
        command=" ".join(sweep.template),
        grid=sweep.grid,
        n=len(rows),
        n_ok=int((rows["status"] == "ok").sum()),
        figure=_figure(sweep),
        table=table_html(_table(sweep), "sweep-table"),
        failed=[
            {"label": r["label"], "status": r["status"], "exit_code": r["exit_code"], "reason": r["reason"]}
            for _, r in failed.iterrows()
        ],
        warnings=sweep.warnings,
        data=sweep.to_dict(),
    )


def render_sweep_terminal(sweep) -> str:
    rows = sweep.rows
    names = _grid_names(sweep)
    speed = _speed_column(rows)
    head = [*names, "status", speed, "peak reserved", "peak allocated", "pareto"]
    body = []
    for _, r in rows.iterrows():
        v = r.get(speed)
        body.append(
            [
                *(str(r[n]) for n in names),
                str(r["status"]),
                number_human(v),
                bytes_human(r.get("peak_reserved_bytes")),
                bytes_human(r.get("peak_allocated_bytes")),
                "*" if bool(r.get("pareto")) else "",
            ]
        )
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)) for b in body]
    for _, r in rows[rows["status"] != "ok"].iterrows():
        last = (r["reason"] or "").strip().splitlines()
        lines.append(f"  {r['label']}: {r['status']}: {last[-1] if last else ''}")
    return "\n".join(lines) + "\n"
