"""Turn a path into a :class:`Profile`: a run folder, or one artifact whose format is detected by content.

The formats and their detection are :mod:`parsers.registry`'s; the run folder's layout is
:mod:`parsers.run_folder`'s. This module only puts what the readers return into a Profile,
and turns readers' warnings (a cut last line) and unreadable artifacts into the report's notes.
"""

from __future__ import annotations

import os
import warnings

from diagnose.profile_data import Profile
from parsers import registry, run_folder
from parsers.errors import InputError
from parsers.reader import FINDINGS, Reader


def load(path: str | os.PathLike) -> Profile:
    """Read a run folder or a single artifact into a Profile."""
    reader = registry.detect(path)
    if reader is None:
        return load_run_folder(path)
    profile = Profile(sources=[os.fspath(path)])
    add_artifact(profile, path, reader)
    return profile


def add_artifact(
    profile: Profile, path: str | os.PathLike, reader: Reader | None = None, rank: int | None = None
) -> None:
    """Read one artifact into the matching table of ``profile``; a reader's warning (a cut last line)
    becomes one of ``profile.warnings``, which the report shows."""
    reader = reader or registry.detect(path)
    if reader is None:
        raise InputError(path, "is a run folder, not one artifact: load it with diagnose.load")
    if reader.table == FINDINGS:
        raise InputError(
            path,
            "is a gpudiag findings JSON: it holds findings, not measurements to analyse; "
            "gate on it with `gpudiag check`, or report the run it came from",
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        value = reader.read(path)
    profile.add(reader.table, value, run_folder.rank_of(path) if rank is None else rank)
    profile.warnings.extend(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, UserWarning)))
    if os.fspath(path) not in profile.sources:
        profile.sources.append(os.fspath(path))


def load_run_folder(folder: str | os.PathLike) -> Profile:
    """Read every artifact of a run folder that finished writing; one that cannot be read becomes a note."""
    manifest = run_folder.read_manifest(os.path.join(folder, run_folder.MANIFEST))
    profile = Profile(sources=[os.fspath(folder)], manifest=manifest)
    for path in run_folder.artifact_paths(folder):
        try:
            add_artifact(profile, path)
        except InputError as e:
            profile.warnings.append(str(e))
    # how the run ended, and what is missing or cut short with the reason the manifest gives
    profile.warnings.extend(run_folder.report_notes(manifest))
    return profile
