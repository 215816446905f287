#!/usr/bin/env python3
"""The import rules of DESIGN.md, lazy imports included: prints one line per break, nothing when the tree keeps them.

    python3 tools/layering.py          # this repository
    python3 tools/layering.py ROOT     # another tree with parsers/, diagnose/ and reports/ (the tests plant breaks)

The in-repo copy of the design folder's hook (``../shared/hooks/layering.py``), with the same rules and the
same output, so a clone checks itself and CI (``.ci/run``) fails on a break:

- ``parsers`` imports neither ``diagnose`` nor ``reports`` (they stand alone);
- ``reports`` takes from ``diagnose`` only ``diagnose.findings``' public names;
- ``diagnose.analyzers`` never import ``diagnose.launch``, nor one another (shared tables go in
  ``diagnose/derive``);
- no import circles (a package's ``__init__`` re-exporting its children is allowed).

Standard library only: it reads the source with ``ast`` and imports nothing it checks.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

PACKAGES = ("parsers", "diagnose", "reports")
REPO = Path(__file__).resolve().parents[1]


def modules(root: str) -> dict[str, str]:
    """Dotted module name → file, for every ``.py`` under the checked packages (a package is its ``__init__``)."""
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(root, package)):
            for file in files:
                if file.endswith(".py"):
                    path = os.path.join(folder, file)
                    name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                    found[name.removesuffix(".__init__")] = path
    return found


def imported(module: str, path: str, tree: ast.AST) -> list[tuple[str, str | None]]:
    """(dotted target, imported name or None) of every import statement in the module, at any depth."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    targets = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: up from this module's package
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if base:
                targets += [(f"{base}.{alias.name}", alias.name) for alias in node.names]
    return targets


def rule_breaks(module: str, target: str, name: str | None) -> list[str]:
    """The layering rules one import edge ``module → target`` breaks."""
    top, target_top = module.split(".")[0], target.split(".")[0]
    found = []
    if top == "parsers" and target_top in ("diagnose", "reports"):
        found.append(f"{module} imports {target} (parsers stand alone)")
    private = (name or "").startswith("_")
    if top == "reports" and target_top == "diagnose" and (target != "diagnose.findings" or private):
        shown = target + (f".{name}" if name else "")
        found.append(f"{module} imports {shown} (reports take only diagnose.findings' public names)")
    if module.startswith("diagnose.analyzers") and target.startswith("diagnose.launch"):
        found.append(f"{module} imports {target} (analyzers read tables, not the launcher)")
    if module.startswith("diagnose.analyzers.") and target.startswith("diagnose.analyzers.") and target != module:
        found.append(
            f"{module} imports {target} (analyzers never import one another: shared tables belong in diagnose/derive)"
        )
    return found


def circles(edges: dict[str, set[str]], nodes) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in list(nodes):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def breaks(root: str | os.PathLike = REPO) -> list[str]:
    """Every break of the import rules in the tree at ``root``, one line each, in a stable order."""
    root = os.fspath(root)
    mods = modules(root)

    def resolve(name: str) -> str | None:  # the longest checked module that ``name`` is, or is inside
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    problems = []
    for module, path in mods.items():
        try:
            tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        except SyntaxError as e:
            problems.append(f"{module}: {e}")
            continue
        for target, name in imported(module, path, tree):
            resolved = resolve(target)
            if not resolved or resolved == module:
                continue
            edges.setdefault(module, set()).add(resolved)
            problems += rule_breaks(module, resolved, name)
    for component in circles(edges, mods):
        inner = [x for x in component if not any(x != y and y.startswith(x + ".") for y in component)]
        if len(inner) > 1 or len(component) > 2:  # not just a package and the child its __init__ re-exports
            problems.append("import circle: " + " -> ".join(component))
    return list(dict.fromkeys(problems))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    found = breaks(args[0] if args else REPO)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
