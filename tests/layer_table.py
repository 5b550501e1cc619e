"""The table every layer passes: one row per layer class of mcutrain.layers, per GLU gate and per activation
kind, plus the compositions. Adding a layer means adding its row here (docs/adding-a-layer.md); then

- tests/test_gradients.py checks its forward pass against the float64 oracle (tests/oracle.py) and its
  backward pass against central finite differences;
- tests/test_every_layer.py checks that the table covers every registered layer class, gate and activation
  and every op of the C core, and that each row survives a model file bit for bit;
- tests/test_firmware_native.py trains every_layer_net(), which chains all rows, on the native firmware
  and on the host in lockstep (host/device parity, bit for bit, for every optimizer);
- tests/test_modelfile.py round-trips every_layer_net() with its optimizer state.
"""

from __future__ import annotations

from typing import Callable, List, Tuple

from mcutrain import LR, Residual, Sequential
from mcutrain import layers as L
from mcutrain.module import Module

Row = Tuple[str, Callable[[], Module]]

ROWS: List[Row] = [
    ("Dense", lambda: L.Dense(4, 3)),
    ("Linear", lambda: L.Linear(4, 3)),
    ("Bias1d", lambda: L.Bias1d(4)),
    ("Relu", lambda: L.Relu(4)),
    ("LeakyRelu", lambda: L.LeakyRelu(0.2, 4)),
    ("Sigmoid", lambda: L.Sigmoid(4)),
    ("Tanh", lambda: L.Tanh(4)),
    ("SiLU", lambda: L.SiLU(4)),
    ("Softplus", lambda: L.Softplus(4)),
    ("Sine", lambda: L.Sine(4)),
    ("Cosine", lambda: L.Cosine(4)),
    ("Softmax", lambda: L.Softmax(2.5, 5)),
    ("Swish", lambda: L.Swish(4)),
    ("GLU-sigmoid", lambda: L.GLU(4, 3, "sigmoid")),
    ("GLU-relu", lambda: L.GLU(4, 3, "relu")),
    ("GLU-leaky_relu", lambda: L.GLU(4, 3, "leaky_relu", alpha=0.1)),
    ("GLU-tanh", lambda: L.GLU(4, 3, "tanh")),
    ("GLU-silu", lambda: L.GLU(4, 3, "silu")),
    ("GLU-softplus", lambda: L.GLU(4, 3, "softplus")),
    ("GLU-swish", lambda: L.GLU(4, 3, "swish")),
    ("SwiGLU", lambda: L.SwiGLU(3, 4)),
    ("GLULeakyRelu", lambda: L.GLULeakyRelu(3, 4)),
    ("TanhGLU", lambda: L.TanhGLU(3, 4)),
    ("ReluGLU", lambda: L.ReluGLU(3, 4)),
    ("Diag", lambda: L.Diag(4)),
    ("ScalarScale", lambda: L.ScalarScale(4, init=0.7)),
    ("RMSNorm", lambda: L.RMSNorm(4, eps=1e-5)),
    ("DyT", lambda: L.DyT(4)),
    ("SingleChannelConv1d", lambda: L.SingleChannelConv1d(7, 5, 3)),
    ("Conv2d", lambda: L.Conv2d(2, 2, 3, stride=2, padding="same", input_shape=(3, 3, 2))),
    ("Conv2d-1x1-nobias", lambda: L.Conv2d(2, 3, 1, bias=False, input_shape=(2, 2, 2))),
    ("DepthwiseConv2d", lambda: L.DepthwiseConv2d(1, 3, padding=1, depth_multiplier=2, input_shape=(3, 2, 1))),
    ("MaxPool2d", lambda: L.MaxPool2d(2, input_shape=(4, 2, 1))),
    ("AvgPool2d", lambda: L.AvgPool2d(3, stride=2, padding=1, input_shape=(3, 3, 1))),
    ("GlobalAvgPool2d", lambda: L.GlobalAvgPool2d(input_shape=(2, 2, 2))),
    ("Conv1d", lambda: L.Conv1d(2, 2, 3, stride=2, padding="same", input_shape=(5, 2))),
    ("MaxPool1d", lambda: L.MaxPool1d(2, input_shape=(4, 2))),
    ("AvgPool1d", lambda: L.AvgPool1d(3, stride=1, padding=1, input_shape=(4, 1))),
    ("GlobalAvgPool1d", lambda: L.GlobalAvgPool1d(input_shape=(3, 2))),
    ("Flatten", lambda: Sequential(L.Conv2d(1, 2, 2, input_shape=(3, 3, 1)), L.Flatten())),
    ("BatchNorm", lambda: L.BatchNorm(2, input_shape=(3, 2))),
    ("Relu6", lambda: L.Relu6(5)),
    ("Dropout", lambda: L.Dropout(0.25, 4, seed=3)),
    ("Residual", lambda: Residual(L.Linear(4, 4))),
    ("Residual with a shortcut", lambda: Residual(L.Linear(4, 3), L.Tanh(), shortcut=[L.Dense(4, 3)])),
    ("LR", lambda: LR(L.Linear(4, 3), 10.0)),
]


# rows whose training on the host differs from the device's by design: BatchNorm trains on batch statistics on the
# host and runs on its running statistics elsewhere, Dropout drops values only while the host trains (their
# gradients are checked in test_gradients all the same)
HOST_TRAINING_ONLY = {"BatchNorm", "Dropout"}


def every_layer_net(n_in: int = 6, n_out: int = 4, seed: int = 11) -> Sequential:
    """One network that chains every row of the table but HOST_TRAINING_ONLY (Linear adapters where the widths or
    shapes differ), ending in a
    Softmax over n_out outputs (so every loss applies), with seeded parameters."""
    mods: List[Module] = []
    width, shape = n_in, (n_in,)
    for name, make in ROWS:
        if name in HOST_TRAINING_ONLY:
            continue
        m = make()
        assert m.n_in is not None and m.n_out is not None and m.in_shape is not None
        if m.n_in != width or (len(m.in_shape) > 1 and m.in_shape != shape):  # a spatial row reads a flat input
            mods.append(L.Linear(width, m.n_in))
        mods.append(m)
        width, shape = m.n_out, m.out_shape
    if width != n_out:
        mods.append(L.Linear(width, n_out))
    return Sequential(*mods, L.Softmax(0.8)).rand_params(seed=seed, scale=0.8)


def mixed_layers() -> List[Module]:
    """Most layer kinds in one chain from 8 to 6 features (a network's body: add a head), for the tests that
    run a bit of everything through one path (a simulated board, ONNX export)."""
    return [
        L.Linear(8, 10),
        L.RMSNorm(10),
        L.Swish(10),
        Residual(L.Linear(10, 10), L.Tanh()),
        L.GLU(10, 8, "swish"),
        L.DyT(8),
        LR(Sequential(L.Linear(8, 8), L.Sigmoid()), 2.0),
        L.Diag(8),
        L.LeakyRelu(0.25),
        L.SingleChannelConv1d(8, 6, 3),
        L.SiLU(),
        L.ScalarScale(6),
        L.Softplus(),
        L.Sine(),
        L.Dense(6, 6),
        L.Cosine(),
        L.Bias1d(6),
        L.Relu(),
    ]
