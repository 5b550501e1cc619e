"""Import an ONNX model (opset 13 or later) as an mcutrain network.

The graph must be a chain from one float input (batch, features...) to one output, the shape
`torch.onnx.export` gives an `nn.Sequential`: Gemm, or MatMul then Add (Linear/Dense); Add, Sub, Mul and
Div by a constant (Bias1d, ScalarScale for a single number, Diag for a vector); Relu, LeakyRelu, Sigmoid,
Tanh, Softplus (also PyTorch's form with its threshold), Sin, Cos; Softmax on the last axis; x * Sigmoid(x)
(SiLU); Add of an earlier value of the chain (Residual); a one-channel 1-D Conv without padding, stride or
dilation (Conv1d, its bias a Bias1d); and the layout ops in between (Flatten, Reshape, Squeeze, Unsqueeze,
Identity, Dropout in inference form, Cast to float), with shape arithmetic on constants and Shape folded
away. Anything else is an ImportModelError naming the node and listing what is supported.

Hostile files: the file is read with a size bound, every tensor's element count is bounded before its data
is converted, external tensor data (torch.onnx.export writes it to `model.onnx.data`) is read only from a file
in the model's folder and within that file's bounds, and every weight must be a constant of the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from mcutrain import layers as L
from mcutrain.compose import Residual, Sequential
from mcutrain.errors import ImportModelError, ShapeError
from mcutrain.extras import require
from mcutrain.files import read_bounded
from mcutrain.module import Module

from .interop import MAX_IMPORT_BYTES, MAX_PARAMS, as_f32, check_width, dense, sequential

SUPPORTED = (
    "Gemm, MatMul (+ Add), Add/Sub/Mul/Div by a constant, Relu, LeakyRelu, Sigmoid, Tanh, Softplus, Sin, Cos, "
    "Softmax (last axis), x * Sigmoid(x), Add of an earlier value (residual), Conv (1 channel, 1-D, no padding), "
    "Flatten, Reshape, Squeeze, Unsqueeze, Identity, Dropout (inference), Cast to float, Constant and shape "
    "arithmetic on constants"
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
        self.pos: Dict[str, int] = {}  # data value -> how many layers precede it
        self.layers: List[Module] = []
        self.cur = ""
        self.batch: Optional[int] = None  # the input's batch size when the file fixes it

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
        self._input(inputs[0])
        nodes = self._fuse_softplus([self._node(i, n) for i, n in enumerate(g.node)])
        used = {name for n in nodes for name in n.inputs} | {g.output[0].name}
        for node in nodes:
            self._step(node, used)
        out = g.output[0].name
        if out != self.cur:
            raise ImportModelError(
                f"{self.source}: the graph's output {out!r} is not the end of its chain of layers ({self.cur!r})"
            )
        return sequential(_merge_linear(self.layers), self.source)

    def _input(self, vi: Any) -> None:
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

    def _produce(self, n: _Node, shape: Tuple[int, ...], *layers: Module) -> None:
        self.layers.extend(layers)
        out = n.outputs[0]
        self.shapes[out] = shape
        self.pos[out] = len(self.layers)
        self.cur = out

    def _const_input(self, n: _Node, i: int, what: str) -> np.ndarray:
        if len(n.inputs) <= i or n.inputs[i] not in self.consts:
            raise self.fail(n.where, f"its {what} is not a constant of the file")
        return self.consts[n.inputs[i]]

    def _data_op(self, n: _Node) -> None:
        shape = self.shapes[self.cur]
        size = int(np.prod(shape))
        op = n.op
        if op in ("Identity", "Dropout"):
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
        elif op == "Conv":
            self._conv(n, shape)
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
        try:
            layer = dense(w, b, n.where)
        except ShapeError as e:
            raise self.fail(n.where, str(e)) from None
        self._produce(n, shape[:-1] + (w.shape[1],), layer)

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

    def _conv(self, n: _Node, shape: Tuple[int, ...]) -> None:
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
            raise self.fail(
                n.where, "only a 1-D Conv with one input and one output channel, no padding, stride or dilation"
            )
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

    # ---- residuals and x * sigmoid(x) ----
    def _join(self, n: _Node) -> None:
        a, b = n.inputs[0], n.inputs[1]
        if self.cur not in (a, b):
            raise self.fail(n.where, f"neither of its inputs is the chain's current value {self.cur!r}")
        other = b if a == self.cur else a
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
        inner = self.layers[start:]
        try:
            block = Residual(inner[0] if len(inner) == 1 else Sequential(*inner))
        except ShapeError as e:
            raise self.fail(n.where, str(e)) from None
        for k in [k for k, p in self.pos.items() if p > start]:
            del self.pos[k], self.shapes[k]
        shape = self.shapes[other]
        del self.layers[start:]
        self._produce(n, shape, block)

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
            m = Residual(merged[0] if len(merged) == 1 else Sequential(*merged))
        if isinstance(m, L.Bias1d) and out and type(out[-1]) is L.Dense:
            d = out.pop()
            lin = L.Linear(d.n_in, d.n_out)
            lin.params = np.concatenate([d.params, m.params])
            m = lin
        out.append(m)
    return out
