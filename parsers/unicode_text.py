"""Text that a table, a terminal and the UTF-8 report can hold.

``json.loads`` lets a lone surrogate escape (``\\ud800``) through, and Python decodes a path or
argument that was not UTF-8 into lone surrogates (surrogateescape): such a string makes pandas /
pyarrow or a UTF-8 write raise UnicodeEncodeError. Found by fuzzing; each reader decides whether
to refuse the input or replace the character.
"""

from __future__ import annotations

import re

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(text: str) -> bool:
    return not text.isascii() and _LONE_SURROGATE.search(text) is not None


def without_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD."""
    return text if text.isascii() else _LONE_SURROGATE.sub("\ufffd", text)
