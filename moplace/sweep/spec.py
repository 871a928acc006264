"""The sweep file: what varies, the sampler, what a trial returns, how many trials.

::

    [sweep]
    name = "resnet50-devices-memory"  # the Optuna study (default: the file's name)
    trials = 9                        # default: the grid's size with sampler "grid"
    sampler = "grid"                  # grid, random, tpe, or an optuna.samplers class name
    sampler_seed = 0
    returns = ["best_runtime_within_memory"]   # one, or several (multi-objective)
    heartbeat_seconds = 5             # a worker silent for 4 heartbeats is taken as dead
    retries = 3                       # times a dead worker's trial is run again
    storage = "postgresql://..."      # default: STEM.optuna.db (SQLite) in the working directory

    [fixed]                           # what every trial uses
    graph = "pipedream:resnet50"
    searcher = "nsga2"
    budget = 1000

    [space]                           # what varies: a list of choices, or a range
    devices = [2, 4, 8]
    memory_limit_gib = [8, 16, 32]
    "nsga2.pop_size" = { low = 20, high = 100, step = 20 }
    "mcmc.temperature" = { low = 1e-4, high = 1e-1, log = true }

A parameter is in `PARAMETERS` or is ``SEARCHER.SETTING`` (a setting `moplace searchers`
lists; used only by trials of that searcher). Each parameter is in ``[fixed]`` or in
``[space]``, not both. Paths of graphs and clusters are relative to the sweep file; the
study's default storage is in the working directory (`moplace.sweep.study`). Errors name the
file and the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FormatError, MoplaceError, parse_toml, shown

#: parameter -> (type, meaning); see also `moplace.sweep.trial.build`
PARAMETERS = {
    "graph": (str, "graph file or bundled name; zoo:MODEL profiles a zoo model (TensorFlow)"),
    "batch": (int, "batch size of a zoo:MODEL graph"),
    "cluster": (str, "preset name or cluster TOML file"),
    "devices": (int, "devices of a generated cluster (all pairs linked)"),
    "device_kind": (str, "device kind of a generated cluster (V100, A100, ...; default V100)"),
    "device_memory_gib": (float, "memory per device of a generated cluster (default 16)"),
    "link_bandwidth_gbps": (float, "GB/s of each link of a generated cluster (default 24)"),
    "link_latency_us": (float, "µs of each link of a generated cluster (default 2)"),
    "memory_limit_gib": (float, "the memory limit best_runtime_within_memory reads the front at"),
    "searcher": (str, "searcher name (see moplace searchers)"),
    "budget": (int, "evaluations per search"),
    "seed": (int, "the search's seed"),
}
GENERATED = ("devices", "device_kind", "device_memory_gib", "link_bandwidth_gbps", "link_latency_us")
#: what a trial can return -> optuna direction
RETURNS = {"hypervolume": "maximize", "best_runtime": "minimize",
           "best_runtime_within_memory": "minimize", "search_seconds": "minimize"}
SAMPLERS = {"grid": "GridSampler", "random": "RandomSampler", "tpe": "TPESampler"}
_SWEEP_KEYS = {"name", "trials", "sampler", "sampler_seed", "returns", "heartbeat_seconds",
               "retries", "storage"}
MAX_TRIALS = 100_000


@dataclass(frozen=True)
class Dist:
    """A parameter's values: ``choices``, or a range ``low``..``high`` (``step``, ``log``)."""

    name: str
    kind: type
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False

    def suggest(self, trial):
        if self.choices:
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.kind is int:
            return trial.suggest_int(self.name, int(self.low), int(self.high),
                                     step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, step=self.step, log=self.log)

    def grid(self) -> list:
        """The values a grid sampler walks through."""
        if self.choices:
            return list(self.choices)
        if self.step is None:
            raise MoplaceError(f"parameter {self.name}: a grid needs choices or a range with a step")
        n = int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1
        return [self.kind(self.low + k * self.step) for k in range(n)]


@dataclass
class SweepSpec:
    path: Path
    name: str
    trials: int
    sampler: str
    sampler_seed: int
    returns: tuple[str, ...]
    fixed: dict
    space: dict[str, Dist]
    heartbeat_seconds: int = 5
    retries: int = 3
    storage: str | None = None
    directions: tuple[str, ...] = field(init=False)

    def __post_init__(self):
        self.directions = tuple(RETURNS[r] for r in self.returns)

    @property
    def folder(self) -> Path:
        return self.path.parent

    def suggest(self, trial) -> dict:
        """The trial's parameters: the fixed ones and those drawn (define-by-run: a searcher's
        settings are drawn only for trials of that searcher)."""
        params = {k: v for k, v in self.fixed.items()}
        if "searcher" in self.space:
            params["searcher"] = self.space["searcher"].suggest(trial)
        for name, dist in self.space.items():
            if name == "searcher":
                continue
            owner = name.partition(".")[0] if "." in name else None
            if owner is not None and owner != params.get("searcher"):
                continue
            params[name] = dist.suggest(trial)
        return params

    def grid(self) -> dict[str, list]:
        return {name: d.grid() for name, d in self.space.items()}


def load_spec(path) -> SweepSpec:
    """Read and check a sweep file; every error names the file and the key."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise MoplaceError(f"cannot read sweep file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise FormatError(path, "not UTF-8 text") from None
    data = parse_toml(text, path)  # malformed, nested too deeply, an integer too long
    err = lambda key, msg: FormatError(path, f"{key}: {msg}")  # noqa: E731
    unknown = sorted(set(data) - {"sweep", "fixed", "space"})
    if unknown:
        raise err(unknown[0], "unknown table; a sweep file has [sweep], [fixed] and [space]")
    sweep, fixed, space = (data.get(k, {}) for k in ("sweep", "fixed", "space"))
    for key, table in (("[sweep]", sweep), ("[fixed]", fixed), ("[space]", space)):
        if not isinstance(table, dict):
            raise err(key, "must be a table")
    for key in sweep:
        if key not in _SWEEP_KEYS:
            raise err(f"[sweep] {key}", f"unknown key; known: {', '.join(sorted(_SWEEP_KEYS))}")
    if not space:
        raise err("[space]", "nothing varies: give at least one parameter")
    both = sorted(set(fixed) & set(space))
    if both:
        raise err(f"[space] {both[0]}", "is also in [fixed]: give it in one of them")
    names = set(fixed) | set(space)
    searchers = _searchers(fixed, space, err)
    for name in names:
        _check_name(name, searchers, err, "[space]" if name in space else "[fixed]")
    if "cluster" in names and names & set(GENERATED):
        raise err(f"{sorted(names & set(GENERATED))[0]}", "a generated cluster's parameter "
                  "cannot go with cluster: give one or the other")
    if "batch" in names and not _is_zoo(fixed, space):
        raise err("batch", "only for zoo:MODEL graphs (profiled with TensorFlow)")
    fixed_values = {k: _fixed_value(k, v, searchers, err) for k, v in fixed.items()}
    dists = {k: _dist(k, v, searchers, err) for k, v in space.items()}
    returns = sweep.get("returns", ["hypervolume"])
    returns = [returns] if isinstance(returns, str) else returns
    if not isinstance(returns, list) or not returns \
            or any(not isinstance(r, str) or r not in RETURNS for r in returns):
        raise err("[sweep] returns", f"must be one or more of {', '.join(RETURNS)}, got {shown(returns)}")
    if len(set(returns)) != len(returns):
        raise err("[sweep] returns", "names a value twice")
    sampler = sweep.get("sampler", "tpe")
    if not isinstance(sampler, str) or not _sampler_known(sampler):
        raise err("[sweep] sampler", f"unknown sampler {shown(sampler)}: grid, random, tpe, or a "
                  f"class of optuna.samplers (NSGAIISampler, QMCSampler, ...)")
    spec_name = sweep.get("name", path.stem)
    if not isinstance(spec_name, str) or not spec_name.strip() or len(spec_name) > 200:
        raise err("[sweep] name", "must be a non-empty text of at most 200 characters")
    ints = {k: sweep.get(k, d) for k, d in (("sampler_seed", 0), ("heartbeat_seconds", 5),
                                             ("retries", 3))}
    for key, value in ints.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10**9:
            raise err(f"[sweep] {key}", f"must be a whole number from 0 to 10**9, got {shown(value)}")
    if ints["heartbeat_seconds"] < 1:
        raise err("[sweep] heartbeat_seconds", "must be at least 1")
    storage = sweep.get("storage")
    if storage is not None and (not isinstance(storage, str) or "://" not in storage):
        raise err("[sweep] storage", f"must be a database URL (postgresql://..., mysql://..., "
                  f"sqlite:///FILE), got {shown(storage)}")
    spec = SweepSpec(path=path, name=spec_name.strip(), trials=0, sampler=sampler,
                     sampler_seed=ints["sampler_seed"], returns=tuple(returns),
                     fixed=fixed_values, space=dists, heartbeat_seconds=ints["heartbeat_seconds"],
                     retries=ints["retries"], storage=storage)
    if SAMPLERS.get(sampler) == "GridSampler":
        try:
            size = math.prod(len(v) for v in spec.grid().values())
        except MoplaceError as exc:
            raise err("[space]", str(exc)) from None
    else:
        size = None
    trials = sweep.get("trials", size)
    if trials is None:
        raise err("[sweep] trials", "how many trials? (only a grid sweep has a default)")
    if isinstance(trials, bool) or not isinstance(trials, int) or not 1 <= trials <= MAX_TRIALS:
        raise err("[sweep] trials", f"must be a whole number from 1 to {MAX_TRIALS}, got {shown(trials)}")
    spec.trials = trials
    return spec


def _searchers(fixed, space, err) -> list[str]:
    from ..optimize.plugins import SEARCHERS

    if "searcher" in fixed:
        names, key = [fixed["searcher"]], "[fixed] searcher"
    elif "searcher" in space:
        names, key = space["searcher"], "[space] searcher"
        if not isinstance(names, list):
            raise err(key, "the searcher varies over a list of names")
    else:
        raise err("searcher", "which searcher? give searcher in [fixed] or in [space]")
    for n in names:
        if not isinstance(n, str) or n not in SEARCHERS:
            raise err(key, f"unknown searcher {shown(n)}; known: {', '.join(SEARCHERS.names())}")
    return names


def _check_name(name, searchers, err, table) -> None:
    if name in PARAMETERS:
        return
    owner, dot, setting = name.partition(".")
    if not dot:
        raise err(f"{table} {name}", f"unknown parameter; known: {', '.join(PARAMETERS)}, "
                  "or SEARCHER.SETTING")
    if owner not in searchers:
        raise err(f"{table} {name}", f"searcher {shown(owner)} is not one this sweep runs "
                  f"({', '.join(searchers)})")
    from ..optimize.plugins import SEARCHERS, settings_of

    known = [s.name for s in settings_of(SEARCHERS[owner])]
    if setting not in known:
        raise err(f"{table} {name}", f"searcher {shown(owner)} has no setting {shown(setting)}; its "
                  f"settings: {', '.join(known) or 'none'}")


def _setting(name, searchers):
    from ..optimize.plugins import SEARCHERS, settings_of

    owner, _, setting = name.partition(".")
    return owner, next(s for s in settings_of(SEARCHERS[owner]) if s.name == setting)


def _fixed_value(name, value, searchers, err):
    if name in PARAMETERS:
        return _typed(name, PARAMETERS[name][0], value, err, "[fixed]")
    from ..optimize.plugins import convert_setting

    owner, setting = _setting(name, searchers)
    try:
        return convert_setting(owner, setting, value)
    except MoplaceError as exc:
        raise err(f"[fixed] {name}", str(exc)) from None


def _typed(name, kind, value, err, table):
    key = f"{table} {name}"
    if kind is str:
        if not isinstance(value, str) or not value.strip():
            raise err(key, f"must be a text, got {shown(value)}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or (isinstance(value, int) and abs(value) > 2**64) or not math.isfinite(value):
        raise err(key, f"must be a number, got {shown(value)}")
    if kind is int and int(value) != value:
        raise err(key, f"must be a whole number, got {shown(value)}")
    if name == "seed" and not 0 <= value <= 2**63 - 1:
        raise err(key, f"must be from 0 to 2**63 - 1, got {shown(value)}")
    if name != "seed" and not 0 < value <= 1e12:
        raise err(key, f"must be above 0 and at most 1e12, got {shown(value)}")
    return kind(value)


def _dist(name, value, searchers, err) -> Dist:
    key = f"[space] {name}"
    kind = PARAMETERS[name][0] if name in PARAMETERS else None
    if kind is None:
        owner, setting = _setting(name, searchers)
        base = setting.type.split("|")[0].strip()
        kind = {"int": int, "float": float, "bool": bool, "str": str}.get(base)
    if isinstance(value, list):
        if not value:
            raise err(key, "empty list of choices")
        if name in PARAMETERS:
            value = [_typed(name, kind, v, err, "[space]") for v in value]
        else:
            from ..optimize.plugins import convert_setting

            try:
                value = [convert_setting(owner, setting, v) for v in value]
            except MoplaceError as exc:
                raise err(key, str(exc)) from None
        if len(set(map(repr, value))) != len(value):
            raise err(key, "a choice is listed twice")
        if not all(v is None or isinstance(v, (bool, int, float, str)) for v in value):
            raise err(key, "choices must be numbers, texts, booleans")
        return Dist(name, kind or type(value[0]), choices=tuple(value))
    if not isinstance(value, dict):
        raise err(key, "must be a list of choices or a range {low = ..., high = ...}")
    extra = sorted(set(value) - {"low", "high", "step", "log"})
    if extra:
        raise err(key, f"unknown range key {shown(extra[0])} (low, high, step, log)")
    if kind not in (int, float):
        raise err(key, "a range needs a numeric parameter; give a list of choices")
    try:
        low, high = (_typed(name, float, value[k], err, "[space]") for k in ("low", "high"))
    except KeyError as exc:
        raise err(key, f"a range needs {exc.args[0]}") from None
    step = value.get("step")
    log = value.get("log", False)
    if not isinstance(log, bool):
        raise err(key, f"log must be true or false, got {shown(log)}")
    if low > high:
        raise err(key, f"empty range: low {low:g} is above high {high:g}")
    if step is not None:
        step = _typed(name, float, step, err, "[space]")
        if log:
            raise err(key, "a range takes step or log, not both")
    if kind is int and (low != int(low) or high != int(high) or (step and step != int(step))):
        raise err(key, "an integer parameter's range needs whole numbers")
    if name not in PARAMETERS:  # a searcher setting: both ends within its declared bounds
        from ..optimize.plugins import convert_setting

        try:
            for end in (low, high):
                convert_setting(owner, setting, kind(end))
        except MoplaceError as exc:
            raise err(key, str(exc)) from None
    return Dist(name, kind, low=low, high=high, step=step, log=log)


def _is_zoo(fixed, space) -> bool:
    graphs = [fixed["graph"]] if "graph" in fixed else space.get("graph", [])
    return bool(graphs) and all(isinstance(g, str) and g.startswith("zoo:") for g in graphs)


def _sampler_known(name: str) -> bool:
    if name in SAMPLERS:
        return True
    import optuna.samplers

    cls = getattr(optuna.samplers, name, None)
    return isinstance(cls, type) and issubclass(cls, optuna.samplers.BaseSampler)


def relative(name: str, folder: Path) -> str:
    """A file named in the sweep file, relative to its folder; else a bundled name or a preset."""
    path = folder / name
    return str(path) if path.exists() else name


def check_sources(spec: SweepSpec) -> None:
    """Load every graph and cluster the sweep names (not zoo models: profiling is the trial's
    work), so that a typo fails before any trial; errors name the file and the key."""
    from ..core.presets import load_cluster
    from ..io import load_graph

    for key, load in (("graph", load_graph), ("cluster", load_cluster)):
        table = "[fixed]" if key in spec.fixed else "[space]"
        values = [spec.fixed[key]] if key in spec.fixed else \
            list(spec.space[key].choices) if key in spec.space else []
        for value in values:
            if key == "graph" and value.startswith("zoo:"):
                continue
            try:
                load(relative(value, spec.folder))
            except MoplaceError as exc:
                raise FormatError(spec.path, f"{table} {key}: {exc}") from None
