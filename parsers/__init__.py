"""Raw profiling artifacts → typed pandas tables. No analysis, no plotting.

Every reader takes a path (or bytes) and returns frames that follow the schemas
declared beside it (see :mod:`parsers.schema`), raising :class:`InputError` for
input it cannot use.
"""

from parsers.errors import InputError

__all__ = ["InputError"]
