"""A zoo of Keras models, each with a loss, an optimizer and one synthetic batch.

``ZOO[name](batch_size)`` returns a `TrainingSetup`. Every builder calls
``keras.utils.set_random_seed(0)`` first, so the same call gives the same initial weights, and
draws its batch from ``numpy.random.default_rng(0)``. Nothing is downloaded: the
keras.applications models are built with ``weights=None``. Inputs are small (the smallest size
each application accepts, or close to it) so that one training step takes about a second on a CPU.

Classifiers output logits (``classifier_activation=None``) and train with
``SparseCategoricalCrossentropy(from_logits=True)`` on integer labels, which is numerically
stabler than a softmax followed by a log.

Multi-input models (``gnmt``) have several ``model.inputs``; then ``data[0]`` is a tuple of
arrays in that order, which can be passed to the model as it is: ``model(x)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import keras
import numpy as np

from ..errors import MoplaceError
from ..registry import Registry


@dataclass(frozen=True, eq=False)  # eq=False: comparing models and arrays field-wise is meaningless
class TrainingSetup:
    """One training step: model, loss, optimizer and one batch ``(x, y)`` of synthetic data.

    ``x`` is an array, or a tuple of arrays (one per model input, in ``model.inputs`` order);
    ``y`` is an array. Both have ``batch_size`` rows.
    """

    model: keras.Model
    loss: Any
    optimizer: keras.optimizers.Optimizer
    data: tuple[Any, np.ndarray]
    name: str


ZOO: Registry[Callable[[int], TrainingSetup]] = Registry("zoo model")

_NUM_CLASSES = 10


def _start(batch_size: int) -> np.random.Generator:
    """Check the batch size, fix every seed Keras uses and return the data generator."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise MoplaceError(f"batch size must be an integer >= 1, got {batch_size!r}")
    keras.utils.set_random_seed(0)
    return np.random.default_rng(0)


def _xent() -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _sgd() -> keras.optimizers.Optimizer:
    # SGD with momentum 0.9 is the standard recipe for the CNN classifiers
    return keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)


def _classifier_setup(name: str, model: keras.Model, batch_size: int, rng: np.random.Generator,
                 optimizer: keras.optimizers.Optimizer | None = None) -> TrainingSetup:
    shape = tuple(model.inputs[0].shape[1:])
    x = rng.standard_normal((batch_size, *shape), dtype=np.float32)
    y = rng.integers(0, _NUM_CLASSES, size=batch_size, dtype=np.int32)
    return TrainingSetup(model, _xent(), optimizer or _sgd(), (x, y), name)


def _application(name: str, factory: Callable[..., keras.Model], side: int) -> None:
    """Register a keras.applications classifier with a ``side`` x ``side`` x 3 input."""
    def build(batch_size: int) -> TrainingSetup:
        rng = _start(batch_size)
        model = factory(weights=None, input_shape=(side, side, 3), classes=_NUM_CLASSES,
                        classifier_activation=None)
        return _classifier_setup(name, model, batch_size, rng)
    build.__doc__ = f"{factory.__name__}, input {side}x{side}x3, {_NUM_CLASSES} classes, no weights."
    ZOO.add(name, build)


# Sizes: 64 for ResNet50 (it accepts 32, but then its last stage is 1x1); the documented minimum
# for the others (InceptionV3 75, VGG19 / MobileNetV2 / NASNetMobile 32 with weights=None).
_application("resnet50", keras.applications.ResNet50, 64)
_application("inception_v3", keras.applications.InceptionV3, 75)
_application("vgg19", keras.applications.VGG19, 32)
_application("mobilenet_v2", keras.applications.MobileNetV2, 32)
_application("nasnet_mobile", keras.applications.NASNetMobile, 32)


@ZOO.register("mlp")
def mlp(batch_size: int) -> TrainingSetup:
    """Tiny MLP for tests: 16 features -> Dense 32 (ReLU) -> Dense 10 logits."""
    rng = _start(batch_size)
    inputs = keras.Input(shape=(16,), name="x")
    hidden = keras.layers.Dense(32, activation="relu", name="hidden")(inputs)
    logits = keras.layers.Dense(_NUM_CLASSES, name="logits")(hidden)
    return _classifier_setup("mlp", keras.Model(inputs, logits, name="mlp"), batch_size, rng)


@ZOO.register("cnn")
def cnn(batch_size: int) -> TrainingSetup:
    """Tiny CNN for tests: 16x16x3 -> Conv 8 -> BatchNorm -> ReLU -> MaxPool -> Conv 16 -> GAP -> Dense 10."""
    rng = _start(batch_size)
    inputs = keras.Input(shape=(16, 16, 3), name="x")
    h = keras.layers.Conv2D(8, 3, padding="same", use_bias=False, name="conv1")(inputs)
    h = keras.layers.BatchNormalization(name="bn1")(h)
    h = keras.layers.ReLU(name="relu1")(h)
    h = keras.layers.MaxPooling2D(name="pool1")(h)
    h = keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="conv2")(h)
    h = keras.layers.GlobalAveragePooling2D(name="gap")(h)
    logits = keras.layers.Dense(_NUM_CLASSES, name="logits")(h)
    return _classifier_setup("cnn", keras.Model(inputs, logits, name="cnn"), batch_size, rng)


@keras.saving.register_keras_serializable(package="moplace")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned vector per position to a ``(batch, seq_len, d_model)`` input."""

    def __init__(self, seq_len: int, d_model: int, **kwargs):
        super().__init__(**kwargs)
        self.seq_len, self.d_model = seq_len, d_model

    def build(self, input_shape):
        self.positions = self.add_weight(
            name="positions", shape=(self.seq_len, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=0.02))

    def call(self, inputs):
        return inputs + keras.ops.cast(self.positions, inputs.dtype)

    def get_config(self):
        return {**super().get_config(), "seq_len": self.seq_len, "d_model": self.d_model}


@ZOO.register("transformer")
def transformer(batch_size: int, seq_len: int = 32, vocab: int = 1000, d_model: int = 64,
                heads: int = 4, ffn: int = 128, blocks: int = 2) -> TrainingSetup:
    """Transformer encoder classifier: tokens (seq 32, vocab 1000) -> 2 post-norm blocks -> mean -> 10 logits."""
    rng = _start(batch_size)
    tokens = keras.Input(shape=(seq_len,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(vocab, d_model, name="token_embedding")(tokens)
    h = PositionEmbedding(seq_len, d_model, name="position_embedding")(h)
    for i in range(blocks):
        att = keras.layers.MultiHeadAttention(heads, d_model // heads, name=f"block{i}_attention")(h, h)
        h = keras.layers.LayerNormalization(name=f"block{i}_norm1")(keras.layers.Add()([h, att]))
        f = keras.layers.Dense(ffn, activation="relu", name=f"block{i}_ffn1")(h)
        f = keras.layers.Dense(d_model, name=f"block{i}_ffn2")(f)
        h = keras.layers.LayerNormalization(name=f"block{i}_norm2")(keras.layers.Add()([h, f]))
    h = keras.layers.GlobalAveragePooling1D(name="mean_pool")(h)
    logits = keras.layers.Dense(_NUM_CLASSES, name="logits")(h)
    model = keras.Model(tokens, logits, name="transformer")
    x = rng.integers(0, vocab, size=(batch_size, seq_len), dtype=np.int32)
    y = rng.integers(0, _NUM_CLASSES, size=batch_size, dtype=np.int32)
    return TrainingSetup(model, _xent(), keras.optimizers.Adam(1e-3), (x, y), "transformer")


@ZOO.register("gnmt")
def gnmt(batch_size: int, seq_len: int = 16, vocab: int = 1000, hidden: int = 64) -> TrainingSetup:
    """GNMT-like translator, teacher forced: ``x = (source, target_in)`` tokens, ``y`` = next tokens.

    Encoder: embedding -> bidirectional LSTM (hidden/2 per direction) -> LSTM (+ residual).
    Decoder: embedding -> LSTM -> additive (Bahdanau) attention over the encoder outputs ->
    LSTM on [decoder state, context] -> logits over the target vocabulary, per step.
    """
    rng = _start(batch_size)
    source = keras.Input(shape=(seq_len,), dtype="int32", name="source")
    target_in = keras.Input(shape=(seq_len,), dtype="int32", name="target_in")
    e = keras.layers.Embedding(vocab, hidden, name="source_embedding")(source)
    e = keras.layers.Bidirectional(keras.layers.LSTM(hidden // 2, return_sequences=True),
                                   name="encoder_bilstm")(e)
    e2 = keras.layers.LSTM(hidden, return_sequences=True, name="encoder_lstm")(e)
    encoded = keras.layers.Add(name="encoder_residual")([e, e2])
    d = keras.layers.Embedding(vocab, hidden, name="target_embedding")(target_in)
    d = keras.layers.LSTM(hidden, return_sequences=True, name="decoder_lstm1")(d)
    context = keras.layers.AdditiveAttention(name="attention")([d, encoded])
    d2 = keras.layers.Concatenate(name="decoder_concat")([d, context])
    d2 = keras.layers.LSTM(hidden, return_sequences=True, name="decoder_lstm2")(d2)
    logits = keras.layers.Dense(vocab, name="logits")(d2)
    model = keras.Model([source, target_in], logits, name="gnmt")
    src = rng.integers(0, vocab, size=(batch_size, seq_len), dtype=np.int32)
    tgt = rng.integers(0, vocab, size=(batch_size, seq_len + 1), dtype=np.int32)
    # teacher forcing: the decoder reads target[:-1] and predicts target[1:]
    x = (src, tgt[:, :-1].copy())
    return TrainingSetup(model, _xent(), keras.optimizers.Adam(1e-3), (x, tgt[:, 1:].copy()), "gnmt")
