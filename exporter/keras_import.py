"""Import a Keras 3 `.keras` file (a keras.Sequential model, or a functional model that is a chain with residual
blocks: an Add of an earlier value, or of two branches from one value, ResNet's projection shortcut) as an mcutrain
network.

Supported layers: Dense (with or without bias) with the activations linear, relu, relu6, leaky_relu, sigmoid,
tanh, softplus, silu/swish and softmax; the layers Activation (the same names), ReLU (no threshold; a cap of 6
is Relu6), LeakyReLU, Softmax (last axis); and Dropout, Flatten and Identity, which move no values at inference.
Convolutional networks on (batch, H, W, C) images or (batch, T, C) series: Conv2D and Conv1D (padding valid,
same, or causal for Conv1D), DepthwiseConv2D (with its depth multiplier), SeparableConv2D (a DepthwiseConv2d
then a 1x1 Conv2d), MaxPooling1D/2D, AveragePooling1D/2D, GlobalAveragePooling1D/2D, GlobalMaxPooling1D/2D,
BatchNormalization (mcutrain's BatchNorm with its running statistics) and SpatialDropout. Keras is channels-last
as mcutrain is, so every kernel keeps its layout. Anything else is an ImportModelError naming the layer and
listing what is supported.

The file is loaded by Keras itself, with safe_mode on (a file cannot smuggle in a Python lambda), after its
archive's size and its config's layer widths and weight count have been checked. Keras needs
a backend: KERAS_BACKEND if set, else TensorFlow if installed, else jax or torch (see interop.keras_backend).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from mcutrain import layers as L
from mcutrain.errors import ImportModelError, ShapeError
from mcutrain.extras import require
from mcutrain.files import read_bounded
from mcutrain.module import Module
from mcutrain.plaindata import parse_json

from .interop import (
    MAX_IMPORT_BYTES,
    MAX_PARAMS,
    as_f32,
    check_width,
    dense,
    keras_backend,
    residual_block,
    sequential,
)

SUPPORTED = (
    "Dense (activation linear, relu, relu6, leaky_relu, sigmoid, tanh, softplus, silu/swish or softmax), "
    "Activation (the same), ReLU, LeakyReLU, Softmax (last axis), Dropout, Flatten, Identity, Conv1D, Conv2D, "
    "DepthwiseConv2D, SeparableConv2D, MaxPooling1D/2D, AveragePooling1D/2D, GlobalAveragePooling1D/2D, "
    "GlobalMaxPooling1D/2D, BatchNormalization, SpatialDropout1D/2D, in a keras.Sequential model (channels_last), "
    "or a functional model of them with residual Adds (of an earlier value, or of two branches from one value)"
)

_ACTIVATIONS: Dict[str, Callable[[int], Optional[Module]]] = {
    "linear": lambda n: None,
    "relu": L.Relu,
    "relu6": L.Relu6,
    "leaky_relu": lambda n: L.LeakyRelu(0.2, n),  # keras.activations.leaky_relu's default slope
    "sigmoid": L.Sigmoid,
    "tanh": L.Tanh,
    "softplus": L.Softplus,
    "silu": L.SiLU,
    "swish": L.SiLU,
    "softmax": lambda n: L.Softmax(1.0, n),
}


def from_keras(path: Union[str, Path]) -> Module:
    """The mcutrain network of a Keras 3 `.keras` file holding a keras.Sequential model (see the module
    docstring). Raises ImportModelError naming an unsupported layer, MissingExtraError without Keras."""
    p = Path(path)
    read_bounded(p, MAX_IMPORT_BYTES, "Keras file", ImportModelError)  # a regular file of a bounded size
    _check_archive(p)
    keras_backend()
    keras = require("keras", "keras")
    try:
        model = keras.saving.load_model(str(p), compile=False, safe_mode=True)
    except Exception as e:  # noqa: BLE001 - Keras raises many kinds for a file it cannot load
        raise ImportModelError(f"{p}: Keras cannot load this file ({type(e).__name__}: {e})") from None
    return from_keras_model(model, str(p))


def _dict(v: Any) -> Dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _check_archive(p: Path) -> None:
    """Check a .keras archive before Keras reads it (Keras allocates every layer's weights as it builds them):
    it unpacks to a bounded size, and its config.json asks for no layer wider than MAX_WIDTH and for at most
    MAX_PARAMS weights in its Dense layers."""
    try:
        with zipfile.ZipFile(p) as zf:
            total = sum(i.file_size for i in zf.infolist())
            if total > MAX_IMPORT_BYTES:
                raise ImportModelError(f"{p}: unpacks to {total:,} bytes; mcutrain reads at most {MAX_IMPORT_BYTES:,}")
            config = parse_json(zf.read("config.json"), f"{p}: config.json", ImportModelError)
    except ImportModelError:
        raise
    except (zipfile.BadZipFile, KeyError, ValueError, RecursionError, OSError) as e:
        raise ImportModelError(f"{p}: not a Keras 3 .keras file (a zip archive with config.json): {e}") from None

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if k in ("units", "filters", "depth_multiplier") or (
                    k in ("batch_shape", "input_shape", "shape", "kernel_size", "pool_size", "strides")
                    and isinstance(x, list)
                ):
                    for d in x if isinstance(x, list) else [x]:
                        if d is not None and not isinstance(d, (list, dict)):
                            check_width(d, f"{p}: {k}")
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    try:
        walk(config)
    except RecursionError:
        raise ImportModelError(f"{p}: config.json is nested too deeply") from None
    weights = _weights_bound(_dict(_dict(config).get("config")).get("layers"))
    if weights > MAX_PARAMS:
        raise ImportModelError(
            f"{p}: its layers hold {weights:,} weights or more; mcutrain imports at most {MAX_PARAMS:,}"
        )


def _weights_bound(layers: Any) -> int:
    """At least as many weights as the layers of a config hold, from their widths alone: the channels (or
    features) n of the value, the positions `area` per sample (no layer adds any), a Flatten multiplying them."""
    n: Optional[int] = None
    area, weights = 1, 0
    for layer in layers if isinstance(layers, list) else []:
        cfg = _dict(_dict(layer).get("config"))
        shape, units, filters = cfg.get("batch_shape"), cfg.get("units"), cfg.get("filters")
        if isinstance(shape, list) and shape and all(isinstance(d, int) for d in shape[1:]):
            n, area = shape[-1], int(np.prod(shape[1:-1]))
        if n is None:
            continue
        if _dict(layer).get("class_name") == "Flatten":
            n, area = n * area, 1
        kernel = cfg.get("kernel_size", 1)
        taps = int(np.prod([d for d in (kernel if isinstance(kernel, list) else [kernel]) if isinstance(d, int)]))
        mult = cfg.get("depth_multiplier") if isinstance(cfg.get("depth_multiplier"), int) else None
        if mult is not None:  # depthwise (and the depthwise half of a separable convolution)
            weights += taps * n * mult + n * mult
            n, taps = n * mult, 1
        if isinstance(units, int):
            weights += (n + 1) * units
            n = units
        elif isinstance(filters, int):
            weights += (taps * n + 1) * filters
            n = filters
    return weights


def _activation(name: Any, n: int, where: str) -> Optional[Module]:
    """The mcutrain layer of a Keras activation (None for linear)."""
    key = name if isinstance(name, str) else getattr(name, "__name__", repr(name))
    if key not in _ACTIVATIONS:
        raise ImportModelError(f"{where}: activation {key!r} is not supported. mcutrain imports: {SUPPORTED}")
    return _ACTIVATIONS[key](n)


def from_keras_model(model: Any, source: str = "Keras model") -> Module:
    """The mcutrain network of a keras.Sequential model in memory, or of a functional keras.Model that is a chain
    with residual blocks (see _functional)."""
    keras = require("keras", "keras")
    functional = type(model).__name__ == "Functional"
    if not isinstance(model, keras.Sequential) and not functional:
        raise ImportModelError(
            f"{source}: a {type(model).__name__} model; mcutrain imports keras.Sequential models and functional "
            f"models built from keras.Input. mcutrain imports: {SUPPORTED}"
        )
    try:
        batch_shape = tuple(model.inputs[0].shape)
    except (AttributeError, IndexError, ValueError):
        raise ImportModelError(f"{source}: the model has no known input shape (build it with keras.Input)") from None
    if not 2 <= len(batch_shape) <= 4 or any(d is None for d in batch_shape[1:]):
        raise ImportModelError(
            f"{source}: input shape {batch_shape}; mcutrain imports inputs shaped (batch, features), (batch, T, C) "
            "or (batch, H, W, C)"
        )
    shape: Shape = tuple(check_width(d, f"{source} input") for d in batch_shape[1:])
    check_width(int(np.prod(shape)), f"{source} input")
    if functional:
        return sequential(_functional(model, source, shape), source, batch_shape[1:] if len(batch_shape) > 2 else None)
    out: List[Module] = []
    for layer in model.layers:
        kind = type(layer).__name__
        where = f"{source}: layer {layer.name!r} ({kind})"
        if kind not in _CONVERTERS:
            raise ImportModelError(f"{where}: this layer is not supported. mcutrain imports: {SUPPORTED}")
        try:
            layers, shape = _CONVERTERS[kind](layer, layer.get_config(), shape, where)
        except ShapeError as e:
            raise ImportModelError(f"{where}: {e}") from None
        out.extend(layers)
    return sequential(out, source, batch_shape[1:] if len(batch_shape) > 2 else None)


def _inbound(layer: Any) -> List[str]:
    """The names of the layers whose outputs a functional model's layer reads."""
    nodes = getattr(layer, "_inbound_nodes", None) or []
    return [t._keras_history.operation.name for t in nodes[0].input_tensors] if nodes else []


def _functional(model: Any, source: str, shape: Shape) -> List[Module]:
    """The layers of a functional model that is a chain from one input to one output with residual blocks: an Add of
    the chain's value and an earlier one is y = x + M(x); a layer that reads an earlier value starts a second branch,
    and the Add of both branches' ends is y = M(x) + S(x) (ResNet's projection shortcut)."""
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise ImportModelError(f"{source}: {len(model.inputs)} inputs and {len(model.outputs)} outputs; mcutrain "
                               "imports a network with one input and one output")  # fmt: skip
    layers: List[Module] = []
    pos: Dict[str, int] = {}  # value (the layer that gives it) -> how many layers precede it
    shapes: Dict[str, Shape] = {}
    branches: List[Tuple[int, str, List[Module]]] = []  # open second branches: (start, first branch's end, its layers)
    cur = ""
    for layer in model.layers:
        kind, ins = type(layer).__name__, _inbound(layer)
        where = f"{source}: layer {layer.name!r} ({kind})"
        if kind == "InputLayer":
            cur, pos[layer.name], shapes[layer.name] = layer.name, 0, shape
            continue
        if kind == "Add":
            if len(ins) != 2:
                raise ImportModelError(f"{where}: an Add of {len(ins)} values; mcutrain adds two (a residual block)")
            if branches and set(ins) == {cur, branches[-1][1]}:  # the two branches of a block with a projection
                start, first_end, main = branches.pop()
                if shapes[first_end] != shapes[cur]:
                    raise ImportModelError(f"{where}: it adds {shapes[first_end]} and {shapes[cur]}")
                block = residual_block(main, layers[start:], where)
            else:
                other = ins[1] if ins[0] == cur else ins[0]
                if cur not in ins or other not in pos or pos[other] >= len(layers) or shapes[other] != shapes[cur]:
                    raise ImportModelError(
                        f"{where}: a residual Add needs the chain's value and an earlier one of the same shape, or "
                        "the ends of two branches from one value"
                    )
                start = pos[other]
                block = residual_block(layers[start:], [], where)
            for k in [k for k, p in pos.items() if p > start]:
                del pos[k]
            del layers[start:]
            layers.append(block)
            cur, pos[layer.name], shapes[layer.name] = layer.name, len(layers), shapes[cur]
            continue
        if kind not in _CONVERTERS:
            raise ImportModelError(f"{where}: this layer is not supported. mcutrain imports: {SUPPORTED}")
        if len(ins) != 1:
            raise ImportModelError(f"{where}: it reads {len(ins)} values; mcutrain's layers read one")
        if ins[0] != cur:
            if ins[0] not in pos or pos[ins[0]] >= len(layers):
                raise ImportModelError(f"{where}: it reads {ins[0]!r}, not the chain's current value {cur!r}")
            start = pos[ins[0]]  # a second branch from an earlier value: the first one is set aside
            branches.append((start, cur, layers[start:]))
            for k in [k for k, p in pos.items() if p > start]:
                del pos[k]
            del layers[start:]
            cur = ins[0]
        try:
            converted, out_shape = _CONVERTERS[kind](layer, layer.get_config(), shapes[cur], where)
        except ShapeError as e:
            raise ImportModelError(f"{where}: {e}") from None
        layers.extend(converted)
        cur, pos[layer.name], shapes[layer.name] = layer.name, len(layers), out_shape
    if branches:
        raise ImportModelError(f"{source}: the branch that ends in {branches[-1][1]!r} is never added back")
    if model.outputs[0]._keras_history.operation.name != cur:
        raise ImportModelError(f"{source}: the model's output is not the end of its chain of layers ({cur!r})")
    return layers


# ---------------------------------------------------------------- one converter per Keras layer class
# Each takes (the Keras layer, its config, the shape of one sample before it, where) and gives the mcutrain
# layers and the shape after it. Keras is channels-last, as mcutrain: filters and pooling map one to one.

Shape = Tuple[int, ...]
Converter = Callable[[Any, Dict[str, Any], Shape, str], Tuple[List[Module], Shape]]
_CONVERTERS: Dict[str, Converter] = {}


def _converter(*kinds: str) -> Callable[[Converter], Converter]:
    def register(f: Converter) -> Converter:
        for kind in kinds:
            _CONVERTERS[kind] = f
        return f

    return register


def _with_activation(layers: List[Module], cfg: Dict[str, Any], where: str) -> Tuple[List[Module], Shape]:
    """The layers, then the layer of the config's activation; the shape after the last one."""
    shape = layers[-1].out_shape
    assert shape is not None
    act = _activation(cfg.get("activation", "linear"), int(np.prod(shape)), where)
    return layers + ([act] if act is not None else []), shape


def _size(shape: Shape) -> int:
    return int(np.prod(shape))


@_converter("Dense")
def _dense(layer: Any, cfg: Dict[str, Any], shape: Shape, where: str) -> Tuple[List[Module], Shape]:
    weights = layer.get_weights()
    w = np.asarray(weights[0])
    if len(shape) > 1:
        raise ImportModelError(
            f"{where}: a Dense layer on ({', '.join(map(str, shape))}) values works on their last axis; mcutrain "
            f"imports Dense on flat values (put a Flatten before it). mcutrain imports: {SUPPORTED}"
        )
    if w.ndim != 2 or w.shape[0] != shape[0]:
        raise ImportModelError(f"{where}: kernel of shape {w.shape} after {shape[0]} values")
    lin = dense(w, np.asarray(weights[1]) if cfg.get("use_bias", True) else None, where)
    return _with_activation([lin], cfg, where)


@_converter("Activation")
def _activation_layer(layer: Any, cfg: Dict[str, Any], shape: Shape, where: str) -> Tuple[List[Module], Shape]:
    act = _activation(cfg.get("activation"), _size(shape), where)
    return ([act] if act is not None else []), shape


@_converter("ReLU")
def _relu(layer: Any, cfg: Dict[str, Any], shape: Shape, where: str) -> Tuple[List[Module], Shape]:
    cap, slope = cfg.get("max_value"), float(cfg.get("negative_slope", 0.0))
    if float(cfg.get("threshold", 0.0)) != 0.0 or (cap is not None and (float(cap) != 6.0 or slope)):
        raise ImportModelError(f"{where}: a ReLU with a threshold or a cap other than 6. mcutrain imports: {SUPPORTED}")
    n = _size(shape)
    return [L.Relu6(n) if cap is not None else L.LeakyRelu(slope, n) if slope else L.Relu(n)], shape


@_converter("LeakyReLU")
def _leaky_relu(layer: Any, cfg: Dict[str, Any], shape: Shape, where: str) -> Tuple[List[Module], Shape]:
    return [L.LeakyRelu(float(cfg.get("negative_slope", cfg.get("alpha", 0.3))), _size(shape))], shape


@_converter("Softmax")
def _softmax(layer: Any, cfg: Dict[str, Any], shape: Shape, where: str) -> Tuple[List[Module], Shape]:
    if cfg.get("axis", -1) not in (-1, 1, [-1], [1]) or len(shape) > 1:
        raise ImportModelError(
            f"{where}: softmax over axis {cfg.get('axis')} of ({', '.join(map(str, shape))}) values. "
            f"mcutrain imports: {SUPPORTED}"
        )
    return [L.Softmax(1.0, _size(shape))], shape


@_converter("Dropout", "SpatialDropout1D", "SpatialDropout2D", "Identity", "InputLayer")
def _nothing(layer: Any, cfg: Dict[str, Any], shape: Shape, where: str) -> Tuple[List[Module], Shape]:
    return [], shape


@_converter("Flatten")
def _flatten(layer: Any, cfg: Dict[str, Any], shape: Shape, where: str) -> Tuple[List[Module], Shape]:
    """A channels-last Flatten moves no values; a Dense layer reads them in mcutrain's (H, W, C) order."""
    return [], (_size(shape),)


def _spatial(cfg: Dict[str, Any], shape: Shape, rank: int, where: str) -> Shape:
    """The (H, W, C) or (T, C) input of a spatial layer, checked (channels-last, no dilation)."""
    if len(shape) != rank + 1:
        want = "(H, W, C)" if rank == 2 else "(T, C)"
        raise ImportModelError(f"{where}: it takes {want} values, not ({', '.join(map(str, shape))})")
    if cfg.get("data_format", "channels_last") != "channels_last":
        raise ImportModelError(f"{where}: data_format {cfg.get('data_format')!r}; mcutrain imports channels_last")
    if any(int(d) != 1 for d in np.ravel(cfg.get("dilation_rate", 1))):
        raise ImportModelError(f"{where}: dilated windows are not supported. mcutrain imports: {SUPPORTED}")
    return shape


def _window(cfg: Dict[str, Any], rank: int, size_key: str, where: str) -> Tuple[Any, Any, Any]:
    """(kernel, stride, padding) in mcutrain's terms; Conv1D's 'causal' padding is (kernel - 1) on the left."""
    k = [int(v) for v in np.ravel(cfg[size_key])]
    strides = cfg.get("strides")
    s = k if strides is None else [int(v) for v in np.ravel(strides)]
    pad = str(cfg.get("padding", "valid")).lower()
    if pad == "causal" and rank == 1:
        return k[0], s[0], (k[0] - 1, 0)
    if pad not in ("valid", "same"):
        raise ImportModelError(f"{where}: padding {pad!r}. mcutrain imports: {SUPPORTED}")
    return (k[0], s[0], pad) if rank == 1 else (tuple(k), tuple(s), pad)


def _params(layer: Module, parts: List[np.ndarray], where: str) -> Module:
    layer.params = as_f32(np.concatenate([np.ravel(p) for p in parts]), (layer.param_count(),), f"{where} weights")
    return layer


@_converter("Conv1D", "Conv2D")
def _conv(layer: Any, cfg: Dict[str, Any], shape: Shape, where: str) -> Tuple[List[Module], Shape]:
    """Conv2D / Conv1D: the kernel [kh][kw][in][out] is mcutrain's layout."""
    rank = 1 if type(layer).__name__ == "Conv1D" else 2
    shape = _spatial(cfg, shape, rank, where)
    if int(cfg.get("groups", 1)) != 1:
        raise ImportModelError(f"{where}: a grouped convolution. mcutrain imports: {SUPPORTED}")
    k, s, p = _window(cfg, rank, "kernel_size", where)
    bias = bool(cfg.get("use_bias", True))
    kind = L.Conv1d if rank == 1 else L.Conv2d
    conv = kind(shape[-1], int(cfg["filters"]), k, s, p, bias=bias, input_shape=shape)
    return _with_activation([_params(conv, layer.get_weights(), where)], cfg, where)


@_converter("DepthwiseConv2D")
def _depthwise(layer: Any, cfg: Dict[str, Any], shape: Shape, where: str) -> Tuple[List[Module], Shape]:
    """DepthwiseConv2D: the kernel [kh][kw][in][multiplier] is mcutrain's [kh][kw][in * multiplier]."""
    shape = _spatial(cfg, shape, 2, where)
    k, s, p = _window(cfg, 2, "kernel_size", where)
    m, bias = int(cfg.get("depth_multiplier", 1)), bool(cfg.get("use_bias", True))
    conv = L.DepthwiseConv2d(shape[-1], k, s, p, m, bias=bias, input_shape=shape)
    return _with_activation([_params(conv, layer.get_weights(), where)], cfg, where)


@_converter("SeparableConv2D")
def _separable(layer: Any, cfg: Dict[str, Any], shape: Shape, where: str) -> Tuple[List[Module], Shape]:
    """SeparableConv2D: a DepthwiseConv2d without bias, then a 1x1 Conv2d with the layer's bias."""
    shape = _spatial(cfg, shape, 2, where)
    k, s, p = _window(cfg, 2, "kernel_size", where)
    m, bias = int(cfg.get("depth_multiplier", 1)), bool(cfg.get("use_bias", True))
    weights = layer.get_weights()
    dw = _params(L.DepthwiseConv2d(shape[-1], k, s, p, m, bias=False, input_shape=shape), weights[:1], where)
    assert dw.out_shape is not None
    pw = L.Conv2d(shape[-1] * m, int(cfg["filters"]), 1, bias=bias, input_shape=dw.out_shape)
    return _with_activation([dw, _params(pw, weights[1:], where)], cfg, where)


@_converter("MaxPooling1D", "MaxPooling2D", "AveragePooling1D", "AveragePooling2D")
def _pool(layer: Any, cfg: Dict[str, Any], shape: Shape, where: str) -> Tuple[List[Module], Shape]:
    """Pooling: Keras' average pooling with 'same' padding divides by the taps inside the input, as mcutrain."""
    kind = type(layer).__name__
    rank = 1 if kind.endswith("1D") else 2
    shape = _spatial(cfg, shape, rank, where)
    k, s, p = _window(cfg, rank, "pool_size", where)
    cls = {
        "MaxPooling1D": L.MaxPool1d,
        "MaxPooling2D": L.MaxPool2d,
        "AveragePooling1D": L.AvgPool1d,
        "AveragePooling2D": L.AvgPool2d,
    }[kind]
    pool = cls(k, s, p, input_shape=shape)
    assert pool.out_shape is not None
    return [pool], pool.out_shape


@_converter("GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalMaxPooling1D", "GlobalMaxPooling2D")
def _global_pool(layer: Any, cfg: Dict[str, Any], shape: Shape, where: str) -> Tuple[List[Module], Shape]:
    """The mean (GlobalAvgPool2d/1d) or the largest value (a max pooling window as large as the input) of each
    channel; keepdims changes nothing in mcutrain (the values are the same)."""
    kind = type(layer).__name__
    rank = 1 if kind.endswith("1D") else 2
    shape = _spatial(cfg, shape, rank, where)
    if "Max" in kind:
        cls: Any = L.MaxPool1d if rank == 1 else L.MaxPool2d
        pool = cls(shape[0] if rank == 1 else shape[:2], 1, input_shape=shape)
    else:
        pool = (L.GlobalAvgPool1d if rank == 1 else L.GlobalAvgPool2d)(input_shape=shape)
    return [pool], (shape[-1],)


@_converter("BatchNormalization")
def _batchnorm(layer: Any, cfg: Dict[str, Any], shape: Shape, where: str) -> Tuple[List[Module], Shape]:
    """BatchNormalization of the last axis: BatchNorm (Keras' momentum m is mcutrain's 1 - m)."""
    axis = cfg.get("axis", -1)
    axis = axis[0] if isinstance(axis, (list, tuple)) and len(axis) == 1 else axis
    if axis not in (-1, len(shape)):
        raise ImportModelError(f"{where}: normalises axis {axis}; mcutrain normalises the last (channels)")
    c = shape[-1]
    weights = [np.asarray(w, np.float64) for w in layer.get_weights()]
    gain = weights.pop(0) if cfg.get("scale", True) else np.ones(c)
    bias = weights.pop(0) if cfg.get("center", True) else np.zeros(c)
    if len(weights) != 2 or np.any(weights[1] < 0):
        raise ImportModelError(f"{where}: its moving variance is missing or has negative values")
    eps, momentum = float(cfg.get("epsilon", 1e-3)), float(cfg.get("momentum", 0.99))
    bn = L.BatchNorm(c, eps=eps, momentum=1.0 - momentum, input_shape=shape)
    return [_params(bn, [gain, bias, *weights], where)], shape
