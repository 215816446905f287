"""`Profile`: every table of one run (or one artifact) plus its manifest.

Analyzers take a Profile and nothing else. Tables that were not captured are
typed empty frames (or empty per-rank dicts), never None, so an analyzer only
has to ask ``profile.has(...)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from parsers import reader as tables


@dataclass
class Profile:
    sources: list[str] = field(default_factory=list)  # the files that were read
    manifest: dict[str, Any] = field(default_factory=dict)  # run manifest (empty for a single artifact)
    kernels: pd.DataFrame | None = None  # ncu: one row per profiled kernel launch (parsers.ncu_kernels.KERNELS_SCHEMA)
    ncu_rules: pd.DataFrame | None = None  # ncu's own rule results per launch (parsers.ncu_kernels.RULES_SCHEMA)
    traces: dict[int, Any] = field(default_factory=dict)  # rank → parsers.trace.Trace
    snapshots: dict[int, Any] = field(default_factory=dict)  # rank → parsers.snapshot.MemorySnapshot
    memory_stats: dict[int, pd.DataFrame] = field(default_factory=dict)  # rank → per-step allocator stats
    step_events: dict[int, pd.DataFrame] = field(default_factory=dict)  # rank → per-step CUDA-event timings
    sync_records: dict[int, pd.DataFrame] = field(default_factory=dict)  # rank → exact-line sync records
    work_records: dict[int, pd.DataFrame] = field(default_factory=dict)  # rank → checkpoint saves, evaluation spans
    loaders: pd.DataFrame | None = (
        None  # every rank's torch DataLoaders' configurations (parsers.events.LOADERS_SCHEMA)
    )
    run_marks: dict[int, dict] = field(
        default_factory=dict
    )  # rank → install_ns, start_ns, end_ns (unix ns; None: unknown), jit_step_name, jit_step_location (JAX), the
    # main thread's main_cpu_ms_at_start/_at_end and main_run_queue_ms_at_start/_at_end (Linux's schedstat), the CPUs
    # it could run on (cpus_allowed) of the host's (cpus), the most threads it had (threads: at its first step or its end)
    nvml: pd.DataFrame | None = None  # NVML samples
    launch_starts: pd.DataFrame | None = None  # under --ncu: when each launch's profiling began (unix ns)
    warnings: list[str] = field(default_factory=list)  # what could not be read, said in the report
    ingest: dict[str, Any] = field(default_factory=dict)  # how it was read: workers, per file seconds and peak RSS
    # the kernels tables read so far, one per capture (pages of one report merged into one): ``kernels`` joins them
    _kernel_parts: list[pd.DataFrame] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.kernels is None:
            from parsers.ncu_kernels import KERNELS_SCHEMA

            self.kernels = KERNELS_SCHEMA.empty()
        if self.ncu_rules is None:
            from parsers.ncu_kernels import RULES_SCHEMA

            self.ncu_rules = RULES_SCHEMA.empty()
        if self.nvml is None:
            from parsers.nvml import NVML_SCHEMA

            self.nvml = NVML_SCHEMA.empty()
        if self.launch_starts is None:
            from parsers.ncu_launch_starts import LAUNCH_STARTS_SCHEMA

            self.launch_starts = LAUNCH_STARTS_SCHEMA.empty()
        if self.loaders is None:
            from parsers.events import LOADERS_SCHEMA

            self.loaders = LOADERS_SCHEMA.empty()

    def add(self, table: str, value: Any, rank: int, path: str | None = None) -> None:
        """Put what a reader read (``parsers.reader.Reader.read``) from ``path`` into the table it declares;
        ``rank`` is the one the file's name gives, used where the content does not say."""
        if table == tables.KERNELS:
            from diagnose.ingest import same_launches

            # the ncu readers give (kernels, rules); a bare kernels frame (a caller's own) is taken too
            kernels, rules = value if isinstance(value, tuple) else (value, None)
            if not self._kernel_parts and len(self.kernels):
                self._kernel_parts.append(self.kernels)  # a table set by hand: one capture
            match = next(
                (i for i, part in enumerate(self._kernel_parts) if same_launches.same_launches(part, kernels)), None
            )
            if match is not None:
                # another page or form of a report read already: its launches once (diagnose.ingest.same_launches)
                self.warnings.append(
                    f"{path or 'an ncu file'}: the same {len(kernels):,} launches as an ncu file read before (pages "
                    "of one report): merged, each launch counted once"
                )
                self._kernel_parts[match] = same_launches.merge(self._kernel_parts[match], kernels)
                if rules is not None and len(rules):
                    self.ncu_rules = same_launches.merge_rules(self.ncu_rules, rules)
            else:
                self._kernel_parts.append(kernels)
                if rules is not None and len(rules):
                    self.ncu_rules = (
                        rules if not len(self.ncu_rules) else pd.concat([self.ncu_rules, rules], ignore_index=True)
                    )
            parts = [part for part in self._kernel_parts if len(part)]
            self.kernels = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True) if parts else kernels
        elif table == tables.TRACES:
            self.traces[value.rank if value.rank is not None else rank] = value
        elif table == tables.SNAPSHOTS:
            self.snapshots[rank] = value
        elif table == tables.MEMORY_STATS:
            self.memory_stats[rank] = value
        elif table == tables.EVENTS:
            steps, syncs, *rest = value  # parsers.events.EventTables; a caller's own (steps, syncs) pair too
            self.step_events[rank] = steps
            if len(syncs):
                self.sync_records[rank] = syncs
            if rest and len(rest[0]):
                self.work_records[rank] = rest[0]
            self._add_run_records(steps.attrs)
        elif table == tables.NVML:
            self.nvml = value
        elif table == tables.LAUNCH_STARTS:
            self.launch_starts = value
        else:
            raise ValueError(f"a Profile has no table {table!r}")

    def _add_run_records(self, attrs: dict) -> None:
        """The run records parsers.events keeps beside the steps: the DataLoaders and each rank's run marks."""
        from parsers.events import loaders_frame

        loaders = attrs.get("dataloaders") or ()
        if loaders:
            frame = loaders_frame(loaders)
            self.loaders = frame if not len(self.loaders) else pd.concat([self.loaders, frame], ignore_index=True)
        for marks in attrs.get("run_marks") or ():
            self.run_marks[marks.rank] = {k: v for k, v in vars(marks).items() if k != "rank"}

    def trace_header(self, rank: int):
        """Rank ``rank``'s trace for what it says it ran on (metadata, device properties): a cluster read's
        (diagnose.cluster.parquet_traces) gives these without reading the rank's other tables."""
        light = getattr(self.traces, "light", None)
        return light(rank) if light is not None else self.traces[rank]

    def has(self, what: str) -> bool:
        value = getattr(self, what)
        if isinstance(value, pd.DataFrame):
            return len(value) > 0
        return bool(value)

    @property
    def gpu_name(self) -> str | None:
        gpus = self.manifest.get("gpus") or []
        if gpus:
            return gpus[0].get("name")
        if len(self.kernels) and "device__attribute_display_name" in self.kernels:
            names = self.kernels["device__attribute_display_name"].dropna()
            if len(names):
                return str(names.iloc[0])
        for rank in self.traces:
            trace = self.trace_header(rank)
            props = getattr(trace, "device_properties", None)
            if props is not None and len(props):
                return str(props["name"].iloc[0])
        return None


def run_marks_of(profile, rank: int) -> dict:
    """Light mode's run marks of ``rank`` (the jit step's name and loop line, the process's install and start);
    empty where the profile has none (a cluster worker's light profile, step timings from elsewhere)."""
    return (getattr(profile, "run_marks", None) or {}).get(rank, {})
