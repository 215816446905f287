"""Options shared by the subcommands that analyse: thresholds and config."""
from __future__ import annotations

import click

from diagnose.thresholds import Thresholds, load_config, parse_assignments


def threshold_options(f):
    f = click.option("--threshold", "thresholds", multiple=True, metavar="GROUP.NAME=VALUE",
                     help="Override a threshold, e.g. --threshold l2.warning_pct=80 (repeatable; "
                          "see docs/thresholds.md for every name).")(f)
    f = click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                     help="TOML or JSON file of threshold overrides ([l2] warning_pct = 80).")(f)
    return f


def build_thresholds(config_path: str | None, assignments: tuple[str, ...]) -> Thresholds:
    th = Thresholds()
    if config_path:
        th = th.with_overrides(load_config(config_path), origin=config_path)
    if assignments:
        th = th.with_overrides(parse_assignments(assignments))
    return th
