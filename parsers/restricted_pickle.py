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
from contextlib import contextmanager

from parsers.errors import InputError
from parsers.limits import limit, nesting_error

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
        with _memory_cap(MEMORY_ALLOWANCE_BYTES + MEMORY_PER_PICKLE_BYTE * len(data)):
            obj = RestrictedUnpickler(io.BytesIO(data)).load()
    except _ForbiddenCode as e:
        raise InputError(path, f"expected {what}; refused to unpickle it because {e}. Nothing was run.") from None
    except EOFError:
        raise InputError(
            path, f"expected {what}; the pickle ends early after {len(data):,} bytes (truncated file?)"
        ) from None
    except RecursionError:
        raise InputError(path, f"expected {what}; the pickle nests too deeply to read") from None
    except MemoryError:
        raise InputError(
            path,
            f"expected {what}; unpickling its {len(data):,} bytes asks for more memory than "
            "any real snapshot of that size needs (a damaged or hostile pickle)",
        ) from None
    except Exception as e:  # UnpicklingError, TypeError from REDUCE on a non-callable, ValueError, ...
        raise InputError(path, f"expected {what}; the pickle is malformed ({type(e).__name__}: {e})") from None
    max_depth = limit("MAX_NESTING_DEPTH")
    bad = _first_non_plain(obj, max_depth)
    if bad is _TOO_DEEP:
        raise nesting_error(path, max_depth, f"expected {what}; it")
    if bad is not None:
        raise InputError(path, f"expected {what}; it holds a {bad} object, which gpudiag does not accept")
    return obj


MEMORY_ALLOWANCE_BYTES = 2**30  # new address space an unpickle may take, plus ...
MEMORY_PER_PICKLE_BYTE = 64  # ... this per byte of pickle (real torch snapshots take ~10)


@contextmanager
def _memory_cap(extra_bytes: int):
    """Let the process map at most ``extra_bytes`` more while the block runs (Linux; elsewhere no cap).

    The C unpickler keeps its memo in an array indexed by the numbers of PUT / LONG_BINPUT: one
    ``LONG_BINPUT 0x10000000`` makes it allocate and clear 2**29 pointers (4 GiB, seconds of work)
    for a file of a few bytes (found by atheris on a mutated oom snapshot). An honest pickle numbers
    its memo from 0 and costs about ten times its size, so the cap only stops such a pickle, which
    then fails with MemoryError instead of swapping or being killed.
    """
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * resource.getpagesize()
    except (ImportError, OSError, ValueError):
        yield
        return
    cap = mapped + extra_bytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield  # already capped tighter by the user
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


_TOO_DEEP = "containers nested deeper than MAX_NESTING_DEPTH"


def _first_non_plain(obj, max_depth: int) -> str | None:
    """Name of the first value whose type is not plain data, or _TOO_DEEP.

    Level by level, not recursive: a deep nest must not recurse. A container the pickle shares
    (memo) is walked once per depth it is met at, not once per reference, and the deepest
    depth counts: Python's repr recurses along the longest path.
    """
    level = [obj]
    depth = 0
    walked: dict[int, int] = {}  # id → the deepest level a container was walked at
    while level:
        depth += 1
        below = []
        for value in level:
            kind = type(value)
            if kind is dict or kind is list or kind is tuple:
                if walked.get(id(value), 0) >= depth:
                    continue
                if depth > max_depth:
                    return _TOO_DEEP
                walked[id(value)] = depth
                if kind is dict:
                    below.extend(value.keys())
                    below.extend(value.values())
                else:
                    below.extend(value)
            elif kind not in PLAIN_TYPES:
                return kind.__name__
        level = below
    return None
