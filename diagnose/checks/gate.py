"""The CI gate's rule: a run fails when a finding reaches the severity to fail on and is not ignored.

``gpudiag check`` is this rule behind a command line (diagnose/commands/check.py only reads its options and prints);
a notebook or a CI script in Python asks the same question with :func:`gate`::

    result = gate(diagnose.analyze(profile).findings, fail_on="warning", ignore=["l2.*"])
    result.passed, result.line   # False, "FAIL: 2 findings at or above warning: idle.gpu_idle, sync.host_sync"

An ``ignore`` value is a finding id or a glob (``l2.*``) and must match an id some analyzer declares (its
``FINDING_IDS``): a typo must not silently leave a finding in the gate's blind spot.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from diagnose.findings import Severity
from diagnose.formatting import n_things
from parsers.errors import InputError


def known_finding_ids() -> tuple[str, ...]:
    """Every finding id an analyzer declares (its module's ``FINDING_IDS``), sorted."""
    from diagnose.analyzers import discover

    return tuple(sorted({i for mod in discover() for i in getattr(mod, "FINDING_IDS", ())}))


def ignore_matcher(patterns: Iterable[str], known: Iterable[str]) -> Callable[[str], bool]:
    """A test ``id -> ignored?`` for ``--ignore`` values: exact ids or globs (``l2.*``).

    A value that matches no known id is an error listing them: a typo must not silently leave a finding
    in the gate's blind spot.
    """
    patterns = tuple(patterns)
    known = sorted(set(known))
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(i, pattern) for i in known):
            close = difflib.get_close_matches(pattern, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise InputError(
                None,
                f"--ignore {pattern}: no finding has this id{hint}. Known ids (globs such as 'l2.*' work too):\n  "
                + "\n  ".join(known),
            )
    return lambda finding_id: any(fnmatch.fnmatchcase(finding_id, p) for p in patterns)


@dataclass(frozen=True)
class GateResult:
    """What the gate decided: the findings that fail it and the ids it was told to leave out."""

    fail_on: Severity
    hits: tuple[Any, ...]  # the findings at or above fail_on and not ignored, in the order given
    ignored_ids: tuple[str, ...]  # the ids of the findings left out by ``ignore``, sorted

    @property
    def passed(self) -> bool:
        return not self.hits

    @property
    def exit_code(self) -> int:
        """``gpudiag check``'s exit code for this result: 0 passed, 1 failed."""
        return 0 if self.passed else 1

    @property
    def line(self) -> str:
        """The gate's one-line result: ``OK: no finding at or above critical`` or ``FAIL: ...`` with the ids."""
        level = self.fail_on.label
        if self.passed:
            return f"OK: no finding at or above {level}"
        ids = ", ".join(dict.fromkeys(f.id for f in self.hits))
        return f"FAIL: {n_things(len(self.hits), 'finding')} at or above {level}: {ids}"


def judge(findings: Sequence[Any], fail_on: Severity | str, ignored: Callable[[str], bool]) -> GateResult:
    """The gate over ``findings`` (anything with ``id`` and ``severity``), leaving out the ids ``ignored`` says."""
    level = fail_on if isinstance(fail_on, Severity) else Severity.parse(fail_on)
    hits = tuple(f for f in findings if f.severity >= level and not ignored(f.id))
    left_out = tuple(sorted({f.id for f in findings if ignored(f.id)}))
    return GateResult(level, hits, left_out)


def gate(
    findings: Sequence[Any],
    fail_on: Severity | str = Severity.CRITICAL,
    ignore: Iterable[str] = (),
    known_ids: Iterable[str] | None = None,
) -> GateResult:
    """The gate over ``findings``: fail on a finding at or above ``fail_on`` whose id no ``ignore`` value matches.

    ``ignore`` values are checked against ``known_ids`` (default: every id an analyzer declares); one that
    matches none raises :class:`parsers.errors.InputError` listing them.
    """
    known = known_finding_ids() if known_ids is None else tuple(known_ids)
    return judge(findings, fail_on, ignore_matcher(ignore, known))
