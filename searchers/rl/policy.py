"""The Hierarchical planner's policy in Keras 3 (TensorFlow): a feed-forward grouper that puts
every op in one of ``n_groups`` groups, and a sequence-to-sequence LSTM placer with attention
that decides for every group its device, and optionally its split degree and its priority level
(``../shared/PAPERS.md`` 2; Trinity's agent, 4, is the same shape).

- **Units**: ops that must stay together (a co-location group of the graph) are one unit; the
  grouper places units, so every sampled strategy keeps co-location. A unit's input is the mean
  of its ops' rows.
- **Grouper**: per op, its type embedding, its numbers (`features.NUMERIC`), the mean type
  embedding of its BFS neighbours and its structural embedding -> Dense(hidden, relu) ->
  softmax over groups.
- **Conditions** (Trinity's objective weights, optional): a vector per sample added to the
  grouper's hidden layer and to every group's encoder input, so one policy learns a placement
  for each weighting of the objectives.
- **Group embedding** (from the sampled grouping, not differentiated): `features.group_features`
  (numpy) with its type shares turned into the mean type embedding, that is mean type
  embedding, mean numbers, log summed output bytes, adjacency row to the other groups.
- **Placer**: a bidirectional LSTM encodes the groups in order; an LSTM decoder decides one
  group per step, attending over the encoder's outputs (content-based, Bahdanau), fed the
  trainable embedding of the device it chose at the step before. Each head (device; split
  degree and priority level when asked for) has logits clipped and tempered as in the paper,
  ``C * tanh(u / T)`` with T = 10, C = 5 (the original code's defaults are T = C = 1), plus
  Gaussian logit noise while exploring.

`HierarchicalPolicy.sample` draws ``k`` `Actions` with their log probabilities;
`HierarchicalPolicy.log_prob` recomputes the log probability of given actions under the current
weights (teacher forcing), for the policy gradient.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from .features import VOCABULARY, OpFeatures, group_features  # noqa: E402


class ProblemTensors:
    """A problem's op features as constant tensors, built once per problem; ``units`` [n]
    numbers the op's unit (co-location group; default: every op its own)."""

    def __init__(self, ops: OpFeatures, structure: np.ndarray | None = None, units=None):
        n = ops.n_ops
        self.ops, self.n_ops = ops, n
        units = np.arange(n) if units is None else np.asarray(units, np.int64)
        self.unit_of_op = units
        self.n_units = int(units.max()) + 1 if n else 0
        self.units = tf.constant(units, tf.int32)
        self.types = tf.constant(ops.types, tf.int32)
        self.numbers = tf.constant(ops.numbers, tf.float32)
        nb = ops.neighbours
        self.neighbours = tf.constant(np.maximum(nb, 0), tf.int32)
        self.neighbour_mask = tf.constant((nb >= 0).astype(np.float32))
        self.structure = tf.constant(np.zeros((n, 0), np.float32) if structure is None
                                     else np.asarray(structure, np.float32))


@dataclass(frozen=True)
class Actions:
    """``k`` sampled decisions: ``groups`` [k, units] the group of each unit; per group [k, G]
    its ``devices``, ``splits`` (choice index, 0 = whole) and priority ``levels``."""

    groups: np.ndarray
    devices: np.ndarray
    splits: np.ndarray
    levels: np.ndarray

    def __len__(self) -> int:
        return int(self.groups.shape[0])


class HierarchicalPolicy(keras.Model):
    """Grouper + placer (see the module docstring) for ``n_groups`` groups on ``n_devices``;
    ``n_splits`` and ``n_levels`` choices for the split and priority heads (1: no such head),
    ``n_conditions`` numbers conditioning each sample (0: none)."""

    def __init__(self, n_groups: int, n_devices: int, *, n_splits: int = 1, n_levels: int = 1,
                 n_conditions: int = 0, type_dim: int = 20, hidden: int = 64, lstm: int = 64,
                 temperature: float = 10.0, clip: float = 5.0, seed: int = 0):
        super().__init__()
        if min(n_groups, n_devices, n_splits, n_levels) < 1 or n_conditions < 0:
            raise ValueError("n_groups, n_devices, n_splits and n_levels must be at least 1")
        self.n_groups, self.n_devices = int(n_groups), int(n_devices)
        self.n_splits, self.n_levels = int(n_splits), int(n_levels)
        self.n_conditions = int(n_conditions)
        self.temperature, self.clip = float(temperature), float(clip)
        init = keras.initializers.GlorotUniform(seed=seed)
        dense = lambda units, **kw: keras.layers.Dense(units, kernel_initializer=init, **kw)  # noqa: E731
        self.type_embedding = keras.layers.Embedding(len(VOCABULARY), type_dim,
                                                     embeddings_initializer=init)
        self.group_hidden = dense(hidden)
        self.condition_hidden = dense(hidden, use_bias=False) if self.n_conditions else None
        self.group_logits = dense(self.n_groups)
        recurrent = keras.initializers.Orthogonal(seed=seed)
        self.encoder = keras.layers.Bidirectional(keras.layers.LSTM(
            lstm, return_sequences=True, kernel_initializer=init, recurrent_initializer=recurrent))
        self.decoder = keras.layers.LSTMCell(lstm, kernel_initializer=init,
                                             recurrent_initializer=recurrent)
        self.device_embedding = keras.layers.Embedding(self.n_devices + 1, lstm,
                                                       embeddings_initializer=init)  # +1: start
        self.attend_keys = dense(lstm, use_bias=False)
        self.attend_query = dense(lstm, use_bias=False)
        self.attend_v = dense(1, use_bias=False)
        self.heads = [dense(n) for n in (self.n_devices, self.n_splits, self.n_levels)]

    def config(self) -> dict:
        """The sizes that fix the weights' shapes (a saved policy must match them)."""
        return {"n_groups": self.n_groups, "n_devices": self.n_devices, "n_splits": self.n_splits,
                "n_levels": self.n_levels, "n_conditions": self.n_conditions,
                "type_dim": self.type_embedding.output_dim, "hidden": self.group_hidden.units,
                "lstm": self.decoder.units, "vocabulary": len(VOCABULARY)}

    def _conditions(self, conditions, k: int) -> np.ndarray:
        c = np.zeros((k, self.n_conditions), np.float32) if conditions is None \
            else np.asarray(conditions, np.float32).reshape(k, self.n_conditions)
        return c

    # -- grouper --------------------------------------------------------------------------------
    def _grouper_logits(self, p: ProblemTensors, cond: tf.Tensor) -> tf.Tensor:
        """Group logits [k or 1, units, G]."""
        own = self.type_embedding(p.types)                                  # [n, E]
        around = self.type_embedding(tf.gather(p.types, p.neighbours))      # [n, 2N, E]
        mask = p.neighbour_mask[:, :, None]
        around = tf.reduce_sum(around * mask, 1) / tf.maximum(tf.reduce_sum(mask, 1), 1.0)
        x = tf.concat([own, p.numbers, around, p.structure], axis=1)
        x = tf.math.unsorted_segment_mean(x, p.units, p.n_units)            # [U, F]
        h = self.group_hidden(x)[None]
        if self.condition_hidden is not None:
            h = h + self.condition_hidden(cond)[:, None, :]
        return self.group_logits(tf.nn.relu(h))

    def _group_inputs(self, p: ProblemTensors, groups: np.ndarray, cond: np.ndarray):
        """The groups of each unit grouping ``groups`` [k, U] (`features.group_features`): type
        shares [k, G, V] and the other features [k, G, F] (numbers, log output, adjacency,
        conditions)."""
        rows = [group_features(p.ops, row[p.unit_of_op], self.n_groups)
                for row in np.asarray(groups)]
        shares = np.stack([g.type_share for g in rows])
        rest = np.stack([np.concatenate([g.numbers, g.log_output[:, None], g.adjacency,
                                         np.broadcast_to(c, (self.n_groups, c.size))], 1)
                         for g, c in zip(rows, cond)])
        return tf.constant(shares), tf.constant(rest, tf.float32)

    def _encode(self, shares: tf.Tensor, rest: tf.Tensor) -> tf.Tensor:
        """The encoder's outputs [k, G, 2H] for the group inputs of `_group_inputs`; the type
        shares times the embedding matrix are each group's mean type embedding."""
        table = tf.stop_gradient(self.type_embedding(tf.range(len(VOCABULARY))))
        return self.encoder(tf.concat([tf.einsum("kgv,ve->kge", shares, table), rest], 2))

    # -- placer ---------------------------------------------------------------------------------
    def _place(self, enc: tf.Tensor, given, noise, seed, head_weight=(1.0, 1.0, 1.0)):
        """Decide every group in turn; ``given`` (devices, splits, levels) [k, G] each:
        teacher forcing (log probs of those), else sampled. Returns (choices [3, k, G], log
        probs [k, G], entropies [k, G]), both summed over the heads, the log probabilities
        each times its ``head_weight``."""
        k = tf.shape(enc)[0]
        keys = self.attend_keys(enc)
        h = tf.zeros([k, self.decoder.units])
        c = tf.zeros([k, self.decoder.units])
        prev = tf.fill([k], self.n_devices)  # the start token
        chosen = tf.TensorArray(tf.int32, size=self.n_groups)
        logps = tf.TensorArray(tf.float32, size=self.n_groups)
        ents = tf.TensorArray(tf.float32, size=self.n_groups)
        for t in tf.range(self.n_groups):
            out, (h, c) = self.decoder(self.device_embedding(prev), [h, c])
            score = self.attend_v(tf.tanh(keys + self.attend_query(out)[:, None, :]))[:, :, 0]
            context = tf.reduce_sum(tf.nn.softmax(score, axis=1)[:, :, None] * enc, axis=1)
            state = tf.concat([out, context], axis=1)
            picks, logp, ent = [], tf.zeros([k]), tf.zeros([k])
            for j, head in enumerate(self.heads):
                if head.units == 1:
                    picks.append(tf.zeros_like(prev))
                    continue
                logits = self.clip * tf.tanh(head(state) / self.temperature)
                step_seed = seed + tf.cast(tf.stack([j, t]), tf.int64)
                logits += noise * tf.random.stateless_normal(tf.shape(logits), step_seed)
                logp_all = tf.nn.log_softmax(logits)
                if given is None:
                    d = tf.random.stateless_categorical(logits, 1, step_seed + [7, 0],
                                                        dtype=tf.int32)[:, 0]
                else:
                    d = given[j][:, t]
                picks.append(d)
                logp += head_weight[j] * tf.gather(logp_all, d, axis=1, batch_dims=1)
                ent += -tf.reduce_sum(tf.exp(logp_all) * logp_all, axis=1)
            chosen = chosen.write(t, tf.stack(picks))
            logps = logps.write(t, logp)
            ents = ents.write(t, ent)
            prev = picks[0]
        return (tf.transpose(chosen.stack(), [1, 2, 0]), tf.transpose(logps.stack()),
                tf.transpose(ents.stack()))

    # -- public ---------------------------------------------------------------------------------
    def sample(self, p: ProblemTensors, k: int, seed: int, noise: float = 0.0, conditions=None):
        """``k`` draws: (`Actions`, log probability [k]) as numpy; ``seed`` makes the draw
        repeatable, ``noise`` is the standard deviation of Gaussian noise added to the logits
        (exploration), ``conditions`` [k, n_conditions] the conditioning of each draw."""
        k = int(k)
        cond = self._conditions(conditions, k)
        seed = tf.constant([int(seed) % (2**31), 0], tf.int64)
        groups, logp_group = self._draw_groups(p, k, seed, tf.constant(cond))
        groups = groups.numpy()
        choices, logp_place = self._draw_rest(
            *self._group_inputs(p, groups, cond), seed, tf.constant(float(noise), tf.float32))
        choices = choices.numpy()
        return Actions(groups, *choices), (logp_group + logp_place).numpy()

    @tf.function(reduce_retracing=True)
    def _draw_groups(self, p: ProblemTensors, k: int, seed, cond):
        logits = self._grouper_logits(p, cond)
        logits = tf.broadcast_to(logits, [k, p.n_units, self.n_groups])
        flat = tf.reshape(logits, [-1, self.n_groups])
        groups = tf.reshape(tf.random.stateless_categorical(flat, 1, seed, dtype=tf.int32),
                            [k, p.n_units])
        logp = tf.gather(tf.nn.log_softmax(logits), groups, axis=2, batch_dims=2)
        return groups, tf.reduce_sum(logp, axis=1)

    @tf.function(reduce_retracing=True)
    def _draw_rest(self, shares, rest, seed, noise):
        choices, logp, _ = self._place(self._encode(shares, rest), None, noise, seed + [0, 1])
        return choices, tf.reduce_sum(logp, 1)

    def log_prob(self, p: ProblemTensors, actions: Actions, conditions=None):
        """Log probability [k] and mean entropy per decision of ``actions`` under the current
        weights (differentiable)."""
        k = len(actions)
        cond = self._conditions(conditions, k)
        given = tuple(tf.convert_to_tensor(a, tf.int32)
                      for a in (actions.devices, actions.splits, actions.levels))
        return self._log_prob(p, tf.convert_to_tensor(actions.groups, tf.int32), given,
                              tf.constant(cond), *self._group_inputs(p, actions.groups, cond),
                              tf.ones([3]))

    @tf.function(reduce_retracing=True)
    def _log_prob(self, p: ProblemTensors, groups, given, cond, shares, rest, head_weight):
        k = tf.shape(groups)[0]
        logp_units = tf.nn.log_softmax(self._grouper_logits(p, cond))
        logp_units = tf.broadcast_to(logp_units, [k, p.n_units, self.n_groups])
        logp_group = tf.reduce_sum(tf.gather(logp_units, groups, axis=2, batch_dims=2), axis=1)
        _, logp_place, ents = self._place(self._encode(shares, rest), given, tf.constant(0.0),
                                          tf.constant([0, 0], tf.int64), head_weight)
        group_entropy = -tf.reduce_mean(tf.reduce_sum(tf.exp(logp_units) * logp_units, axis=2))
        return logp_group + tf.reduce_sum(logp_place, 1), \
            0.5 * (group_entropy + tf.reduce_mean(ents))

    def train_step(self, optimizer, p: ProblemTensors, actions: Actions, advantage, *,
                   logp_old=None, clip_ratio: float = 0.2, entropy: float = 0.0,
                   conditions=None, heads=(1.0, 1.0, 1.0)):
        """One gradient step of ``optimizer``, compiled whole (loss, gradients, update); returns
        (loss, mean entropy, log probabilities [k] before the step) as numpy.

        The loss is PPO's clipped surrogate ``-mean(min(r A, clip(r, 1 - clip_ratio,
        1 + clip_ratio) A))``, ``r = p / p_old``, minus ``entropy`` times the mean entropy.
        Without ``logp_old``, ``p_old`` is the current probability held constant: ``r = 1``
        with gradient ``grad log p``, which is REINFORCE's ``-mean(A log p)`` (and, with a
        positive A, the imitation loss), so every use shares one compiled step. ``heads``
        weighs the placer's heads (device, split, level) in the log probability: imitation
        leaves out the heads it has no target for."""
        k = len(actions)
        cond = self._conditions(conditions, k)
        given = tuple(tf.convert_to_tensor(a, tf.int32)
                      for a in (actions.devices, actions.splits, actions.levels))
        adv = tf.constant(np.asarray(advantage, np.float32).reshape(k))
        has_old = logp_old is not None
        old = tf.constant(np.asarray(logp_old if has_old else np.zeros(k), np.float32))
        out = self._train(optimizer, p, tf.convert_to_tensor(actions.groups, tf.int32), given,
                          tf.constant(cond), *self._group_inputs(p, actions.groups, cond), adv,
                          old, tf.constant(has_old), tf.constant(float(clip_ratio)),
                          tf.constant(float(entropy)), tf.constant(heads, tf.float32))
        return tuple(t.numpy() for t in out)

    @tf.function(reduce_retracing=True)
    def _train(self, optimizer, p, groups, given, cond, shares, rest, adv, old, has_old,
               clip_ratio, entropy_coef, head_weight):
        variables = self.trainable_variables
        with tf.GradientTape() as tape:
            logp, entropy = self._log_prob(p, groups, given, cond, shares, rest, head_weight)
            old = tf.where(has_old, old, tf.stop_gradient(logp))
            ratio = tf.exp(logp - old)
            clipped = tf.clip_by_value(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
            surrogate = tf.minimum(ratio * adv, clipped * adv)
            loss = -tf.reduce_mean(surrogate) - entropy_coef * entropy
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss, entropy, logp


__all__ = ["Actions", "HierarchicalPolicy", "ProblemTensors"]
