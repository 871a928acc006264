"""Every ``moplace`` command README.md shows runs in the test suite, so the README cannot drift.

The commands are the lines of README.md's code blocks that start with ``moplace `` (with the
``moplace`` part of a set-up line ``python3 -m pip install -e . && moplace ...``) and the
inline `` `moplace ...` `` spans of its prose. Each runs in its own temporary folder as the
working directory, as the README gives it, except that:

- placeholders (``GRAPH``, ``PRESET_OR_TOML``, ``RUN_ID``, ``FILE``...) are filled from
  `PLACEHOLDERS`, the optional parts (``[--json]``) are given, and of ``NAME|all`` the literal
  alternative is taken; a path of the checkout (``experiments/sweeps/...``) is made absolute;
- budgets shrink (`shrink`): a search ``--budget 30`` (``--time 1s``), a sweep one trial,
  the TensorFlow commands a tiny batch and one step; no figures;
- what a command reads is made first (`Case.prepare`): the outputs of the README command that
  writes them (``profile ... -o resnet50.json``), else a ``front.json`` by a tiny search, a
  ``strategy.json``, a model file, or an MLflow store holding one logged search (``runs``,
  ``show``, ``plot``, ``ui``);
- a command that needs a server outside (``--dask tcp://...``, a PostgreSQL or MySQL
  ``--storage``) and ``moplace ui`` (a server that runs until Ctrl-C) are only parsed by the
  command line's own parser (``moplace.cli._parser``); a slow test starts the UI and stops it.

A command that exits with a status other than 0 fails its test, which names the README line.
A new README command runs under these rules, or its test says which placeholder or input it
lacks. MLflow's store is the working directory's ``mlflow.db`` as the README says, given as an
absolute ``MLFLOW_TRACKING_URI`` because MLflow caches its stores by URI within a process.
The commands that load TensorFlow run as processes of their own; the others run in this one.
The commands that start processes (``--workers N``, ``--dask local:N``, a ``--testbed`` and
what reads its graph) and the TensorFlow commands are marked slow; in the default suite every command still parses, and a sweep's file
passes ``--check``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from moplace.cli import _parser, main

from fuzz.formats import with_option

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: a placeholder -> the value it runs with ({run_id}: the logged search of the MLflow store)
PLACEHOLDERS = {
    "GRAPH": "pipedream:alexnet",
    "PRESET_OR_TOML": "4xV100-NVLink",
    "NAME": "all",
    "RUN_ID": "{run_id}",
    "RUN_ID_OR_FRONT_JSON": "{run_id}",
    "K": "0",
    "DIR": "figures-again",
    "FILE": "experiments/sweeps/devices-and-memory.toml",
}
#: the commands that load TensorFlow (a process of their own; slow: importing it alone takes
#: 10-20 s on a busy 2-core machine)
TENSORFLOW = {"profile", "apply", "fidelity", "zoo"}
#: the commands that read an MLflow store (given the store with one logged search)
READ_STORE = {"runs", "show", "plot", "ui"}
#: the commands whose first word is a graph (the others read a front, a run or a file)
GRAPH_FIRST = {"search", "compare", "evaluate"}
#: options whose value a command writes (not an input to make first)
OUTPUTS = {"-o", "--output", "--out", "--checkpoint", "--save"}
#: a placeholder: a whole word of capitals and underscores
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$")
#: a file name a command may read
INPUT_FILE = re.compile(r"^[\w./-]+\.(json|toml|py)$")

def _documented_model_file() -> str:
    """The example model file of `moplace.tf.modelfile`'s docstring (the one the docs show),
    read from the source (importing `moplace.tf` would load TensorFlow at collection)."""
    import ast
    import textwrap

    source = (ROOT / "moplace" / "tf" / "modelfile.py").read_text()
    text = ast.get_docstring(ast.parse(source), clean=False).split("Example::\n", 1)[1]
    lines = []
    for line in text.splitlines():
        if line.strip() and not line.startswith(" "):
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines)).strip() + "\n"


MODEL_FILE = _documented_model_file()


# --- the README's commands ------------------------------------------------------------------


@dataclass
class Command:
    line: int
    text: str  # as the README shows it, without the comment

    @property
    def argv(self) -> list[str]:
        """The words after ``moplace``, optional parts given, of alternatives the literal one."""
        words = shlex.split(self.text, comments=True)[1:]
        out = []
        for w in words:
            w = w.strip("[]")
            if "|" in w and not w.startswith("-"):
                options = w.split("|")
                w = next((o for o in options if not PLACEHOLDER.match(o)), options[0])
            if w:
                out.append(w)
        return out

    @property
    def sub(self) -> str:
        return self.argv[0] if self.argv else ""


def readme_commands(text: str) -> list[Command]:
    """The ``moplace`` commands of a Markdown text: lines of code blocks (fenced but not
    Python, or indented by four spaces after a blank line) that start with ``moplace `` or
    hold ``&& moplace ...``, and the inline code spans of the prose that start with it."""
    found, fence, indented, blank = [], None, False, True
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith("```"):
                fence = None
            elif fence not in ("python", "py", "toml", "json"):
                found += _commands_in(number, stripped)
            continue
        if stripped.startswith("```"):
            fence = stripped[3:].strip().lower()
            indented = False
            continue
        if line.startswith("    ") and (blank or indented) and stripped:
            indented = True
            found += _commands_in(number, stripped)
        elif stripped:
            indented = False
            for span in re.findall(r"`(moplace [^`]+)`", line):
                found.append(Command(number, span.strip()))
        blank = not stripped
    return found


def unique(commands: list[Command]) -> list[Command]:
    """The first of each command the README shows more than once."""
    seen, out = set(), []
    for c in commands:
        if c.text not in seen:
            seen.add(c.text)
            out.append(c)
    return out


def _commands_in(number: int, line: str) -> list[Command]:
    line = line.removeprefix("$ ")
    return [Command(number, part.strip()) for part in line.split("&&")
            if part.strip().startswith("moplace ") or part.strip() == "moplace"]


COMMANDS = unique(readme_commands(README.read_text(encoding="utf-8")))


# --- how each one runs ----------------------------------------------------------------------


def _value(argv, option):
    return argv[argv.index(option) + 1] if option in argv else None


def fill(cmd: Command) -> list[str]:
    """``cmd``'s words with its placeholders filled and checkout paths made absolute."""
    out = []
    for w in cmd.argv:
        if PLACEHOLDER.match(w):
            if w not in PLACEHOLDERS:
                pytest.fail(f"README.md:{cmd.line}: `{cmd.text}`: placeholder {w} has no value: "
                            f"add one to PLACEHOLDERS in {Path(__file__).name}")
            w = PLACEHOLDERS[w]
        if "/" in w and not w.startswith("-") and (ROOT / w).exists():
            w = str(ROOT / w)
        out.append(w)
    return out


def shrink(argv: list[str]) -> list[str]:
    """The same command on a budget fit for a test."""
    sub = argv[0]
    if sub in ("search", "compare"):
        if "--time" in argv:
            argv = with_option(argv, "--time", "1s")
        else:
            argv = with_option(argv, "--budget", str(min(int(_value(argv, "--budget") or 30), 30)))
        argv = with_option(argv, "--figures", "off")
    elif sub == "sweep" and "--check" not in argv:
        argv = with_option(with_option(argv, "--trials", "1"), "--figures", "off")
    elif sub == "profile":
        argv = with_option(with_option(argv, "--batch", "2"), "--steps", "1")
    elif sub == "apply":
        argv = with_option(argv, "--steps", "1")
    elif sub == "evaluate" and "--plan" in argv:  # its graph, profiled at --batch 2 above
        argv = with_option(argv, "--plan", re.sub(r"mbs=\d+", "mbs=2", _value(argv, "--plan")))
    elif sub == "fidelity":
        for option, value in (("--batch", "8"), ("--steps", "3"), ("--budget", "30"),
                              ("--front-points", "1"), ("--calibration", "1")):
            argv = with_option(argv, option, value)
    return argv


def parse_only(argv: list[str]) -> bool:
    """Needs a server outside (a Dask scheduler, a database), or is one (the UI)."""
    dask, storage = _value(argv, "--dask"), _value(argv, "--storage")
    return argv[0] == "ui" or bool(dask and "://" in dask) or \
        bool(storage and not storage.startswith("sqlite"))


def is_slow(cmd: Command) -> bool:
    argv = cmd.argv
    dask = _value(argv, "--dask") or ""
    testbed = "--testbed" in argv or any("--testbed" in p.argv for p in producers(cmd))
    return cmd.sub in TENSORFLOW or any(p.sub in TENSORFLOW for p in producers(cmd)) \
        or "--workers" in argv or dask.startswith("local:") or testbed


def _outputs(cmd: Command) -> set[str]:
    """The files a README command writes that a later one may read."""
    argv = cmd.argv
    made = {argv[i + 1] for i, w in enumerate(argv[:-1]) if w in ("-o", "--output")}
    if cmd.sub in ("search", "compare") and "--out" in argv:  # the front.json it writes
        made.add(str(Path(_value(argv, "--out")) / "front.json"))
    if cmd.sub == "profile":  # the cluster file it measured, beside it (a Keras model's)
        made |= {str(Path(m).with_suffix("")) + ".cluster.toml" for m in made}
    return made


def _inputs(cmd: Command) -> list[str]:
    argv = cmd.argv
    return [w for i, w in enumerate(argv[1:], 1) if INPUT_FILE.match(w)
            and argv[i - 1] not in OUTPUTS and not (ROOT / w).exists()]


def producers(cmd: Command) -> list[Command]:
    """The earlier README commands whose outputs ``cmd`` reads, in the order they run."""
    chain = []
    for name in _inputs(cmd):
        for earlier in COMMANDS:
            if earlier.line < cmd.line and name in _outputs(earlier) and earlier not in chain:
                chain = [p for p in producers(earlier) if p not in chain] + chain + [earlier]
                break
    return chain


#: README line of a command -> the folder holding what it wrote (made once, for later commands)
PRODUCED: dict[int, Path] = {}


@dataclass
class Result:
    code: int
    out: str
    err: str


@dataclass
class Case:
    """One README command run in ``folder``."""

    cmd: Command
    folder: Path
    store: Path | None
    factory: pytest.TempPathFactory | None = None
    ran: list = field(default_factory=list)

    def run(self, argv: list[str]) -> Result:
        self.ran.append(argv)
        if argv[0] in TENSORFLOW:  # TensorFlow stays out of the test process
            done = subprocess.run([sys.executable, "-m", "moplace", *argv], cwd=self.folder,
                                  capture_output=True, text=True, timeout=900)
            return Result(done.returncode, done.stdout, done.stderr)
        import contextlib
        import io

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        return Result(code, out.getvalue(), err.getvalue())

    def must(self, argv: list[str], what: str) -> Result:
        result = self.run(argv)
        # 3: a search on the test's shrunk budget found nothing that fits (documented; it
        # still writes its front of the least-violating points, which later commands read)
        if result.code != 0 and not (result.code == 3 and argv[0] in ("search", "compare")):
            pytest.fail(f"README.md:{self.cmd.line}: `{self.cmd.text}`: {what} `moplace "
                        f"{shlex.join(argv)}` exited {result.code}:\n{result.err[-3000:]}")
        return result

    def take(self, producer: Command) -> None:
        """The files ``producer`` (an earlier README command) writes, made once per session in
        a folder of their own and copied here."""
        if producer.line not in PRODUCED:
            folder = Path(self.factory.mktemp(f"made-by-line-{producer.line}"))
            maker = Case(producer, folder, None, self.factory)
            for earlier in producers(producer):
                maker.take(earlier)
            cwd = os.getcwd()
            os.chdir(folder)
            try:
                maker.must(shrink(fill(producer)), f"its input comes from README.md:"
                           f"{producer.line}:")
            finally:
                os.chdir(cwd)
            PRODUCED[producer.line] = folder
        for name in _outputs(producer):
            if not (PRODUCED[producer.line] / name).exists():  # a PyTorch profile: no cluster
                continue
            (self.folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(PRODUCED[producer.line] / name, self.folder / name)

    def prepare(self, argv: list[str]) -> list[str]:
        """Make what ``argv`` reads; the words with the run id filled."""
        for producer in producers(self.cmd):
            self.take(producer)
        graph = (argv[1] if argv[0] in GRAPH_FIRST and len(argv) > 1
                 and not argv[1].startswith("-") else "pipedream:alexnet")
        cluster = _value(argv, "--cluster") or "4xV100-NVLink"
        for name in _inputs(self.cmd):
            if (self.folder / name).exists():
                continue
            if name.endswith("front.json"):
                self.must(["search", graph, "--cluster", cluster, "--searcher", "random",
                           "--budget", "20", "--no-mlflow", "--quiet",
                           "--out", str((self.folder / name).parent)], "its front.json from")
            elif name.endswith(".py"):
                (self.folder / name).write_text(MODEL_FILE)
            elif _value(argv, "--strategy") == name:
                import moplace

                g, c = moplace.load_graph(graph), moplace.load_cluster(cluster)
                moplace.save_strategy(str(self.folder / name), g,
                                      moplace.baseline("data-parallel", g, c.n_devices), c)
            else:
                pytest.fail(f"README.md:{self.cmd.line}: `{self.cmd.text}` reads {name}: no "
                            f"README command writes it and {Path(__file__).name} cannot make it")
        run_id = ""
        if argv[0] in READ_STORE:
            assert self.store is not None
            shutil.copy(self.store / "mlflow.db", self.folder / "mlflow.db")
            run_id = (self.store / "run_id").read_text()
        return [w.replace("{run_id}", run_id) for w in argv]


# --- the tests ------------------------------------------------------------------------------


def test_the_readme_shows_commands():
    subs = {c.sub for c in COMMANDS}
    assert len(COMMANDS) >= 25, [c.text for c in COMMANDS]
    assert {"evaluate", "search", "compare", "sweep", "runs", "show", "plot", "ui", "profile",
            "apply", "fidelity"} <= subs
    assert any("nsga2-settings.toml" in c.text for c in COMMANDS)


def test_the_parser_of_commands_finds_them_all():
    text = ("Intro `moplace graphs` here.\n\n    moplace clusters   # presets\n    moplace ui "
            "[--port 5000]\n\n```python\nmoplace.search(x)\n```\n\n```\nmoplace zoo\n```\n"
            "\n    python3 -m pip install -e . && moplace evaluate G --cluster C\n")
    found = [(c.line, c.argv) for c in readme_commands(text)]
    assert found == [(1, ["graphs"]), (3, ["clusters"]), (4, ["ui", "--port", "5000"]),
                     (11, ["zoo"]), (14, ["evaluate", "G", "--cluster", "C"])]


@pytest.fixture(scope="module")
def mlflow_template(tmp_path_factory):
    """An empty MLflow store, its schema made once (copied: MLflow's migrations take seconds)."""
    from moplace.review.mlstore import connect_client

    folder = tmp_path_factory.mktemp("template")
    connect_client(f"sqlite:///{folder / 'mlflow.db'}")
    return folder / "mlflow.db"


@pytest.fixture(scope="module")
def logged_store(tmp_path_factory, mlflow_template):
    """A folder with an MLflow store holding one logged search of ResNet-50 (and its id)."""
    folder = tmp_path_factory.mktemp("store")
    shutil.copy(mlflow_template, folder / "mlflow.db")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{folder / 'mlflow.db'}")
        case = Case(Command(0, "set-up"), folder, None)
        result = case.must(["search", "pipedream:resnet50", "--cluster", "4xV100-NVLink",
                            "--searcher", "random", "--budget", "20", "--figures", "off",
                            "--quiet", "--json"], "the logged search")
    (folder / "run_id").write_text(json.loads(result.out)["mlflow_run_id"])
    return folder


def _case_id(cmd: Command) -> str:
    return f"L{cmd.line}-" + re.sub(r"[^\w.:=-]+", "_", " ".join(cmd.argv))[:60]


@pytest.mark.parametrize("cmd", [pytest.param(c, marks=[pytest.mark.slow] if is_slow(c) else [],
                                              id=_case_id(c)) for c in COMMANDS])
def test_readme_command_runs(cmd, tmp_path, monkeypatch, request, mlflow_template):
    """One README command, filled in and shrunk, exits 0 in a folder of its own (a command that
    needs a server outside, or is one, parses)."""
    argv = shrink(fill(cmd))
    if parse_only(argv):
        try:
            _parser().parse_args([w.replace("{run_id}", "abcdef") for w in argv])
        except SystemExit as exc:
            pytest.fail(f"README.md:{cmd.line}: `{cmd.text}` does not parse (exit {exc.code})")
        return
    if cmd.sub in TENSORFLOW:
        pytest.importorskip("tensorflow")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    shutil.copy(mlflow_template, tmp_path / "mlflow.db")
    store = request.getfixturevalue("logged_store") if cmd.sub in READ_STORE else None
    case = Case(cmd, tmp_path, store, request.getfixturevalue("tmp_path_factory"))
    argv = case.prepare(argv)
    sweeps_before = set((ROOT / "experiments" / "sweeps").iterdir())
    result = case.must(argv, "as run:")
    if "--json" in argv:
        json.loads(result.out)  # exactly one JSON object
    if _outputs(cmd):  # a later README command reads them: no need to run this one again
        PRODUCED.setdefault(cmd.line, tmp_path)
    assert set((ROOT / "experiments" / "sweeps").iterdir()) == sweeps_before, \
        "the command wrote into the checkout"


@pytest.mark.parametrize("cmd", COMMANDS, ids=_case_id)
def test_readme_command_parses(cmd):
    """Every README command, the slow ones too, is one the command line accepts (quick: the
    parser only); a sweep's file also passes ``--check`` (its settings are real)."""
    argv = [w.replace("{run_id}", "abcdef") for w in shrink(fill(cmd))]
    try:
        _parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"README.md:{cmd.line}: `{cmd.text}` does not parse (exit {exc.code})")
    if cmd.sub == "sweep":
        code = main([*argv, "--check"])
        assert code == 0, f"README.md:{cmd.line}: `{cmd.text} --check` exited {code}"


@pytest.mark.slow
def test_moplace_ui_starts_and_stops(tmp_path, logged_store):
    """`moplace ui [--port 5000]` (on a free port): it prints its address, the address answers,
    and Ctrl-C stops it and MLflow's server with it."""
    import urllib.request

    shutil.copy(logged_store / "mlflow.db", tmp_path / "mlflow.db")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    # Ctrl-C as from a terminal: the child gets SIGINT's default disposition, whatever this
    # test process has (a pytest-xdist worker can hold SIGINT ignored, which a child inherits;
    # the command then ran on after the test, and the test timed out)
    proc = subprocess.Popen([sys.executable, "-m", "moplace", "ui", "--port", str(port)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = proc.stdout.readline()  # printed once the server answers
        assert line.startswith("MLflow UI: http://127.0.0.1:"), (line, proc.stderr.read()
                                                                  if proc.poll() else "")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
            assert r.status == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    deadline = time.time() + 20
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                break
        time.sleep(0.5)
    else:
        pytest.fail(f"MLflow's server still answers on port {port} after Ctrl-C")
