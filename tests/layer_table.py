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
    ("Conv1d", lambda: L.Conv1d(7, 5, 3)),
    ("Residual", lambda: Residual(L.Linear(4, 4))),
    ("LR", lambda: LR(L.Linear(4, 3), 10.0)),
]


def every_layer_net(n_in: int = 6, n_out: int = 4, seed: int = 11) -> Sequential:
    """One network that chains every row of the table (Linear adapters where the widths differ), ending in a
    Softmax over n_out outputs (so every loss applies), with seeded parameters."""
    mods: List[Module] = []
    width = n_in
    for _, make in ROWS:
        m = make()
        assert m.n_in is not None and m.n_out is not None
        if m.n_in != width:
            mods.append(L.Linear(width, m.n_in))
        mods.append(m)
        width = m.n_out
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
        L.Conv1d(8, 6, 3),
        L.SiLU(),
        L.ScalarScale(6),
        L.Softplus(),
        L.Sine(),
        L.Dense(6, 6),
        L.Cosine(),
        L.Bias1d(6),
        L.Relu(),
    ]
