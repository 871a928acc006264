"""Searchers as entry-point plugins: a fake third-party package registers one, and it is listed,
described, made by name, run from the command line and held to the whole contract suite.

Nothing is installed: the test writes a distribution's metadata (``*.dist-info`` with an
``entry_points.txt``) and its module into a temporary directory and puts that directory on
``sys.path``, which is all ``importlib.metadata`` looks at.
"""

import json
import subprocess
import sys
import textwrap

import pytest

from moplace.errors import MoplaceError
from moplace.optimize import plugins
from moplace.optimize.plugins import REQUIRED, SEARCHERS, make_searcher, setting_docs

from searcher_contract import SearcherContract

PLUGIN = textwrap.dedent('''
    """A third party's searcher: a greedy walk over one group's device at a time."""

    from moplace import Searcher


    class GreedyWalk(Searcher):
        """Greedy walk: moves one group to another device, keeps the move if it is faster.

        Settings:
            batch_size: strategies proposed per ask.
            step: groups moved per proposal; more moves explore
                further from the current point.
        """

        def __init__(self, batch_size: int = 4, step: int = 1):
            self.batch_size, self.step = int(batch_size), int(step)

        def _setup(self):
            self.x, self.best = None, float("inf")

        def ask(self):
            space = self.problem.genome
            if self.x is None:
                return [space.decode(x) for x in space.sample(self.batch_size, self.rng)]
            out = []
            for _ in range(self.batch_size):
                x = self.x.copy()
                for g in self.rng.integers(max(space.n_groups, 1), size=self.step):
                    if space.n_groups:
                        x[g] = self.rng.integers(space.n_devices)
                out.append(space.decode(x))
            return out

        def tell(self, strategies, evaluations):
            for s, ev in zip(strategies, evaluations):
                cost = ev.values[0] + ev.violation
                if cost < self.best:
                    self.best, self.x = cost, self.problem.genome.encode(s)

        def settings(self):
            return {"batch_size": self.batch_size, "step": self.step}
''')


def write_distribution(root, name="greedy-placer", version="1.2.0", entry="greedy-walk",
                       target="greedy_placer:GreedyWalk", module=PLUGIN):
    """A distribution ``name`` in ``root``: its metadata and, if given, its module."""
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[moplace.searchers]\n{entry} = {target}\n")
    if module is not None:
        (root / f"{target.split(':')[0]}.py").write_text(module)
    return root


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """The fake package on sys.path, and the registry reading entry points anew."""
    write_distribution(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    SEARCHERS.reload()
    yield tmp_path
    monkeypatch.undo()
    sys.modules.pop("greedy_placer", None)
    SEARCHERS.reload()


@pytest.fixture
def name(plugin_dir):
    return "greedy-walk"


class TestPluginContract(SearcherContract):
    """The third party's searcher keeps the same contract as the built-in ones."""


def test_plugin_is_listed_after_the_built_in_searchers(plugin_dir):
    names = SEARCHERS.names()
    assert names[-1] == "greedy-walk" and "nsga2" in names[:-1]


def test_plugin_is_described(plugin_dir):
    info = SEARCHERS.info("greedy-walk")
    assert info.origin == "greedy-placer 1.2.0"
    assert info.target == "greedy_placer:GreedyWalk"
    assert info.summary == "Greedy walk: moves one group to another device, keeps the move if it is faster."
    assert [(s.name, s.type, s.default) for s in info.settings] == [("batch_size", "int", 4),
                                                                     ("step", "int", 1)]
    assert info.settings[1].doc == "groups moved per proposal; more moves explore further from the current point."


def test_built_in_searchers_come_from_moplace():
    info = SEARCHERS.info("nsga2")
    assert info.origin.startswith("moplace ") and info.target == "searchers.nsga2:Nsga2Searcher"


def test_plugin_settings_are_checked(plugin_dir):
    assert make_searcher("greedy-walk", step=3).step == 3
    with pytest.raises(MoplaceError, match="has no setting 'steps' \\(did you mean 'step'\\?\\); its settings: batch_size, step"):
        make_searcher("greedy-walk", steps=3)


def test_plugin_runs_from_the_command_line(plugin_dir, tmp_path):
    env_path = f"{plugin_dir}"
    cmd = [sys.executable, "-m", "moplace", "search", "pipedream:alexnet", "--cluster",
           "4xV100-NVLink", "--searcher", "greedy-walk", "--set", "step=2", "--budget", "40",
           "--json", "--no-mlflow", "--out", str(tmp_path / "out")]
    import os
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([env_path, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["searcher"] == "greedy-walk" and out["settings"] == {"batch_size": 4, "step": 2}
    assert out["evaluations"] == 40 and out["front"]
    listing = subprocess.run([sys.executable, "-m", "moplace", "searchers", "--json"],
                             capture_output=True, text=True, env=env, timeout=120)
    entry = {s["name"]: s for s in json.loads(listing.stdout)["searchers"]}["greedy-walk"]
    assert entry["origin"] == "greedy-placer 1.2.0"
    assert entry["settings"][0] == {"name": "batch_size", "type": "int", "required": False,
                                    "default": 4, "meaning": "strategies proposed per ask.",
                                    "allowed": ""}


def test_two_packages_claiming_one_name_are_refused(tmp_path, monkeypatch):
    write_distribution(tmp_path, name="rival-placer", entry="nsga2", target="rival:Nsga2")
    monkeypatch.syspath_prepend(str(tmp_path))
    SEARCHERS.reload()
    try:
        with pytest.raises(MoplaceError, match=r"searcher 'nsga2' is registered twice: by "
                                               r"moplace .* and by rival-placer 1.2.0"):
            SEARCHERS.names()
    finally:
        monkeypatch.undo()
        SEARCHERS.reload()


def test_a_plugin_that_fails_to_import_is_named(tmp_path, monkeypatch):
    write_distribution(tmp_path, name="broken-placer", entry="broken",
                       target="broken_placer:Broken", module="import no_such_module_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    SEARCHERS.reload()
    try:
        with pytest.raises(MoplaceError, match=r"searcher 'broken' \(broken_placer:Broken, from "
                                               r"broken-placer 1.2.0\) cannot be loaded: "
                                               r"ModuleNotFoundError"):
            make_searcher("broken")
        assert "nsga2" in SEARCHERS.names()  # the others still work
        make_searcher("random")
    finally:
        monkeypatch.undo()
        sys.modules.pop("broken_placer", None)
        SEARCHERS.reload()


def test_settings_section_parsing():
    doc = textwrap.dedent("""\
        Summary line.

        Settings:
            alpha: the first
                setting, continued.
            beta (int): the second.

        Notes:
            gamma: not a setting.
        """)
    assert setting_docs(doc) == {"alpha": "the first setting, continued.", "beta": "the second."}
    assert setting_docs("no section here") == {}


def test_a_setting_without_a_default_is_required():
    class Needy(plugins.SearcherRegistry):  # any class with an __init__ will do
        def __init__(self, group, depth: int = 2):
            pass

    settings = plugins.settings_of(Needy)
    assert settings[0].name == "group" and settings[0].default is REQUIRED
    assert settings[1].type == "int" and settings[1].default == 2
