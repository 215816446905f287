"""The step_budget analyzer's diagnoses, one module each, judged from the budget ``Derived.step_budget()`` keeps
(diagnose.derive.step_budget_table): ``causes`` (the median step's parts: input, sync, launch_bound, allocator,
unexplained; ``sync_cause`` and ``unexplained`` word two of them), ``periodic``, ``compilation``, ``new_shape``.
"""
