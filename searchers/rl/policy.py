"""The Hierarchical planner's policy in Keras 3 (TensorFlow): a feed-forward grouper that puts
every op in one of ``n_groups`` groups, and a sequence-to-sequence LSTM placer with attention
that puts every group on a device (``../shared/PAPERS.md`` 2; Trinity's agent, 4, is the same
shape).

- **Grouper**: per op, its type embedding, its numbers (`features.NUMERIC`), the mean type
  embedding of its BFS neighbours and its structural embedding -> Dense(hidden, relu) ->
  softmax over groups.
- **Group embedding** (from the sampled grouping, not differentiated): `features.group_features`
  (numpy) with its type shares turned into the mean type embedding, that is mean type
  embedding, mean numbers, log summed output bytes, adjacency row to the other groups.
- **Placer**: a bidirectional LSTM encodes the groups in order; an LSTM decoder places one
  group per step, attending over the encoder's outputs (content-based, Bahdanau), fed the
  trainable embedding of the device it chose at the step before. Device logits are clipped
  and tempered as in the paper: ``C * tanh(u / T)`` with T = 10, C = 5 (the original code's
  defaults are T = C = 1), plus Gaussian logit noise while exploring.

`HierarchicalPolicy.sample` draws ``k`` placements and returns them with their log
probabilities; `HierarchicalPolicy.log_prob` recomputes the log probability of given actions
under the current weights (teacher forcing), for the policy gradient.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from .features import VOCABULARY, OpFeatures, group_features  # noqa: E402


class ProblemTensors:
    """A problem's op features as constant tensors, built once per problem."""

    def __init__(self, ops: OpFeatures, structure: np.ndarray | None = None):
        n = ops.n_ops
        self.ops, self.n_ops = ops, n
        self.types = tf.constant(ops.types, tf.int32)
        self.numbers = tf.constant(ops.numbers, tf.float32)
        nb = ops.neighbours
        self.neighbours = tf.constant(np.maximum(nb, 0), tf.int32)
        self.neighbour_mask = tf.constant((nb >= 0).astype(np.float32))
        self.structure = tf.constant(np.zeros((n, 0), np.float32) if structure is None
                                     else np.asarray(structure, np.float32))


class HierarchicalPolicy(keras.Model):
    """Grouper + placer (see the module docstring) for ``n_groups`` groups on ``n_devices``."""

    def __init__(self, n_groups: int, n_devices: int, *, type_dim: int = 20, hidden: int = 64,
                 lstm: int = 64, temperature: float = 10.0, clip: float = 5.0, seed: int = 0):
        super().__init__()
        if n_groups < 1 or n_devices < 1:
            raise ValueError("n_groups and n_devices must be at least 1")
        self.n_groups, self.n_devices = int(n_groups), int(n_devices)
        self.temperature, self.clip = float(temperature), float(clip)
        init = keras.initializers.GlorotUniform(seed=seed)
        self.type_embedding = keras.layers.Embedding(len(VOCABULARY), type_dim,
                                                     embeddings_initializer=init)
        self.group_hidden = keras.layers.Dense(hidden, activation="relu", kernel_initializer=init)
        self.group_logits = keras.layers.Dense(self.n_groups, kernel_initializer=init)
        self.encoder = keras.layers.Bidirectional(keras.layers.LSTM(
            lstm, return_sequences=True, kernel_initializer=init))
        self.decoder = keras.layers.LSTMCell(lstm, kernel_initializer=init)
        self.device_embedding = keras.layers.Embedding(self.n_devices + 1, lstm,
                                                       embeddings_initializer=init)  # +1: start
        self.attend_keys = keras.layers.Dense(lstm, use_bias=False, kernel_initializer=init)
        self.attend_query = keras.layers.Dense(lstm, use_bias=False, kernel_initializer=init)
        self.attend_v = keras.layers.Dense(1, use_bias=False, kernel_initializer=init)
        self.device_logits = keras.layers.Dense(self.n_devices, kernel_initializer=init)

    # -- grouper --------------------------------------------------------------------------------
    def _grouper_logits(self, p: ProblemTensors) -> tf.Tensor:
        own = self.type_embedding(p.types)                                  # [n, E]
        around = self.type_embedding(tf.gather(p.types, p.neighbours))      # [n, 2N, E]
        mask = p.neighbour_mask[:, :, None]
        around = tf.reduce_sum(around * mask, 1) / tf.maximum(tf.reduce_sum(mask, 1), 1.0)
        x = tf.concat([own, p.numbers, around, p.structure], axis=1)
        return self.group_logits(self.group_hidden(x))                       # [n, G]

    def _group_inputs(self, p: ProblemTensors, groups: np.ndarray):
        """The groups of each grouping ``groups`` [k, n] (`features.group_features`): type
        shares [k, G, V] and the other features [k, G, F] (numbers, log output, adjacency)."""
        rows = [group_features(p.ops, row, self.n_groups) for row in np.asarray(groups)]
        shares = np.stack([g.type_share for g in rows])
        rest = np.stack([np.concatenate([g.numbers, g.log_output[:, None], g.adjacency], 1)
                         for g in rows])
        return tf.constant(shares), tf.constant(rest)

    def _encode(self, shares: tf.Tensor, rest: tf.Tensor) -> tf.Tensor:
        """The encoder's outputs [k, G, 2H] for the group inputs of `_group_inputs`; the type
        shares times the embedding matrix are each group's mean type embedding."""
        table = tf.stop_gradient(self.type_embedding(tf.range(len(VOCABULARY))))
        return self.encoder(tf.concat([tf.einsum("kgv,ve->kge", shares, table), rest], 2))

    # -- placer ---------------------------------------------------------------------------------
    def _place(self, enc: tf.Tensor, devices: tf.Tensor | None, noise, seed):
        """Decode one device per group; ``devices`` [k, G] given: teacher forcing (log probs of
        those), else sampled. Returns (devices [k, G], log probs [k, G], entropies [k, G])."""
        k = tf.shape(enc)[0]
        G = self.n_groups
        keys = self.attend_keys(enc)
        h = tf.zeros([k, self.decoder.units])
        c = tf.zeros([k, self.decoder.units])
        prev = tf.fill([k], self.n_devices)  # the start token
        chosen = tf.TensorArray(tf.int32, size=G)
        logps = tf.TensorArray(tf.float32, size=G)
        ents = tf.TensorArray(tf.float32, size=G)
        for t in tf.range(G):
            out, (h, c) = self.decoder(self.device_embedding(prev), [h, c])
            score = self.attend_v(tf.tanh(keys + self.attend_query(out)[:, None, :]))[:, :, 0]
            context = tf.reduce_sum(tf.nn.softmax(score, axis=1)[:, :, None] * enc, axis=1)
            u = self.device_logits(tf.concat([out, context], axis=1))
            logits = self.clip * tf.tanh(u / self.temperature)
            step_seed = seed + tf.cast(tf.stack([0, t]), tf.int64)
            logits += noise * tf.random.stateless_normal(tf.shape(logits), step_seed)
            logp_all = tf.nn.log_softmax(logits)
            if devices is None:
                d = tf.random.stateless_categorical(logits, 1, step_seed + [1, 0],
                                                    dtype=tf.int32)[:, 0]
            else:
                d = devices[:, t]
            chosen = chosen.write(t, d)
            logps = logps.write(t, tf.gather(logp_all, d, axis=1, batch_dims=1))
            ents = ents.write(t, -tf.reduce_sum(tf.exp(logp_all) * logp_all, axis=1))
            prev = d
        return (tf.transpose(chosen.stack()), tf.transpose(logps.stack()),
                tf.transpose(ents.stack()))

    # -- public ---------------------------------------------------------------------------------
    def sample(self, p: ProblemTensors, k: int, seed: int, noise: float = 0.0):
        """``k`` placements: (op devices [k, n] int, groups [k, n], group devices [k, G], log
        probability [k]) as numpy arrays; ``seed`` makes the draw repeatable, ``noise`` is the
        standard deviation of Gaussian noise added to the device logits (exploration)."""
        seed = tf.constant([int(seed) % (2**31), 0], tf.int64)
        groups, logp_group = self._draw_groups(p, int(k), seed)
        groups = groups.numpy()
        devices, logp_place = self._draw_devices(
            *self._group_inputs(p, groups), seed, tf.constant(float(noise), tf.float32))
        devices = devices.numpy()
        return (np.take_along_axis(devices, groups, axis=1), groups, devices,
                (logp_group + logp_place).numpy())

    @tf.function(reduce_retracing=True)
    def _draw_groups(self, p: ProblemTensors, k: int, seed):
        logits = self._grouper_logits(p)
        groups = tf.transpose(tf.random.stateless_categorical(logits, k, seed, dtype=tf.int32))
        return groups, tf.reduce_sum(_of_groups(tf.nn.log_softmax(logits), groups), axis=1)

    @tf.function(reduce_retracing=True)
    def _draw_devices(self, shares, rest, seed, noise):
        devices, logp, _ = self._place(self._encode(shares, rest), None, noise, seed + [0, 1])
        return devices, tf.reduce_sum(logp, 1)

    def log_prob(self, p: ProblemTensors, groups, devices):
        """Log probability [k] and mean entropy per decision of the given groupings [k, n] and
        group devices [k, G] under the current weights (differentiable)."""
        return self._log_prob(p, tf.convert_to_tensor(groups, tf.int32),
                              tf.convert_to_tensor(devices, tf.int32),
                              *self._group_inputs(p, groups))

    @tf.function(reduce_retracing=True)
    def _log_prob(self, p: ProblemTensors, groups, devices, shares, rest):
        logp_ops = tf.nn.log_softmax(self._grouper_logits(p))
        logp_group = tf.reduce_sum(_of_groups(logp_ops, groups), axis=1)
        _, logp_place, ents = self._place(self._encode(shares, rest), devices, tf.constant(0.0),
                                          tf.constant([0, 0], tf.int64))
        group_entropy = -tf.reduce_mean(tf.reduce_sum(tf.exp(logp_ops) * logp_ops, axis=1))
        return logp_group + tf.reduce_sum(logp_place, 1), \
            0.5 * (group_entropy + tf.reduce_mean(ents))


def _of_groups(logp_ops: tf.Tensor, groups: tf.Tensor) -> tf.Tensor:
    """logp_ops [n, G], groups [k, n] -> [k, n]: each op's log probability of its group."""
    return tf.transpose(tf.gather(logp_ops, tf.transpose(groups), axis=1, batch_dims=1))


__all__ = ["HierarchicalPolicy", "ProblemTensors"]
