"""Judging that an analyzer hands to smaller modules, one per diagnosis: ``diagnose/judges/<analyzer>/``.

An analyzer module (diagnose/analyzers/) is one report section: its name, its result, its summary. When it judges
several diagnoses from one derived table (the step budget: input wait, syncs, periodic work, compilation, new
shapes, …), each diagnosis's rule, words and advice live here, in a module of their own, and the analyzer calls
them in the order its findings come. They are not analyzers: analyzers never import one another, and the modules
here import no analyzer (tests/analyzers/test_step_budget_judges.py); this ``__init__`` imports none of them.
"""
