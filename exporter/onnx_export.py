"""Export an mcutrain network as an ONNX model (opset 13), so what a device learned can be inspected, served
or fine-tuned elsewhere: every layer and composition of mcutrain, with its current parameters.

The graph takes `x` (batch, n_in) float32 and gives `y` (batch, n_out). Each layer becomes the standard ONNX
operators that compute it (Linear a Gemm, Residual an Add, Conv1d a one-channel Conv between an Unsqueeze and
a Flatten, RMSNorm, DyT, Swish and the GLUs a few elementwise operators); LR wrappers only change training
and export as their inner module. The results agree with net.forward within float32 rounding (ONNX runtimes
use their own exp, tanh and summation order).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional, Union

import numpy as np

from mcutrain import layers as L
from mcutrain.compose import LR, Residual, Sequential
from mcutrain.errors import McuTrainError
from mcutrain.extras import require
from mcutrain.files import atomic_write
from mcutrain.module import Module
from mcutrain.version import __version__

OPSET = 13
IR_VERSION = 7  # the IR version of opset 13, which every ONNX runtime since 2020 reads


class OnnxExportError(McuTrainError, ValueError):
    """A network with a layer the ONNX export does not know (a layer added to mcutrain without its ONNX form)."""


class _Graph:
    """Nodes and initializers being written, with fresh names."""

    def __init__(self, onnx: Any) -> None:
        self.onnx = onnx
        self.nodes: List[Any] = []
        self.inits: List[Any] = []
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, values: Any, stem: str, dtype: Any = np.float32) -> str:
        name = self.name(stem)
        self.inits.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(values, dtype), name))
        return name

    def op(self, op: str, inputs: List[str], stem: str, **attrs: Any) -> str:
        out = self.name(stem)
        self.nodes.append(self.onnx.helper.make_node(op, inputs, [out], name=out, **attrs))
        return out


def _gate(g: _Graph, layer: L.GLU, z: str, beta: Optional[np.ndarray]) -> str:
    """The GLU gate applied to z."""
    gate = layer.gate
    if gate == "sigmoid":
        return g.op("Sigmoid", [z], "gate")
    if gate == "relu":
        return g.op("Relu", [z], "gate")
    if gate == "leaky_relu":
        return g.op("LeakyRelu", [z], "gate", alpha=float(layer.alpha))
    if gate == "tanh":
        return g.op("Tanh", [z], "gate")
    if gate == "softplus":
        return g.op("Softplus", [z], "gate")
    if gate == "silu":
        return g.op("Mul", [z, g.op("Sigmoid", [z], "sig")], "gate")
    if gate == "swish":
        assert beta is not None
        return g.op("Mul", [z, g.op("Sigmoid", [g.op("Mul", [z, g.const(beta, "beta")], "bz")], "sig")], "gate")
    raise OnnxExportError(f"{layer.describe()}: no ONNX form for the GLU gate {gate!r}")


_SIMPLE = {L.Relu: "Relu", L.Sigmoid: "Sigmoid", L.Tanh: "Tanh", L.Softplus: "Softplus", L.Sine: "Sin", L.Cosine: "Cos"}


def _emit(g: _Graph, m: Module, x: str) -> str:
    """Append m's operators computing from x; returns the name of its output."""
    if isinstance(m, Sequential):
        for c in m.modules:
            x = _emit(g, c, x)
        return x
    if isinstance(m, Residual):
        return g.op("Add", [x, _emit(g, m.inner, x)], "residual")
    if isinstance(m, LR):
        return _emit(g, m.inner, x)
    p = np.array(m.params, np.float32)
    t = type(m)
    if t in _SIMPLE:
        return g.op(_SIMPLE[t], [x], t.__name__.lower())
    if t is L.LeakyRelu:
        return g.op("LeakyRelu", [x], "leaky_relu", alpha=float(m.alpha))
    if t is L.SiLU:
        return g.op("Mul", [x, g.op("Sigmoid", [x], "sig")], "silu")
    if t is L.Softmax:
        if m.temperature != 1.0:
            x = g.op("Div", [x, g.const(np.float32(m.temperature), "temperature")], "scaled")
        return g.op("Softmax", [x], "softmax", axis=-1)
    n_in, n_out = m.n_in, m.n_out
    if t is L.Linear:
        w = p[: n_in * n_out].reshape(n_in, n_out)
        return g.op("Gemm", [x, g.const(w, "weight"), g.const(p[n_in * n_out :], "bias")], "linear")
    if t is L.Dense:
        return g.op("MatMul", [x, g.const(p.reshape(n_in, n_out), "weight")], "dense")
    if t is L.Bias1d:
        return g.op("Add", [x, g.const(p, "bias")], "bias")
    if t in (L.Diag, L.ScalarScale):
        return g.op("Mul", [x, g.const(p, "scale")], "scale")
    if t is L.Swish:
        return g.op("Mul", [x, g.op("Sigmoid", [g.op("Mul", [x, g.const(p, "beta")], "bx")], "sig")], "swish")
    if t is L.RMSNorm:
        ms = g.op("ReduceMean", [g.op("Mul", [x, x], "square")], "mean_square", axes=[-1], keepdims=1)
        r = g.op("Sqrt", [g.op("Add", [ms, g.const(np.float32(m.eps), "eps")], "ms_eps")], "rms")
        return g.op("Mul", [g.op("Div", [x, r], "normed"), g.const(p, "gain")], "rmsnorm")
    if t is L.DyT:
        th = g.op("Tanh", [g.op("Mul", [x, g.const(p[:1], "alpha")], "ax")], "tanh")
        scaled = g.op("Mul", [th, g.const(p[1 : 1 + n_in], "gain")], "scaled")
        return g.op("Add", [scaled, g.const(p[1 + n_in :], "bias")], "dyt")
    if t is L.SingleChannelConv1d:
        u = g.op("Unsqueeze", [x, g.const(np.array([1], np.int64), "axes", np.int64)], "channel")
        c = g.op("Conv", [u, g.const(p.reshape(1, 1, m.filter_size), "filter")], "conv", kernel_shape=[m.filter_size])
        return g.op("Flatten", [c], "conv1d", axis=1)
    if isinstance(m, L.GLU):
        io = n_in * n_out
        wg, wv = p[:io].reshape(n_in, n_out), p[io : 2 * io].reshape(n_in, n_out)
        bg, bv = p[2 * io : 2 * io + n_out], p[2 * io + n_out : 2 * io + 2 * n_out]
        beta = p[2 * io + 2 * n_out :] if m.gate == "swish" else None
        zg = g.op("Gemm", [x, g.const(wg, "gate_weight"), g.const(bg, "gate_bias")], "zg")
        zv = g.op("Gemm", [x, g.const(wv, "value_weight"), g.const(bv, "value_bias")], "zv")
        return g.op("Mul", [_gate(g, m, zg, beta), zv], "glu")
    raise OnnxExportError(f"{m.describe()}: the ONNX export does not know this layer")


def onnx_model(net: Module, name: str = "mcutrain") -> Any:
    """The onnx.ModelProto computing net (with its current parameters)."""
    onnx = require("onnx", "onnx")
    h = onnx.helper
    g = _Graph(onnx)
    _emit(g, net, "x")  # every layer ends with the node giving its output: the last node gives the network's
    g.nodes[-1].output[0] = g.nodes[-1].name = "y"
    graph = h.make_graph(
        g.nodes,
        name,
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", net.n_in])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", net.n_out])],
        g.inits,
    )
    model = h.make_model(
        graph, producer_name="mcutrain", producer_version=__version__, opset_imports=[h.make_opsetid("", OPSET)]
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def to_onnx(net: Module, path: Union[str, Path]) -> None:
    """Write net as an ONNX file (opset 13), atomically: input `x` (batch, n_in), output `y` (batch, n_out)."""
    atomic_write(path, onnx_model(net, Path(path).stem or "mcutrain").SerializeToString())
