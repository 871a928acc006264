"""The import graph of moplace's packages, read from their source with `ast` (nothing is imported).

Every ``import`` and ``from ... import`` counts, also those inside functions (a lazy import is
still a dependency). ``from pkg import name`` points at ``pkg.name`` when that is a module, else
at ``pkg``. Importing a submodule runs its parent packages' ``__init__`` too, but that is not an
edge here: otherwise every module would sit on a cycle with a package that re-exports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("moplace", "objectives", "searchers")


def modules(root: Path = ROOT, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of ``packages``."""
    found = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` (file ``path``) imports."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = _package_of(name, path).split(".")
                pkg = pkg[:len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `import moplace.tf.zoo` with zoo known, or a parent
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def import_graph(root: Path = ROOT, packages=PACKAGES) -> dict[str, set[str]]:
    """Module -> the set of modules it imports (within ``packages``)."""
    mods = modules(root, packages)
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: one list of modules per strongly connected component
    of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out
