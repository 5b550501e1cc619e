"""Folding BatchNorm into the layer before it, as export and import do: the device runs (and trains) the folded network.

A BatchNorm after a convolution or a dense layer computes g (z - mean) / sqrt(var + eps) + b on that layer's output
z = W x + c, channel by channel (the last axis of every weight layout here is the output channel). With
s = g / sqrt(var + eps) that is (W s) x + ((c - mean) s + b): the layer's weights scaled per output channel and a new
bias, one layer instead of two. The folded network computes what the BatchNorm network computes on its running
statistics, up to float32 rounding (a few ulp). A BatchNorm with no such layer right before it (first in its block,
after an activation or a pooling) stays, running its running statistics.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np

from . import layers as L
from .architecture import from_architecture
from .compose import LR, Residual, Sequential
from .modelfile import Checkpoint
from .module import Module
from .optim import Optimizer

_FOLDS_INTO = (L.Conv2d, L.DepthwiseConv2d, L.Dense, L.Linear)  # Conv1d is a Conv2d


def has_batchnorm(net: Module) -> bool:
    """Does the network hold a BatchNorm or a Dropout anywhere (layers that export leaves out or folds)?"""
    return any(isinstance(m, (L.BatchNorm, L.Dropout)) for m in net.layers())


def fold_batchnorm(net: Module) -> Module:
    """A new network without the BatchNorm layers that follow a convolution or a dense layer (folded into it, which
    gains a bias: Dense becomes Linear, a Conv2d without bias gets one) and without Dropout (the identity outside
    host training). The network given is not changed."""
    with net.lock:
        new, params = _rebuild(net)
        if isinstance(net, Sequential) and not isinstance(new, Sequential):
            new = Sequential(new)
        flat = np.concatenate(params) if params else np.zeros(0, np.float32)
        new.params = flat.astype(np.float32)
    return new


def _copy(m: Module) -> Tuple[Module, List[np.ndarray]]:
    """A new instance of a leaf layer with a copy of its parameters."""
    return from_architecture(m.architecture()), [np.array(m.params, np.float32)]


def _rebuild(m: Module) -> Tuple[Module, List[np.ndarray]]:
    if isinstance(m, Sequential):
        mods: List[Module] = []
        params: List[List[np.ndarray]] = []
        for c in m.modules:
            if isinstance(c, L.Dropout):
                continue  # the identity outside host training
            if isinstance(c, L.BatchNorm) and mods and isinstance(mods[-1], _FOLDS_INTO):
                mods[-1], params[-1] = _fold(mods[-1], params[-1][0], c)
                continue
            nm, p = _rebuild(c)
            mods.append(nm)
            params.append(p)
        return Sequential(*mods, input_shape=m.in_shape), [a for p in params for a in p]
    if isinstance(m, Residual):
        inner, p = _rebuild(m.inner)
        if m.shortcut is None:
            return Residual(inner), p
        shortcut, ps = _rebuild(m.shortcut)
        return Residual(inner, shortcut=shortcut), p + ps
    if isinstance(m, LR):
        inner, p = _rebuild(m.inner)
        return LR(inner, m.divisor), p
    return _copy(m)


def _fold(layer: Module, p: np.ndarray, bn: L.BatchNorm) -> Tuple[Module, List[np.ndarray]]:
    """layer (a new instance, p its parameters) followed by bn, as one layer with a bias."""
    c = bn.channels
    bp = np.asarray(bn.params, np.float64)
    g, b, mean, var = bp[:c], bp[c : 2 * c], bp[2 * c : 3 * c], bp[3 * c :]
    s = g / np.sqrt(var + np.float64(np.float32(bn.eps)))
    arch: Dict[str, Any] = layer.architecture()
    if isinstance(layer, (L.Dense, L.Linear)):
        n_w = layer.n_in * layer.n_out  # type: ignore[operator]
        has_bias = isinstance(layer, L.Linear)
        arch = {"type": "Linear", "n_in": layer.n_in, "n_out": layer.n_out}
    else:
        n_w = layer._n_weights()  # type: ignore[attr-defined]
        has_bias = bool(layer.bias)  # type: ignore[attr-defined]
        arch = {**arch, "bias": True}
    w = np.asarray(p[:n_w], np.float64).reshape(-1, c)
    bias = np.asarray(p[n_w:], np.float64) if has_bias else np.zeros(c)
    folded = np.concatenate([(w * s).ravel(), (bias - mean) * s + b]).astype(np.float32)
    return from_architecture(arch), [folded]


def fold_checkpoint(ck: Checkpoint) -> Checkpoint:
    """A checkpoint whose network has its BatchNorm layers folded (fold_batchnorm), as `mcutrain export` writes it
    for the device. The optimizer keeps its kind and settings; its state starts afresh, since its moments belong to
    the parameters before folding. The metadata records the fold ('batchnorm_folded': the count)."""
    folded = fold_batchnorm(ck.net)
    opt = None
    if ck.optimizer is not None:
        o = ck.optimizer
        c = o.coeffs
        opt = Optimizer(
            o.kind, o.params, folded.param_count(), c["momentum"], c["beta"], c["beta1"] or 0.9, c["eps"],
            c["sim_penalty"],
        )  # fmt: skip
    n = sum(isinstance(m, L.BatchNorm) for m in ck.net.layers()) - sum(
        isinstance(m, L.BatchNorm) for m in folded.layers()
    )
    return Checkpoint(folded, opt, {**ck.metadata, "batchnorm_folded": n})
