"""The int8 kernels of the core (issue 11): int8 weights (`--quant int8`, MCT_STORE_I8) quantize each sample's
input once and use integer dot products with one float scale per output; the full-integer QDENSE sums 8 x 8
products. Both are re-derived here from their documented formulas in NumPy, bit for bit (the C kernels are the
same on every target, which the simulator parity tests check).
"""

from __future__ import annotations

import numpy as np
import pytest

from mcutrain import Checkpoint, Sequential, TrainParams
from mcutrain import layers as L
from mcutrain.exporter.device import build_device_model
from mcutrain.exporter.quantize import quantize_weights
from mcutrain.exporter.twin import DeviceTwin

F32 = np.float32


def int8_weight_layer(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MCT_STORE_I8 as documented in mct.h, in float32 steps: m = max|x|, q = round(x * (127 / m)) (ties to even,
    clamped to [-127, 127], 0 when m <= 1e-30), y = float(sum q W8) * ((m / 127) * scale) + b."""
    n_in, n_out = w.shape
    w8, scale = quantize_weights(w, n_in, n_out)
    out = np.empty((x.shape[0], n_out), F32)
    for s, xs in enumerate(x.astype(F32)):
        m = F32(np.max(np.abs(xs)))
        inv = F32(127.0) / m if m > F32(1e-30) else F32(0.0)
        q = np.clip(np.rint((xs * inv).astype(F32)), -127, 127).astype(np.int64)
        acc = q @ w8.astype(np.int64)
        out[s] = acc.astype(F32) * (F32(m / F32(127.0)) * scale) + b.astype(F32)
    return out


def test_int8_weights_quantize_the_input_once_and_sum_integers() -> None:
    net = Sequential(L.Linear(20, 9), L.Relu(), L.Linear(9, 5)).rand_params(seed=4)
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.01)))
    twin = DeviceTwin(build_device_model(ck, "none", "int8"))
    rng = np.random.default_rng(2)
    x = rng.normal(0.0, 1.5, (40, 20)).astype(F32)
    x[3] = 0.0  # an all-zero input: q = 0, y = b
    x[4, :] = 1e-31  # below the smallest maximum the kernel scales by
    p = net.params
    w1, b1 = p[:180].reshape(20, 9), p[180:189]
    w2, b2 = p[189:234].reshape(9, 5), p[234:239]
    h = np.maximum(int8_weight_layer(x, w1, b1), F32(0.0))
    want = int8_weight_layer(h, w2, b2)
    got = twin.predict(x)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    # and it stays close to the f32 network (int8 inputs and weights: about 1 % of the output range)
    ref = net.forward(x)
    assert np.max(np.abs(got - ref)) < 0.03 * np.max(np.abs(ref))


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_int8_weights_give_nan_for_a_non_finite_input(bad: float) -> None:
    net = Sequential(L.Linear(4, 3)).rand_params(seed=1)
    twin = DeviceTwin(build_device_model(Checkpoint(net, net.new_sgd(TrainParams(lr=0.01))), "none", "int8"))
    y = twin.predict(np.array([0.5, bad, -1.0, 2.0], F32))
    assert np.all(np.isnan(y))
    y_ok = twin.predict(np.array([0.5, 0.25, -1.0, 2.0], F32))
    assert np.all(np.isfinite(y_ok))
