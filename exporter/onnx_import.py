"""Import an ONNX model (opset 13 or later) as an mcutrain network.

The graph must be a chain from one float input (batch, features...) to one output, the shape
`torch.onnx.export` gives an `nn.Sequential`: Gemm, or MatMul then Add (Linear/Dense); Add, Sub, Mul and
Div by a constant (Bias1d, ScalarScale for a single number, Diag for a vector); Relu, LeakyRelu, Sigmoid,
Tanh, Softplus (also PyTorch's form with its threshold), Sin, Cos; Softmax on the last axis; x * Sigmoid(x)
(SiLU); Add of an earlier value of the chain (Residual); and the layout ops in between (Flatten, Reshape,
Squeeze, Unsqueeze, Transpose, Identity, Dropout in inference form, Cast to float), with shape arithmetic on
constants and Shape folded away. Anything else is an ImportModelError naming the node and listing what is
supported.

Convolutional networks (PyTorch's, channels-first): Conv (2-D as Conv2d, 1-D as Conv1d, groups equal to the
channels as DepthwiseConv2d with the depth multiplier out / in; a one-channel 1-D Conv without padding or
stride stays minidx's SingleChannelConv1d), MaxPool, AveragePool (count_include_pad=1 with padding as AvgPool
then a Diag of taps inside / all taps), GlobalAveragePool and ReduceMean over the spatial axes, GlobalMaxPool,
BatchNormalization (BatchNorm with its running statistics), Clip(0, 6) as Relu6. mcutrain keeps tensors
channels-last, as TFLite does, and converts at import so the device moves no values: an image input
(N, C, H, W) becomes the network's (H, W, C) input (a series (N, C, T) becomes (T, C)), filters are stored
[kh][kw][in][out], and a Flatten of a (C, H, W) value reads in C, H, W order, so the rows of the Gemm after it
are put in H, W, C order. An input the graph itself transposes from channels-last is taken as it is. A residual
Add adds the block's input unchanged (y = x + M(x)); when the shortcut has layers of its own (ResNet's 1x1
projection), the graph branches: a node that reads an earlier value starts a second branch from it, and the Add of
the two branches' ends closes the block, Residual(first branch, shortcut=[second branch]).

Hostile files: the file is read with a size bound, every tensor's element count is bounded before its data
is converted, external tensor data (torch.onnx.export writes it to `model.onnx.data`) is read only from a file
in the model's folder and within that file's bounds, and every weight must be a constant of the model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from mcutrain import layers as L
from mcutrain.compose import Residual, Sequential
from mcutrain.errors import ImportModelError, ShapeError
from mcutrain.extras import require
from mcutrain.files import read_bounded
from mcutrain.module import Module

from .interop import MAX_IMPORT_BYTES, MAX_PARAMS, as_f32, check_width, dense, residual_block, sequential

SUPPORTED = (
    "Gemm, MatMul (+ Add), Add/Sub/Mul/Div by a constant, Relu, LeakyRelu, Sigmoid, Tanh, Softplus, Sin, Cos, "
    "Softmax (last axis), x * Sigmoid(x), Add of an earlier value (residual) or of two branches from one value "
    "(residual with a projection shortcut), Conv (1-D, 2-D, groups 1 or the "
    "channels), MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, ReduceMean (spatial axes), "
    "BatchNormalization, Clip(0, 6), Flatten, Reshape, Squeeze, Unsqueeze, Transpose, Identity, Dropout "
    "(inference), Cast to float, Constant and shape arithmetic on constants"
)
MIN_OPSET = 13
MAX_NODES = 100_000
BATCH = 1_000_003  # the batch size as Shape reports it while shape arithmetic is folded (a prime, not a size)
SOFTPLUS_MIN_THRESHOLD = 15.0  # above it, x and log(1 + e^x) are the same float32

_ACTIVATIONS = {
    "Relu": L.Relu,
    "Sigmoid": L.Sigmoid,
    "Tanh": L.Tanh,
    "Softplus": L.Softplus,
    "Sin": L.Sine,
    "Cos": L.Cosine,
}


_KEEP: Any = object()  # _produce: the output is stored as the current value is


def _channels_last_order(shape: Tuple[int, ...]) -> np.ndarray:
    """For a channels-first per-sample shape (C, *spatial), the place of each value (row-major) in the
    channels-last tensor (*spatial, C) that holds it."""
    stored = np.arange(int(np.prod(shape))).reshape(tuple(shape[1:]) + (shape[0],))
    return np.moveaxis(stored, -1, 0).ravel()


def _identity_to_none(order: Optional[np.ndarray]) -> Optional[np.ndarray]:
    return None if order is None or np.array_equal(order, np.arange(order.size)) else order


@dataclass
class _Node:
    name: str
    op: str
    inputs: List[str]
    outputs: List[str]
    attrs: Dict[str, Any] = field(default_factory=dict)
    domain: str = ""

    @property
    def where(self) -> str:
        return f"node {self.name!r} ({self.op})"


def from_onnx(path: Union[str, Path]) -> Module:
    """The mcutrain network of an ONNX file (see the module docstring for what is supported). Raises
    ImportModelError naming the node that cannot be imported, MissingExtraError without the `onnx` package."""
    onnx = require("onnx", "onnx")
    data = read_bounded(path, MAX_IMPORT_BYTES, "ONNX file", ImportModelError)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as e:  # noqa: BLE001 - protobuf raises several kinds for a file that is not ONNX
        raise ImportModelError(f"{path}: not an ONNX model ({type(e).__name__}: {e})") from None
    return _Importer(onnx, model, str(path), Path(path).parent).run()


def _tensor(
    onnx: Any, t: Any, where: str, folder: Optional[Path] = None, files: Optional[Dict[Path, bytes]] = None
) -> np.ndarray:
    """A TensorProto's values, with its size bounded and checked before they are converted. Data kept in an
    external file (torch.onnx.export writes one next to the model) is read only from a file in the model's own
    folder (`folder`; `files` caches what was read), within its bounds."""
    dims = [int(d) for d in t.dims]
    count = 1
    for d in dims:
        if d < 0:
            raise ImportModelError(f"{where}: tensor {t.name!r} has a negative dimension {d}")
        count *= d
        if count > MAX_PARAMS:
            raise ImportModelError(f"{where}: tensor {t.name!r} has more than {MAX_PARAMS:,} values")
    if t.data_type in (
        onnx.TensorProto.STRING,
        onnx.TensorProto.UNDEFINED,
        onnx.TensorProto.COMPLEX64,
        onnx.TensorProto.COMPLEX128,
    ):
        raise ImportModelError(f"{where}: tensor {t.name!r} holds no real numbers")
    if t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data):
        return _external(onnx, t, dims, count, where, folder, files if files is not None else {})
    try:
        a = onnx.numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001 - a tensor whose data does not match its dims or type
        raise ImportModelError(f"{where}: tensor {t.name!r} cannot be read ({e})") from None
    if list(a.shape) != dims:
        raise ImportModelError(f"{where}: tensor {t.name!r} holds {a.size} values for dims {dims}")
    return a


def _external(
    onnx: Any, t: Any, dims: List[int], count: int, where: str, folder: Optional[Path], files: Dict[Path, bytes]
) -> np.ndarray:
    """The values of a tensor kept in an external data file of the model's folder."""
    info = {e.key: e.value for e in t.external_data}
    name = info.get("location", "")
    if folder is None or not name or Path(name).name != name or name in (".", ".."):
        raise ImportModelError(
            f"{where}: tensor {t.name!r} keeps its data in {name!r}; mcutrain reads external data only from a "
            "file next to the model, named without a folder"
        )
    path = folder / name
    real, home = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    if real != home and home not in real.parents:
        raise ImportModelError(
            f"{where}: tensor {t.name!r} keeps its data in {name!r}, a link to {real}, outside the model's folder "
            f"{home}; mcutrain reads external data only from the model's own folder: copy the file there"
        )
    if path not in files:
        files[path] = read_bounded(path, MAX_IMPORT_BYTES, "ONNX external data file", ImportModelError)
    data = files[path]
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).newbyteorder("<")
        offset = int(info.get("offset", 0))
        length = int(info.get("length", count * dtype.itemsize))
    except (TypeError, ValueError, KeyError) as e:
        raise ImportModelError(f"{where}: tensor {t.name!r} has bad external data fields ({e})") from None
    if length != count * dtype.itemsize or offset < 0 or offset + length > len(data):
        raise ImportModelError(
            f"{where}: tensor {t.name!r} needs {count * dtype.itemsize} bytes at offset {offset} of {name}, "
            f"which has {len(data)} (or its length field says {length})"
        )
    return np.frombuffer(data, dtype, count, offset).reshape(dims)


class _Importer:
    """Walks the graph's nodes in order, keeping the one chain of values the network computes."""

    def __init__(self, onnx: Any, model: Any, source: str, folder: Path) -> None:
        self.onnx = onnx
        self.folder = folder
        self.files: Dict[Path, bytes] = {}  # external data files read
        self.model = model
        self.source = source
        self.consts: Dict[str, np.ndarray] = {}
        self.shapes: Dict[str, Tuple[int, ...]] = {}  # data value -> its shape without the batch
        # data value -> for each of its values in ONNX's row-major order, its place in mcutrain's tensor (None:
        # the same order). Transposes only change this map; a channels-first (C, H, W) value is stored (H, W, C).
        self.orders: Dict[str, Optional[np.ndarray]] = {}
        self.in_shape: Optional[Tuple[int, ...]] = None  # the network's input shape when it is not flat
        self.pos: Dict[str, int] = {}  # data value -> how many layers precede it
        self.layers: List[Module] = []
        self.cur = ""
        self.batch: Optional[int] = None  # the input's batch size when the file fixes it
        # open residual branches, innermost last: (layer index where the block starts, the first branch's last
        # value, its layers); the chain goes on along the second branch until an Add of both ends
        self.branches: List[Tuple[int, str, List[Module]]] = []

    def fail(self, where: str, what: str) -> ImportModelError:
        return ImportModelError(f"{self.source}: {where}: {what}. mcutrain imports: {SUPPORTED}")

    # ---- the graph ----
    def run(self) -> Module:
        g = self.model.graph
        opset = {(o.domain or "ai.onnx"): o.version for o in self.model.opset_import}
        if opset.get("ai.onnx", 0) < MIN_OPSET:
            raise ImportModelError(
                f"{self.source}: opset {opset.get('ai.onnx')}; mcutrain imports opset {MIN_OPSET} or later "
                f"(torch.onnx.export(..., opset_version={MIN_OPSET}) or onnx.version_converter)"
            )
        if len(g.node) > MAX_NODES:
            raise ImportModelError(f"{self.source}: {len(g.node):,} nodes; mcutrain imports at most {MAX_NODES:,}")
        for t in g.initializer:
            self.consts[t.name] = _tensor(self.onnx, t, "initializer", self.folder, self.files)
        inputs = [i for i in g.input if i.name not in self.consts]
        if len(inputs) != 1 or len(g.output) != 1:
            raise ImportModelError(
                f"{self.source}: the graph has {len(inputs)} inputs and {len(g.output)} outputs; "
                "mcutrain imports a network with one input and one output"
            )
        nodes = self._fuse_softplus([self._node(i, n) for i, n in enumerate(g.node)])
        self._input(inputs[0], nodes)
        used = {name for n in nodes for name in n.inputs} | {g.output[0].name}
        for node in nodes:
            self._step(node, used)
        out = g.output[0].name
        if self.branches:
            raise ImportModelError(
                f"{self.source}: the branch that ends in {self.branches[-1][1]!r} is never added back to the chain "
                "(mcutrain imports branches that end in a residual Add)"
            )
        if out != self.cur:
            raise ImportModelError(
                f"{self.source}: the graph's output {out!r} is not the end of its chain of layers ({self.cur!r})"
            )
        if self.orders.get(out) is not None and not self.stored_channels_last(out):
            raise ImportModelError(
                f"{self.source}: the graph's output {out!r} ends in a Transpose or Reshape that mcutrain cannot "
                "follow (mcutrain keeps tensors channels-last and moves no values)"
            )
        return sequential(_merge_linear(self.layers), self.source, self.in_shape)

    def _input(self, vi: Any, nodes: List[_Node]) -> None:
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or t.elem_type != self.onnx.TensorProto.FLOAT:
            raise ImportModelError(f"{self.source}: input {vi.name!r} is not a float32 tensor")
        dims = list(t.shape.dim)
        if len(dims) < 2:
            raise ImportModelError(
                f"{self.source}: input {vi.name!r} has {len(dims)} dimensions; mcutrain imports inputs shaped "
                "(batch, features): export with a batch dimension"
            )
        rest = []
        for d in dims[1:]:
            if not d.HasField("dim_value"):
                raise ImportModelError(f"{self.source}: input {vi.name!r} has a feature dimension of unknown size")
            rest.append(int(d.dim_value))
        n = 1
        for d in rest:
            n *= d
        check_width(n, f"input {vi.name!r}")
        if dims[0].HasField("dim_value"):
            self.batch = int(dims[0].dim_value)
        self.cur = vi.name
        self.shapes[vi.name] = tuple(rest)
        self.pos[vi.name] = 0
        self._input_layout(vi.name, tuple(rest), [n for n in nodes if vi.name in n.inputs])

    def _input_layout(self, name: str, shape: Tuple[int, ...], readers: List[_Node]) -> None:
        """An image or series input: channels-last (N, H, W, C) when the graph first transposes it to
        channels-first, else channels-first (N, C, H, W) as PyTorch gives it, stored channels-last, so the
        network's input is (H, W, C) either way (for a series (T, C))."""
        if len(shape) < 2:
            return
        rank = len(shape) + 1
        to_first = [0, rank - 1] + list(range(1, rank - 1))
        if len(readers) == 1 and readers[0].op == "Transpose" and list(readers[0].attrs.get("perm", [])) == to_first:
            self.in_shape = shape
        elif len(shape) == 3 or any(r.op in _SPATIAL_OPS for r in readers):
            self.orders[name] = _identity_to_none(_channels_last_order(shape))
            self.in_shape = shape[1:] + shape[:1]

    def _node(self, i: int, n: Any) -> _Node:
        attrs = {}
        for a in n.attribute:
            if a.type == self.onnx.AttributeProto.TENSOR:
                attrs[a.name] = _tensor(self.onnx, a.t, f"node {n.name!r} attribute {a.name}", self.folder, self.files)
            elif a.type in (self.onnx.AttributeProto.GRAPH, self.onnx.AttributeProto.GRAPHS):
                attrs[a.name] = None  # control flow: refused below by op type
            else:
                attrs[a.name] = self.onnx.helper.get_attribute_value(a)
        return _Node(n.name or f"#{i}", n.op_type, list(n.input), list(n.output), attrs, n.domain)

    @staticmethod
    def _fuse_softplus(nodes: List[_Node]) -> List[_Node]:
        """PyTorch's Softplus(threshold=t) exports as Where(Greater(x, t), x, Softplus(x)): one Softplus."""
        producer = {o: n for n in nodes for o in n.outputs}
        uses: Dict[str, int] = {}
        for n in nodes:
            for i in n.inputs:
                uses[i] = uses.get(i, 0) + 1
        drop: Set[int] = set()
        for w in nodes:
            if w.op != "Where" or len(w.inputs) != 3:
                continue
            cond, x, sp = (producer.get(v) for v in w.inputs)
            if (
                cond is not None
                and sp is not None
                and cond.op == "Greater"
                and sp.op == "Softplus"
                and cond.inputs[0] == w.inputs[1] == sp.inputs[0]
                and uses.get(w.inputs[0]) == 1
                and uses.get(w.inputs[2]) == 1
            ):
                sp.attrs["_threshold"] = cond.inputs[1]
                sp.outputs = [w.outputs[0]]
                drop |= {id(w)}
                cond.op = "_SoftplusThreshold"
        return [n for n in nodes if id(n) not in drop]

    # ---- one node ----
    def _step(self, n: _Node, used: Set[str]) -> None:
        try:
            with np.errstate(all="ignore"):  # a non-finite weight is refused where a layer takes it (as_f32)
                self._dispatch(n, used)
        except (TypeError, ValueError, IndexError, KeyError, OverflowError) as e:
            if isinstance(e, ImportModelError):
                raise
            # an attribute of the wrong type, an input list of the wrong length: what a damaged file holds
            raise self.fail(n.where, f"its attributes or inputs are malformed ({type(e).__name__}: {e})") from None

    def _dispatch(self, n: _Node, used: Set[str]) -> None:
        if n.domain not in ("", "ai.onnx"):
            raise self.fail(n.where, f"operator domain {n.domain!r} is not standard ONNX")
        ins = [i for i in n.inputs if i]
        if n.op == "Constant":
            self.consts[n.outputs[0]] = self._constant(n)
            return
        if n.op == "_SoftplusThreshold":
            return  # checked by its Softplus
        if n.op == "Shape" and ins and ins[0] in self.shapes:
            self._shape(n)
            return
        if all(i in self.consts for i in ins):
            self.consts[n.outputs[0]] = self._fold(n, [self.consts[i] for i in ins])
            return
        data = [i for i in ins if i in self.shapes]
        if any(i not in self.consts and i not in self.shapes for i in ins):
            missing = next(i for i in ins if i not in self.consts and i not in self.shapes)
            raise self.fail(
                n.where, f"its input {missing!r} is neither a value of the chain nor a constant of the file"
            )
        if n.op in ("Add", "Mul") and len(data) == 2:
            self._join(n)
            return
        if len(data) == 1 and data[0] in self.pos and self.pos[data[0]] < len(self.layers):
            self._fork(data[0])  # a second branch from an earlier value: a residual block's shortcut
        if data != [self.cur]:
            raise self.fail(
                n.where,
                f"it reads {', '.join(repr(d) for d in data)}, not the chain's current value {self.cur!r} "
                "(branching graphs other than residual Adds are not supported)",
            )
        extra = [o for o in n.outputs[1:] if o and o in used]
        if extra:
            raise self.fail(n.where, f"its extra output {extra[0]!r} is used")
        self._data_op(n)

    def _produce(self, n: _Node, shape: Tuple[int, ...], *layers: Module, order: Any = _KEEP) -> None:
        """The node's output is the chain's new value, of the given per-sample ONNX shape, after these layers;
        `order` says where its values are stored (see `orders`): kept from the current value by default."""
        before = self.layers[-1].out_shape if self.layers and layers else None
        after = layers[0].in_shape if layers else None
        if before and after and len(before) > 1 and len(after) > 1 and before != after:
            self.layers.append(L.Flatten())  # the same values seen with another rank ((T, C) as (1, T, C))
        self.layers.extend(layers)
        out = n.outputs[0]
        self.orders[out] = self.orders.get(self.cur) if order is _KEEP else _identity_to_none(order)
        self.shapes[out] = shape
        self.pos[out] = len(self.layers)
        self.cur = out

    def order(self, value: str) -> np.ndarray:
        """Where each value of `value` (in ONNX's row-major order) is stored in mcutrain's tensor."""
        o = self.orders.get(value)
        return np.arange(int(np.prod(self.shapes[value]))) if o is None else o

    def stored_channels_last(self, value: str) -> bool:
        """Is this channels-first ONNX value (C, H, W) or (C, T) stored as mcutrain's (H, W, C) or (T, C)?"""
        return np.array_equal(self.order(value), _channels_last_order(self.shapes[value]))

    def _const_input(self, n: _Node, i: int, what: str) -> np.ndarray:
        if len(n.inputs) <= i or n.inputs[i] not in self.consts:
            raise self.fail(n.where, f"its {what} is not a constant of the file")
        return self.consts[n.inputs[i]]

    def _data_op(self, n: _Node) -> None:
        shape = self.shapes[self.cur]
        size = int(np.prod(shape))
        op = n.op
        if op in _CONVERTERS:
            _CONVERTERS[op](self, n)
        elif op in ("Identity", "Dropout"):
            if op == "Dropout" and len(n.inputs) > 2 and n.inputs[2]:
                mode = self._const_input(n, 2, "training_mode")
                if bool(np.asarray(mode).reshape(-1)[0]):
                    raise self.fail(n.where, "it is in training mode; export the model in eval() mode")
            self._produce(n, shape)
        elif op == "Cast":
            if n.attrs.get("to") != self.onnx.TensorProto.FLOAT:
                raise self.fail(n.where, "it casts to another type than float32")
            self._produce(n, shape)
        elif op in _ACTIVATIONS:
            if op == "Softplus" and "_threshold" in n.attrs:
                t = np.asarray(self.consts.get(n.attrs["_threshold"], np.float32(0)), np.float64)
                if (
                    t.size != 1
                    or n.attrs["_threshold"] not in self.consts
                    or float(t.ravel()[0]) < SOFTPLUS_MIN_THRESHOLD
                ):
                    raise self.fail(
                        n.where, f"its threshold is below {SOFTPLUS_MIN_THRESHOLD:g} (mcutrain's Softplus has none)"
                    )
            self._produce(n, shape, _ACTIVATIONS[op](size))
        elif op == "LeakyRelu":
            self._produce(n, shape, L.LeakyRelu(float(n.attrs.get("alpha", 0.01)), size))
        elif op == "Softmax":
            axis = int(n.attrs.get("axis", -1))
            rank = len(shape) + 1
            if axis not in (-1, rank - 1) or any(d != 1 for d in shape[:-1]):
                raise self.fail(n.where, f"it normalizes axis {axis} of a ({', '.join(map(str, shape))}) value")
            self._produce(n, shape, L.Softmax(1.0, size))
        elif op in ("Gemm", "MatMul"):
            self._linear(n, shape)
        elif op in ("Add", "Sub", "Mul", "Div"):
            self._elementwise(n, shape, size)
        elif op in ("Flatten", "Reshape", "Squeeze", "Unsqueeze"):
            self._produce(n, self._layout(n, shape, size))
        else:
            raise self.fail(n.where, "this operator is not supported")

    # ---- layers with weights ----
    def _linear(self, n: _Node, shape: Tuple[int, ...]) -> None:
        if n.inputs[0] != self.cur:
            raise self.fail(n.where, "the chain's value is not its first input")
        w = np.asarray(self._const_input(n, 1, "weight"), np.float64)
        b = None
        if n.op == "Gemm":
            if n.attrs.get("transA", 0) or len(shape) != 1 or w.ndim != 2:
                raise self.fail(n.where, "only Gemm(x, W[, C]) on (batch, features) values is supported")
            if n.attrs.get("transB", 0):
                w = w.T
            w = w * float(n.attrs.get("alpha", 1.0))
            if len(n.inputs) > 2 and n.inputs[2]:
                c = np.asarray(self._const_input(n, 2, "bias"), np.float64) * float(n.attrs.get("beta", 1.0))
                b = self._broadcast(n, c, (w.shape[1],), "bias")
        elif w.ndim != 2 or any(d != 1 for d in shape[:-1]):
            raise self.fail(n.where, "only x @ W with a 2-D constant W on (batch, features) values is supported")
        if w.shape[0] != shape[-1]:
            raise self.fail(n.where, f"its weight has {w.shape[0]} rows for {shape[-1]} inputs")
        if self.orders.get(self.cur) is not None:  # e.g. a Flatten of (C, H, W), stored (H, W, C): rows to match
            rows = np.empty_like(w)
            rows[self.order(self.cur)] = w
            w = rows
        try:
            layer = dense(w, b, n.where)
        except ShapeError as e:
            raise self.fail(n.where, str(e)) from None
        self._produce(n, shape[:-1] + (w.shape[1],), layer, order=None)

    def _broadcast(self, n: _Node, c: np.ndarray, shape: Tuple[int, ...], what: str) -> np.ndarray:
        """c broadcast to one sample of the given shape (it may carry a leading batch axis of 1), flat."""
        full = (1,) + tuple(shape)
        try:
            ok = np.broadcast_shapes(full, c.shape) == full
        except ValueError:
            ok = False
        if not ok:
            raise self.fail(n.where, f"its constant {what} of shape {c.shape} does not fit values of shape {shape}")
        return np.broadcast_to(c, full).ravel()

    def _elementwise(self, n: _Node, shape: Tuple[int, ...], size: int) -> None:
        data_first = n.inputs[0] == self.cur
        if not data_first and n.op in ("Sub", "Div"):
            raise self.fail(n.where, "only x - c and x / c are supported (the constant second)")
        c = np.asarray(self.consts[n.inputs[1 if data_first else 0]], np.float64)
        v = self._broadcast(n, c, shape, "operand")
        if self.orders.get(self.cur) is not None and c.size != 1:
            stored = np.empty_like(v)
            stored[self.order(self.cur)] = v
            v = stored
        if n.op == "Sub":
            v = -v
        elif n.op == "Div":
            v = 1.0 / v
        v32 = as_f32(v, (size,), n.where)
        if n.op in ("Add", "Sub"):
            layer: Module = L.Bias1d(size)
        elif c.size == 1:
            layer = L.ScalarScale(size, init=float(v32[0]))
            v32 = v32[:1]
        else:
            layer = L.Diag(size)
        layer.params = v32
        self._produce(n, shape, layer)

    def single_channel_conv(self, n: _Node) -> bool:
        """A 1-D Conv of one channel into one without padding, stride or dilation as minidx's
        SingleChannelConv1d (and Bias1d); False when the Conv is not of that kind."""
        shape = self.shapes[self.cur]
        w = np.asarray(self._const_input(n, 1, "filter"), np.float64)
        a = n.attrs
        if (
            n.inputs[0] != self.cur
            or len(shape) != 2
            or shape[0] != 1
            or w.ndim != 3
            or w.shape[:2] != (1, 1)
            or a.get("group", 1) != 1
            or any(s != 1 for s in a.get("strides", [1]))
            or any(d != 1 for d in a.get("dilations", [1]))
            or any(p != 0 for p in a.get("pads", [0, 0]))
            or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID")
        ):
            return False
        k, length = int(w.shape[2]), shape[1]
        if not 1 <= k <= length:
            raise self.fail(n.where, f"its filter of {k} is longer than its {length} inputs")
        out = length - k + 1
        conv = L.SingleChannelConv1d(length, out, k)
        conv.params = as_f32(w.ravel(), (k,), f"{n.where} filter")
        layers: List[Module] = [conv]
        if len(n.inputs) > 2 and n.inputs[2]:
            b = np.asarray(self._const_input(n, 2, "bias"), np.float64)
            if b.shape != (1,):
                raise self.fail(n.where, f"its bias has shape {b.shape}, not (1,)")
            bias = L.Bias1d(out)
            bias.params = as_f32(np.full(out, b[0]), (out,), f"{n.where} bias")
            layers.append(bias)
        self._produce(n, (1, out), *layers)
        return True

    # ---- residuals and x * sigmoid(x) ----
    def _fork(self, start_value: str) -> None:
        """Start a second branch from an earlier value of the chain: keep the first branch's layers aside (they are
        the main body of a residual block whose shortcut the second branch is) and go on from that value."""
        start = self.pos[start_value]
        self.branches.append((start, self.cur, self.layers[start:]))
        for k in [k for k, p in self.pos.items() if p > start]:
            del self.pos[k]  # the first branch's values: only its end is read again, by the block's Add
        del self.layers[start:]
        self.cur = start_value

    def _join_branches(self, n: _Node) -> None:
        """The Add of two branches from one value: Residual(first branch, shortcut=[second branch])."""
        start, first_end, main = self.branches.pop()
        shortcut = self.layers[start:]
        if self.shapes[first_end] != self.shapes[self.cur]:
            raise self.fail(
                n.where,
                f"it adds the branches' ends {first_end!r} {self.shapes[first_end]} and {self.cur!r} "
                f"{self.shapes[self.cur]}, which differ in shape",
            )
        if not np.array_equal(self.order(first_end), self.order(self.cur)):
            raise self.fail(n.where, "a residual Add of branches laid out differently (a Transpose in one of them)")
        block = residual_block(main, shortcut, f"{self.source}: {n.where}")
        shape, order = self.shapes[self.cur], self.orders.get(self.cur)
        for k in [k for k, p in self.pos.items() if p > start]:
            del self.pos[k]
        del self.layers[start:]
        self._produce(n, shape, block, order=order)

    def _join(self, n: _Node) -> None:
        a, b = n.inputs[0], n.inputs[1]
        if n.op == "Add" and self.branches and {a, b} == {self.cur, self.branches[-1][1]}:
            self._join_branches(n)
            return
        if self.cur not in (a, b):
            raise self.fail(n.where, f"neither of its inputs is the chain's current value {self.cur!r}")
        other = b if a == self.cur else a
        if other not in self.pos:  # the end of a branch that is not the innermost open one
            what = "a product of two values is supported only as x * Sigmoid(x)" if n.op == "Mul" else ""
            raise self.fail(
                n.where,
                what or f"it adds {other!r}, which is not the other branch of the residual block {self.cur!r} is in",
            )
        start = self.pos[other]
        if n.op == "Mul":
            last = self.layers[-1] if self.layers else None
            if isinstance(last, L.Sigmoid) and start == len(self.layers) - 1 and other != self.cur:
                self.layers[-1] = L.SiLU(last.n_in)
                self._produce(n, self.shapes[other])
                return
            raise self.fail(n.where, "a product of two values is supported only as x * Sigmoid(x)")
        if self.shapes[other] != self.shapes[self.cur] or start >= len(self.layers):
            raise self.fail(n.where, "a residual Add needs an earlier value of the same shape as the current one")
        if not np.array_equal(self.order(other), self.order(self.cur)):
            raise self.fail(n.where, "a residual Add of values laid out differently (a Transpose inside the block)")
        inner = self.layers[start:]
        try:
            block = Residual(inner[0] if len(inner) == 1 else Sequential(*inner))
        except ShapeError as e:
            raise self.fail(n.where, str(e)) from None
        for k in [k for k, p in self.pos.items() if p > start]:
            del self.pos[k], self.shapes[k]
            self.orders.pop(k, None)
        shape, order = self.shapes[other], self.orders.get(other)
        del self.layers[start:]
        self._produce(n, shape, block, order=order)

    # ---- layout ----
    def _layout(self, n: _Node, shape: Tuple[int, ...], size: int) -> Tuple[int, ...]:
        """The per-sample shape after Flatten, Reshape, Squeeze or Unsqueeze (which move no values)."""
        rank = len(shape) + 1
        if n.op == "Flatten":
            axis = int(n.attrs.get("axis", 1))
            axis = axis + rank if axis < 0 else axis
            if axis < 1 or int(np.prod(shape[: axis - 1])) != 1:
                raise self.fail(n.where, f"Flatten(axis={axis}) would mix samples of the batch")
            return (size,)
        if n.op == "Reshape":
            target = [int(v) for v in np.asarray(self._const_input(n, 1, "shape")).ravel()]
            full = (BATCH,) + shape
            if not n.attrs.get("allowzero", 0):
                target = [full[i] if v == 0 and i < len(full) else v for i, v in enumerate(target)]
            if not target or target[0] not in (BATCH, -1) + ((self.batch,) if self.batch else ()):
                raise self.fail(n.where, f"Reshape to {target} would mix samples of the batch")
            rest = target[1:]
            if target[0] == -1 and -1 in rest:
                raise self.fail(n.where, f"Reshape to {target} has two unknown sizes")
            if -1 in rest:
                if rest.count(-1) > 1:
                    raise self.fail(n.where, f"Reshape to {target} has two unknown sizes")
                known = int(np.prod([d for d in rest if d != -1]))
                if known <= 0 or size % known:
                    raise self.fail(n.where, f"Reshape to {target} does not fit {size} values per sample")
                rest = [size // known if d == -1 else d for d in rest]
            if any(d < 1 for d in rest) or int(np.prod(rest)) != size:
                raise self.fail(n.where, f"Reshape to {target} does not keep the {size} values of each sample")
            return tuple(rest)
        if len(n.inputs) > 1 and n.inputs[1]:
            axes = [int(v) for v in np.asarray(self._const_input(n, 1, "axes")).ravel()]
        else:
            axes = [int(v) for v in n.attrs.get("axes", [])]
        out_rank = rank + len(axes) if n.op == "Unsqueeze" else rank
        axes = sorted(a + out_rank if a < 0 else a for a in axes)
        if n.op == "Unsqueeze":
            if any(a < 1 or a >= out_rank for a in axes) or len(set(axes)) != len(axes):
                raise self.fail(n.where, f"Unsqueeze of axes {axes} would touch the batch axis")
            full = list(shape)
            for a in axes:
                full.insert(a - 1, 1)
            return tuple(full)
        if not axes:
            return tuple(d for d in shape if d != 1) or (1,)
        if any(a < 1 or a >= rank or shape[a - 1] != 1 for a in axes):
            raise self.fail(n.where, f"Squeeze of axes {axes} would touch the batch axis or a size other than 1")
        return tuple(d for i, d in enumerate(shape) if i + 1 not in axes) or (1,)

    # ---- constants ----
    def _constant(self, n: _Node) -> np.ndarray:
        a = n.attrs
        if a.get("value") is not None:
            return a["value"]
        for key, dtype in (("value_float", np.float32), ("value_floats", np.float32)):
            if key in a:
                return np.asarray(a[key], dtype)
        for key in ("value_int", "value_ints"):
            if key in a:
                return np.asarray(a[key], np.int64)
        raise self.fail(n.where, "only numeric constants are supported")

    def _shape(self, n: _Node) -> None:
        full = np.array((BATCH,) + self.shapes[n.inputs[0]], np.int64)
        start, end = int(n.attrs.get("start", 0)), n.attrs.get("end")
        self.consts[n.outputs[0]] = full[start : (None if end is None else int(end))]

    def _fold(self, n: _Node, v: Sequence[np.ndarray]) -> np.ndarray:
        """A node whose inputs are all constants (shape arithmetic, constant weights): its constant output."""
        op, a = n.op, n.attrs
        try:
            if op in ("Identity", "Dropout"):
                return v[0]
            if op == "Cast":
                to = self.onnx.helper.tensor_dtype_to_np_dtype(int(a["to"]))
                return np.asarray(v[0]).astype(to)
            if op in ("Add", "Sub", "Mul", "Div", "Mod"):
                x, y = np.asarray(v[0]), np.asarray(v[1])
                if x.size * y.size > MAX_PARAMS:
                    raise self.fail(n.where, "its constant operands are too large")
                if op == "Div" and x.dtype.kind in "iu":
                    return np.trunc(x / y).astype(x.dtype)
                f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Mod": np.fmod}[op]
                return f(x, y)
            if op == "Neg":
                return -np.asarray(v[0])
            if op == "Concat":
                return np.concatenate([np.atleast_1d(x) for x in v], axis=int(a.get("axis", 0)))
            if op == "Gather":
                return np.take(v[0], np.asarray(v[1], np.int64), axis=int(a.get("axis", 0)))
            if op == "Slice":
                x = np.asarray(v[0])
                starts, ends = np.asarray(v[1]).ravel(), np.asarray(v[2]).ravel()
                axes = np.asarray(v[3]).ravel() if len(v) > 3 else np.arange(len(starts))
                steps = np.asarray(v[4]).ravel() if len(v) > 4 else np.ones(len(starts), np.int64)
                index = [slice(None)] * x.ndim
                for s, e, ax, st in zip(starts, ends, axes, steps):
                    dim = x.shape[int(ax)]
                    index[int(ax)] = slice(int(max(min(s, dim), -dim - 1)), int(max(min(e, dim), -dim - 1)), int(st))
                return x[tuple(index)]
            if op == "Unsqueeze":
                axes = [int(x) for x in np.asarray(v[1]).ravel()] if len(v) > 1 else list(a["axes"])
                return np.expand_dims(v[0], tuple(axes))
            if op == "Squeeze":
                axes = [int(x) for x in np.asarray(v[1]).ravel()] if len(v) > 1 else a.get("axes")
                return np.squeeze(v[0], None if axes is None else tuple(axes))
            if op == "Reshape":
                target = [int(x) for x in np.asarray(v[1]).ravel()]
                target = [v[0].shape[i] if t == 0 and not a.get("allowzero", 0) else t for i, t in enumerate(target)]
                return np.reshape(v[0], target)
            if op == "Transpose":
                return np.transpose(v[0], a.get("perm"))
            if op == "Shape":
                return np.array(np.shape(v[0]), np.int64)
        except ImportModelError:
            raise
        except Exception as e:  # noqa: BLE001 - numpy's errors for inconsistent constants
            raise self.fail(n.where, f"its constant inputs cannot be combined ({e})") from None
        raise self.fail(n.where, "this operator is not supported on constants")


def _merge_linear(layers: List[Module]) -> List[Module]:
    """Dense followed by Bias1d of its output size (MatMul then Add) becomes one Linear, at every level."""
    out: List[Module] = []
    for m in layers:
        if isinstance(m, Residual):
            inner = m.inner.modules if isinstance(m.inner, Sequential) else (m.inner,)
            merged = _merge_linear(list(inner))
            body = merged[0] if len(merged) == 1 else Sequential(*merged)
            if m.shortcut is None:
                m = Residual(body)
            else:
                sc = m.shortcut.modules if isinstance(m.shortcut, Sequential) else (m.shortcut,)
                m = Residual(body, shortcut=_merge_linear(list(sc)))
        if isinstance(m, L.Bias1d) and out and type(out[-1]) is L.Dense:
            d = out.pop()
            lin = L.Linear(d.n_in, d.n_out)
            lin.params = np.concatenate([d.params, m.params])
            m = lin
        out.append(m)
    return out


# ---------------------------------------------------------------- converters of spatial and layout operators
# One function per ONNX operator, registered in _CONVERTERS; each reads the chain's current value (channels-first
# in ONNX, stored channels-last in mcutrain) and produces the node's output.

Converter = Callable[[_Importer, _Node], None]
_CONVERTERS: Dict[str, Converter] = {}
# operators that read a channels-first image or series (an input they read directly is taken as channels-first)
_SPATIAL_OPS = ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization")


def _converter(*ops: str) -> Callable[[Converter], Converter]:
    def register(f: Converter) -> Converter:
        for op in ops:
            _CONVERTERS[op] = f
        return f

    return register


def _spatial_input(imp: _Importer, n: _Node) -> Tuple[int, Tuple[int, ...]]:
    """(channels, (H, W) or (T,)) of the chain's value, a channels-first image or series stored channels-last."""
    if n.inputs[0] != imp.cur:
        raise imp.fail(n.where, "the chain's value is not its first input")
    shape = imp.shapes[imp.cur]
    if len(shape) not in (2, 3):
        raise imp.fail(n.where, f"it reads a ({', '.join(map(str, shape))}) value; mcutrain takes (C, H, W) or (C, T)")
    if not imp.stored_channels_last(imp.cur):
        raise imp.fail(n.where, "its input went through a Transpose or Reshape that mcutrain cannot follow")
    return shape[0], shape[1:]


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _window(imp: _Importer, n: _Node, spatial: Tuple[int, ...], kernel: Sequence[int]) -> Tuple[Any, Any, Any]:
    """(kernel, stride, padding) of a Conv or pooling node in mcutrain's terms for a spatial input: explicit
    (top, bottom, left, right), or (left, right) for a series."""
    a, rank = n.attrs, len(spatial)
    kernel = [int(k) for k in kernel]
    strides = [int(s) for s in a.get("strides", [1] * rank)]
    if len(kernel) != rank or len(strides) != rank:
        raise imp.fail(n.where, f"its kernel {kernel} or strides {strides} do not fit a {rank}-D input")
    if any(int(d) != 1 for d in a.get("dilations", [1] * rank)):
        raise imp.fail(n.where, "dilated windows are not supported")
    auto = _text(a.get("auto_pad", "NOTSET"))
    if auto == "SAME_UPPER":  # mcutrain's "same" (TFLite's): the odd padding after
        return (kernel[0] if rank == 1 else tuple(kernel)), (strides[0] if rank == 1 else tuple(strides)), "same"
    if auto == "SAME_LOWER":
        total = [max((-(-d // s) - 1) * s + k - d, 0) for d, s, k in zip(spatial, strides, kernel)]
        before = [t - t // 2 for t in total]  # the odd padding before
        after = [t - b for t, b in zip(total, before)]
    elif auto in ("NOTSET", "VALID"):
        pads = [int(p) for p in a.get("pads", [0] * 2 * rank)] if auto == "NOTSET" else [0] * 2 * rank
        if len(pads) != 2 * rank:
            raise imp.fail(n.where, f"its pads {pads} do not fit a {rank}-D input")
        before, after = pads[:rank], pads[rank:]
    else:
        raise imp.fail(n.where, f"auto_pad {auto!r} is not an ONNX padding")
    if int(a.get("ceil_mode", 0)):
        for d, k, s, b, e in zip(spatial, kernel, strides, before, after):
            if (d + b + e - k) % s:
                raise imp.fail(n.where, "ceil_mode=1 gives another output size than mcutrain's (floor) here")
    if rank == 1:
        return kernel[0], strides[0], (before[0], after[0])
    return tuple(kernel), tuple(strides), (before[0], after[0], before[1], after[1])


def _layer(imp: _Importer, n: _Node, make: Callable[[], Module]) -> Module:
    """The mcutrain layer `make` builds, its ShapeError (a window larger than the input...) as ImportModelError."""
    try:
        return make()
    except ShapeError as e:
        raise imp.fail(n.where, str(e)) from None


def _produce_spatial(imp: _Importer, n: _Node, layer: Module, *more: Module) -> None:
    """The output of a spatial layer: stored (H, W, C), channels-first (C, H, W) in ONNX; a flat one is (C, 1, 1)."""
    out = layer.out_shape  # the layers in `more` keep its shape
    assert out is not None
    shape = tuple(out[-1:]) + tuple(out[:-1]) if len(out) > 1 else tuple(out) + (1,) * len(imp.shapes[imp.cur][1:])
    imp._produce(n, shape, layer, *more, order=_channels_last_order(shape))


def _bias(imp: _Importer, n: _Node, channels: int) -> Optional[np.ndarray]:
    if len(n.inputs) > 2 and n.inputs[2]:
        return np.asarray(imp._const_input(n, 2, "bias"), np.float64).reshape(-1)[:channels]
    return None


@_converter("Conv")
def _conv(imp: _Importer, n: _Node) -> None:
    """Conv: Conv2d or Conv1d (groups 1), DepthwiseConv2d (groups = channels, depth multiplier out / in), or
    minidx's SingleChannelConv1d; the filter (out, in, kh, kw) becomes [kh][kw][in][out]."""
    if imp.single_channel_conv(n):
        return
    c, spatial = _spatial_input(imp, n)
    w = np.asarray(imp._const_input(n, 1, "filter"), np.float64)
    if w.ndim != len(spatial) + 2:
        raise imp.fail(n.where, f"its filter of shape {w.shape} does not fit a {len(spatial)}-D input")
    out, group = int(w.shape[0]), int(n.attrs.get("group", 1))
    k, s, p = _window(imp, n, spatial, w.shape[2:])
    b = _bias(imp, n, out)
    if b is not None and b.size != out:
        raise imp.fail(n.where, f"its bias has {b.size} values for {out} output channels")
    in_shape = tuple(spatial) + (c,)
    if group == 1 and w.shape[1] == c:
        kind = L.Conv2d if len(spatial) == 2 else L.Conv1d
        layer = _layer(imp, n, lambda: kind(c, out, k, s, p, bias=b is not None, input_shape=in_shape))
        wt = np.moveaxis(w, (0, 1), (-1, -2))  # (out, in, *k) -> (*k, in, out)
    elif group == c and w.shape[1] == 1 and out % c == 0 and len(spatial) == 2:
        m = out // c
        layer = _layer(imp, n, lambda: L.DepthwiseConv2d(c, k, s, p, m, bias=b is not None, input_shape=in_shape))
        wt = np.moveaxis(w[:, 0], 0, -1)  # (out, kh, kw) -> (kh, kw, out)
    else:
        raise imp.fail(
            n.where,
            f"a grouped Conv ({group} groups of {c} channels, filter {w.shape}): mcutrain imports groups 1, and groups "
            "equal to the channels of an image (depthwise)",
        )
    parts = [wt.ravel()] + ([b] if b is not None else [])
    layer.params = as_f32(np.concatenate(parts), (layer.param_count(),), f"{n.where} filter")
    _produce_spatial(imp, n, layer)


@_converter("MaxPool", "AveragePool")
def _pool(imp: _Importer, n: _Node) -> None:
    """MaxPool and AveragePool: MaxPool2d/1d, AvgPool2d/1d (which divide by the taps inside the input);
    count_include_pad=1 with padding is AvgPool then a Diag scaling each output by its taps inside / all taps."""
    c, spatial = _spatial_input(imp, n)
    k, s, p = _window(imp, n, spatial, n.attrs.get("kernel_shape", []))
    avg = n.op == "AveragePool"
    kinds = {(False, 2): L.MaxPool2d, (False, 1): L.MaxPool1d, (True, 2): L.AvgPool2d, (True, 1): L.AvgPool1d}
    kind = kinds[avg, len(spatial)]
    layer = _layer(imp, n, lambda: kind(k, s, p, input_shape=tuple(spatial) + (c,)))
    more: List[Module] = []
    if avg and int(n.attrs.get("count_include_pad", 0)) and any(p):
        more.append(_taps_inside(layer))
    _produce_spatial(imp, n, layer, *more)


def _taps_inside(pool: Module) -> Module:
    """A Diag over the pool's outputs: (taps of its window inside the input) / (taps of the window)."""
    g = pool._geometry()
    scale = np.ones(1)
    for n_in, n_out, k, st, before in (
        (g["h_in"], g["h_out"], g["kh"], g["sh"], g["pt"]),
        (g["w_in"], g["w_out"], g["kw"], g["sw"], g["pl"]),
    ):
        first = np.arange(int(n_out)) * int(st) - int(before)
        inside = np.minimum(first + int(k), int(n_in)) - np.maximum(first, 0)
        scale = np.multiply.outer(scale, inside / float(k))
    d = np.repeat(scale.reshape(-1), int(g["c_out"]))
    diag = L.Diag(d.size)
    diag.params = d.astype(np.float32)
    return diag


def _global_pool(imp: _Importer, n: _Node, keepdims: bool = True) -> None:
    """The mean (GlobalAvgPool2d/1d) or the largest value (a max pooling window as large as the input) of each
    channel."""
    c, spatial = _spatial_input(imp, n)
    in_shape = tuple(spatial) + (c,)
    if n.op == "GlobalMaxPool":
        kind: Any = L.MaxPool2d if len(spatial) == 2 else L.MaxPool1d
        k = tuple(spatial) if len(spatial) == 2 else spatial[0]
        layer = _layer(imp, n, lambda: kind(k, 1, input_shape=in_shape))
    else:
        kind = L.GlobalAvgPool2d if len(spatial) == 2 else L.GlobalAvgPool1d
        layer = _layer(imp, n, lambda: kind(input_shape=in_shape))
    shape = (c,) + (1,) * len(spatial) if keepdims else (c,)
    imp._produce(n, shape, layer, order=None)


@_converter("GlobalAveragePool", "GlobalMaxPool")
def _global(imp: _Importer, n: _Node) -> None:
    _global_pool(imp, n)


@_converter("ReduceMean")
def _reduce_mean(imp: _Importer, n: _Node) -> None:
    """ReduceMean over every spatial axis of an image or series (PyTorch's adaptive average pooling to 1 and
    x.mean((2, 3))): global average pooling."""
    shape = imp.shapes[imp.cur]
    if len(n.inputs) > 1 and n.inputs[1]:
        axes = [int(v) for v in np.asarray(imp._const_input(n, 1, "axes")).ravel()]
    else:
        axes = [int(v) for v in n.attrs.get("axes", [])]
    rank = len(shape) + 1
    if sorted(a + rank if a < 0 else a for a in axes) != list(range(2, rank)) or rank < 3:
        raise imp.fail(n.where, f"a mean over axes {axes}: mcutrain imports the mean over every spatial axis")
    _global_pool(imp, n, bool(n.attrs.get("keepdims", 1)))


@_converter("BatchNormalization")
def _batchnorm(imp: _Importer, n: _Node) -> None:
    """BatchNormalization in inference form: BatchNorm (scale, bias, running mean and variance; ONNX's momentum
    m is mcutrain's 1 - m) over the channels of an image, series or flat vector."""
    if int(n.attrs.get("training_mode", 0)) or any(o for o in n.outputs[1:]):
        raise imp.fail(n.where, "it is in training mode; export the model in eval() mode")
    shape = imp.shapes[imp.cur]
    if len(shape) == 1:
        if imp.orders.get(imp.cur) is not None:
            raise imp.fail(n.where, "its input went through a Transpose or Reshape that mcutrain cannot follow")
        c, in_shape = shape[0], None
    else:
        c, spatial = _spatial_input(imp, n)
        in_shape = tuple(spatial) + (c,)
    stats = [
        np.asarray(imp._const_input(n, i, what), np.float64).reshape(-1)
        for i, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "variance"))
    ]
    if any(v.size != c for v in stats):
        raise imp.fail(n.where, f"its scale, bias, mean and variance need {c} values each")
    if np.any(stats[3] < 0):
        raise imp.fail(n.where, "its running variance has negative values")
    eps, momentum = float(n.attrs.get("epsilon", 1e-5)), float(n.attrs.get("momentum", 0.9))
    layer = _layer(imp, n, lambda: L.BatchNorm(c, eps=eps, momentum=1.0 - momentum, input_shape=in_shape))
    layer.params = as_f32(np.concatenate(stats), (4 * c,), f"{n.where} parameters")
    imp._produce(n, shape, layer)


@_converter("Clip")
def _clip(imp: _Importer, n: _Node) -> None:
    """Clip(x, 0, 6) as Relu6 (PyTorch's ReLU6), Clip(x, 0) as Relu."""

    def bound(i: int, attr: str) -> Optional[float]:
        if len(n.inputs) > i and n.inputs[i]:
            v = np.asarray(imp._const_input(n, i, attr), np.float64).reshape(-1)
            return float(v[0]) if v.size == 1 else float("nan")
        return float(n.attrs[attr]) if attr in n.attrs else None

    lo, hi = bound(1, "min"), bound(2, "max")
    size = int(np.prod(imp.shapes[imp.cur]))
    if lo == 0.0 and hi == 6.0:
        imp._produce(n, imp.shapes[imp.cur], L.Relu6(size))
    elif lo == 0.0 and (hi is None or hi == float("inf")):
        imp._produce(n, imp.shapes[imp.cur], L.Relu(size))
    else:
        raise imp.fail(n.where, f"Clip to [{lo}, {hi}]: mcutrain imports Clip(0, 6) (Relu6) and Clip(0) (Relu)")


@_converter("Transpose")
def _transpose(imp: _Importer, n: _Node) -> None:
    """A Transpose that keeps the batch axis first moves no values in mcutrain, only where they are read."""
    shape = imp.shapes[imp.cur]
    perm = [int(p) for p in n.attrs.get("perm", range(len(shape), -1, -1))]
    if sorted(perm) != list(range(len(shape) + 1)) or perm[0] != 0:
        raise imp.fail(n.where, f"Transpose {perm} would mix samples of the batch")
    axes = [p - 1 for p in perm[1:]]
    order = imp.order(imp.cur).reshape(shape).transpose(axes).ravel()
    imp._produce(n, tuple(shape[a] for a in axes), order=order)
