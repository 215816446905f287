"""Pickles that only this user's gpudiag wrote: each carries an HMAC under a key kept in the user's cache folder.

The cluster read keeps each rank's analysis parts (frames, findings) for the next report. A pickle runs code
when it is loaded, and the cache sits next to traces that may come from elsewhere (copied off a cluster, shared
storage): a parts file is loaded only when its HMAC, under a secret key that never leaves this user's home
(``$XDG_CACHE_HOME/gpudiag/cache-key``, mode 0600), matches. Any other file, a foreign one included, is not
loaded: the rank is analysed again from its Parquet tables (which Arrow reads as data).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import secrets
from pathlib import Path
from typing import Any

from diagnose.outputs.atomic_write import atomic_write_bytes

KEY_BYTES = 32
MAGIC = b"gpudiag-signed-pickle/1\n"


def key_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpudiag" / "cache-key"


def _key() -> bytes | None:
    """This user's key, made on first use; None where it cannot be kept (a read-only home): nothing is signed."""
    path = key_path()
    try:
        key = path.read_bytes()
        if len(key) == KEY_BYTES:
            return key
    except OSError:
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        key = secrets.token_bytes(KEY_BYTES)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        return key
    except OSError:
        return None


def dump(value: Any, path: str | os.PathLike, label: str) -> bool:
    """Write ``value`` signed (with ``label``, what it must be loaded as); False where no key can be kept."""
    key = _key()
    if key is None:
        return False
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    head = MAGIC + label.encode() + b"\n"
    tag = hmac.new(key, head + payload, hashlib.sha256).digest()
    atomic_write_bytes(path, head + tag + payload)
    return True


def load(path: str | os.PathLike, label: str) -> Any | None:
    """The value :func:`dump` wrote with ``label``, or None: no such file, another label, or not signed by this
    user's key (never unpickled then)."""
    key = _key()
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    head = MAGIC + label.encode() + b"\n"
    if key is None or not data.startswith(head) or len(data) < len(head) + 32:
        return None
    tag, payload = data[len(head) : len(head) + 32], data[len(head) + 32 :]
    if not hmac.compare_digest(tag, hmac.new(key, head + payload, hashlib.sha256).digest()):
        return None
    try:
        return pickle.loads(payload)  # noqa: S301 - signed by this user's key above
    except Exception:  # noqa: BLE001 - an older gpudiag's classes: analysed again
        return None
