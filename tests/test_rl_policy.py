"""The Hierarchical planner's policy (searchers.rl.policy): grouper + LSTM placer in Keras 3."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from moplace.core.synthetic import layered_dag  # noqa: E402
from moplace.optimize.problem import Problem  # noqa: E402
from searchers.rl.features import problem_features  # noqa: E402
from searchers.rl.policy import HierarchicalPolicy, ProblemTensors  # noqa: E402
from searchers.rl.structure import structural_embedding  # noqa: E402

from conftest import make_cluster  # noqa: E402


@pytest.fixture(scope="module")
def slow_links():
    """24 ops on 3 devices whose links are so slow that one device is best."""
    return Problem(layered_dag(24, width=3, seed=1), make_cluster(3, bandwidth=1e6, latency=1e-3))


@pytest.fixture(scope="module")
def tensors(slow_links):
    return ProblemTensors(problem_features(slow_links),
                          structural_embedding(slow_links.graph, dim=8))


def test_samples_are_valid_repeatable_and_scored(tensors):
    policy = HierarchicalPolicy(6, 3, hidden=16, lstm=16)
    actions, logp = policy.sample(tensors, 5, seed=3)
    groups, devices = actions.groups, actions.devices
    assert groups.shape == (5, 24) and devices.shape == (5, 6)
    assert groups.min() >= 0 and groups.max() < 6 and devices.min() >= 0 and devices.max() < 3
    assert not actions.splits.any() and not actions.levels.any()  # no such heads
    assert np.all(logp < 0) and np.all(np.isfinite(logp))
    again, logp_again = policy.sample(tensors, 5, seed=3)
    np.testing.assert_array_equal(logp, logp_again)
    for a, b in zip((groups, devices), (again.groups, again.devices)):
        np.testing.assert_array_equal(a, b)
    other, _ = policy.sample(tensors, 5, seed=4)
    assert not np.array_equal(other.groups, groups)
    # the log probability of the sampled actions, recomputed by teacher forcing, is the same
    recomputed, entropy = policy.log_prob(tensors, actions)
    np.testing.assert_allclose(recomputed.numpy(), logp, rtol=1e-4)
    assert 0 < float(entropy) <= np.log(6)


def _forced(devices, d):
    """Every group on device ``d``, whole, at level 0 (as the ``given`` of `_place`)."""
    return (tf.constant(np.full_like(devices, d)), tf.zeros_like(devices), tf.zeros_like(devices))


def test_logits_are_tempered_and_clipped(tensors):
    """C * tanh(u / T) keeps every device's probability at least e^-C / (e^-C + (D-1) e^C),
    however large the raw logits (a tiny T saturates the tanh)."""
    policy = HierarchicalPolicy(4, 3, hidden=8, lstm=8, temperature=1e-3, clip=1.0)
    actions, _ = policy.sample(tensors, 4, seed=0)
    cond = np.zeros((4, 0), np.float32)
    enc = policy._encode(*policy._group_inputs(tensors, actions.groups, cond))
    bound = np.log(np.exp(-1.0) / (np.exp(-1.0) + 2 * np.exp(1.0)))
    zero = (tf.constant(0.0), tf.constant([0, 0], tf.int64))
    for d in range(3):  # every device at every step, chosen by the policy or not
        _, logp, _ = policy._place(enc, _forced(actions.devices, d), *zero)
        assert np.all(logp.numpy() >= bound - 1e-5)
    # the same saturated logits clipped at 20 instead: some device gets far less
    loose = HierarchicalPolicy(4, 3, hidden=8, lstm=8, temperature=1e-3, clip=20.0)
    enc = loose._encode(*loose._group_inputs(tensors, actions.groups, cond))
    lowest = min(float(tf.reduce_min(loose._place(enc, _forced(actions.devices, d), *zero)[1]))
                 for d in range(3))
    assert lowest < bound - 1.0


def test_split_and_level_heads_and_conditions(tensors):
    """With split and priority heads and conditioning weights: choices in range, the draw's log
    probability recomputed equal, and the conditions change what is drawn."""
    policy = HierarchicalPolicy(5, 3, n_splits=3, n_levels=4, n_conditions=3, hidden=16, lstm=16)
    w = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1 / 3, 1 / 3, 1 / 3]], np.float32)
    actions, logp = policy.sample(tensors, 4, seed=2, conditions=w)
    assert actions.splits.max() < 3 and actions.levels.max() < 4
    assert actions.splits.any() and actions.levels.any()
    recomputed, _ = policy.log_prob(tensors, actions, conditions=w)
    np.testing.assert_allclose(recomputed.numpy(), logp, rtol=1e-4)
    shifted, _ = policy.log_prob(tensors, actions, conditions=w[::-1].copy())
    assert not np.allclose(shifted.numpy(), logp, rtol=1e-4)


def test_colocated_ops_share_their_group(slow_links):
    """Units (co-location groups) are grouped as one: every op of a unit gets its group."""
    units = np.arange(24) // 2  # ops 2i and 2i+1 together
    p = ProblemTensors(problem_features(slow_links), units=units)
    policy = HierarchicalPolicy(4, 3, hidden=8, lstm=8)
    actions, logp = policy.sample(p, 3, seed=0)
    assert actions.groups.shape == (3, 12)
    recomputed, _ = policy.log_prob(p, actions)
    np.testing.assert_allclose(recomputed.numpy(), logp, rtol=1e-4)


def test_gradients_reach_every_weight(tensors):
    policy = HierarchicalPolicy(4, 3, n_splits=2, n_levels=2, n_conditions=3, hidden=8, lstm=8)
    w = np.full((3, 3), 1 / 3, np.float32)
    actions, _ = policy.sample(tensors, 3, seed=1, conditions=w)
    with tf.GradientTape() as tape:
        logp, entropy = policy.log_prob(tensors, actions, conditions=w)
        loss = -tf.reduce_mean(logp) - 0.01 * entropy
    grads = tape.gradient(loss, policy.trainable_variables)
    assert grads and all(g is not None and np.any(tf.convert_to_tensor(g).numpy() != 0)
                          for g in grads)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        HierarchicalPolicy(0, 2)
