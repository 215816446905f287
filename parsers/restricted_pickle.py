"""Unpickle untrusted files as plain data: dict, list, tuple, str, bytes, int, float, bool, None.

A pickle can only call code through an object it first looks up by name
(GLOBAL, STACK_GLOBAL, INST, EXT all go through ``find_class``) or through a
persistent id (``persistent_load``). Both raise here, so REDUCE, NEWOBJ, OBJ and
BUILD never get a callable to call: a pickle that tries is an :class:`InputError`
and nothing runs. After loading, the result is walked once to make sure it holds
only the plain types above (protocol 4/5 can also build sets and bytearrays).
"""
from __future__ import annotations

import io
import os
import pickle

from parsers.errors import InputError

PLAIN_TYPES = (dict, list, tuple, str, bytes, int, float, bool, type(None))


class _ForbiddenCode(Exception):
    """Raised inside the unpickler when the pickle asks for a callable."""


class RestrictedUnpickler(pickle.Unpickler):
    """pickle.Unpickler that refuses every global and persistent id."""

    def find_class(self, module, name):
        raise _ForbiddenCode(f"it asks for the Python object {module}.{name} (code, not data)")

    def persistent_load(self, pid):
        raise _ForbiddenCode("it uses a persistent id (an external object, not data)")


def loads_plain(data: bytes, path: str | os.PathLike | None, what: str = "a pickle of plain data"):
    """The object in ``data``, built from plain types only; anything else is an InputError."""
    try:
        obj = RestrictedUnpickler(io.BytesIO(data)).load()
    except _ForbiddenCode as e:
        raise InputError(path, f"expected {what}; refused to unpickle it because {e}. Nothing was run.") from None
    except EOFError:
        raise InputError(path, f"expected {what}; the pickle ends early after {len(data):,} bytes (truncated file?)") from None
    except RecursionError:
        raise InputError(path, f"expected {what}; the pickle nests too deeply to read") from None
    except Exception as e:  # UnpicklingError, TypeError from REDUCE on a non-callable, ValueError, ...
        raise InputError(path, f"expected {what}; the pickle is malformed ({type(e).__name__}: {e})") from None
    bad = _first_non_plain(obj)
    if bad is not None:
        raise InputError(path, f"expected {what}; it holds a {bad} object, which gpudiag does not accept")
    return obj


def _first_non_plain(obj) -> str | None:
    """Name of the first value whose type is not plain data (iterative: deep nests must not recurse)."""
    stack = [obj]
    seen: set[int] = set()  # containers the pickle shares (memo) are walked once
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is dict or kind is list or kind is tuple:
            if id(value) in seen:
                continue
            seen.add(id(value))
            if kind is dict:
                stack.extend(value.keys())
                stack.extend(value.values())
            else:
                stack.extend(value)
        elif kind not in PLAIN_TYPES:
            return kind.__name__
    return None
