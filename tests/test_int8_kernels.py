"""The int8 kernels of the core (issue 11): int8 weights (`--quant int8`, MCT_STORE_I8) quantize each sample's
input once and use integer dot products with one float scale per output (int8-weight convolutions keep f32 inputs
and scale each output channel's f32 sum once); the full-integer QDENSE sums 8 x 8 products. All are re-derived
here from their documented formulas in NumPy, bit for bit (the C kernels are the same on every target, which the
simulator parity tests check).
"""

from __future__ import annotations

from typing import Any

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


def int8_weight_conv(x: np.ndarray, layer: Any, geom: dict) -> np.ndarray:
    """MCT_STORE_I8 of a Conv2d / depthwise Conv2d as documented in mct.h, in float32 steps: W8 and the channel scales
    from quantize_weights over W [taps][c_out]; per output, starting from 0, y += x * float(W8) over the taps inside
    the input row by row, column by column, then input channel by input channel (the f32 kernel's order), then
    y * scale (+ b). x: (nb, h, w, c_in) float32."""
    g = {k: int(v) for k, v in geom.items()}
    co, ci, kh, kw = g["c_out"], g["c_in"], g["kh"], g["kw"]
    dw = isinstance(layer, L.DepthwiseConv2d)
    taps = kh * kw * (1 if dw else ci)
    p = layer.params
    w8, scale = quantize_weights(p[: taps * co], taps, co)
    w8 = w8.astype(F32).reshape((kh, kw, co) if dw else (kh, kw, ci, co))
    y = np.zeros((x.shape[0], g["h_out"], g["w_out"], co), F32)
    for oy in range(g["h_out"]):
        for ox in range(g["w_out"]):
            acc = np.zeros((x.shape[0], co), F32)
            for ky in range(kh):
                for kx in range(kw):
                    iy, ix = oy * g["sh"] - g["pt"] + ky, ox * g["sw"] - g["pl"] + kx
                    if not (0 <= iy < g["h_in"] and 0 <= ix < g["w_in"]):
                        continue
                    if dw:
                        acc = acc + x[:, iy, ix, np.arange(co) // (co // ci)] * w8[ky, kx]
                    else:
                        for c in range(ci):
                            acc = acc + x[:, iy, ix, c : c + 1] * w8[ky, kx, c]
            acc = acc * scale
            y[:, oy, ox] = acc + p[taps * co : taps * co + co].astype(F32) if layer.bias else acc
    return y


def test_int8_weight_convolutions_sum_in_f32_and_scale_each_channel_once() -> None:
    """`--quant int8` keeps frozen Conv2d and depthwise Conv2d weights as int8 with a scale per output channel
    (MCT_STORE_I8) and runs them in f32: the device model's outputs equal the documented re-derivation bit for bit,
    layer by layer, and stay near the f32 network; the layers' const bytes (the core's size functions) are about a
    quarter of the f32 ones."""
    from mcutrain.corefacts import Op, Storage, layer_size_of

    conv = L.Conv2d(2, 5, 3, stride=(2, 1), padding="same")
    dw = L.DepthwiseConv2d(5, 3, padding=(1, 0, 0, 1), depth_multiplier=2)
    pw = L.Conv2d(10, 3, 1, bias=False)
    net = Sequential(conv, dw, pw, input_shape=(7, 6, 2)).rand_params(seed=9)
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.01)))
    m = build_device_model(ck, "none", "int8")
    base = build_device_model(ck, "none", "f32")
    assert [(d.op, Storage(d.storage)) for d in m.program.layers] == [
        (Op.CONV2D, Storage.I8), (Op.DWCONV2D, Storage.I8), (Op.CONV2D, Storage.I8)
    ]  # fmt: skip
    assert [Storage(d.storage) for d in base.program.layers] == [Storage.F32] * 3
    for d, f in zip(m.program.layers, base.program.layers):
        c_out = int(d.geometry["c_out"])
        n_w = d.n_p - (c_out if d.kind else 0)
        assert layer_size_of(d).consts == n_w + 4 * (d.n_p - n_w + c_out)  # W8, then the scales and biases in f32
        assert layer_size_of(f).consts == 4 * d.n_p
    assert len(bytes(m.program.cdata)) < 0.4 * len(bytes(base.program.cdata))
    rng = np.random.default_rng(6)
    x = rng.normal(size=(9, net.n_in)).astype(F32)
    h = x.reshape(-1, 7, 6, 2)
    for layer, d in zip((conv, dw, pw), m.program.layers):
        h = int8_weight_conv(h, layer, d.geometry)
    got = DeviceTwin(m).predict(x)
    np.testing.assert_array_equal(got.view(np.uint32), h.reshape(h.shape[0], -1).view(np.uint32))
    ref = net.forward(x)
    assert np.max(np.abs(got - ref)) < 0.03 * np.max(np.abs(ref))
