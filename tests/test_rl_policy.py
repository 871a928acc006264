"""The Hierarchical planner's policy (searchers.rl.policy): grouper + LSTM placer in Keras 3."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from moplace.core.baselines import topological_priority  # noqa: E402
from moplace.core.strategy import Strategy  # noqa: E402
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
    op_devices, groups, devices, logp = policy.sample(tensors, 5, seed=3)
    assert op_devices.shape == (5, 24) and groups.shape == (5, 24) and devices.shape == (5, 6)
    assert groups.min() >= 0 and groups.max() < 6 and devices.min() >= 0 and devices.max() < 3
    # each op goes where its group goes
    np.testing.assert_array_equal(op_devices, np.take_along_axis(devices, groups, axis=1))
    assert np.all(logp < 0) and np.all(np.isfinite(logp))
    again = policy.sample(tensors, 5, seed=3)
    for a, b in zip((op_devices, groups, devices, logp), again):
        np.testing.assert_array_equal(a, b)
    other = policy.sample(tensors, 5, seed=4)
    assert not np.array_equal(other[1], groups)
    # the log probability of the sampled actions, recomputed by teacher forcing, is the same
    recomputed, entropy = policy.log_prob(tensors, groups, devices)
    np.testing.assert_allclose(recomputed.numpy(), logp, rtol=1e-4)
    assert 0 < float(entropy) <= np.log(6)


def test_logits_are_tempered_and_clipped(tensors):
    """C * tanh(u / T) keeps every device's probability at least e^-C / (e^-C + (D-1) e^C),
    however large the raw logits (a tiny T saturates the tanh)."""
    policy = HierarchicalPolicy(4, 3, hidden=8, lstm=8, temperature=1e-3, clip=1.0)
    _, groups, devices, _ = policy.sample(tensors, 4, seed=0)
    enc = policy._encode(*policy._group_inputs(tensors, groups))
    bound = np.log(np.exp(-1.0) / (np.exp(-1.0) + 2 * np.exp(1.0)))
    for d in range(3):  # every device at every step, chosen by the policy or not
        forced = tf.constant(np.full_like(devices, d))
        _, logp, _ = policy._place(enc, forced, tf.constant(0.0), tf.constant([0, 0], tf.int64))
        assert np.all(logp.numpy() >= bound - 1e-5)
    # the same saturated logits clipped at 20 instead: some device gets far less
    loose = HierarchicalPolicy(4, 3, hidden=8, lstm=8, temperature=1e-3, clip=20.0)
    enc = loose._encode(*loose._group_inputs(tensors, groups))
    lowest = min(float(tf.reduce_min(loose._place(
        enc, tf.constant(np.full_like(devices, d)), tf.constant(0.0),
        tf.constant([0, 0], tf.int64))[1])) for d in range(3))
    assert lowest < bound - 1.0


def test_gradients_reach_every_weight(tensors):
    policy = HierarchicalPolicy(4, 3, hidden=8, lstm=8)
    _, groups, devices, _ = policy.sample(tensors, 3, seed=1)
    with tf.GradientTape() as tape:
        logp, entropy = policy.log_prob(tensors, groups, devices)
        loss = -tf.reduce_mean(logp) - 0.01 * entropy
    grads = tape.gradient(loss, policy.trainable_variables)
    assert grads and all(g is not None and np.any(tf.convert_to_tensor(g).numpy() != 0)
                          for g in grads)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        HierarchicalPolicy(0, 2)


def test_policy_gradient_learns_from_the_simulator(slow_links, tensors):
    """REINFORCE (reward -sqrt(runtime), moving-average baseline with decay 0.9, Adam, gradient
    clip 1.0): the mean reward of the last batch beats the first batch's."""
    prio = topological_priority(slow_links.graph)
    policy = HierarchicalPolicy(6, 3, hidden=32, lstm=32)
    optimizer = keras.optimizers.Adam(0.05)
    baseline, means = None, []
    for step in range(10):
        op_devices, groups, devices, _ = policy.sample(tensors, 8, seed=step)
        reward = np.array([-np.sqrt(slow_links.evaluate(Strategy(row, prio)).values[0])
                           for row in op_devices])
        means.append(reward.mean())
        baseline = reward.mean() if baseline is None else 0.9 * baseline + 0.1 * reward.mean()
        with tf.GradientTape() as tape:
            logp, _ = policy.log_prob(tensors, groups, devices)
            loss = -tf.reduce_mean(tf.constant(reward - baseline, tf.float32) * logp)
        grads, _ = tf.clip_by_global_norm(tape.gradient(loss, policy.trainable_variables), 1.0)
        optimizer.apply_gradients(zip(grads, policy.trainable_variables))
    assert means[-1] > means[0], means
