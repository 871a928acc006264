"""The TensorFlow model zoo and model-file loader: shapes, one real training step, seeding, errors.

The keras.applications models take 0.5-2.5 s each to build on a CPU, so each zoo model is built
once per module (the `built` fixture) and shared by the tests that only read or train it.
"""

import math
import textwrap

import keras  # noqa: E402
import numpy as np
import pytest
import tensorflow as tf  # noqa: E402

import moplace.tf  # noqa: F401 - sets TensorFlow's environment before it is first imported
from moplace.errors import FormatError, MoplaceError  # noqa: E402
from moplace.tf.modelfile import load_setup  # noqa: E402
from moplace.tf.zoo import ZOO, TrainingSetup  # noqa: E402

# name -> (input shapes, output shape) at any batch size
EXPECTED = {
    "resnet50": ([(None, 64, 64, 3)], (None, 10)),
    "inception_v3": ([(None, 75, 75, 3)], (None, 10)),
    "vgg19": ([(None, 32, 32, 3)], (None, 10)),
    "mobilenet_v2": ([(None, 32, 32, 3)], (None, 10)),
    "nasnet_mobile": ([(None, 32, 32, 3)], (None, 10)),
    "transformer": ([(None, 32)], (None, 10)),
    "gnmt": ([(None, 16), (None, 16)], (None, 16, 1000)),
    "mlp": ([(None, 16)], (None, 10)),
    "cnn": ([(None, 16, 16, 3)], (None, 10)),
}


@pytest.fixture(scope="module")
def built():
    """``built(name)`` -> (setup at batch 2, its initial weights); each model is built once."""
    cache = {}

    def get(name):
        if name not in cache:
            setup = ZOO[name](2)
            cache[name] = (setup, [w.copy() for w in setup.model.get_weights()])
        return cache[name]
    return get


def train_step(setup: TrainingSetup) -> float:
    """One real step: forward, loss, gradients, optimizer update; returns the loss."""
    x, y = setup.data
    variables = setup.model.trainable_variables
    with tf.GradientTape() as tape:
        loss = setup.loss(y, setup.model(x, training=True))
    grads = tape.gradient(loss, variables)
    assert all(g is not None for g in grads), "a trainable variable gets no gradient"
    setup.optimizer.apply_gradients(zip(grads, variables))
    return float(loss)


def test_zoo_lists_every_model():
    assert sorted(ZOO.names()) == sorted(EXPECTED)


#: the largest zoo models (3-11 s each for both tests) are checked by the slow run; the
#: default run keeps the small ones and mobilenet_v2 for the Keras applications
LARGE = ("nasnet_mobile", "inception_v3", "resnet50", "vgg19")
ZOO_CASES = [pytest.param(n, marks=pytest.mark.slow) if n in LARGE else n for n in EXPECTED]


@pytest.mark.parametrize("name", ZOO_CASES)
def test_zoo_model_shapes_and_data(built, name):
    setup, _ = built(name)
    inputs, output = EXPECTED[name]
    assert setup.name == name
    assert [tuple(t.shape) for t in setup.model.inputs] == inputs
    assert tuple(setup.model.output_shape) == output
    x, y = setup.data
    xs = x if isinstance(x, tuple) else (x,)
    assert [a.shape for a in xs] == [(2, *shape[1:]) for shape in inputs]
    assert y.shape == (2, *output[1:-1]) and np.issubdtype(y.dtype, np.integer)
    assert y.min() >= 0 and y.max() < output[-1]


@pytest.mark.parametrize("name", ZOO_CASES)
def test_zoo_model_trains_one_step(built, name):
    setup, initial = built(name)
    assert math.isfinite(train_step(setup))
    after = setup.model.get_weights()
    assert any(not np.array_equal(a, b) for a, b in zip(initial, after)), "no weight changed"


# mobilenet_v2 stands for the applications (the cheapest to build a second time)
@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer", "gnmt", "mobilenet_v2"])
def test_same_build_same_weights_and_data(built, name):
    first, initial = built(name)
    second = ZOO[name](2)
    assert all(np.array_equal(a, b) for a, b in zip(initial, second.model.get_weights()))
    flat = lambda data: [*(data[0] if isinstance(data[0], tuple) else (data[0],)), data[1]]  # noqa: E731
    assert all(np.array_equal(a, b) for a, b in zip(flat(first.data), flat(second.data)))


def test_batch_size_is_honoured():
    setup = ZOO["cnn"](5)
    assert setup.data[0].shape == (5, 16, 16, 3) and setup.data[1].shape == (5,)


# --- load_setup ------------------------------------------------------------------------------

def _docstring_example() -> tuple[str, str]:
    """The example model file from modelfile's docstring: (import line, build function)."""
    from moplace.tf import modelfile
    lines = modelfile.__doc__.split("Example::", 1)[1].splitlines()[1:]
    block = []
    for line in lines:  # the indented block after "Example::"
        if line.strip() and not line.startswith("    "):
            break
        block.append(line)
    code = textwrap.dedent("\n".join(block)).strip("\n")
    header, _, build = code.partition("\n")
    return header + "\n", build + "\n"


# the documented example is the file these tests load, so the doc cannot drift from the code
HEADER, GOOD_BUILD = _docstring_example()
SECOND_BODY_LINE = f"line {HEADER.count(chr(10)) + 2}"  # where a body's 2nd line lands in the file


def write(tmp_path, body, name="mymodel.py"):
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def test_load_zoo_name():
    setup = load_setup("mlp", 3)
    assert setup.name == "mlp" and setup.data[0].shape == (3, 16)


def test_load_valid_file_and_train(tmp_path):
    setup = load_setup(str(write(tmp_path, GOOD_BUILD)), 4)
    assert isinstance(setup, TrainingSetup) and setup.name == "mymodel"
    assert setup.data[0].shape == (4, 16) and setup.data[1].shape == (4,)
    assert math.isfinite(train_step(setup))


def test_load_multi_input_file_gives_tuple(tmp_path):
    path = write(tmp_path, """
        def build(batch_size):
            a, b = keras.Input(shape=(3,), name="a"), keras.Input(shape=(5,), name="b")
            model = keras.Model([a, b], keras.layers.Dense(1)(keras.layers.Concatenate()([a, b])))
            x = [np.zeros((batch_size, 3), np.float32), np.ones((batch_size, 5), np.float32)]
            return model, keras.losses.MeanSquaredError(), keras.optimizers.SGD(), (x, np.zeros((batch_size, 1)))
        """, name="two.py")
    setup = load_setup(str(path), 2)
    assert isinstance(setup.data[0], tuple) and len(setup.data[0]) == 2
    assert math.isfinite(train_step(setup))


def error_for(source, batch_size=2, kind=FormatError):
    with pytest.raises(kind) as info:
        load_setup(str(source), batch_size)
    message = str(info.value)
    assert "Traceback" not in message
    return message


def test_unknown_zoo_name_lists_names():
    message = error_for("resnet51", kind=MoplaceError)
    assert "resnet51" in message and all(name in message for name in EXPECTED)


@pytest.mark.parametrize("batch_size", [0, -1])
def test_bad_batch_size(batch_size):
    assert "batch size" in error_for("mlp", batch_size, kind=MoplaceError)


def test_missing_file(tmp_path):
    message = error_for(tmp_path / "nope.py")
    assert "nope.py" in message and "no such" in message


def test_syntax_error_names_line(tmp_path):
    path = write(tmp_path, "x = 1\ndef build(batch_size)\n    pass\n")
    message = error_for(path)
    assert str(path) in message and SECOND_BODY_LINE in message and "SyntaxError" in message


def test_import_error_names_type_message_and_line(tmp_path):
    path = write(tmp_path, "y = 1\nz = y / 0\n")
    message = error_for(path)
    assert str(path) in message and SECOND_BODY_LINE in message
    assert "ZeroDivisionError: division by zero" in message


def test_no_build_function(tmp_path):
    message = error_for(write(tmp_path, "build = 3\n"))
    assert "mymodel.py" in message and "no build(batch_size) function" in message


def test_build_raises_names_line(tmp_path):
    path = write(tmp_path, "def build(batch_size):\n    raise RuntimeError('out of ideas')\n")
    message = error_for(path)
    assert f"mymodel.py, {SECOND_BODY_LINE}" in message and "RuntimeError: out of ideas" in message


RETURNS = {
    "not a tuple": ("return None", "got NoneType"),
    "3-tuple": ("return 1, 2, 3", "got a 3-tuple"),
    "model not a keras.Model": ("return 'm', loss, opt, (x, y)", "model must be a keras.Model"),
    "optimizer not keras": ("return model, loss, 'sgd', (x, y)", "optimizer must be a keras optimizer"),
    "data not a pair": ("return model, loss, opt, x", "pair (x, y)"),
    "x not an array": ("return model, loss, opt, (x.tolist(), y)", "got a list holding list"),
    "x a tensor": ("return model, loss, opt, (keras.ops.convert_to_tensor(x), y)", "must be a numpy array"),
    "x wrong batch": ("return model, loss, opt, (x[:1], y)", "expected (2, 16)"),
    "y wrong batch": ("return model, loss, opt, (x, y[:1])", "expected 2 rows"),
    "x wrong count": ("return model, loss, opt, ((x, x), y)", "1 input(s) but x holds 2"),
}


@pytest.mark.parametrize("case", list(RETURNS))
def test_build_returns_wrong_thing(tmp_path, case):
    statement, expected = RETURNS[case]
    path = write(tmp_path, f"""
        def build(batch_size):
            inputs = keras.Input(shape=(16,), name="x")
            model = keras.Model(inputs, keras.layers.Dense(10)(inputs))
            x, y = np.zeros((batch_size, 16), np.float32), np.zeros(batch_size, np.int32)
            loss, opt = keras.losses.SparseCategoricalCrossentropy(), keras.optimizers.SGD()
            {statement}
        """)
    message = error_for(path)
    assert "mymodel.py" in message and expected in message


def test_dynamic_shapes_rejected(tmp_path):
    path = write(tmp_path, """
        def build(batch_size):
            inputs = keras.Input(shape=(None, 3), name="x")
            model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
            x, y = np.zeros((batch_size, 4, 3), np.float32), np.zeros((batch_size, 4, 2), np.float32)
            return model, keras.losses.MeanSquaredError(), keras.optimizers.SGD(), (x, y)
        """)
    message = error_for(path)
    assert "mymodel.py" in message
    assert "dynamic shapes are not supported: input 'x' has shape (None, None, 3)" in message


def test_subclassed_model_rejected(tmp_path):
    path = write(tmp_path, """
        class Net(keras.Model):
            def __init__(self):
                super().__init__()
                self.dense = keras.layers.Dense(10)
            def call(self, x):
                return self.dense(x)
        def build(batch_size):
            x, y = np.zeros((batch_size, 16), np.float32), np.zeros(batch_size, np.int32)
            return Net(), keras.losses.SparseCategoricalCrossentropy(), keras.optimizers.SGD(), (x, y)
        """)
    assert "no defined inputs" in error_for(path)


def test_the_names_known_without_tensorflow_are_the_zoos():
    """`moplace zoo` and the model argument's check list the zoo without importing TensorFlow
    (`moplace.tf.source.ZOO_NAMES`): the same names in the same order as the zoo itself."""
    from moplace.tf.source import ZOO_NAMES

    assert list(ZOO_NAMES) == list(ZOO.names())
