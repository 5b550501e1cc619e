"""What the importers of other frameworks' models share: the bounds every imported size must respect before anything
is allocated, and turning (W, b) arrays into mcutrain layers. (model_import picks the importer for a file.)

The importers share no state and may run in several threads at once, except that the first Keras import may
set KERAS_BACKEND in the process environment (keras_backend).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any, List, Optional, Sequence

import numpy as np

from mcutrain import layers as L
from mcutrain.compose import Residual, Sequential
from mcutrain.errors import ImportModelError, ShapeError
from mcutrain.fold import fold_batchnorm, has_batchnorm
from mcutrain.module import Module

# A model file read into memory at once (ONNX, .keras, pickle) has at most this many bytes, and a network
# at most this many parameters (64 MB of float32: far beyond what a microcontroller holds, well within a host).
MAX_IMPORT_BYTES = 256 << 20
MAX_PARAMS = 16 << 20
MAX_WIDTH = 65535  # the largest layer size mcutrain builds (layers._check_size)
MAX_LAYERS = 4096

PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib")
SUFFIXES = (".onnx", ".keras", ".tflite") + PICKLE_SUFFIXES


def check_width(n: Any, where: str) -> int:
    """A layer size read from a model: a whole number from 1 to MAX_WIDTH, else ImportModelError."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= int(n) <= MAX_WIDTH:
        raise ImportModelError(f"{where}: size {n!r} is not a whole number from 1 to {MAX_WIDTH}")
    return int(n)


def as_f32(a: Any, shape: Sequence[int], where: str) -> np.ndarray:
    """a as a finite float32 array of the given shape, else ImportModelError naming where it came from."""
    arr = np.asarray(a)
    if arr.dtype.kind not in "fiu":
        raise ImportModelError(f"{where}: expected numbers, got an array of {arr.dtype}")
    if tuple(arr.shape) != tuple(shape):
        raise ImportModelError(f"{where}: expected shape {tuple(shape)}, got {tuple(arr.shape)}")
    out = np.ascontiguousarray(arr, np.float32)
    if not np.all(np.isfinite(out)):
        raise ImportModelError(f"{where}: holds NaN or infinite values (or values too large for float32)")
    return out


def dense(w: np.ndarray, b: Optional[np.ndarray], where: str) -> Module:
    """Linear (with b) or Dense (without) holding W [n_in][n_out] and b [n_out]."""
    n_in, n_out = check_width(w.shape[0], where), check_width(w.shape[1], where)
    w = as_f32(w, (n_in, n_out), f"{where} weights")
    if b is None:
        layer: Module = L.Dense(n_in, n_out)
        layer.params = w.ravel()
    else:
        layer = L.Linear(n_in, n_out)
        layer.params = np.concatenate([w.ravel(), as_f32(b, (n_out,), f"{where} bias")])
    return layer


def sequential(layers: List[Module], source: str, input_shape: Optional[Sequence[int]] = None) -> Module:
    """A Sequential of the imported layers taking `input_shape` ((H, W, C) or (T, C); None: the first layer's),
    each BatchNorm that follows a convolution or dense layer folded into it (mcutrain.fold), as the device runs
    it; ImportModelError when there are none, too many parameters or the sizes do not chain."""
    if not layers:
        raise ImportModelError(f"{source}: the model has no layers mcutrain can run")
    if len(layers) > MAX_LAYERS:
        raise ImportModelError(f"{source}: {len(layers)} layers; mcutrain imports at most {MAX_LAYERS}")
    try:
        net = Sequential(*layers, input_shape=input_shape)
    except ShapeError as e:
        raise ImportModelError(f"{source}: {e}") from None
    if net.param_count() > MAX_PARAMS:
        raise ImportModelError(f"{source}: {net.param_count():,} parameters; mcutrain imports at most {MAX_PARAMS:,}")
    return fold_batchnorm(net) if has_batchnorm(net) else net


def residual_block(main: List[Module], shortcut: List[Module], where: str) -> Module:
    """The residual block of an imported graph: main (M) added to its input (y = x + M(x)) when `shortcut` is empty,
    else to the shortcut branch's output (y = M(x) + S(x)); ImportModelError when the branches' shapes differ."""
    body = main[0] if len(main) == 1 else Sequential(*main)
    try:
        if not shortcut:
            return Residual(body)
        return Residual(body, shortcut=shortcut[0] if len(shortcut) == 1 else Sequential(*shortcut))
    except ShapeError as e:
        raise ImportModelError(f"{where}: {e}") from None


def suggested_loss(net: Module) -> str:
    """The loss to train an imported network with, from its last layer: cross_entropy after a Softmax,
    logit_bce after a Sigmoid (outputs in (0, 1)), mse otherwise."""
    last = list(net.layers())[-1]
    if isinstance(last, L.Softmax):
        return "cross_entropy"
    if isinstance(last, L.Sigmoid):
        return "logit_bce"
    return "mse"


def keras_backend() -> None:
    """Choose a Keras backend that runs here before Keras is first imported: KERAS_BACKEND if set, else
    TensorFlow when it is installed (Keras's own default), else jax, else torch."""
    if "keras" in sys.modules or os.environ.get("KERAS_BACKEND"):
        return
    for name in ("tensorflow", "jax", "torch"):
        if importlib.util.find_spec(name) is not None:
            os.environ["KERAS_BACKEND"] = name
            return
