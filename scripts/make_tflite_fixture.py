#!/usr/bin/env python3
"""Make tests/fixtures/digits_cnn_int8.tflite: a small Keras CNN on scikit-learn's digits (8x8x1, pixels / 16),
trained briefly and converted by TensorFlow Lite's converter to full int8 (int8 input and output, int8 weights
per channel, int32 biases), for the .tflite import tests (tests/test_tflite_import.py). CI has no TensorFlow:
the small file is committed; run this only to make it again.

Needs tensorflow-cpu==2.21.0 and scikit-learn in a venv of its own (never in mcutrain's dependencies):
    python3 -m venv /tmp/tf && /tmp/tf/bin/pip install tensorflow-cpu==2.21.0 scikit-learn
    /tmp/tf/bin/python scripts/make_tflite_fixture.py [OUT]

Network: Conv2D 8 3x3 same + ReLU -> MaxPool 2 -> Conv2D 16 3x3 same + ReLU -> DepthwiseConv2D 3x3 same + ReLU
-> AveragePool 2 -> Flatten -> Dense 10 -> Softmax (the converter fuses the ReLUs into the convolutions and
drops the Flatten or turns it into a RESHAPE).
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

SEED = 21


def digits() -> tuple:
    """(x (n, 8, 8, 1) float32 in [0, 1], labels (n,)) of scikit-learn's digits."""
    d = load_digits()
    return (d.images / 16.0).astype(np.float32)[..., None], d.target.astype(np.int64)


def build(batch_size=None) -> "tf.keras.Model":
    """The Keras CNN (see the module docstring); batch_size=1 for the converter (a fixed batch makes the Flatten a
    plain RESHAPE instead of SHAPE / STRIDED_SLICE / PACK operators computing the batch size)."""
    L = tf.keras.layers
    return tf.keras.Sequential(
        [
            tf.keras.Input((8, 8, 1), batch_size=batch_size),
            L.Conv2D(8, 3, padding="same", activation="relu"),
            L.MaxPooling2D(2),
            L.Conv2D(16, 3, padding="same", activation="relu"),
            L.DepthwiseConv2D(3, padding="same", activation="relu"),
            L.AveragePooling2D(2),
            L.Flatten(),
            L.Dense(10),
            L.Softmax(),
        ]
    )


def main() -> None:
    out = (
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else Path(__file__).resolve().parents[1] / "tests/fixtures/digits_cnn_int8.tflite"
    )
    tf.keras.utils.set_random_seed(SEED)
    x, y = digits()
    model = build()
    model.compile(
        optimizer=tf.keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    model.fit(x[:1500], y[:1500], epochs=15, batch_size=32, verbose=0)
    _, acc = model.evaluate(x[1500:], y[1500:], verbose=0)

    def representative():
        for i in range(0, 1500, 5):
            yield [x[i : i + 1]]

    one = build(batch_size=1)
    one.set_weights(model.get_weights())
    conv = tf.lite.TFLiteConverter.from_keras_model(one)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = representative
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    data = conv.convert()
    out.write_bytes(data)
    print(f"keras accuracy on digits 1500..1796: {acc:.4f}; wrote {out} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
