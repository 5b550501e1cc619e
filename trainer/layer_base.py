"""The base classes of the layer specs: a layer is one op of the C core (_CoreLayer), with a size fixed at
construction (_Sized) or taken from the layer before (_SameSize); and the seeded initialisations they share."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import numpy as np

from .corefacts import layer_size
from .errors import ShapeError
from .module import Module
from .program import Op, ProgramBuilder


def _glorot(rng: np.random.Generator, n_in: int, n_out: int, count: int, scale: float) -> np.ndarray:
    """Glorot/Xavier normal: std sqrt(2 / (fan_in + fan_out)), times scale."""
    return (rng.normal(0.0, math.sqrt(2.0 / (n_in + n_out)), count) * scale).astype(np.float32)


def _bias_init(rng: np.random.Generator, n: int, scale: float) -> np.ndarray:
    """Small normal biases, std 1 / (8 n), times scale (as minidx)."""
    return (rng.normal(0.0, 1.0 / (8.0 * n), n) * scale).astype(np.float32)


def _swish_beta_init(rng: np.random.Generator, n: int, scale: float) -> np.ndarray:
    """Swish's learned betas: normal around 1 with std 1 / (2 sqrt(2) n), times scale."""
    return (rng.normal(1.0, 1.0 / (2.0 * math.sqrt(2.0) * n), n) * scale).astype(np.float32)


def _check_size(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1 or value > 65535:
        raise ShapeError(f"{name} must be a whole number from 1 to 65535, got {value!r}")
    return int(value)


class _CoreLayer(Module):
    """A layer that is one op of the C core. Its sizes (parameter count, aux trace) come from the op's own C
    code through corefacts.layer_size; a layer class says only which op it is (`op`), the op's fields
    (`_op_fields`: kind, k, alpha) and how many of its parameters are connection weights (`_n_weights`, the
    ones L1/L2 regularize; they come first)."""

    op: Op

    def _op_fields(self) -> Dict[str, Any]:
        """The op-specific fields of its row in the layer table (kind, k, alpha)."""
        return {}

    def _n_weights(self) -> int:
        """How many of the parameters (the first ones) are connection weights."""
        return 0

    def _geometry(self) -> Dict[str, float]:
        """A spatial op's geometry fields of its row (corefacts.GEOMETRY_FIELDS); none for flat layers."""
        return {}

    def param_count(self) -> int:
        if self.n_in is None:
            return 0
        n = self.__dict__.get("_n_p")
        if n is None:
            size = layer_size(self.op, self.n_in, self.n_out, **self._op_fields(), **self._geometry())
            if not size.valid:
                raise ShapeError(f"{self.describe()}: the C core does not accept these sizes or settings")
            n = self._n_p = size.params
        return n

    def _emit(self, b: ProgramBuilder) -> None:
        b.add(
            self.op,
            self.n_in,
            self.n_out,
            n_w=self._n_weights(),
            name=self.describe(),
            **self._op_fields(),
            **self._geometry(),
        )


class _Sized(_CoreLayer):
    """A layer with an input and output size fixed at construction."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.n_in = _check_size(f"{type(self).__name__} input size", n_in)
        self.n_out = _check_size(f"{type(self).__name__} output size", n_out)

    def describe(self) -> str:
        return f"{type(self).__name__}({self.n_in}, {self.n_out})"

    def architecture(self) -> Dict[str, Any]:
        return {"type": type(self).__name__, "n_in": self.n_in, "n_out": self.n_out}


class _SameSize(_CoreLayer):
    """A layer whose output has its input's size; the size may be left to the Sequential."""

    def __init__(self, n: Optional[int] = None) -> None:
        super().__init__()
        if n is not None:
            n = _check_size(f"{type(self).__name__} size", n)
        self.n_in = self.n_out = n

    def _resolve(self, n: int) -> None:
        if self.n_in is None:
            self.n_in = self.n_out = n
        elif self.n_in != n:
            raise ShapeError(f"{self.describe()} takes {self.n_in} values, the layer before gives {n}")

    def _resolve_shape(self, shape: Tuple[int, ...]) -> None:
        self._resolve(int(np.prod(shape)))
        if len(shape) > 1:  # keeps the spatial shape of the layer before
            self._shape = tuple(int(d) for d in shape)

    @property
    def out_shape(self) -> Optional[Tuple[int, ...]]:
        return self.in_shape

    def describe(self) -> str:
        return f"{type(self).__name__}({self.n_in if self.n_in is not None else ''})"

    def architecture(self) -> Dict[str, Any]:
        return {"type": type(self).__name__, "n": self.n_in}
