"""Checking what users pass: numbers (finite, in range, whole where they must be) and samples (one sample
or a batch of float32 numbers). Each check names the argument and the value it got."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional, Tuple, Type, TypeVar

import numpy as np

from .errors import ConfigError, McuTrainError, ShapeError


def number(
    name: str,
    value: Any,
    lo: float = -math.inf,
    hi: float = math.inf,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
    error: Type[McuTrainError] = ConfigError,
) -> float:
    """value as a float, or `error` saying that `name` must be a finite number in the range (a bool, a
    string, NaN or an infinity is refused)."""
    rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise error(f"{name} must be a number in {rng}, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < lo or v > hi or (lo_open and v <= lo) or (hi_open and v >= hi):
        raise error(f"{name} must be a finite number in {rng}, got {value!r}")
    return v


def whole(name: str, value: Any, lo: int = 0, hi: int = 2**32 - 1, *, error: Type[McuTrainError] = ConfigError) -> int:
    """value as an int, or `error` saying that `name` must be a whole number from lo to hi (1.5, True and
    '3' are refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise error(f"{name} must be a whole number from {lo} to {hi}, got {value!r}")
    return int(value)


def as_batch(
    x: Any, width: int, what: str = "input", shape: Optional[Tuple[int, ...]] = None
) -> Tuple[np.ndarray, bool]:
    """Check and convert x to a C-contiguous float32 batch (nb, width); returns (batch, was_single). With the
    sample shape of a spatial network (e.g. (H, W, C)) a sample of that shape or a batch (nb, H, W, C) is taken
    too (channels last, so it is the same values in the same order)."""
    if (  # the common case, a batch that is already right, checked first and cheaply
        type(x) is np.ndarray
        and x.ndim == 2
        and x.dtype is _F32
        and x.shape[1] == width
        and x.shape[0] > 0
        and x.flags.c_contiguous
    ):
        return x, False
    if not isinstance(x, np.ndarray):
        try:
            x = np.asarray(x)
        except Exception as e:  # ragged lists and the like
            raise ShapeError(f"{what} must be an array of numbers: {e}") from None
    if x.dtype.kind not in "fiu":
        raise ShapeError(f"{what} has dtype {x.dtype}; pass float32 numbers (np.float32)")
    if shape is not None and len(shape) > 1 and x.ndim >= len(shape) and tuple(x.shape[x.ndim - len(shape) :]) == shape:
        if x.ndim == len(shape):
            x = x.reshape(1, width)
            single = True
        elif x.ndim == len(shape) + 1:
            x = x.reshape(x.shape[0], width)
            single = False
        else:
            raise ShapeError(f"{what} must be a sample {shape} or a batch (n, {', '.join(map(str, shape))})")
    elif x.ndim == 1:
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


_F32 = np.dtype(np.float32)
_T = TypeVar("_T")
# dataclass field annotations (as strings: the modules use postponed annotations) -> accepted types
_PLAIN = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}


def settings_from_dict(cls: Type[_T], d: Any, where: str, error: Type[McuTrainError], **nested: Any) -> _T:
    """A settings dataclass from plain data (e.g. a model file's metadata): unknown keys are ignored,
    missing ones take the defaults, and a value of the wrong type is `error` naming `where.field`.
    nested: field -> function(value, where) that builds a field that is itself a dataclass."""
    if not isinstance(d, dict):
        raise error(f"{where} must be a mapping, got {type(d).__name__}")
    kw: Dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in d:
            continue
        v, ann = d[f.name], str(f.type)
        if f.name in nested:
            kw[f.name] = nested[f.name](v, f"{where}.{f.name}")
            continue
        optional = ann.startswith("Optional[")
        base = ann[9:-1] if optional else ann
        ok = (v is None and optional) or (
            base in _PLAIN and isinstance(v, _PLAIN[base]) and not (base != "bool" and isinstance(v, bool))
        )
        if base not in _PLAIN and not optional:
            ok = True  # a field this check does not know: left to the class
        if not ok:
            raise error(f"{where}.{f.name} must be {'null or ' if optional else ''}{base}, got {v!r}")
        if base == "float" and v is not None and not math.isfinite(float(v)):
            raise error(f"{where}.{f.name} must be finite, got {v!r}")
        kw[f.name] = v
    return cls(**kw)
