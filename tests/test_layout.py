"""The package's shape: no import cycles, imports that follow the data's flow, small modules.

docs/architecture.md describes the layers; `LAYERS` is its checkable form.
"""

import re
import subprocess
import sys

import pytest

from importgraph import ROOT, cycles, import_graph, imports, modules

#: The flow, first to last: a module may import its own layer and the layers before it.
LAYERS = [
    ["moplace.errors", "moplace.registry", "moplace.arrays", "moplace.progress",
     "moplace.strictjson"],  # the true utilities
    ["moplace.core"],          # graph, cluster + presets, strategy, genome, baselines
    ["moplace.costs"],         # measured, fitted and roofline costs
    ["objectives"],            # plain functions of a trace, and their JSON names
    ["moplace.io", "moplace.data"],  # file formats and bundled graphs
    ["moplace.simulator"],     # task graph, compiled core, trace, delta, evaluation
    ["moplace.optimize"],      # problem, searcher contract and plugins, driver, archive
    ["searchers"],             # the built-in searchers (entry-point plugins)
    ["moplace.scale"],         # evaluators elsewhere: a Dask cluster
    ["moplace.review"],        # MLflow tracking, reports
    ["moplace.tf", "moplace.torch", "moplace.testbed"],  # the front ends, their testbeds' room
    ["moplace.sweep"],         # sweeps: an Optuna study of searches, MLflow parent run
    ["moplace"],               # the public API (moplace/__init__.py)
    ["moplace.cli", "moplace.__main__"],  # the command line, outermost
]
MAX_LINES = 400
#: the searchers' modules that import TensorFlow (the RL policies)
TENSORFLOW_SEARCHERS = {"searchers.rl.policy"}
TOP_LEVEL = {"__init__.py", "__main__.py", "errors.py", "registry.py", "arrays.py", "progress.py",
             "strictjson.py"}


def layer_of(module: str) -> int:
    best, length = None, -1
    for k, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > length:
                best, length = k, len(name)
    assert best is not None, f"{module} is in no layer of LAYERS: add it (and to the docs)"
    return best


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_no_import_cycles(graph):
    assert cycles(graph) == []


def test_cycle_finder_finds_cycles():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": {"e"}, "f": set()}
    assert sorted(cycles(g)) == [["a", "b", "c"], ["e", "e2"]]


def test_imports_follow_the_flow(graph):
    backwards = [f"{m} imports {d}" for m, deps in sorted(graph.items()) for d in sorted(deps)
                 if layer_of(d) > layer_of(m)]
    assert backwards == []


def test_every_module_is_in_a_layer(graph):
    for module in graph:
        layer_of(module)


def _private(module: str) -> str | None:
    """The package whose private module ``module`` is (None: not private)."""
    parts = module.split(".")
    for k, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:k])
    return None


def test_no_private_module_is_imported_from_outside_its_package():
    scanned = modules(ROOT, ("moplace", "objectives", "searchers", "tests", "experiments"))
    known = set(modules())
    outside = []
    for name, path in scanned.items():
        for target in imports(name, path, known):
            owner = _private(target)
            if owner is not None and not (name == owner or name.startswith(owner + ".")):
                outside.append(f"{name} imports {target}")
    assert outside == []


def test_modules_are_small():
    big = {name: n for name, path in modules().items()
           if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert big == {}, f"modules over {MAX_LINES} lines: split them along their seams"


def test_top_of_moplace_holds_only_subpackages_and_true_utilities():
    loose = {p.name for p in (ROOT / "moplace").glob("*.py")} - TOP_LEVEL
    assert loose == set(), "put new modules in the subpackage of their step (docs/architecture.md)"
    for sub in (ROOT / "moplace").iterdir():
        if sub.is_dir() and sub.name != "__pycache__":
            assert (sub / "__init__.py").is_file(), f"{sub} is not a package"


@pytest.mark.parametrize("imported", ["moplace", "moplace, objectives, searchers"])
def test_import_moplace_stays_light(imported):
    """Neither moplace nor the objectives and searchers packages load a heavy library (nor
    does moplace load the searchers): each searcher imports its own when it is made."""
    heavy = ("tensorflow", "keras", "mlflow", "optuna", "pymoo", "dask", "distributed",
             "matplotlib", "plotly", "rich", "moocore", "torch", "gensim")
    if imported == "moplace":
        heavy += ("searchers",)
    code = f"import sys, {imported}; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_python_api_is_where_the_readme_says():
    import moplace

    for name in moplace.__all__:
        assert hasattr(moplace, name), name
    assert callable(moplace.search) and callable(moplace.make_searcher)
    assert isinstance(moplace.Problem, type)


def test_every_module_imports(graph):
    """Every module can be imported (the TensorFlow front end only where TensorFlow is)."""
    import importlib
    import importlib.util

    has_tf = importlib.util.find_spec("tensorflow") is not None
    for name in sorted(graph):
        if (name.startswith("moplace.tf") or name in TENSORFLOW_SEARCHERS) and not has_tf:
            continue
        if name.endswith("__main__"):
            continue
        importlib.import_module(name)



def test_the_architecture_names_every_module():
    """docs/architecture.md's module index lists each module of moplace, objectives and
    searchers that exists, and no other (python3 docs/module_index.py writes it anew)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    index = text[text.index("## Module index"):]
    listed = set(re.findall(r"^\| `([\w/]+\.py)` \|", index, flags=re.MULTILINE))
    present = {p.relative_to(ROOT).as_posix() for pkg in ("moplace", "objectives", "searchers")
               for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts}
    assert sorted(present - listed) == [], "modules the index does not name"
    assert sorted(listed - present) == [], "modules the index names that do not exist"
