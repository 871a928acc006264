"""What ``moplace fidelity`` writes and prints, for either front end's report: the files of
``-o STEM`` checked before the work, then the table, the JSON and the figure."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .. import strictjson


def report_outputs(args, *, figure: bool = True) -> list[Path]:
    """STEM.txt, STEM.json and (with ``figure``) STEM.png of ``-o STEM``, checked
    (`check_output`); none without ``-o``."""
    if not args.output:
        return []
    from .output import check_output

    stem = Path(args.output)
    return [check_output(stem.with_suffix(s), force=args.force, flag="-o")
            for s in (".txt", ".json", ".png")[:3 if figure else 2]]


def finish(args, data: dict, table: str, outputs: list, run_id: str | None,
           draw: Callable[[Path], object]) -> int:
    """Write the files (``draw(path)`` the figure) and print the table, or the JSON object
    with ``--json``."""
    if outputs:
        outputs[0].write_text(table + "\n")
        outputs[1].write_text(strictjson.dumps(data, indent=1))
        if len(outputs) > 2:
            draw(outputs[2])
    if args.json:
        print(strictjson.dumps({**data, "mlflow_run_id": run_id,
                                "files": [str(p) for p in outputs]}))
        return 0
    print(table)
    if outputs:
        print(f"wrote {', '.join(map(str, outputs))}")
    if run_id:
        print(f"logged to MLflow: run {run_id} in experiment {args.experiment!r}")
    return 0
