"""Export an mcutrain network as an ONNX model (opset 13), so what a device learned can be inspected, served
or fine-tuned elsewhere: every layer and composition of mcutrain, with its current parameters.

The graph takes `x` (batch, n_in) float32, or (batch, H, W, C) / (batch, T, C) channels-last as mcutrain holds
images and series, and gives `y` (batch, n_out). Each layer becomes the standard ONNX operators that compute
it (Linear a Gemm, Residual an Add, SingleChannelConv1d a one-channel Conv between an Unsqueeze and a Flatten,
RMSNorm, DyT, Swish and the GLUs a few elementwise operators, Relu6 a Clip(0, 6), BatchNorm a
BatchNormalization with its running statistics, Dropout nothing); the convolutions and pooling layers are ONNX's
channels-first Conv (groups for depthwise), MaxPool, AveragePool (count_include_pad=0) and GlobalAveragePool,
with one Transpose where values go from mcutrain's channels-last layout to channels-first and one back where a
flat layer follows. LR wrappers only change training and export as their inner module. The results agree with
net.forward within float32 rounding (ONNX runtimes use their own exp, tanh and summation order).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

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


@dataclass
class _Value:
    """A tensor of the graph: its name, the mcutrain shape of one sample ((H, W, C), (T, C) or (n,)) and how
    the graph holds it: 'last' as mcutrain does (N, H, W, C), 'first' as ONNX's Conv wants it (N, C, H, W), or
    'flat' (N, n)."""

    name: str
    shape: Tuple[int, ...]
    layout: str = "flat"


def _as(g: _Graph, v: _Value, layout: str, shape: Optional[Tuple[int, ...]] = None) -> _Value:
    """v held in the given layout, read as `shape` (a flat value holds any shape of its size channels-last)."""
    if shape is not None and v.layout == "flat":
        v = _Value(v.name, tuple(shape))
    if len(v.shape) == 1 or v.layout == layout:
        return v
    rank = len(v.shape) + 1
    to_first = [0, rank - 1] + list(range(1, rank - 1))
    to_last = [0] + list(range(2, rank)) + [1]
    if layout == "flat":
        x = v.name if v.layout == "last" else g.op("Transpose", [v.name], "to_last", perm=to_last)
        return _Value(g.op("Flatten", [x], "flat", axis=1), v.shape, "flat")
    if v.layout == "flat":
        shape = g.const(np.array((-1,) + v.shape, np.int64), "shape", np.int64)
        v = _Value(g.op("Reshape", [v.name, shape], "unflat"), v.shape, "last")
        if layout == "last":
            return v
    return _Value(
        g.op("Transpose", [v.name], "to_" + layout, perm=to_first if layout == "first" else to_last), v.shape, layout
    )


def _emit(g: _Graph, m: Module, v: _Value) -> _Value:
    """Append m's operators computing from v; returns its output."""
    if isinstance(m, Sequential):
        for c in m.modules:
            v = _emit(g, c, v)
        return v
    if isinstance(m, Residual):
        if m.shortcut is None:  # inner(x) + x, in x's layout
            y = _as(g, _emit(g, m.inner, v), v.layout)
            return _Value(g.op("Add", [v.name, y.name], "residual"), v.shape, v.layout)
        # inner(x) + shortcut(x): the main body, then the shortcut, each ending in one layout (channels-first for an
        # image or a series), so that the importer reads them back as the same two branches in the same order
        assert m.out_shape is not None
        layout = "first" if len(m.out_shape) > 1 else "flat"
        y = _as(g, _emit(g, m.inner, v), layout, m.out_shape)
        s = _as(g, _emit(g, m.shortcut, v), layout, m.out_shape)
        return _Value(g.op("Add", [y.name, s.name], "residual"), m.out_shape, layout)
    if isinstance(m, LR):
        return _emit(g, m.inner, v)
    t = type(m)
    if t in _SIMPLE or t in (L.LeakyRelu, L.SiLU, L.Relu6):  # elementwise: in any layout
        return _Value(_emit_flat(g, m, v.name), v.shape, v.layout)
    if t in _SPATIAL:
        assert m.in_shape is not None and m.out_shape is not None
        y = _SPATIAL[t](g, m, _as(g, v, "first", m.in_shape).name)
        return _Value(y, m.out_shape, "first" if len(m.out_shape) > 1 else "flat")
    if t is L.BatchNorm:
        x = _as(g, v, "first", m.in_shape)
        return _Value(_batchnorm(g, m, x.name), x.shape, x.layout)
    if t is L.Flatten:
        return _as(g, v, "flat")
    if t is L.Dropout:  # the identity outside host training
        return v
    return _Value(_emit_flat(g, m, _as(g, v, "flat").name), (m.n_out,))


def _emit_flat(g: _Graph, m: Module, x: str) -> str:
    """The operators of a layer of flat samples (or an elementwise one) from x; returns its output's name."""
    p = np.array(m.params, np.float32)
    t = type(m)
    if t in _SIMPLE:
        return g.op(_SIMPLE[t], [x], t.__name__.lower())
    if t is L.LeakyRelu:
        return g.op("LeakyRelu", [x], "leaky_relu", alpha=float(m.alpha))
    if t is L.SiLU:
        return g.op("Mul", [x, g.op("Sigmoid", [x], "sig")], "silu")
    if t is L.Relu6:
        return g.op("Clip", [x, g.const(np.float32(0), "zero"), g.const(np.float32(6), "six")], "relu6")
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


# ---------------------------------------------------------------- spatial layers
# One function per layer class (registered in _SPATIAL): from a channels-first input (N, C, H, W) or (N, C, T),
# the name of its channels-first output, or of a flat (N, C) one for global pooling.


def _window(m: Module) -> Dict[str, Any]:
    """kernel_shape, strides and pads of a spatial layer (1-D for a series); the padding after follows from the
    output size, as in the C core."""
    geo = {k: int(v) for k, v in m._geometry().items()}
    pad = getattr(m, "_pad", "valid")  # a layer's own explicit padding (top, bottom, left, right) is kept
    dims = []
    for i, (n_in, n_out, k, s, before) in enumerate(
        (("h_in", "h_out", "kh", "sh", "pt"), ("w_in", "w_out", "kw", "sw", "pl"))
    ):
        after = max((geo[n_out] - 1) * geo[s] + geo[k] - geo[n_in] - geo[before], 0)
        dims.append((geo[k], geo[s], geo[before], pad[2 * i + 1] if isinstance(pad, tuple) else after))
    if len(m.in_shape or ()) == 2:  # a series: the width axis only
        dims = dims[1:]
    window: Dict[str, Any] = {"kernel_shape": [d[0] for d in dims], "strides": [d[1] for d in dims]}
    if pad == "same":  # TFLite's and mcutrain's "same" is ONNX's SAME_UPPER (the odd padding after)
        return {**window, "auto_pad": "SAME_UPPER"}
    return {**window, "pads": [d[2] for d in dims] + [d[3] for d in dims]}


def _conv(g: _Graph, m: Module, x: str) -> str:
    """Conv2d, Conv1d: W [kh][kw][in][out] to ONNX's (out, in, kh, kw)."""
    p = np.array(m.params, np.float32)
    w = p[: m._n_weights()].reshape(tuple(m._k if len(m.in_shape) == 3 else m._k[1:]) + (m.in_channels, m.out_channels))
    ins = [x, g.const(np.moveaxis(w, (-1, -2), (0, 1)), "filter")]
    if m.bias:
        ins.append(g.const(p[m._n_weights() :], "bias"))
    return g.op("Conv", ins, "conv", **_window(m))


def _dwconv(g: _Graph, m: Module, x: str) -> str:
    """DepthwiseConv2d: W [kh][kw][out] to (out, 1, kh, kw), one group per input channel."""
    p = np.array(m.params, np.float32)
    out = m.channels * m.depth_multiplier
    w = np.moveaxis(p[: m._n_weights()].reshape(m._k + (out,)), -1, 0)[:, None]
    ins = [x, g.const(w, "filter")] + ([g.const(p[m._n_weights() :], "bias")] if m.bias else [])
    return g.op("Conv", ins, "dwconv", group=m.channels, **_window(m))


def _maxpool(g: _Graph, m: Module, x: str) -> str:
    return g.op("MaxPool", [x], "maxpool", **_window(m))


def _avgpool(g: _Graph, m: Module, x: str) -> str:
    """AvgPool2d/1d divide by the taps inside the input: count_include_pad=0."""
    return g.op("AveragePool", [x], "avgpool", count_include_pad=0, **_window(m))


def _global_avgpool(g: _Graph, m: Module, x: str) -> str:
    return g.op("Flatten", [g.op("GlobalAveragePool", [x], "global_avgpool")], "pooled", axis=1)


def _batchnorm(g: _Graph, m: Module, x: str) -> str:
    """BatchNorm with its running statistics (inference), over axis 1 of (N, C, ...) or (N, C)."""
    p = np.array(m.params, np.float32).reshape(4, m.channels)
    ins = [x] + [g.const(p[i], stem) for i, stem in enumerate(("gain", "bias", "mean", "var"))]
    return g.op("BatchNormalization", ins, "batchnorm", epsilon=float(m.eps), momentum=1.0 - float(m.momentum))


_SPATIAL: Dict[type, Callable[[_Graph, Module, str], str]] = {
    L.Conv2d: _conv,
    L.Conv1d: _conv,
    L.DepthwiseConv2d: _dwconv,
    L.MaxPool2d: _maxpool,
    L.MaxPool1d: _maxpool,
    L.AvgPool2d: _avgpool,
    L.AvgPool1d: _avgpool,
    L.GlobalAvgPool2d: _global_avgpool,
    L.GlobalAvgPool1d: _global_avgpool,
}


def onnx_model(net: Module, name: str = "mcutrain", input_steps: Sequence[Dict[str, Any]] = ()) -> Any:
    """The onnx.ModelProto computing net (with its current parameters), after the model's input steps
    (mcutrain.inputsteps: a standardisation is a Sub and a Mul), so it takes the raw inputs the model takes."""
    onnx = require("onnx", "onnx")
    h = onnx.helper
    g = _Graph(onnx)
    shape = tuple(net.in_shape or (net.n_in,))
    x = "x"
    for step in input_steps:
        mean = np.asarray(step["mean"], np.float32).reshape(shape)
        scale = np.asarray(step["scale"], np.float32).reshape(shape)
        x = g.op(
            "Mul", [g.op("Sub", [x, g.const(mean, "input_mean")], "centred"), g.const(scale, "input_scale")], "std"
        )
    y = _as(g, _emit(g, net, _Value(x, shape, "last" if len(shape) > 1 else "flat")), "flat")
    if g.nodes and g.nodes[-1].output[0] == y.name:
        g.nodes[-1].output[0] = g.nodes[-1].name = "y"
    else:  # the network moves no values (a Flatten)
        g.nodes.append(h.make_node("Identity", [y.name], ["y"], name="y"))
    graph = h.make_graph(
        g.nodes,
        name,
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", *shape])],
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
    """Write net as an ONNX file (opset 13), atomically: input `x` (batch, n_in), or (batch, H, W, C) / (batch,
    T, C) channels-last for a network of images or series, output `y` (batch, n_out)."""
    atomic_write(path, onnx_model(net, Path(path).stem or "mcutrain").SerializeToString())
