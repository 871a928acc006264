"""The ``sweep`` command: a sweep file's trials, on workers here, on other machines, or on Dask.

    moplace sweep SWEEP.toml [--trials N] [--workers N] [--storage URL] [--dask ADDRESS]
                  [--json] [--quiet] [--no-mlflow] [--tracking-uri URI] [--experiment NAME]

The study is kept in ``STEM.optuna.db`` in the working directory (``STEM``: the sweep file's
name), as ``mlflow.db`` is, never beside the sweep file; the command says where on stderr.
Running the same command again from the same folder resumes the sweep (the trials done are
kept, the rest run); from another folder it starts a new study there (``--storage`` names the
first one's file to resume it). The same command on another machine with the same
``--storage`` (a database server) joins it.
``--workers N`` starts N worker processes here, each taking the next waiting trial; this
process shows the progress, takes over a dead worker's trials when every worker has stopped,
and logs the sweep's summary to MLflow at the end. ``--dask ADDRESS`` evaluates every trial's
batches on a Dask cluster (see `moplace.scale.dask`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from .. import strictjson
from ..errors import MoplaceError
from .args import file_arg, integer, logged_run_options


def add_commands(sub) -> None:
    s = sub.add_parser("sweep", help="run a sweep of searches (an Optuna study) from a TOML file")
    s.add_argument("file", type=file_arg, help="the sweep file (see experiments/sweeps/)")
    s.add_argument("--trials", type=integer(1, 100_000), help="trials in all (default: the file's)")
    s.add_argument("--workers", type=integer(1, 256), default=1,
                   help="worker processes here (default 1: this process)")
    s.add_argument("--storage", type=file_arg, metavar="URL",
                   help="Optuna storage (default: a SQLite file STEM.optuna.db in the working "
                        "directory, STEM the sweep file's name: the same folder resumes the "
                        "sweep, another starts a new one); a PostgreSQL/MySQL URL to share it "
                        "between machines")
    s.add_argument("--dask", type=file_arg, metavar="ADDRESS",
                   help="evaluate every trial's batches on this Dask cluster (or local:N)")
    s.add_argument("--on-dask", action="store_true",
                   help="run the --workers as tasks on the --dask cluster instead of processes "
                        "here (the storage must be reachable from its workers)")
    s.add_argument("--check", action="store_true",
                   help="check the file (and its graphs and clusters) and show the plan; run nothing")
    logged_run_options(s)
    s.add_argument("--figures", choices=("inline", "off"), default="inline",
                   help="each trial's figures and the sweep's (default: drawn by the worker)")
    s.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    s.set_defaults(run=_sweep)


def _sweep(args) -> int:
    from ..sweep.spec import load_spec
    from ..sweep.study import open_sweep_study, storage_url

    spec = load_spec(args.file)
    url = storage_url(spec, args.storage)
    if args.on_dask and not args.dask:
        raise MoplaceError("--on-dask runs the workers on a Dask cluster: give it with --dask ADDRESS")
    if args.dask and args.dask.startswith("local:"):
        from ..scale.dask import local_workers

        local_workers(args.dask)  # a bad N fails before anything starts
    if not args.worker:
        from ..sweep.spec import check_sources

        check_sources(spec)
    if args.check:
        return _plan(args, spec, url)
    try:
        study, resumed = open_sweep_study(spec, url, trials=args.trials, create=not args.worker)
    except MoplaceError as exc:
        where = "--storage" if args.storage else f"{spec.path}: [sweep] storage" \
            if spec.storage else f"{spec.path}: the default storage"
        raise MoplaceError(f"{where}: {exc}") from None
    if not args.worker:
        print(f"moplace: {_where(args, spec, study, url, resumed)}", file=sys.stderr)
    tracker = None
    if not args.no_mlflow:
        from ..sweep.tracking import SweepRun

        tracker = SweepRun(args.tracking_uri, args.experiment, args.figures)
        if args.worker:
            from ..sweep.runner import join

            join(tracker, study)
        else:
            tracker.open(spec, study, url, " ".join(["moplace"] + sys.argv[1:]),
                         trials=args.trials)
    if args.worker:
        _work(spec, study, tracker, args.dask, quiet=True)
        return 0
    from ..scale import make_evaluator

    local = args.dask if args.dask and args.dask.startswith("local:") else None
    wanted = args.dask and (local or args.workers == 1 or args.on_dask)
    evaluator = make_evaluator(args.dask) if wanted else None
    address = evaluator.client.scheduler.address if evaluator is not None else args.dask
    status = "finished"
    try:
        if args.on_dask:
            _run_workers(args, url, None, spec, study, tracker, client=evaluator.client)
            evaluator.close()
            evaluator = address = None  # what is left runs here, evaluated here
        elif args.workers > 1:
            _run_workers(args, url, address, spec, study, tracker)
        _work(spec, study, tracker, address, quiet=args.quiet or args.json, evaluator=evaluator)
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        if evaluator is not None:
            evaluator.close()
    return _report(args, spec, study, url, tracker, status)


def _work(spec, study, tracker, dask, *, quiet: bool, evaluator=None) -> int:
    """Run waiting trials in this process until none is waiting or running."""
    from ..sweep.runner import run_worker
    from .progress import Display

    own = evaluator is None and dask
    if own:
        from ..scale import make_evaluator

        evaluator = make_evaluator(dask)
    try:
        with Display("quiet" if quiet else "auto") as display:
            return run_worker(spec, study, tracker, evaluator=evaluator, progress=display.search)
    finally:
        if own and evaluator is not None:
            evaluator.close()


def _worker_args(args, url, tracker, dask) -> list[str]:
    """The command line of a worker (after ``moplace``): same sweep, storage and MLflow store,
    paths absolute (a Dask worker runs elsewhere)."""
    argv = ["sweep", str(Path(args.file).resolve()), "--worker", "--storage", _absolute(url),
            "--figures", args.figures]
    if args.no_mlflow:
        argv.append("--no-mlflow")
    else:
        argv += ["--tracking-uri", _absolute(tracker.tracking_uri), "--experiment", tracker.experiment]
    if dask:
        argv += ["--dask", dask]
    return argv


def _absolute(uri: str) -> str:
    """A SQLite URI with its file made absolute (other URIs as they are)."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri[len("sqlite:///"):]).resolve())
    return uri


def _run_workers(args, url, dask, spec, study, tracker, client=None) -> None:
    """Start ``--workers`` workers (processes here, or tasks on the Dask ``client``'s cluster)
    and show the sweep's progress until they stop."""
    from ..sweep.study import counts
    from .progress import Display

    argv = _worker_args(args, url, tracker, dask)
    if client is not None:
        from ..sweep.runner import dask_worker

        tracking = (None, None) if tracker is None else \
            (_absolute(tracker.tracking_uri), tracker.experiment)
        futures = [client.submit(dask_worker, argv[1], argv[4], *tracking, args.figures,
                                 pure=False, key=f"moplace-sweep-worker-{k}-{time.time_ns()}")
                   for k in range(args.workers)]
        running = lambda: [f for f in futures if not f.done()]  # noqa: E731
    else:
        procs = [subprocess.Popen([sys.executable, "-m", "moplace", *argv], stdin=subprocess.DEVNULL)
                 for _ in range(args.workers)]
        running = lambda: [p for p in procs if p.poll() is None]  # noqa: E731
    display = Display("quiet" if args.quiet or args.json else "auto")
    job = display.job(f"sweep {spec.name}")
    total = spec.trials if args.trials is None else args.trials
    try:
        with display:
            while running():
                c = counts(study)
                job("trials", c["complete"] + c["fail"], total)
                time.sleep(1.0)
    except KeyboardInterrupt:
        if client is None:
            for p in procs:
                p.wait()
        raise
    codes = [f.result() if f.status == "finished" else f.status for f in futures] \
        if client is not None else [p.returncode for p in procs]
    failed = [c for c in codes if c not in (0, 130, -9)]
    if failed:
        print(f"moplace: warning: {len(failed)} of {len(codes)} sweep workers stopped with an "
              f"error (exit {failed[0]}); this process goes on with the trials left",
              file=sys.stderr)


def _default_storage(args, spec) -> bool:
    return not args.storage and not spec.storage


def _storage_file(url) -> str | None:
    from ..sweep.study import storage_file

    path = storage_file(url)
    return None if path is None else str(path)


def _where(args, spec, study, url, resumed: bool) -> str:
    """One line: where the study is, whether it was there already, what a re-run does."""
    from ..sweep.study import counts, hide_password
    from ..sweep.tracking import plan_text

    place = _storage_file(url) or hide_password(url)
    if resumed:
        c = counts(study)
        state = f"resumed, {c['complete'] + c['fail']} trials done"
    else:
        state = "a new study"
    plan = plan_text(spec, args.trials or spec.trials)
    line = f"sweep study {spec.name!r} in {place} (runs {plan}; {state}"
    if _default_storage(args, spec):
        line += ("; kept in the working directory: the same command from this folder resumes "
                 "it, from another folder starts a new study there")
    return line + ")"


def _plan(args, spec, url) -> int:
    """``--check``: what the sweep would run."""
    from ..sweep.tracking import plan_text, space_text

    trials = args.trials or spec.trials
    if args.json:
        print(strictjson.dumps({"sweep": spec.name, "file": str(spec.path), "storage": url,
                                "storage_file": _storage_file(url),
                                "trials": trials, "sampler": spec.sampler,
                                "returns": list(spec.returns), "fixed": spec.fixed,
                                "space": {k: space_text(d) for k, d in spec.space.items()}}))
        return 0
    print(f"sweep {spec.name}: {plan_text(spec, trials)}, sampler {spec.sampler}, returns "
          f"{', '.join(spec.returns)}; storage {url}")
    if _default_storage(args, spec):
        path = _storage_file(url)
        there = "exists: the sweep resumes" if path and Path(path).is_file() else \
            "not there yet: a new study"
        print(f"  (the working directory's {Path(path).name}, {there}; from another folder "
              f"the sweep starts a new study there)")
    for k, v in spec.fixed.items():
        print(f"  fixed  {k} = {v}")
    for k, d in spec.space.items():
        print(f"  varies {k}: {space_text(d)}")
    return 0


def _report(args, spec, study, url, tracker, status) -> int:
    from ..sweep.study import best_trials, counts
    from ..sweep.tracking import trial_rows

    c = counts(study)
    if c["running"] or c["waiting"]:
        status = "interrupted"
    figures = []
    if tracker is not None and tracker.run_id is not None:
        figures = tracker.close(spec, study, status)
    best = best_trials(study)
    rows = {r["number"]: r for r in trial_rows(study, spec.returns)}
    if args.json:
        print(strictjson.dumps({
            "sweep": spec.name, "file": str(spec.path), "storage": url,
            "storage_file": _storage_file(url), "status": status,
            "returns": list(spec.returns), "directions": list(spec.directions),
            "trials": c, "best_trials": [rows[t.number] for t in best],
            "mlflow_run_id": tracker.run_id if tracker else None,
            "tracking_uri": tracker.tracking_uri if tracker else None,
            "figures": figures}))
        return 0 if status == "finished" else 130
    _print_table(spec, list(rows.values()), c, best)
    if tracker is not None and tracker.run_id:
        print(f"logged to MLflow run {tracker.run_id} (one child run per trial) at "
              f"{tracker.where}")
    print(f"Optuna study {spec.name!r} in {url}; browse it with: optuna-dashboard {url}")
    if status != "finished":
        print("the sweep stopped before its end: run the same command again to go on",
              file=sys.stderr)
        return 130
    return 0


def _print_table(spec, rows, c, best) -> None:
    from ..sweep.tracking import return_text

    shown = ", ".join(f"{n} {k}" for k, n in c.items() if n)
    print(f"sweep {spec.name}: {shown}")
    names = list(spec.space)
    head = f"{'trial':>5} {'state':<9} " + " ".join(f"{n[:18]:>18}" for n in names) + " " + \
        " ".join(f"{r[:26]:>26}" for r in spec.returns)
    print(head)
    best_numbers = {t.number for t in best}
    for r in rows:
        cells = [f"{str(r['params'].get(n, '-'))[:18]:>18}" for n in names]
        vals = [f"{return_text(name, r['values'].get(name)):>26}" for name in spec.returns]
        mark = " *" if r["number"] in best_numbers else ""
        err = f"  {r['error'][:60]}" if r.get("error") else ""
        print(f"{r['number']:>5} {r['state']:<9} " + " ".join(cells) + " " + " ".join(vals) + mark + err)
    if best:
        print("* best" + (" (Pareto-optimal over the returned values)" if len(spec.returns) > 1 else ""))
