"""The RL searchers (searchers.rl.hierarchical, searchers.rl.trinity) end to end: learning,
warm start, the full genome, policy files, checkpoints, MLflow curves and edge cases. The
searcher contract suite runs on them too (test_searcher_contract, behind the slow marker).

Every search builds and compiles a TensorFlow policy (about 4 s), so the default run keeps
learning and the missing-TensorFlow message, and the rest runs behind the slow marker (which
.ci/run runs too)."""

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from moplace.core.graph import Op, OpGraph  # noqa: E402
from moplace.core.synthetic import layered_dag  # noqa: E402
from moplace.errors import MoplaceError  # noqa: E402
from moplace.optimize.driver import Budget, Callback, search  # noqa: E402
from moplace.optimize.plugins import make_searcher  # noqa: E402
from moplace.optimize.problem import Problem  # noqa: E402

from conftest import make_cluster  # noqa: E402

SMALL = dict(hidden=16, lstm=16, imitation_steps=20)


@pytest.fixture(scope="module")
def slow_links():
    """24 ops on 3 devices whose links are so slow that one device is best."""
    return Problem(layered_dag(24, width=3, seed=1), make_cluster(3, bandwidth=1e6, latency=1e-3))


@pytest.fixture(scope="module")
def problem():
    return Problem(layered_dag(40, width=4, seed=2), make_cluster(3, bandwidth=5e9, latency=2e-6))


class Rewards(Callback):
    """The searcher's mean reward after every update."""

    def __init__(self, searcher):
        self.searcher, self.means = searcher, []

    def on_batch(self, result):
        progress = self.searcher.progress()
        if "reward_mean" in progress:
            self.means.append(progress["reward_mean"])


@pytest.mark.parametrize("name, settings", [
    pytest.param("hierarchical", dict(samples=8, learning_rate=0.01),
                 marks=pytest.mark.slow),  # a learning curve: a quality check
    pytest.param("trinity", dict(samples=8, genome="placement", learning_rate=0.01),
                 marks=pytest.mark.slow),
])
def test_learning_is_real(slow_links, name, settings):
    """Cold, no heuristics: the mean reward of the last updates beats the first batch's.
    Runtime is the only objective, so Trinity's weights are always (1) and its rewards of
    different batches compare."""
    problem = Problem(slow_links.graph, slow_links.cluster, objectives=("runtime",))
    searcher = make_searcher(name, warm_start=False, seed_heuristics=False, noise_updates=0,
                             hidden=16, lstm=16, polish=0, **settings)
    rewards = Rewards(searcher)
    search(problem, searcher, budget=96, seed=0, callbacks=[rewards])
    assert len(rewards.means) == 12
    assert np.mean(rewards.means[-3:]) > rewards.means[0], rewards.means


@pytest.mark.slow
def test_heuristics_are_seeded_and_warm_start_imitates_dpos(problem):
    """The first batch is every seed (so no front is worse than theirs), and after imitation
    the policy draws DPOS's placement far more often than a cold policy does."""
    from searchers.listsched import heuristic_strategies
    from moplace.optimize.seeds import seed_strategies

    seeds = [seed.strategy for seed in seed_strategies(problem)]
    dpos = heuristic_strategies(problem)[0].placement

    def agreement(warm):
        searcher = make_searcher("hierarchical", warm_start=warm, samples=8, hidden=16,
                                 lstm=16, imitation_steps=300, imitation_confidence=0.95)
        searcher.setup(problem, np.random.default_rng(0))
        first = searcher.ask()
        assert first == seeds
        drawn = searcher.ask()
        return np.mean([np.mean(s.placement == dpos) for s in drawn]), searcher.progress()

    cold, _ = agreement(False)
    warm, progress = agreement(True)
    assert progress["imitation_steps"] >= 1
    assert progress["imitation_confidence"] >= 0.95
    assert warm > 0.8 and cold < 0.5, (warm, cold)


@pytest.mark.slow
def test_full_genome_splits_and_orders(problem):
    """genome="full": the policy's draws split some ops and order ops by level."""
    searcher = make_searcher("trinity", samples=8, warm_start=False, seed_heuristics=False,
                             polish=0, **SMALL)
    result = search(problem, searcher, budget=16, seed=1)
    drawn = [p.strategy for p in result.front + result.infeasible]
    assert any(s.splits for s in drawn)
    placement_only = make_searcher("trinity", samples=8, warm_start=False, genome="placement",
                                   seed_heuristics=False, polish=0, **SMALL)
    result = search(problem, placement_only, budget=16, seed=1)
    assert not any(p.strategy.splits for p in result.front + result.infeasible)


@pytest.mark.slow
def test_polish_batches_are_archived_but_teach_the_policy_nothing(problem):
    """With polish (the default), batches of front neighbours come between policy batches,
    at most half the evaluations (one batch over at most); the policy is updated once per
    policy batch only, and the search notes say what polish did."""
    searcher = make_searcher("hierarchical", samples=8, **SMALL)
    policy_batches = []
    ask = searcher.ask

    def counting_ask():
        batch = ask()
        if searcher._last is not None:
            policy_batches.append(len(batch))
        return batch

    searcher.ask = counting_ask
    result = search(problem, searcher, budget=200, seed=3)
    polish = searcher._front_polish
    assert polish.asked > 0 and polish.polished > 0
    assert polish.asked <= 0.5 * result.n_evaluations + 16
    assert searcher.updates == len(policy_batches) > 0
    assert searcher.progress()["polish_evaluations"] == polish.asked
    assert any(n.startswith("polish: ") for n in searcher.notes()), searcher.notes()
    with pytest.raises(MoplaceError, match="polish"):
        make_searcher("trinity", polish=1.0)


@pytest.mark.slow
def test_same_seed_same_search(problem):
    runs = [search(problem, make_searcher("trinity", samples=8, **SMALL), budget=40, seed=4)
            for _ in range(2)]
    assert [p.strategy for p in runs[0].front] == [p.strategy for p in runs[1].front]
    assert runs[0].hypervolume_history == runs[1].hypervolume_history


@pytest.mark.slow
def test_policy_files_transfer_and_refuse_misfits(problem, tmp_path):
    """A policy saved after one search starts another on another graph (zero-shot, then
    fine-tuned); a file for another cluster, or not a policy, is refused naming the file."""
    saved = tmp_path / "policy.npz"
    search(problem, make_searcher("hierarchical", samples=4, save_policy=str(saved), **SMALL),
           budget=20, seed=0)
    assert saved.exists()
    other = Problem(layered_dag(30, width=5, seed=9), problem.cluster)
    searcher = make_searcher("hierarchical", samples=4, policy=str(saved), hidden=8, lstm=8)
    result = search(other, searcher, budget=20, seed=0)
    assert result.front and searcher.loaded_from["graph"] == problem.graph.name
    assert searcher._model.decoder.units == 16  # the file's sizes, not the settings'
    with pytest.raises(MoplaceError, match=f"policy file {saved} does not fit this search: "
                                           "n_devices is 3 in the file, 2 here"):
        search(Problem(other.graph, make_cluster(2)),
               make_searcher("hierarchical", policy=str(saved)), budget=8)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(MoplaceError, match="junk.npz is not a moplace policy file"):
        search(other, make_searcher("hierarchical", policy=str(junk)), budget=8)
    with pytest.raises(MoplaceError, match="folder .*nowhere does not exist"):
        search(other, make_searcher("hierarchical", save_policy=str(tmp_path / "nowhere/p.npz")),
               budget=8)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hierarchical", "trinity"])
def test_checkpoint_resume_equals_uninterrupted(problem, tmp_path, name):
    """Stopped after 4 updates and continued to 8 from the checkpoint (weights and Adam's
    state included) is the uninterrupted search of 8 updates."""
    from moplace.optimize.seeds import seed_strategies

    first = len(seed_strategies(problem))  # the seed batch, then 4 per update
    settings = dict(samples=4, **SMALL)
    whole = search(problem, make_searcher(name, **settings), budget=first + 32, seed=2)
    path = tmp_path / "run.ckpt"
    search(problem, make_searcher(name, **settings), budget=first + 16, seed=2, checkpoint=path)
    resumed = search(problem, make_searcher(name, **settings), budget=first + 32, seed=2,
                     checkpoint=path)
    assert resumed.resumed_from == first + 16
    assert [p.strategy for p in resumed.front] == [p.strategy for p in whole.front]
    assert resumed.hypervolume_history == whole.hypervolume_history


@pytest.mark.slow
def test_mlflow_gets_per_update_curves(problem, tmp_path):
    from moplace.review.tracking import MLflowCallback

    tracker = MLflowCallback(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="rl")
    from moplace.optimize.seeds import seed_strategies

    searcher = make_searcher("trinity", samples=8, weights_per_batch=2, warm_start=False,
                             polish=0, **SMALL)
    budget = len(seed_strategies(problem)) + 3 * 8 + 1  # the seeds, 3 batches, then 1 sample
    search(problem, searcher, budget=budget, seed=0, callbacks=[tracker])
    client = tracker.client
    updates = client.get_metric_history(tracker.run_id, "searcher.updates")
    assert updates[-1].value >= 3
    for key in ("reward_mean", "reward_best", "loss", "entropy", "weight0_runtime"):
        history = client.get_metric_history(tracker.run_id, f"searcher.{key}")
        assert len(history) == updates[-1].value, key  # one point per policy update
    # two weights per batch but the last, cut by the budget to one sample
    history = client.get_metric_history(tracker.run_id, "searcher.weight1_peak_memory")
    assert len(history) == updates[-1].value - 1
    weights = [client.get_metric_history(tracker.run_id, f"searcher.weight0_{o}")[0].value
               for o in problem.objectives]
    assert sum(weights) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.slow
def test_more_groups_than_ops_unknown_types_and_one_device():
    ops = [Op(f"o{i}", ["Frobnicate", "Conv2d", "Quux"][i % 3], {"V100": 1e-3},
              output_bytes=1000) for i in range(6)]
    from moplace.core.graph import Edge
    graph = OpGraph(ops, [Edge(i, i + 1, 1000) for i in range(5)])
    searcher = make_searcher("trinity", groups=50, samples=4, **SMALL)
    result = search(Problem(graph, make_cluster(2)), searcher, budget=16, seed=0)
    assert searcher._model.n_groups == 50 and result.front
    default = make_searcher("hierarchical", samples=4, **SMALL)
    search(Problem(graph, make_cluster(2)), default, budget=12, seed=0)
    assert default._model.n_groups == 6  # min(256, 20 x devices, ops)
    one = search(Problem(graph, make_cluster(1)), make_searcher("hierarchical", **SMALL),
                 budget=12, seed=0)
    assert all(not p.strategy.placement.any() for p in one.front)


def test_bad_settings_are_refused():
    for name, kw, match in [("hierarchical", dict(samples=0), "samples must be"),
                            ("hierarchical", dict(genome="both"), "genome must be"),
                            ("trinity", dict(weights_per_batch=99), "weights_per_batch must"),
                            ("trinity", dict(clip_ratio=2.0), "clip_ratio must"),
                            ("hierarchical", dict(imitation_confidence=1.0), "imitation_conf")]:
        with pytest.raises(MoplaceError, match=match):
            make_searcher(name, **kw)


def test_without_tensorflow_the_error_says_how_to_install():
    code = ("import sys; sys.modules['tensorflow'] = None; sys.modules['keras'] = None\n"
            "from moplace.core.synthetic import layered_dag\n"
            "from moplace.optimize.driver import search\n"
            "from moplace.optimize.plugins import make_searcher\n"
            "from moplace.optimize.problem import Problem\n"
            "from moplace.core.cluster import Cluster\n"
            "from moplace import load_cluster\n"
            "from moplace.errors import MoplaceError\n"
            "try:\n"
            "    search(Problem(layered_dag(10), load_cluster('4xV100-NVLink')),\n"
            "           make_searcher('hierarchical'), budget=20)\n"
            "except MoplaceError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "pip install 'moplace[tf]'" in out.stdout, out.stdout + out.stderr


@pytest.mark.slow
def test_ten_thousand_ops():
    from moplace import load_cluster

    problem = Problem(layered_dag(10000, width=16, seed=0), load_cluster("4xV100-NVLink"))
    searcher = make_searcher("trinity", samples=4, imitation_steps=5)
    result = search(problem, searcher, budget=Budget(evaluations=20), seed=0)
    assert result.n_evaluations == 20 and result.front
    assert searcher._model.n_groups == 80
