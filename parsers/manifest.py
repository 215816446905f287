"""Read a run folder's manifest.json (schema ``gpudiag.run/1``, docs/run-folder.md).

Validates the shape the rest of gpudiag relies on and fills the optional lists so that
callers never meet None: ``gpus``, ``ranks``, ``missing``, ``notes``, ``faults`` are lists,
``artifacts``, ``unavailable``, ``missing_reasons``, ``incomplete`` dicts. Anything else
raises InputError naming the file.
"""
from __future__ import annotations

import json
import os

from parsers.errors import InputError
from parsers.limits import read_input
from parsers.unicode_text import without_lone_surrogates

SCHEMA_PREFIX = "gpudiag.run/"
SUPPORTED_MAJOR = 1
_LISTS = ("gpus", "ranks", "missing", "notes", "command", "faults")
_DICTS = ("artifacts", "unavailable", "versions", "host", "options", "missing_reasons", "incomplete")


def read_manifest(path: str | os.PathLike) -> dict:
    try:
        raw = read_input(path, json=True, gunzip=False)  # within the caps of parsers/limits.py
    except FileNotFoundError:
        raise InputError(path, "no manifest.json: not a gpudiag run folder, or `gpudiag profile` was killed "
                               "before it started the run") from None
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(path, "is not UTF-8 text; expected the JSON manifest gpudiag profile writes") from None
    except ValueError as e:
        raise InputError(path, f"is not valid JSON ({e}); expected the manifest gpudiag profile writes") from None
    if not isinstance(data, dict):
        raise InputError(path, f"expected a JSON object, found {type(data).__name__}")
    if b"\\ud" in raw or b"\\uD" in raw:
        data = _without_lone_surrogates(data)
    schema = data.get("schema")
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_PREFIX):
        raise InputError(path, f"expected schema {SCHEMA_PREFIX}{SUPPORTED_MAJOR}, found {schema!r}")
    try:
        major = int(schema[len(SCHEMA_PREFIX):].split(".")[0])
    except ValueError:
        raise InputError(path, f"unreadable schema version {schema!r}") from None
    if major != SUPPORTED_MAJOR:
        raise InputError(path, f"schema {schema} is not supported by this gpudiag (reads "
                               f"{SCHEMA_PREFIX}{SUPPORTED_MAJOR}); upgrade gpudiag")
    for key in _LISTS:
        value = data.get(key)
        if value is None:
            data[key] = []
        elif not isinstance(value, list):
            raise InputError(path, f"field {key!r} should be a list, found {type(value).__name__}")
    for key in _DICTS:
        value = data.get(key)
        if value is None:
            data[key] = {}
        elif not isinstance(value, dict):
            raise InputError(path, f"field {key!r} should be an object, found {type(value).__name__}")
    if not all(isinstance(m, str) for m in data["missing"]):
        raise InputError(path, "field 'missing' should list artifact paths (strings)")
    if not all(isinstance(g, dict) for g in data["gpus"]):
        raise InputError(path, "field 'gpus' should list objects with at least a 'name'")
    exit_code = data.get("exit_code")
    if exit_code is not None and (not isinstance(exit_code, int) or isinstance(exit_code, bool)):
        raise InputError(path, f"field 'exit_code' should be an integer or null, found {exit_code!r}")
    return data


def _without_lone_surrogates(value):
    """The manifest with each lone surrogate (a ``\\udce9`` escape) in its text replaced by U+FFFD.

    json.dumps writes one for a command-line argument or path that was not UTF-8 (Python decodes
    those with surrogateescape); such a string cannot be printed or written to the UTF-8 report,
    so `gpudiag report` would stop with a UnicodeEncodeError. Found by fuzzing run folders.
    """
    if isinstance(value, str):
        return without_lone_surrogates(value)
    if isinstance(value, list):
        return [_without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    return value
