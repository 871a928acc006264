"""Every Python block in README.md and docs/ runs as written, so the docs cannot drift.

The blocks of one file run in order in one namespace (a later block may use what an earlier
one made), in a fresh working directory.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(first line, code) of each fenced ```python block of ``path``."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in BLOCK.finditer(text)]


def test_the_docs_have_python_blocks():
    assert python_blocks(ROOT / "README.md"), "the README's 'From Python' block is gone"
    assert python_blocks(ROOT / "docs" / "architecture.md")


@pytest.mark.parametrize("path", [p for p in DOCS if python_blocks(p)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": f"docs_{path.stem}"}
    for line, code in python_blocks(path):
        # the file and line in tracebacks are the block's own
        exec(compile("\n" * (line - 1) + code, str(path), "exec"), namespace)


def test_every_path_the_docs_name_is_there():
    """A path in backticks (`moplace/core/presets/*.toml`) names files of the checkout: the
    cluster format's preset folder was a folder that does not exist (issue 34)."""
    import glob

    missing = []
    for doc in DOCS:
        for m in re.finditer(r"`((?:moplace|searchers|objectives|experiments|tests|docs)/"
                             r"[\w./*-]+)`", doc.read_text()):
            if not glob.glob(str(ROOT / m.group(1).rstrip("."))):
                missing.append(f"{doc.name}: {m.group(1)}")
    assert not missing
