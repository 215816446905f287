"""``Derived``: every table two or more analyzers read, worked out once per Profile (DESIGN.md's data flow).

``analyze()`` makes one for the Profile and hands it to each analyzer with the Profile and the thresholds;
an analyzer reads a shared table from it and never from another analyzer. Each table is computed on first use
(an ncu-only report never works out gaps, a trace-only one never groups kernels), and lives as long as the
Derived: there is no global memo and nothing is attached to the parser's objects.

What it holds:
- ``traces``: one :class:`~diagnose.derive.trace_view.TraceView` per rank, which keeps what the timeline
  functions (diagnose.derive.trace_timeline, trace_input_wait) work out from that trace: its analysed form,
  gaps, host syncs, steps and their GPU windows, input fetches;
- ``kernel_memo``: the kernels table's groupings and limiter means (diagnose.derive.table_values), passed as
  ``memo=`` to the kernel_stats / kernel_limiter functions;
- ``rank_parts``: each trace analyzer's per-rank part (its ``rank_part``) when a cluster's workers worked it
  out (:meth:`Derived.rank_part`);
- the profile-level tables below (``step_table``, ``trace_window``, ``source_dirs``, ``kernel_access``, ``onchip_bound``,
  ``host_sites``, ``rank_calls``, ``step_budget``, ``run_budget``), each a method whose result is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import pandas as pd

from diagnose.derive.table_values import TableValues
from diagnose.derive.trace_view import TraceView, TraceViews
from diagnose.ingest.profile_data import Profile, run_marks_of
from diagnose.thresholds import Thresholds

if TYPE_CHECKING:
    from diagnose.derive.run_budget_table import RankRunBudget
    from diagnose.derive.step_budget_table import StepBudget

T = TypeVar("T")


class Derived:
    """The shared tables of one Profile under one set of thresholds, each computed once on first use."""

    def __init__(
        self,
        profile: Profile,
        thresholds: Thresholds | None = None,
        rank_parts: dict[tuple[str, int], Any] | None = None,
    ):
        self.profile = profile
        self.thresholds = thresholds or Thresholds()
        # (analyzer, rank) → what that analyzer works out from the rank's trace alone, worked out elsewhere (a
        # cluster's workers, diagnose.cluster): the parent then never reads that rank's tables for it
        self.rank_parts = dict(rank_parts or {})
        self.record_parts = False  # a cluster worker sets it: every part worked out is kept, to send back
        # a mapping that reads ranks on demand (the cluster read) gets views that live while their rank is held
        self.traces: dict[int, TraceView] | TraceViews = (
            TraceViews(profile.traces)
            if getattr(profile.traces, "evicts", False)
            else {rank: TraceView(t) for rank, t in profile.traces.items()}
        )
        self.kernel_memo = TableValues()
        self._tables: dict[Any, Any] = {}

    def once(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()`` the first time ``key`` is asked for; what it returned after that (do not change it)."""
        if key not in self._tables:
            self._tables[key] = compute()
        return self._tables[key]

    def rank_part(self, analyzer: str, rank: int, compute: Callable[[], T]) -> T:
        """What ``analyzer`` works out from rank ``rank``'s trace alone (its ``rank_part``): the one given to this
        Derived when there is one, else ``compute()`` (not kept: each analyzer asks for its own once)."""
        if (analyzer, rank) in self.rank_parts:
            return self.rank_parts[(analyzer, rank)]
        part = compute()
        if self.record_parts:
            self.rank_parts[(analyzer, rank)] = part
        return part

    def analysed(self, rank: int) -> TraceView:
        """Rank ``rank``'s trace as analysed (the last profiler step left out, as HTA does)."""
        from diagnose.derive.trace_timeline import analysed

        return analysed(self.traces[rank])

    def step_table(self) -> pd.DataFrame:
        """The run's whole-step rows (diagnose.derive.step_table): a copy each caller may change."""
        from diagnose.derive.step_table import step_table

        return self.once("step_table", lambda: step_table(self.profile, self.thresholds)).copy()

    def trace_window(self) -> range | None:
        """The steps gpudiag's profiler trace window covered (diagnose.derive.trace_window)."""
        from diagnose.derive.trace_window import window_of

        return self.once("trace_window", lambda: window_of(self.profile.manifest))

    def source_dirs(self) -> list[str]:
        """Folders a trace's relative frame file names may be under (diagnose.derive.trace_input_wait)."""
        from diagnose.derive.trace_input_wait import source_dirs_of

        return list(self.once("source_dirs", lambda: source_dirs_of(self.profile)))

    def kernel_access(self) -> pd.DataFrame:
        """Per kernel, its global-memory sectors against the ideal (diagnose.derive.kernel_access): a copy."""
        from diagnose.derive.kernel_access import kernel_access

        table = self.once(
            "kernel_access", lambda: kernel_access(self.profile.kernels, self.thresholds, self.kernel_memo)
        )
        return table.copy()

    def onchip_bound(self) -> pd.DataFrame:
        """Per kernel, whether an on-chip memory unit holds it far from its roofline, why, and what it would save
        (diagnose.derive.onchip_bound): speed_of_light flags them and l2 leaves them to it. A copy."""
        from diagnose.derive.onchip_bound import onchip_bound

        table = self.once(
            "onchip_bound",
            lambda: onchip_bound(self.profile.kernels, self.kernel_access(), self.thresholds, self.kernel_memo),
        )
        return table.copy()

    def host_sites(self, rank: int) -> pd.DataFrame:
        """Where rank ``rank``'s host was while the GPU waited for it in the traced steps (diagnose.derive.host_sites):
        idle and the step budget's launch-bound finding name the same code. A copy."""
        from diagnose.derive import trace_timeline as tl
        from diagnose.derive.host_sites import host_sites, user_files_of

        def compute() -> pd.DataFrame:
            trace = self.analysed(rank)
            gaps = tl.gaps(trace, self.thresholds.sync.kernel_gap_us * 1e3, self.thresholds.sync.sync_slack_us * 1e3)
            user_files = self.once("user_files", lambda: user_files_of(self.profile))
            phase_sites = run_marks_of(self.profile, rank).get("phase_sites") or ()
            return host_sites(trace, gaps, user_files=user_files, phase_sites=phase_sites)

        table = self.once(("host_sites", rank), compute)
        out = table.copy()
        out.attrs = dict(table.attrs)
        return out

    def rank_calls(self, rank: int) -> tuple[pd.DataFrame, float, int]:
        """One rank's sync calls with their costs and lines (diagnose.derive.sync_calls): sync and the step budget
        count the same calls. (a copy of the calls, mean step ns, steps)."""
        from diagnose.derive.sync_calls import rank_calls

        calls, step_ns, n_steps = self.once(
            ("rank_calls", rank), lambda: rank_calls(self.profile, rank, self.analysed(rank), self.thresholds)
        )
        return calls.copy(), step_ns, n_steps

    def work_split(self, rank: int) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
        """Rank ``rank``'s light-mode work records split by diagnose.derive.step_own_code: (those that can explain a
        slow step, the host-code records of a step's own code). Do not change them."""
        from diagnose.derive.step_own_code import split_work

        return self.once(("work_split", rank), lambda: split_work(self.profile.work_records.get(rank), self.thresholds))

    def step_budget(self) -> StepBudget:
        """Every rank's step-time budget, its slow and traced steps (diagnose.derive.step_budget_table): a copy."""
        from diagnose.derive.step_budget_table import step_budget

        return self.once("step_budget", lambda: step_budget(self.profile, self, self.thresholds)).copy()

    def run_budget(self) -> dict[int, RankRunBudget]:
        """Every rank's run budget, process start to exit (diagnose.derive.run_budget_table), by rank; {} when the
        run's wall time is unknown. Do not change it."""
        from diagnose.derive.run_budget_table import run_budget

        return self.once(
            "run_budget",
            lambda: run_budget(self.profile, self.step_table(), self.trace_window(), self.thresholds, self.work_split),
        )
