"""The shape of the code base, for refactoring notes: the longest functions, the constructors
with many arguments, the private attributes read or written across objects, and the
duplicate pairs (through the ``duplicates`` tool when it is on PATH).

    python3 experiments/code_metrics.py [--top 15] [--max-args 8] [--json OUT]

Counts ``moplace/``, ``objectives/`` and ``searchers/`` (tests and experiments are left out).
A function's length is its lines from ``def`` to its last statement, docstring included;
a constructor's arguments are its parameters besides ``self`` (``*args``/``**kw`` count one).
"""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("moplace", "objectives", "searchers")


def _files():
    for pkg in PACKAGES:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def _functions(tree):
    stack = [(tree, "")]
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                yield name, child
                stack.append((child, name + "."))
            elif isinstance(child, ast.ClassDef):
                stack.append((child, f"{prefix}{child.name}."))


def _arg_count(fn) -> int:
    a = fn.args
    n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
    n += (a.vararg is not None) + (a.kwarg is not None)
    if a.args and a.args[0].arg in ("self", "cls"):
        n -= 1
    return n


def _foreign_private(tree):
    """``x._name`` reads/writes where ``x`` is neither ``self`` nor ``cls`` nor a module-level
    name (modules' private helpers are a different rule, checked by tests/test_layout.py)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) \
                    and base.func.id == "super":
                continue
            out.append((node.lineno, ast.unparse(node)))
    return out


def measure(top: int = 15, max_args: int = 8) -> dict:
    functions, constructors, private = [], [], []
    for path in _files():
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(), filename=rel)
        for name, fn in _functions(tree):
            length = fn.end_lineno - fn.lineno + 1
            functions.append({"function": f"{rel}:{fn.lineno} {name}", "lines": length})
            if fn.name == "__init__" and _arg_count(fn) > max_args:
                constructors.append({"constructor": f"{rel}:{fn.lineno} {name}",
                                     "arguments": _arg_count(fn)})
        private += [{"where": f"{rel}:{line}", "expression": expr}
                    for line, expr in _foreign_private(tree)]
    functions.sort(key=lambda f: (-f["lines"], f["function"]))
    constructors.sort(key=lambda c: (-c["arguments"], c["constructor"]))
    return {"longest_functions": functions[:top], "constructors_over": max_args,
            "constructors": constructors, "foreign_private_attributes": private,
            "duplicates": _duplicates()}


def _duplicates() -> list[str]:
    tool = shutil.which("duplicates")
    if tool is None:
        return ["(duplicates tool not on PATH)"]
    out = subprocess.run([tool, "--most", "200", "--seconds", "120"], cwd=ROOT,
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--max-args", type=int, default=8)
    ap.add_argument("--json", help="write the figures to this JSON file as well")
    args = ap.parse_args(argv)
    m = measure(args.top, args.max_args)
    print(f"The {args.top} longest functions:")
    for f in m["longest_functions"]:
        print(f"  {f['lines']:4d}  {f['function']}")
    print(f"\nConstructors with more than {args.max_args} arguments: {len(m['constructors'])}")
    for c in m["constructors"]:
        print(f"  {c['arguments']:4d}  {c['constructor']}")
    print(f"\nPrivate attributes of other objects read or written: "
          f"{len(m['foreign_private_attributes'])}")
    for p in m["foreign_private_attributes"]:
        print(f"  {p['where']}  {p['expression']}")
    print("\nDuplicate pairs:")
    for line in m["duplicates"]:
        print(f"  {line}")
    if args.json:
        Path(args.json).write_text(json.dumps(m, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
