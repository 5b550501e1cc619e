"""Checking and converting what users pass as samples: one sample or a batch of float32 numbers."""
from __future__ import annotations

from typing import Any, Tuple

import numpy as np

from .errors import ShapeError


def as_batch(x: Any, width: int, what: str = "input") -> Tuple[np.ndarray, bool]:
    """Check and convert x to a C-contiguous float32 batch (nb, width); returns (batch, was_single)."""
    if not isinstance(x, np.ndarray):
        try:
            x = np.asarray(x)
        except Exception as e:  # ragged lists and the like
            raise ShapeError(f"{what} must be an array of numbers: {e}") from None
    if x.dtype.kind not in "fiu":
        raise ShapeError(f"{what} has dtype {x.dtype}; pass float32 numbers (np.float32)")
    if x.ndim == 1:
        single = True
        x = x[None, :]
    elif x.ndim == 2:
        single = False
    else:
        raise ShapeError(f"{what} must be one sample ({width},) or a batch (n, {width}); got shape {x.shape}")
    if x.shape[1] != width:
        role = "outputs" if what in ("target", "grads_wrt_output", "output") else "takes"
        raise ShapeError(f"{what} has {x.shape[1]} values per sample, the network {role} {width}")
    if x.shape[0] == 0:
        raise ShapeError(f"{what} is an empty batch")
    if x.dtype != np.float32 or not x.flags.c_contiguous:
        x = np.ascontiguousarray(x, dtype=np.float32)
    return x, single
