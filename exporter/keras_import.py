"""Import a Keras 3 `.keras` file (a keras.Sequential model) as an mcutrain network.

Supported layers: Dense (with or without bias) with the activations linear, relu, leaky_relu, sigmoid,
tanh, softplus, silu/swish and softmax; the layers Activation (the same names), ReLU (no cap, no threshold),
LeakyReLU, Softmax (last axis); and Dropout, Flatten and Identity, which move no values at inference.
Anything else is an ImportModelError naming the layer and listing what is supported.

The file is loaded by Keras itself, with safe_mode on (a file cannot smuggle in a Python lambda), after its
archive's size and its config's layer widths and weight count have been checked. Keras needs
a backend: KERAS_BACKEND if set, else TensorFlow if installed, else jax or torch (see interop.keras_backend).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

import numpy as np

from mcutrain import layers as L
from mcutrain.errors import ImportModelError
from mcutrain.extras import require
from mcutrain.files import read_bounded
from mcutrain.module import Module
from mcutrain.plaindata import parse_json

from .interop import MAX_IMPORT_BYTES, MAX_PARAMS, check_width, dense, keras_backend, sequential

SUPPORTED = (
    "Dense (activation linear, relu, leaky_relu, sigmoid, tanh, softplus, silu/swish or softmax), Activation "
    "(the same), ReLU, LeakyReLU, Softmax (last axis), Dropout, Flatten, Identity, in a keras.Sequential model"
)

_ACTIVATIONS: Dict[str, Callable[[int], Optional[Module]]] = {
    "linear": lambda n: None,
    "relu": L.Relu,
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
                if k == "units" or (k in ("batch_shape", "input_shape", "shape") and isinstance(x, list)):
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
    n, weights = None, 0
    layers = _dict(_dict(config).get("config")).get("layers")
    for layer in layers if isinstance(layers, list) else []:
        cfg = _dict(_dict(layer).get("config"))
        shape, units = cfg.get("batch_shape"), cfg.get("units")
        if isinstance(shape, list) and shape and isinstance(shape[-1], int):
            n = shape[-1]
        if isinstance(units, int) and n is not None:
            weights += (n + 1) * units
            n = units
    if weights > MAX_PARAMS:
        raise ImportModelError(
            f"{p}: its Dense layers hold {weights:,} weights; mcutrain imports at most {MAX_PARAMS:,}"
        )


def _activation(name: Any, n: int, where: str) -> Optional[Module]:
    """The mcutrain layer of a Keras activation (None for linear)."""
    key = name if isinstance(name, str) else getattr(name, "__name__", repr(name))
    if key not in _ACTIVATIONS:
        raise ImportModelError(f"{where}: activation {key!r} is not supported. mcutrain imports: {SUPPORTED}")
    return _ACTIVATIONS[key](n)


def from_keras_model(model: Any, source: str = "Keras model") -> Module:
    """The mcutrain network of a keras.Sequential model in memory."""
    keras = require("keras", "keras")
    if not isinstance(model, keras.Sequential):
        raise ImportModelError(
            f"{source}: a {type(model).__name__} model; mcutrain imports keras.Sequential models. mcutrain "
            f"imports: {SUPPORTED}"
        )
    try:
        shape = tuple(model.inputs[0].shape)
    except (AttributeError, IndexError, ValueError):
        raise ImportModelError(f"{source}: the model has no known input shape (build it with keras.Input)") from None
    if len(shape) != 2 or shape[1] is None:
        raise ImportModelError(f"{source}: input shape {shape}; mcutrain imports inputs shaped (batch, features)")
    n = check_width(shape[1], f"{source} input")
    out: List[Module] = []
    for layer in model.layers:
        kind = type(layer).__name__
        where = f"{source}: layer {layer.name!r} ({kind})"
        cfg = layer.get_config()
        if kind == "Dense":
            weights = layer.get_weights()
            w = np.asarray(weights[0])
            if w.ndim != 2 or w.shape[0] != n:
                raise ImportModelError(f"{where}: kernel of shape {w.shape} after {n} values")
            out.append(dense(w, np.asarray(weights[1]) if cfg.get("use_bias", True) else None, where))
            n = int(w.shape[1])
            act = _activation(cfg.get("activation", "linear"), n, where)
        elif kind == "Activation":
            act = _activation(cfg.get("activation"), n, where)
        elif kind == "ReLU":
            if cfg.get("max_value") is not None or float(cfg.get("threshold", 0.0)) != 0.0:
                raise ImportModelError(f"{where}: a ReLU with max_value or threshold. mcutrain imports: {SUPPORTED}")
            slope = float(cfg.get("negative_slope", 0.0))
            act = L.LeakyRelu(slope, n) if slope else L.Relu(n)
        elif kind == "LeakyReLU":
            act = L.LeakyRelu(float(cfg.get("negative_slope", cfg.get("alpha", 0.3))), n)
        elif kind == "Softmax":
            if cfg.get("axis", -1) not in (-1, 1, [-1], [1]):
                raise ImportModelError(f"{where}: softmax over axis {cfg.get('axis')}. mcutrain imports: {SUPPORTED}")
            act = L.Softmax(1.0, n)
        elif kind in ("Dropout", "Flatten", "Identity", "InputLayer"):
            act = None
        else:
            raise ImportModelError(f"{where}: this layer is not supported. mcutrain imports: {SUPPORTED}")
        if act is not None:
            out.append(act)
    return sequential(out, source)
