"""Read back a findings JSON (``gpudiag.findings/1``, docs/findings-json.md): what `gpudiag check` gates on.

``reports/json_report.py`` writes it; this is the one place that reads it. Only the shape the gate
relies on is checked: a findings list whose entries have an id and a known severity.
"""

from __future__ import annotations

import json
import os

from parsers.errors import InputError
from parsers.limits import read_input
from parsers.reader import FINDINGS, JSON, Reader, compact_json

SCHEMA_PREFIX = "gpudiag.findings/"
SUPPORTED = "gpudiag.findings/1"
SEVERITIES = ("info", "warning", "critical")


def is_findings_json(head: bytes) -> bool:
    compact = compact_json(head)
    return compact is not None and f'"schema":"{SCHEMA_PREFIX}' in compact


def read_findings_json(path: str | os.PathLike) -> dict:
    """The findings JSON at ``path`` as a dict, its findings checked for an id and a severity."""
    try:
        data = json.loads(read_input(path, json=True).decode("utf-8"))  # nesting capped: json.loads recurses
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(path, f"looks like a findings JSON but does not parse: {e}") from None
    if (
        not isinstance(data, dict)
        or not str(data.get("schema", "")).startswith(SUPPORTED)
        or not isinstance(data.get("findings"), list)
    ):
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise InputError(path, f"expected schema {SUPPORTED} with a findings list, found {found!r}")
    for f in data["findings"]:
        if not isinstance(f, dict) or "id" not in f or "severity" not in f:
            raise InputError(path, "a finding lacks id or severity")
        if str(f["severity"]).strip().lower() not in SEVERITIES:
            raise InputError(path, f"severity must be one of {', '.join(SEVERITIES)}; got {f['severity']!r}")
    return data


READERS = (
    Reader(
        "findings-json",
        FINDINGS,
        is_findings_json,
        read_findings_json,
        "a gpudiag findings JSON (gpudiag report --json)",
        (JSON,),
    ),
)
