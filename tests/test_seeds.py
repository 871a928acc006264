"""The seeds' one home: sources registered under the entry-point group moplace.seeds, reached
by every seeded searcher without importing the list-scheduling plugin."""

from pathlib import Path

from moplace.core.baselines import baseline
from moplace.optimize import seeds
from moplace.optimize.seeds import Seed, seed_sources, seed_strategies


def test_moplace_registers_the_list_schedulers_and_the_partitioner_as_seed_sources():
    assert [name for name, _ in seed_sources()] == ["dpos", "heft", "m-etf", "pipedream"]


def test_the_seeds_are_the_sources_then_the_baselines(small):
    labels = [s.label for s in seed_strategies(small)]
    schedulers = [label.split(":")[0] for label in labels if ":" in label]
    assert schedulers and set(schedulers) <= {"dpos", "heft", "m-etf", "pipedream"}
    assert labels.index("single") > max(i for i, label in enumerate(labels) if ":" in label)


def test_another_packages_source_reaches_every_seeded_searcher(small, monkeypatch):
    from searchers.seeding import SeedPhase

    mine = baseline("round-robin", small.graph, small.n_devices).derive(
        priority=-baseline("round-robin", small.graph, small.n_devices).priority)
    monkeypatch.setattr(seeds, "_SOURCES", seed_sources() + [
        ("reversed", lambda problem: [Seed("reversed round-robin", mine)])])
    phase = SeedPhase(small)
    assert "reversed round-robin" in [s.label for s in phase.seeds]
    assert any(s is mine for s in phase.ask())


def test_no_searcher_imports_the_list_schedulers_for_its_seeds():
    """Seeds are reached through moplace.optimize.seeds; only the entry points name
    searchers.listsched.seeds."""
    root = Path(__file__).resolve().parent.parent
    offenders = [str(p.relative_to(root)) for pkg in ("moplace", "searchers")
                 for p in (root / pkg).rglob("*.py")
                 if "listsched" not in p.parts and "listsched.seeds" in p.read_text()
                 and p.name != "seeds.py"]
    assert offenders == []
