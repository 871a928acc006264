"""What the experiments that read one op graph share: their command line (the graph file, a
cluster, where to write the table) and how they hand the table out (printed, and written
where ``--out`` says)."""

from __future__ import annotations

import argparse
from pathlib import Path


def graph_arguments(doc: str, cluster: str = "8xH100-80GB-NVLink") -> argparse.Namespace:
    """``graph``, ``--cluster`` and ``--out`` parsed, the script's docstring's first line its
    description."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("graph")
    ap.add_argument("--cluster", default=cluster)
    ap.add_argument("--out", type=Path, help="also write the table here")
    return ap.parse_args()


def hand_out(lines: list[str], out: Path | None) -> int:
    """Print ``lines`` and write them to ``out`` where given; 0, the exit status."""
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out:
        out.write_text(text)
    return 0
