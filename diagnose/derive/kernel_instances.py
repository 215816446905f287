"""What tells ``vectorized_elementwise_kernel #2`` from ``vectorized_elementwise_kernel``: the note a kernel label
with ``#k`` carries.

gpudiag groups launches by the kernel's full demangled name and labels each group by its short name; two groups
with one short name are two instantiations of one template (PyTorch's elementwise kernels: one per functor and
arity), told apart by ``#2``, ``#3`` … (kernel_stats.unique_labels). A reader cannot act on "#2", so each such
label gets a note saying which template arguments differ from the first kernel of that name, and, where the
capture has them, the grid and block its launches mostly use when those differ too.
"""

from __future__ import annotations

import re

SPACES = re.compile(r"\s+")
MAX_ARG_CHARS = 80


def template_arguments(full_name: str, short: str) -> list[str] | None:
    """The top-level arguments of the template ``short`` is instantiated with in ``full_name`` (None when the name
    has no ``short<…>``)."""
    at = full_name.find(short + "<")
    if at < 0:
        return None
    i, depth, start, args = at + len(short) + 1, 1, at + len(short) + 1, []
    while i < len(full_name) and depth:
        c = full_name[i]
        if c in "<([":
            depth += 1
        elif c in ">)]":
            depth -= 1
            if not depth:
                args.append(full_name[start:i])
        elif c == "," and depth == 1:
            args.append(full_name[start:i])
            start = i + 1
        i += 1
    return [_clean(a) for a in args] if not depth else None


def _clean(arg: str) -> str:
    arg = SPACES.sub(" ", arg.strip())
    arg = re.sub(r"\((?:int|unsigned long|long|bool|unsigned int)\)", "", arg)  # .ncu-rep's "(int)4" is "4"
    return arg if len(arg) <= MAX_ARG_CHARS else arg[: MAX_ARG_CHARS - 1] + "…"


def instance_note(
    label: str, short: str, full: str, first_full: str, config: str | None, first_config: str | None
) -> str:
    """The note of a ``#k`` label: which template arguments (by position, from 1) differ from the first kernel of
    that short name, then the launch shape when it differs."""
    mine, theirs = template_arguments(full, short), template_arguments(first_full, short)
    parts = []
    if mine is not None and theirs is not None:
        for i in range(max(len(mine), len(theirs))):
            a = mine[i] if i < len(mine) else "none"
            b = theirs[i] if i < len(theirs) else "none"
            if a != b:
                parts.append(f"template argument {i + 1} is {a} where {short}'s is {b}")
    if not parts:
        parts.append(f"its full name differs from {short}'s: {_clean(full)}")
    if config and first_config and config != first_config:
        parts.append(f"its launches mostly use {config} where {short}'s use {first_config}")
    return f"{label}: another kernel named {short} (another instantiation of the template); " + "; ".join(parts)


def instance_notes(
    labels: list[str], shorts: list[str], fulls: list[str], configs: list[str | None]
) -> list[str | None]:
    """A note for each label that carries ``#k`` (None for the others), against the first row of its short name."""
    first: dict[str, int] = {}
    notes: list[str | None] = []
    for i, (label, short) in enumerate(zip(labels, shorts)):
        if short not in first:
            first[short] = i
            notes.append(None)
            continue
        j = first[short]
        notes.append(instance_note(label, short, fulls[i], fulls[j], configs[i], configs[j]))
    return notes
