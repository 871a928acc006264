"""The Hierarchical planner's policy in Keras 3 (TensorFlow): a feed-forward grouper that puts
every op in one of ``n_groups`` groups, and a sequence-to-sequence LSTM placer with attention
that puts every group on a device (``../shared/PAPERS.md`` 2; Trinity's agent, 4, is the same
shape).

- **Grouper**: per op, its type embedding, its numbers (`features.NUMERIC`), the mean type
  embedding of its BFS neighbours and its structural embedding -> Dense(hidden, relu) ->
  softmax over groups.
- **Group embedding** (from the sampled grouping, not differentiated): mean type embedding,
  mean numbers, log summed output bytes, adjacency row to the other groups.
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

from .features import VOCABULARY, OpFeatures  # noqa: E402


class ProblemTensors:
    """A problem's op features as constant tensors, built once per problem."""

    def __init__(self, ops: OpFeatures, structure: np.ndarray | None = None):
        n = ops.n_ops
        self.n_ops = n
        self.types = tf.constant(ops.types, tf.int32)
        self.numbers = tf.constant(ops.numbers, tf.float32)
        nb = ops.neighbours
        self.neighbours = tf.constant(np.maximum(nb, 0), tf.int32)
        self.neighbour_mask = tf.constant((nb >= 0).astype(np.float32))
        self.structure = tf.constant(np.zeros((n, 0), np.float32) if structure is None
                                     else np.asarray(structure, np.float32))
        self.output_bytes = tf.constant(ops.output_bytes, tf.float32)
        self.src = tf.constant(ops.src, tf.int32)
        self.dst = tf.constant(ops.dst, tf.int32)


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

    def _group_inputs(self, p: ProblemTensors, groups: tf.Tensor) -> tf.Tensor:
        """[k, G, F] group embeddings of ``groups`` [k, n] (constants for the gradient)."""
        k = tf.shape(groups)[0]
        G = self.n_groups
        seg = groups + (tf.range(k) * G)[:, None]                            # [k, n]
        flat = tf.reshape(seg, [-1])
        count = tf.math.unsorted_segment_sum(tf.ones_like(flat, tf.float32), flat, k * G)
        per = tf.maximum(count, 1.0)[:, None]

        def mean_of(values):  # values [n, F] -> [k, G, F]
            tiled = tf.tile(values, [k, 1])
            s = tf.math.unsorted_segment_sum(tiled, flat, k * G) / per
            return tf.reshape(s, [k, G, -1])

        types = mean_of(tf.stop_gradient(self.type_embedding(p.types)))
        numbers = mean_of(p.numbers)
        out = tf.math.unsorted_segment_sum(tf.tile(p.output_bytes, [k]), flat, k * G)
        out = tf.reshape(tf.math.log(out + 1.0) / (32.0 * np.log(2.0)), [k, G, 1])
        gs, gd = tf.gather(groups, p.src, axis=1), tf.gather(groups, p.dst, axis=1)  # [k, e]
        batch = tf.broadcast_to(tf.range(k)[:, None], tf.shape(gs))
        cut = tf.cast(gs != gd, tf.float32)
        adj = tf.scatter_nd(tf.stack([batch, gs, gd], -1), cut, [k, G, G])
        adj = tf.minimum(adj + tf.transpose(adj, [0, 2, 1]), 1.0)
        return tf.stop_gradient(tf.concat([types, numbers, out, adj], axis=2))

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
        out = self._sample(p, int(k), seed, tf.constant(float(noise), tf.float32))
        return tuple(x.numpy() for x in out)

    @tf.function(reduce_retracing=True)
    def _sample(self, p: ProblemTensors, k: int, seed, noise):
        logits = self._grouper_logits(p)
        groups = tf.transpose(tf.random.stateless_categorical(logits, k, seed, dtype=tf.int32))
        enc = self.encoder(self._group_inputs(p, groups))
        devices, logp_place, _ = self._place(enc, None, noise, seed + [0, 1])
        logp_group = tf.reduce_sum(_gather_rows(tf.nn.log_softmax(logits), groups), axis=1)
        op_devices = tf.gather(devices, groups, axis=1, batch_dims=1)
        return op_devices, groups, devices, logp_group + tf.reduce_sum(logp_place, 1)

    @tf.function(reduce_retracing=True)
    def log_prob(self, p: ProblemTensors, groups, devices):
        """Log probability [k] and mean entropy per decision of the given groupings [k, n] and
        group devices [k, G] under the current weights (differentiable)."""
        groups = tf.convert_to_tensor(groups, tf.int32)
        devices = tf.convert_to_tensor(devices, tf.int32)
        logp_ops = tf.nn.log_softmax(self._grouper_logits(p))
        logp_group = tf.reduce_sum(_gather_rows(logp_ops, groups), axis=1)
        enc = self.encoder(self._group_inputs(p, groups))
        _, logp_place, ents = self._place(enc, devices, tf.constant(0.0),
                                          tf.constant([0, 0], tf.int64))
        group_entropy = -tf.reduce_mean(tf.reduce_sum(tf.exp(logp_ops) * logp_ops, axis=1))
        return logp_group + tf.reduce_sum(logp_place, 1), \
            0.5 * (group_entropy + tf.reduce_mean(ents))


def _gather_rows(logp_ops: tf.Tensor, groups: tf.Tensor) -> tf.Tensor:
    """logp_ops [n, G], groups [k, n] -> [k, n]: each op's log probability of its group."""
    k = tf.shape(groups)[0]
    n = tf.shape(groups)[1]
    idx = tf.stack([tf.broadcast_to(tf.range(n)[None, :], [k, n]), groups], -1)
    return tf.gather_nd(logp_ops, idx)


__all__ = ["HierarchicalPolicy", "ProblemTensors"]
