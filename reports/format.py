"""Human units for display only (values stay in base units everywhere else).

The functions are the project's one formatting layer, ``diagnose.formatting``, which analyzers use for their
titles too; reports take them through ``diagnose.findings`` (the import rules). What is only the reports'
own lives here: the input's name.
"""

from __future__ import annotations

from diagnose.findings import (  # noqa: F401  (re-exported for the renderers)
    DURATION_SCALE_NS,
    MISSING,
    agree,
    bytes_human,
    cell_text,
    count_human,
    is_missing,
    label_of_key,
    ms_human,
    n_things,
    ns_human,
    number_human,
    offset_human,
    pct_human,
    plural_of,
    s_human,
    share_human,
    singular_of,
    unit_of_column,
    us_human,
    value_human,
)


def input_name(paths: list[str]) -> str:
    """The input as one short name: the first path (the run folder or the file), and how many more were read."""
    if not paths:
        return "(no input named)"
    more = len(paths) - 1
    return paths[0] + (f" (+ {n_things(more, 'file')} read)" if more else "")


LIBRARY_ROOTS = ("site-packages/", "dist-packages/")


def short_location(location) -> str:
    """A code location short enough for a bar's legend: ``char_lm_eval.py:56`` of ``/abs/path/char_lm_eval.py:56``;
    a library's file keeps its package path (``torch/serialization.py:652``). '' where none is known."""
    if is_missing(location) or not str(location):
        return ""
    path = str(location).replace("\\", "/")
    for root in LIBRARY_ROOTS:
        if root in path:
            return path.rsplit(root, 1)[1]
    file, _, line = path.rpartition(":")
    return f"{file.rsplit('/', 1)[-1]}:{line}" if file and line.isdigit() else path.rsplit("/", 1)[-1]
