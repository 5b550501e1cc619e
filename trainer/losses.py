"""Losses, each with its gradient w.r.t. the network output; computed by the C core (loss.c)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Tuple

import numpy as np

from . import _core
from .checks import as_batch
from .corefacts import LossKind
from .errors import ConfigError, ShapeError


@dataclass(frozen=True)
class Loss:
    """A loss of the core: kind (enum mct_loss_kind) and its parameter (Huber's beta)."""

    name: str
    kind: int  # corefacts.LossKind
    param: float = 0.0

    def __call__(self, y: Any, t: Any) -> Tuple[float, np.ndarray]:
        """(mean loss over the samples, dL/dy per sample) for one sample or a batch. The mean is the
        core's batch loss (a float32 sum in sample order divided by the count), as training reports it."""
        y = np.asarray(y)
        width = y.shape[-1] if y.ndim else 0
        yb, single = as_batch(y, width, "output")
        tb, _ = as_batch(t, width, "target")
        if tb.shape != yb.shape:
            raise ShapeError(f"target shape {tb.shape} does not match output shape {yb.shape}")
        _, grads, mean = _core.loss_eval(self.kind, self.param, yb, tb)
        return mean, (grads[0] if single else grads)

    def __str__(self) -> str:
        return self.name if self.kind != LossKind.HUBER else f"huber:{self.param:g}"


mse = Loss("mse", LossKind.MSE)
# Binary cross-entropy on probabilities (the name is minidx's: the network's last layer must already give
# values in (0, 1), e.g. a Sigmoid; there are no logits inside). The mean over the n outputs, with y
# clamped to [1e-7, 1 - 1e-7], so a perfect answer gives about 1e-7, not 0.
logit_bce = Loss("logit_bce", LossKind.BCE)
cross_entropy = Loss("cross_entropy", LossKind.XENT)
cosine = Loss("cosine", LossKind.COSINE)


def huber(beta: float = 1.0) -> Loss:
    """Huber loss: quadratic within beta of the target, linear beyond. ConfigError unless beta > 0."""
    if not beta > 0:
        raise ConfigError(f"Huber beta must be > 0, got {beta}")
    return Loss("huber", LossKind.HUBER, float(beta))


_NAMES = {
    "mse": mse,
    "bce": logit_bce,
    "logit_bce": logit_bce,
    "xent": cross_entropy,
    "cross_entropy": cross_entropy,
    "crossentropy": cross_entropy,
    "cosine": cosine,
}


def by_name(name: str) -> Loss:
    """'mse', 'huber' or 'huber:0.5', 'logit_bce' (or 'bce'), 'cross_entropy' (or 'xent'), 'cosine'.
    ConfigError (a ValueError whose message is meant for the user) for any other name."""
    key = name.strip().lower()
    if key.startswith("huber"):
        _, _, beta = key.partition(":")
        try:
            return huber(float(beta) if beta else 1.0)
        except ValueError:
            raise ConfigError(f"bad Huber loss {name!r}: write huber or huber:BETA with BETA > 0") from None
    if key not in _NAMES:
        raise ConfigError(f"unknown loss {name!r}; choose one of mse, huber[:beta], logit_bce, cross_entropy, cosine")
    return _NAMES[key]
