"""How to measure what an input lacks, said for where the input came from.

A trace, CSV or snapshot captured elsewhere is told to run the script under ``gpudiag profile``. A run folder
that ``gpudiag profile`` wrote is told why it lacks the artifact (its manifest's ``missing_reasons``, ``missing``
and ``unavailable``, the options it ran with) and what to change: advice to "profile with `gpudiag profile`" on a
report of a folder that ``gpudiag profile`` wrote did not follow from what was captured (issue 28).
"""

from __future__ import annotations

from typing import Any

from parsers.run_records import RunOptions, is_run_manifest, run_options

# why a run folder can lack step timings, and what gives it some
STEP_RECORDS = (
    "Light mode writes a step record at each optimizer.step(), at the end of each backward pass, at each dispatch of "
    "a jitted step function and at each diagnose.step() (docs/profile.md): call diagnose.step() once per iteration in "
    "a loop that has none of those, or pass a CSV/JSON of step timings (docs/step-timings.md)."
)


def from_run_folder(profile: Any) -> bool:
    """True when the input is a run folder ``gpudiag profile`` wrote (it has a run manifest)."""
    return is_run_manifest(getattr(profile, "manifest", None))


def options_of(profile: Any) -> RunOptions:
    """The options the run folder ran with (``trace_steps``, ``mode``, ...: parsers.run_records.RunOptions); every
    one None for an input captured elsewhere."""
    return run_options(profile.manifest) if from_run_folder(profile) else RunOptions()


def why_absent(profile: Any, artifact: str) -> str | None:
    """Why the run folder holds no ``artifact`` (a path or its start: ``nvml.csv``, ``trace/``, ``memory/``), from
    its manifest; None when the manifest does not say."""
    if not from_run_folder(profile):
        return None
    manifest = profile.manifest
    for path, why in sorted((manifest.get("missing_reasons") or {}).items()):
        if str(path).startswith(artifact):
            return f"{path} was not written: {why}"
    for path in manifest.get("missing") or ():
        if str(path).startswith(artifact):
            return f"{path} was expected but not written"
    for key, why in sorted((manifest.get("unavailable") or {}).items()):
        if str(key).startswith(artifact):
            return f"{key} was not recorded: {why}"
    return None


def advice(profile: Any, elsewhere: str, in_run_folder: str, artifact: str | None = None) -> str:
    """``elsewhere`` for an input captured elsewhere; for a run folder, why it lacks ``artifact`` (when its
    manifest says) and then ``in_run_folder``, which must not send the user back to ``gpudiag profile`` as is."""
    if not from_run_folder(profile):
        return elsewhere
    why = why_absent(profile, artifact) if artifact else None
    return f"In this run folder {why}. {in_run_folder}" if why else in_run_folder


def ncu_command_values(profile: Any, flag: str) -> list[str] | None:
    """The values the run's ncu was given for ``flag`` (``--section``, ``--set``, ``--metrics``), in order, from its
    manifest's ``ncu_command``; None when the input is not a run folder ``gpudiag profile --ncu`` wrote (or its
    manifest keeps no ncu command). What an --ncu run lacks follows from what its ncu was asked for."""
    if not from_run_folder(profile):
        return None
    command = profile.manifest.get("ncu_command")
    if not isinstance(command, list) or not command:
        return None
    words = [str(w) for w in command]
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w == flag]


def steps_under_ncu(profile: Any, step_ms=None) -> str | None:
    """Why step times are not judged: the run ran under Nsight Compute (``gpudiag profile --ncu``), which intercepts
    every launch of the process and serializes and replays each profiled kernel, so its step times are ncu's, not the
    script's (issue 32: "step time varies widely" from a profiled step of 40 s among 11 ms steps). None when the run
    did not run under ncu. ``step_ms``: the step times it saw, said with the reason."""
    if (getattr(profile, "manifest", None) or {}).get("mode") != "ncu":
        return None
    seen = ""
    if step_ms is not None and len(step_ms):
        import numpy as np

        from diagnose.formatting import ms_human

        values = np.asarray(step_ms, dtype=float)
        values = values[np.isfinite(values)]
        if len(values):
            seen = (
                f" (its {len(values)} steps took {ms_human(float(np.median(values)))} at the median and up to "
                f"{ms_human(float(values.max()))} under ncu)"
            )
    return (
        "The run ran under Nsight Compute (--ncu), which intercepts every kernel launch and replays each profiled "
        f"kernel: its step times are ncu's, not the script's{seen}, so none is judged. Run it again in light mode "
        "(without --ncu) for step times."
    )
