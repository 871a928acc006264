"""Write the module index of docs/architecture.md anew: every module of moplace, objectives and
searchers with the first sentence of its docstring (tests/test_layout.py checks the list).

    python3 docs/module_index.py
"""

import ast
import pathlib
import re

root = pathlib.Path(__file__).resolve().parent.parent
rows = []
for pkg in ('moplace', 'objectives', 'searchers'):
    for f in sorted((root / pkg).rglob('*.py')):
        if '__pycache__' in f.parts:
            continue
        rel = f.relative_to(root).as_posix()
        doc = ast.get_docstring(ast.parse(f.read_text())) or ''
        first = doc.strip().split('\n\n')[0].replace('\n', ' ')
        first = re.split(r'(?<=[a-z)`]\.)\s+(?=[A-Z`])', first)[0].rstrip('.') if first else ''
        if len(first) > 110:
            first = first[:107].rsplit(' ', 1)[0] + ' ...'
        rows.append((rel, first.replace('|', '/')))
out = ["## Module index", "",
       "Every module, with the first sentence of its docstring, as `python3 docs/module_index.py`",
       "writes it (`tests/test_layout.py` checks that it names each module that exists and no",
       "other).", "",
       "| module | what it is |", "|---|---|"]
out += [f"| `{rel}` | {first} |" for rel, first in rows]
text = "\n".join(out) + "\n"
doc = (root / 'docs/architecture.md').read_text()
if "## Module index" in doc:
    doc = doc[:doc.index("## Module index")].rstrip() + "\n\n" + text
else:
    doc = doc.rstrip() + "\n\n" + text
(root / 'docs/architecture.md').write_text(doc)
print(len(rows), "modules")
