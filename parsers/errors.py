"""The one error type for bad input.

Every reader raises :class:`InputError` when a file is not what it should be.
The message names the file, what was expected and what was found, so the CLI
can print it as is and exit 2 without a traceback.
"""

from __future__ import annotations

import os


class InputError(Exception):
    """A file (or argument) that gpudiag cannot use, with a message a user can act on."""

    def __init__(self, path: str | os.PathLike | None, problem: str):
        self.path = None if path is None else os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path else problem)
