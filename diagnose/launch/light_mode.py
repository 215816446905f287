"""Light mode, the default capture mode: the user's command runs as it is, the bootstrap (the sitecustomize
folder the launcher puts first on PYTHONPATH) records inside each Python process, and NVML is sampled here.
"""

from __future__ import annotations

from pathlib import Path

from diagnose.launch.capture_mode import CaptureMode, ProfileOptions
from diagnose.launch.child_config import ChildConfig
from diagnose.launch.nvml_sampler import NvmlSampler
from diagnose.launch.run_progress import EventsTail
from parsers import run_folder


class LightMode(CaptureMode):
    """The command as it is, NVML sampled from this process while it runs; signals go to the script as they are."""

    name = "light"

    def __init__(self, options: ProfileOptions):
        super().__init__(options)
        self._sampler = None

    def announce(self, folder: Path, manifest: dict, config: ChildConfig) -> None:
        """Start NVML sampling and say what the run records."""
        options = self.options
        if options.nvml:
            sampler = NvmlSampler(
                folder / run_folder.NVML_CSV,
                options.nvml_hz,
                on_stop=lambda stopped: options.say(_nvml_stopped_line(stopped)),
            )
            if sampler.start():
                self.expected.append(run_folder.NVML_CSV)
                self._sampler = sampler
            else:
                manifest["unavailable"][run_folder.NVML_CSV] = sampler.unavailable_reason
                options.say(f"gpudiag: no NVML samples: {sampler.unavailable_reason}; the run goes on without nvml.csv")
        if config.trace_steps:
            options.say(
                f"gpudiag: light mode; profiler trace of steps {config.trace_start}-{config.trace_stop - 1}; "
                f"writing {folder}"
            )

    def stop_sampling(self) -> None:
        if self._sampler:
            self._sampler.stop()

    def finish(
        self, folder: Path, tail: EventsTail, killed_by: str | None, start_ns: int, faults: list, notes: list
    ) -> None:
        if self._sampler is not None and self._sampler.stopped:
            faults.append({**self._sampler.stopped, "artifact": run_folder.NVML_CSV})


def _nvml_stopped_line(stopped: dict) -> str:
    if stopped["kind"] == "disk-full":
        return (
            f"gpudiag: {stopped['error']} writing nvml.csv; NVML sampling stopped after {stopped['rows']} rows "
            "(they are kept), the run goes on"
        )
    return (
        f"gpudiag: NVML stopped answering ({stopped['error']}); nvml.csv keeps the {stopped['rows']} rows "
        "sampled before, the run goes on without NVML"
    )
