"""The run folder's names, its record kinds' fields and the manifest's option paths are spelled in one module,
parsers/run_records.py (DESIGN.md: "defined once, in a standard-library-only module that the runtime's writer and
the readers share"). This reads the code of diagnose/, parsers/ and reports/ (docstrings and comments left out) and
fails on a copy anywhere else:

- an artifact's name or pattern as a string without spaces (``"events/rank*.jsonl"``, ``f"trace/rank{r}.json.gz"``,
  ``"nvml.csv"``, ``"trace/"``), which a message to the user does not look like;
- a record built or formatted by hand: a dict with ``"kind": "step"`` (or another record kind), or compact JSON
  ``"kind":"…`` in a string (the %-format the step records had);
- a record kind or run event compared by its literal (``record.get("kind") == "sync"``, ``kind == "step"``);
- a manifest's option path read: ``.get("options")``, ``["child"]``, ``.get("trace_start")`` and the like.
"""

from __future__ import annotations

import ast
import re

from parsers import run_records as rr
from tests.paths import REPO

PACKAGES = ("diagnose", "parsers", "reports")
OWNER = "parsers/run_records.py"
ARTIFACT_NAME = re.compile(
    r"^(events|memory|trace|ncu)/|^(manifest\.json|nvml\.csv)$|\.stats\.jsonl|\.snapshot\.json|rank\*|rank<N>"
)
RECORD_KINDS = {k.kind for k in rr.RECORD_KINDS}
RUN_EVENTS = {k.event for k in rr.RECORD_KINDS if k.event}
OPTION_KEYS = {"options", rr.CHILD_OPTIONS, "trace_start", "trace_steps"}
# Spelled in modules other helpers of issue 29 are moving; each goes when its module takes run_records' name
# (TRACE.prefix, MEMORY_STATS.prefix, EVENTS.prefix, NVML_CSV, NCU_FIRST_LOG): scratch/notes/h2-records.md lists them.
NOT_YET: set[tuple[str, str]] = set()  # (file, name) spelled outside run_records while being moved: none now


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _keyed(node: ast.AST, keys: set[str]) -> str | None:
    """The key when ``node`` is ``x.get("<key>")`` or ``x["<key>"]`` with a key in ``keys``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        key = node.args[0]
    elif isinstance(node, ast.Subscript):
        key = node.slice
    else:
        return None
    return key.value if isinstance(key, ast.Constant) and key.value in keys else None


def copies(relative: str, source: str) -> list[tuple[str, int, str]]:
    """(what, line, the text) for each copy of run_records' knowledge in one module's source."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
            if not re.search(r"\s", text) and ARTIFACT_NAME.search(text):
                found.append(("artifact name", node.lineno, text))
            if '"kind":"' in text:
                found.append(("record format", node.lineno, text))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if (
                    isinstance(key, ast.Constant)
                    and key.value == "kind"
                    and isinstance(value, ast.Constant)
                    and value.value in RECORD_KINDS
                ):
                    found.append(("record fields", node.lineno, value.value))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(
                _keyed(s, {"kind", "event"}) or (isinstance(s, ast.Name) and s.id in ("kind", "event")) for s in sides
            ):
                for side in sides:
                    if isinstance(side, ast.Constant) and side.value in RECORD_KINDS | RUN_EVENTS:
                        found.append(("record kind", node.lineno, side.value))
        key = _keyed(node, OPTION_KEYS)
        if key is not None:
            found.append(("manifest option path", node.lineno, key))
    return found


def test_the_run_folder_and_its_records_are_spelled_only_in_run_records():
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            if relative == OWNER:
                continue
            found += [
                f"{relative}:{line}: {what} {text!r}"
                for what, line, text in copies(relative, path.read_text(encoding="utf-8"))
                if (relative, text) not in NOT_YET
            ]
    assert found == [], "use parsers.run_records' names:\n" + "\n".join(found)


def test_each_copy_is_found():
    """The check above catches each way the tree before run_records spelled a name, a record or an option."""
    planted = '''
"""A docstring may say events/rank<N>.jsonl."""
GLOB = "events/rank*.jsonl"
def path(rank):
    return f"trace/rank{rank}.json.gz", "nvml.csv", f"memory/rank{rank}.stats.jsonl"
FORMAT = '{"kind":"step","rank":%d}'
def write(events, rank):
    events.append({"kind": "run", "event": "end", "rank": rank})  # a comment may say "kind":"run"
def read(record, manifest):
    kind = record.get("kind")
    if kind == "step":
        return None
    if record.get("kind") == "sync" or record["event"] == "gpu-time-every":
        return manifest["options"]["child"].get("trace_start")
    raise ValueError("no nvml.csv in the run folder")
'''
    assert sorted((what, text) for what, _, text in copies("planted.py", planted)) == sorted(
        [
            ("artifact name", "events/rank*.jsonl"),
            ("artifact name", "trace/rank"),
            ("artifact name", "nvml.csv"),
            ("artifact name", "memory/rank"),
            ("artifact name", ".stats.jsonl"),
            ("record format", '{"kind":"step","rank":%d}'),
            ("record fields", "run"),
            ("record kind", "step"),
            ("record kind", "sync"),
            ("record kind", "gpu-time-every"),
            ("manifest option path", "trace_start"),
            ("manifest option path", "child"),
            ("manifest option path", "options"),
        ]
    )
