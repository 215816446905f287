"""Read a .ncu-rep in a fresh process, for tests that read a report of a newer ncu than the other fixtures.

ncu_report keeps metric units per process, fixed by the first report whose metrics a process reads: after the
kernel_kinds report (ncu 2025.3.1, which gives ``sass__inst_executed_register_spilling_mem_{local,shared}`` in
``inst``) the convnet report reads them in ``inst`` too, and the other way round ``byte`` (each capture's own CSV says
its own unit). Reading the kinds report in the test process would change what later tests read from the older reports.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os

from tests.paths import REPO

KINDS = REPO / "fixtures" / "ncu" / "kernel_kinds"
# The full report of the kinds run (ncu --set full with SourceCounters, 5.9 MB gzipped) is not in fixtures/: the
# tests of what only it holds (per-instruction excess sectors and their source lines, its rule results) use a copy
# where one is (a developer's gitignored scratch/) and skip otherwise; what any report shows is tested on
# FIXTURE_REPORTS. No small report with SourceCounters has been captured (that needs a GPU).
REPORT = next(
    (p for p in (KINDS / "report.ncu-rep.gz", REPO / "scratch" / "kinds" / "report.ncu-rep.gz") if p.exists()), None
)
NO_KINDS_REPORT = (
    "needs the kernel_kinds .ncu-rep (SourceCounters, 5.9 MB gzipped): captured on a GPU, not in fixtures/ "
    "(its CSV pages are)"
)
# the project's own H200 reports (fixtures/ncu/PROVENANCE.md): SpeedOfLight, memory, occupancy and launch sections
FIXTURE_REPORTS = {
    name: REPO / "fixtures" / "ncu" / name / "report.ncu-rep.gz"
    for name in ("l2_random_gather", "matmul_tiled", "small_grid", "tiny_kernels")
}


def in_fresh_process(fn, *args):
    """``fn(*args)`` in a spawned process (``fn`` importable at module level; its result pickled back)."""
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def analyze_report(analyzer: str, path: str):
    """One analyzer's Result on a report."""
    import diagnose
    from diagnose.analysis import run_analyzer

    return run_analyzer(analyzer, diagnose.load(path))


def read_report(path: str):
    """The registry reader's (kernels, rules) of a report."""
    from parsers import registry

    return registry.detect(path).read(path)


def report_path() -> str:
    """The kinds report, or skip (no ncu_report, or no report in this checkout: see REPORT)."""
    import pytest

    pytest.importorskip("ncu_report")
    if REPORT is None:
        pytest.skip(NO_KINDS_REPORT)
    return os.fspath(REPORT)


def read_with_broken_rules(path: str):
    """The registry read of a report whose rule results ncu_report cannot give: (kernels, rules, warnings)."""
    import warnings

    from parsers import ncu_rep, registry

    def broken(*args):
        raise RuntimeError("no rules")

    ncu_rep._action_rules = broken
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernels, rules = registry.detect(path).read(path)
    return kernels, rules, [str(w.message) for w in caught]
