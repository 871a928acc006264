"""Run moplace's CLI in process on one argv and judge the outcome; fuzz one input format.

A run is fine when `moplace.cli.main` returns 0 (and, with ``--json``, prints exactly one
strict JSON document), or is a clean user error: it returns 2 after printing exactly one line
``moplace: error: ...`` (or argparse's ``moplace CMD: error: ...``) on stderr, or argparse
exits with status 2 (``SystemExit(0)`` from ``--help`` is fine too). Anything else fails:

    traceback  an exception other than a clean error escaped `main` (MemoryError included)
    hang       the run took longer than the time limit (SIGALRM in the main thread)
    bad-json   ``--json`` and status 0, but stdout is not exactly one strict JSON document
    bad-exit   another exit status, or status 2 without exactly one ``moplace: error:`` line
               (of at most `MAX_ERROR_LINE` characters)

A failure's ``klass`` groups failures of one cause: exception type + innermost frame in
moplace/searchers/objectives; for a hang, the outermost step below the CLI it was in (a slow
loop is interrupted at a different line each time; ``where`` keeps the innermost frame). A watchdog thread ends the process (``os._exit(3)``) when a run
is stuck in compiled code 3x the time limit, after writing which input it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import re
import resource
import shlex
import shutil
import signal
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT_DIRS = ("moplace", "searchers", "objectives")


_ERROR_LINE = re.compile(r"moplace(?: [a-z][a-z-]*)?: error: \S.*")
#: an error line says what is wrong and shows values cut short (`moplace.errors.shown`)
MAX_ERROR_LINE = 1000


def shorten(text: str) -> str:
    """``text`` with long runs of one character written as ``x*5000`` (readable reports)."""
    text = re.sub(r"(.)\1{40,}", lambda m: f"{m.group(1)}*{len(m.group(0))}", text)
    return re.sub(r"[\x00-\x08\x0b-\x1f]", lambda m: f"\\x{ord(m.group()):02x}", text)


def _ascii(text: str) -> str:
    return text.encode("ascii", "backslashreplace").decode()


class Hang(BaseException):
    """Raised in the main thread when a run passes its time limit (a BaseException, so that
    `except Exception` in the code under test does not swallow it)."""


@dataclasses.dataclass
class Outcome:
    ok: bool
    kind: str            # "ok" | "clean-error" | "traceback" | "hang" | "bad-json" | "bad-exit"
    detail: str = ""
    klass: str = ""      # failure class: "ExcType @ file:line", "Hang in file:line in func"
    where: str = ""      # innermost moplace frame (file:line) of a traceback or hang
    seconds: float = 0.0
    argv: tuple = ()
    mutations: tuple = ()
    repro: str = ""      # the failure's saved input / sidecar (set by `fuzz`)


def _project_frames(tb) -> list[str]:
    """``file:line in func`` of the frames of ``tb`` in the project's packages, outermost first."""
    out = []
    for fr in traceback.extract_tb(tb):
        try:
            rel = Path(fr.filename).resolve().relative_to(ROOT)
        except ValueError:
            continue
        if rel.parts and rel.parts[0] in PROJECT_DIRS:
            out.append(f"{rel.as_posix()}:{fr.lineno} in {fr.name}")
    return out


def _where(exc) -> tuple[str, str, str]:
    """(innermost project frame as file:line, a few frames of context, the outermost project
    frame below the CLI: the step a hang was in)."""
    frames = _project_frames(exc.__traceback__)
    if not frames:
        last = traceback.extract_tb(exc.__traceback__)[-1:] or [None]
        inner = f"{Path(last[0].filename).name}:{last[0].lineno}" if last[0] else "?"
        return f"(no moplace frame) {inner}", "", f"(no moplace frame) {inner}"
    below_cli = [f for f in frames if not f.startswith("moplace/cli/")] or frames[-1:]
    return frames[-1].split(" in ")[0], " <- ".join(reversed(frames[-4:])), below_cli[0]


def _strict_json(text: str) -> str | None:
    """None when ``text`` is exactly one strict JSON document, else what is wrong."""
    def refuse(token):
        raise ValueError(f"non-strict JSON constant {token}")
    try:
        json.loads(text, parse_constant=refuse)
    except ValueError as exc:  # JSONDecodeError is a ValueError
        return f"{exc}; stdout starts {text[:200]!r}"
    return None


def _capture():
    """A text stream like the real stdout: UTF-8, strict (a lone surrogate fails to print)."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)


def _read(stream) -> str:
    return stream.buffer.getvalue().decode("utf-8", "replace")


def run_one(argv, time_limit: float = 10.0, note: str = "") -> Outcome:
    """Run ``moplace.cli.main(argv)`` in process and judge it (see module docstring).
    ``note`` (the input's path) goes into the watchdog's message."""
    from moplace.cli import main

    argv = [str(a) for a in argv]
    out, err = _capture(), io.TextIOWrapper(io.BytesIO(), encoding="utf-8",
                                            errors="backslashreplace", write_through=True)
    state = {"armed": True, "fired": False}
    done = threading.Event()

    def on_alarm(signum, frame):
        if state["armed"]:
            state["fired"] = True
            raise Hang(f"over the {time_limit:g} s limit")

    def watchdog():
        if done.wait(3 * time_limit):
            return
        msg = (f"moplace fuzz watchdog: stuck for {3 * time_limit:g} s (3x the limit) in compiled "
               f"code; argv: {shlex.join(argv)}; input: {note}\n")
        with contextlib.suppress(Exception):
            Path(os.environ.get("MOPLACE_FUZZ_STUCK", "fuzz-stuck.txt")).write_text(msg)
        with contextlib.suppress(Exception):
            sys.__stderr__.write(msg)
            sys.__stderr__.flush()
        os._exit(3)

    old = signal.signal(signal.SIGALRM, on_alarm)
    threading.Thread(target=watchdog, daemon=True, name="fuzz-watchdog").start()
    t0, code, exc = time.perf_counter(), None, None
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, time_limit)
            with warnings.catch_warnings(), contextlib.redirect_stdout(out), \
                    contextlib.redirect_stderr(err):
                warnings.simplefilter("ignore")
                logging.disable(logging.CRITICAL)
                try:
                    code = main(argv)
                finally:
                    state["armed"] = False
                    logging.disable(logging.NOTSET)
        except SystemExit as e:
            code = ("exit", e.code)
        except BaseException as e:  # judging every escape is the point
            if isinstance(e, KeyboardInterrupt) and not isinstance(e, Hang):
                raise
            exc = e
    except Hang as e:  # fired between main's return and disarming
        exc = e
    finally:
        state["armed"] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        done.set()
    seconds = time.perf_counter() - t0
    o = {"seconds": seconds, "argv": tuple(argv)}
    if isinstance(exc, Hang) or (state["fired"] and exc is None):
        # grouped by the step it was in (a slow loop is caught at a different line each time)
        where, ctx, step = _where(exc) if exc is not None else ("(Hang swallowed)", "", "?")
        return Outcome(False, "hang", f"over {time_limit:g} s, stopped at {ctx or where}",
                       f"Hang in {step}", where=where, **o)
    if exc is not None:
        where, ctx, _ = _where(exc)
        msg = shorten(str(exc).replace("\n", " | "))[:400]
        return Outcome(False, "traceback", f"{type(exc).__name__}: {msg} (at {ctx or where})",
                       f"{type(exc).__name__} @ {where}", where=where, **o)
    stdout, stderr = _read(out), _read(err)
    if isinstance(code, tuple):  # SystemExit
        if code[1] in (0, None, 2):
            return Outcome(True, "ok" if code[1] in (0, None) else "clean-error",
                           stderr.strip()[-300:], **o)
        return Outcome(False, "bad-exit", f"SystemExit({code[1]!r}); stderr {stderr[-300:]!r}",
                       f"SystemExit({code[1]!r})", **o)
    if code == 2:  # "moplace: error: ..." (MoplaceError) or "moplace CMD: error: ..." (argparse)
        lines = stderr.splitlines()
        if len(lines) == 1 and _ERROR_LINE.fullmatch(lines[0]):
            if len(lines[0]) > MAX_ERROR_LINE:  # a value shown whole: a megabyte, one "line"
                return Outcome(False, "bad-exit", f"the error line is {len(lines[0])} characters: "
                               f"{lines[0][:300]!r}", "error line too long", **o)
            return Outcome(True, "clean-error", lines[0][:300], **o)
        return Outcome(False, "bad-exit", f"status 2 but stderr is {len(lines)} lines, not one "
                       f"'moplace: error:' line: {stderr[:300]!r}",
                       "status 2, stderr not one error line", **o)
    if code != 0 and not (code == 3 and argv and argv[0] in ("search", "compare")):
        # 3: a search or comparison that found nothing feasible (documented; its front is
        # still written and printed)
        return Outcome(False, "bad-exit", f"status {code!r}; stderr {stderr[-300:]!r}",
                       f"status {code!r}", **o)
    if "--json" in argv:
        problem = _strict_json(stdout)
        if problem:
            return Outcome(False, "bad-json", problem, f"bad JSON: {argv[0]} " +
                           problem.split(";")[0][:60], **o)
    return Outcome(True, "ok", "", **o)


# -- fuzzing one format -------------------------------------------------------------------------
@contextlib.contextmanager
def sandbox(workdir: Path, memory_mb: int | None = 4096):
    """Run in ``workdir`` (a dropped --out or --tracking-uri writes there, not in the repo),
    MLflow's default store inside it, and the address space capped ``memory_mb`` above what
    the process uses now (so an unbounded allocation is a MemoryError, not the OOM killer)."""
    cwd, env = os.getcwd(), {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI",
                                                            "MOPLACE_FUZZ_STUCK")}
    old_limit = resource.getrlimit(resource.RLIMIT_AS)
    os.chdir(workdir)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{workdir / 'default-mlflow.db'}"
    os.environ["MOPLACE_FUZZ_STUCK"] = str(workdir / "STUCK.txt")
    try:
        if memory_mb:
            with open("/proc/self/statm") as f:
                used = int(f.read().split()[0]) * resource.getpagesize()
            cap = used + memory_mb * 2**20
            if old_limit[0] == resource.RLIM_INFINITY or old_limit[0] > cap:
                hard = old_limit[1]
                resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY
                                                        else min(cap, hard), hard))
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old_limit)
        os.chdir(cwd)
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _save_failure(workdir: Path, fmt: str, input_id: str, case, outcome: Outcome,
                  stored: Path | None) -> tuple[str, tuple]:
    """Copy a failing input to ``failures/<fmt>/<id>.<ext>`` with a sidecar ``<id>.txt``;
    (the saved input or sidecar, the argv naming the saved copy)."""
    folder = workdir / "failures" / fmt
    folder.mkdir(parents=True, exist_ok=True)
    argv = list(outcome.argv)
    if stored is not None:
        kept = folder / stored.name
        shutil.copyfile(stored, kept)
        argv = [a.replace(str(stored), str(kept)) for a in argv]
    side = folder / f"{input_id}.txt"
    shown, exact = _ascii(shorten(shlex.join(argv))), _ascii(shlex.join(argv))
    side.write_text(f"argv: {shown}\nargv_json: {json.dumps(argv)}\n"
                    f"reproduce: python3 -m moplace {exact}\n"
                    f"kind: {outcome.kind}\nclass: {outcome.klass}\nwhere: {outcome.where}\n"
                    f"detail: {outcome.detail}\n"
                    f"mutations: {', '.join(case.mutations)}\nseed: {case.seed_name}\n"
                    f"seconds: {outcome.seconds:.2f}\n", encoding="utf-8")
    return str(kept if stored is not None else side), tuple(argv)


def fuzz(format_name: str, n: int, seed: int, workdir, *, time_limit: float = 10.0,
         memory_mb: int | None = 4096, progress=None, start: int = 0):
    """Fuzz ``format_name`` with ``n`` mutated inputs (ids ``start .. start+n-1``) made from
    ``seed``; returns ``[(input_id, Outcome)]``. Inputs are written under ``workdir/inputs``
    (deleted after a clean run); failing ones are kept in ``workdir/failures/<format>/``.
    ``progress(outcome)`` is called after each input."""
    from .formats import make_format

    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    results = []
    warm_up(format_name)
    with sandbox(workdir, memory_mb):
        gen = make_format(format_name, workdir)
        inputs = workdir / "inputs" / format_name
        inputs.mkdir(parents=True, exist_ok=True)
        for i in range(start, start + n):
            input_id = f"{format_name}-s{seed}-{i:06d}"
            case = gen.case(_rng(format_name, seed, i), i)
            stored = None
            argv = list(case.argv)
            if case.data is not None:
                stored = inputs / f"{input_id}.{case.ext}"
                stored.write_bytes(case.data)
                argv = [a.replace("{input}", str(stored)) for a in argv]  # hf:{input}
            outcome = run_one(argv, time_limit, note=str(stored or input_id))
            outcome.mutations = tuple(case.mutations)
            if not outcome.ok:
                outcome.repro, outcome.argv = _save_failure(workdir, format_name, input_id,
                                                            case, outcome, stored)
            if stored is not None:
                stored.unlink(missing_ok=True)
            results.append((input_id, outcome))
            if progress is not None:
                progress(outcome)
    return results


def warm_up(format_name: str = "") -> None:
    """Compile (or load from numba's cache) the simulator and the list schedulers before any
    input is timed: on a clean checkout the first compilation alone takes longer than the
    time limit, and would be judged a hang of whichever input came first. The command lines
    (``arguments``) include `moplace profile` of model files that are not Python, refused once
    TensorFlow is loaded: it is loaded here (importing it takes longer than the time limit),
    and so is transformers, which the ``hf:`` cases read their configurations with (its first
    import, run alone with ``-n0``, took over 5 s)."""
    if format_name == "arguments":
        with contextlib.suppress(ImportError):  # without TensorFlow, profile says to install it
            import moplace.tf.modelfile  # noqa: F401
        with contextlib.suppress(ImportError):
            from transformers import AutoConfig  # noqa: F401
    if format_name in ("torch-model", "hf-config"):  # torch and transformers load in seconds
        with contextlib.suppress(ImportError):
            import moplace.torch.trace  # noqa: F401
            from transformers import AutoConfig  # noqa: F401
    from moplace import load_cluster, load_graph
    from moplace.core.baselines import BASELINES, baseline
    from moplace.optimize.problem import Problem
    from searchers.listsched import ListSchedInput, heuristic_strategies, metf

    problem = Problem(load_graph("pipedream:alexnet"), load_cluster("4xV100-NVLink"))
    for name in BASELINES:
        problem.evaluate(baseline(name, problem.graph, problem.n_devices))
    heuristic_strategies(problem)
    metf(ListSchedInput.from_problem(problem.graph, problem.cluster, problem.costs))


def _rng(fmt: str, seed: int, i: int):
    import random

    return random.Random(f"moplace-fuzz:{fmt}:{seed}:{i}")


def group_failures(results) -> dict[str, list]:
    """Failure class -> [(input_id, Outcome)], biggest class first."""
    groups: dict[str, list] = {}
    for input_id, o in results:
        if not o.ok:
            groups.setdefault(f"[{o.kind}] {o.klass}", []).append((input_id, o))
    return dict(sorted(groups.items(), key=lambda kv: -len(kv[1])))


def failure_report(results, limit: int = 10) -> str:
    """The failures grouped by class, at most ``limit`` classes, one example each."""
    groups = group_failures(results)
    failed = sum(len(v) for v in groups.values())
    lines = [f"{failed} of {len(results)} inputs failed, {len(groups)} classes:"]
    for klass, items in list(groups.items())[:limit]:
        input_id, o = items[0]
        lines.append(f"- {klass}  x{len(items)}\n    e.g. {input_id}: {o.detail[:500]}\n"
                     f"    argv: {_ascii(shorten(shlex.join(o.argv)))[:300]}\n    saved: {o.repro}")
    if len(groups) > limit:
        lines.append(f"... and {len(groups) - limit} more classes")
    return "\n".join(lines)
