"""Options shared by the subcommands that analyse: thresholds and config."""

from __future__ import annotations

import os
from pathlib import Path

import click

from diagnose.thresholds import Thresholds, load_config, parse_assignments
from parsers.errors import InputError


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
