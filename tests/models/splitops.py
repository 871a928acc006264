"""A small model holding every op type moplace can split, for the split-rewriting tests.

Depthwise and ordinary convolutions (NHWC), Dense layers (MatMul), and BatchMatMul in its
three TensorFlow versions (V1 and V3 through raw ops, V2 through a Keras einsum-free matmul).
"""

import keras
import numpy as np
import tensorflow as tf


class RawBatchMatMul(keras.layers.Layer):
    """x [b, t, d] @ w [d, d] as TensorFlow's BatchMatMul op of the given version."""

    def __init__(self, version: str, units: int, **kwargs):
        super().__init__(**kwargs)
        self.version, self.units = version, units

    def build(self, input_shape):
        self.w = self.add_weight(name="w", shape=(input_shape[-1], self.units),
                                 initializer="glorot_uniform")

    def call(self, x):
        w = tf.broadcast_to(self.w, (tf.shape(x)[0], *self.w.shape))
        if self.version == "v1":
            return tf.raw_ops.BatchMatMul(x=x, y=w)
        if self.version == "v3":
            return tf.raw_ops.BatchMatMulV3(x=x, y=w, Tout=x.dtype)
        return tf.raw_ops.BatchMatMulV2(x=x, y=self.w, adj_y=False)


def build(batch_size):
    rng = np.random.default_rng(0)
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape=(8, 8, 4), name="x")
    h = keras.layers.Conv2D(6, 3, padding="same", activation="relu", name="conv")(inputs)
    h = keras.layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same", name="depthwise")(h)
    h = keras.layers.Activation("tanh")(h)
    h = keras.layers.Conv2D(12, 3, padding="same", name="conv2")(h)  # its input gradient is needed
    h = keras.layers.Reshape((16, 12))(keras.layers.AveragePooling2D(2)(h))  # (b, 4*4, 6*2)
    for version in ("v1", "v2", "v3"):
        h = keras.layers.Activation("tanh")(RawBatchMatMul(version, 24, name=f"bmm_{version}")(h))
    h = keras.layers.Flatten()(h)
    logits = keras.layers.Dense(10, name="logits")(h)
    model = keras.Model(inputs, logits, name="splitops")
    x = rng.standard_normal((batch_size, 8, 8, 4)).astype(np.float32)
    y = rng.integers(0, 10, size=batch_size).astype(np.int32)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return model, loss, keras.optimizers.SGD(0.1), (x, y)
