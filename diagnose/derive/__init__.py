"""Tables that more than one analyzer needs, worked out by one function each (DESIGN.md's data flow).

Analyzers never import one another: when two of them read the same derived table (the run's step rows, the
per-kernel memory access, a sync's cost, a step's GPU busy and idle), its code lives here, once, so they cannot
drift apart. The step-time budget is here too (step_budget_table and the modules it names), though one analyzer
judges it: derived once, it is judged by one module per diagnosis (diagnose/judges/step_budget/). A module here
imports parsers and diagnose's helpers (trace_timeline, kernel_stats, …), never
``diagnose.analyzers``; this ``__init__`` imports none of its modules.
"""
