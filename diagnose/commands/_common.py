"""What the subcommands share: threshold options, input and output checks, the "nothing to judge" rule,
and the terminal width. The finding ids `--ignore` accepts are the gate's (diagnose/checks/gate.py)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from parsers.errors import InputError

if TYPE_CHECKING:
    from diagnose.thresholds import Thresholds


def threshold_options(f):
    f = click.option(
        "--threshold",
        "thresholds",
        multiple=True,
        metavar="GROUP.NAME=VALUE",
        help="Override a threshold, e.g. --threshold l2.warning_pct=80 (repeatable; "
        "see docs/thresholds.md for every name).",
    )(f)
    f = click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        default=None,
        help="TOML or JSON file of threshold overrides ([l2] warning_pct = 80).",
    )(f)
    return f


def build_thresholds(config_path: str | None, assignments: tuple[str, ...]) -> Thresholds:
    from diagnose.thresholds import Thresholds, load_config, parse_assignments

    th = Thresholds()
    if config_path:
        th = th.with_overrides(load_config(config_path), origin=config_path)
    if assignments:
        th = th.with_overrides(parse_assignments(assignments))
    return th


def require_input_path(path) -> None:
    """Refuse a missing input, saying why: not there, a dangling link, or a link loop."""
    p = Path(path)
    if p.exists():
        return
    if p.is_symlink():
        try:
            os.stat(p)
        except OSError as e:
            raise InputError(path, f"is a symbolic link that cannot be followed ({e.strerror})") from None
    raise InputError(path, "does not exist")


def require_output_path(path, option: str) -> None:
    """Refuse an output file whose folder does not exist (or that is a folder), before any work is done.

    Output files never create folders: a typo in ``-o reprots/x.html`` should fail, not scatter files.
    (Run and sweep folders, ``profile -o`` / ``sweep -o``, are created with their parents: they are new.)
    """
    if path is None:
        return
    p = Path(path)
    folder = p.parent
    if p.is_dir():
        raise InputError(path, f"is a folder; {option} takes a file name")
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise InputError(path, f"cannot write {option} here: its folder {str(folder)!r} {what} (create it first)")
    _require_writable(folder, path, option)


def require_output_folder(path, option: str) -> None:
    """Refuse a run or sweep folder that could not be created (it is created with its parents): the nearest
    part of ``path`` that exists must be a folder this process can write in. Checked before any work."""
    if path is None:
        return
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(path, f"is a file; {option} takes a folder")
    existing = p
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(path, f"cannot create {option} here: {str(existing)!r} is not a folder")
    _require_writable(existing, path, option)


def _require_writable(folder: Path, path, option: str) -> None:
    from diagnose.outputs.atomic_write import check_can_create_in

    try:
        check_can_create_in(folder)
    except OSError as e:
        raise InputError(
            path, f"cannot write {option} here: no file can be created in {str(folder)!r} ({e.strerror})"
        ) from None


def write_output(path, option: str, write: Callable[[], object]) -> None:
    """Run ``write`` (which writes ``path``); an OSError it meets (the disk filled, the folder went away since
    :func:`require_output_path` checked it) is one line naming the path, exit 2, not a traceback."""
    try:
        write()
    except OSError as e:
        raise InputError(path, f"cannot write {option}: {e.strerror or e}") from None


def measured_anything(artifacts: Mapping) -> bool:
    """Whether an input held any measurement an analyzer can judge.

    ``artifacts`` is ``Analysis.source["artifacts"]`` (``diagnose.analysis.describe_source``), which the
    findings JSON keeps too: counts and rank lists of what was read.
    """
    return any(bool(v) for v in artifacts.values())


def require_measurement(artifacts: Mapping | None, path, notes: Iterable[str] = (), verb: str = "report") -> None:
    """The rule `report` and `check` share: an input in which nothing could be judged is bad input (exit 2),
    not an empty report or a passing gate. ``artifacts`` None (a findings JSON that does not say) passes."""
    if artifacts is None or measured_anything(artifacts):
        return
    notes = list(notes)
    what = "the run folder" if Path(path).is_dir() else "the input"
    raise InputError(
        path,
        f"nothing to {verb}: {what} holds no readable measurement" + (f" ({'; '.join(notes)})" if notes else ""),
    )


def terminal_width() -> int | None:
    """The width to fit the terminal summary to: the terminal's when stdout is one, else None (CI logs and
    pipes get whole lines)."""
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size((100, 20)).columns
