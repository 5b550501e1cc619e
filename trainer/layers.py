"""Layer specs, named as minidx names them. Each describes one op of the C core: its sizes, its
parameters (connection weights first: they are the ones L1/L2 regularize) and their init.

Activation-like layers may omit their size; a Sequential gives them the size of the layer before.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from .checks import number
from .conv_layers import (
    AvgPool1d,
    AvgPool2d,
    BatchNorm,
    Conv1d,
    Conv2d,
    DepthwiseConv2d,
    Flatten,
    GlobalAvgPool1d,
    GlobalAvgPool2d,
    MaxPool1d,
    MaxPool2d,
)
from .corefacts import GLU_GATES
from .errors import ShapeError
from .layer_base import _bias_init, _check_size, _glorot, _SameSize, _Sized, _swish_beta_init
from .program import Act, Op, ProgramBuilder

# ---------------------------------------------------------------- parameterized layers


class Dense(_Sized):
    """y = x W, no bias. W is [n_in][n_out] (connection weights)."""

    op = Op.DENSE

    def _n_weights(self) -> int:
        return self.n_in * self.n_out

    def _init_params(self, rng: np.random.Generator, scale: float) -> np.ndarray:
        return _glorot(rng, self.n_in, self.n_out, self.n_in * self.n_out, scale)

    @property
    def weight(self) -> np.ndarray:
        """W as an (n_in, n_out) view."""
        return self.params.reshape(self.n_in, self.n_out)


class Linear(_Sized):
    """y = x W + b: Dense followed by Bias1d, run as one op (W, then b)."""

    op = Op.DENSE

    def _op_fields(self) -> Dict[str, Any]:
        return {"kind": 1}

    def _n_weights(self) -> int:
        return self.n_in * self.n_out

    def _init_params(self, rng: np.random.Generator, scale: float) -> np.ndarray:
        w = _glorot(rng, self.n_in, self.n_out, self.n_in * self.n_out, scale)
        return np.concatenate([w, _bias_init(rng, self.n_out, scale)])

    @property
    def weight(self) -> np.ndarray:
        """W as an (n_in, n_out) view."""
        return self.params[: self.n_in * self.n_out].reshape(self.n_in, self.n_out)

    @property
    def bias(self) -> np.ndarray:
        """b as an (n_out,) view."""
        return self.params[self.n_in * self.n_out :]


class Bias1d(_SameSize):
    """y = x + b (b is not regularized)."""

    op = Op.BIAS

    def _init_params(self, rng: np.random.Generator, scale: float) -> np.ndarray:
        return _bias_init(rng, self.n_in, scale)


class Swish(_SameSize):
    """y = x sigmoid(beta x) with a learned beta per element (init N(1, 1/(2 sqrt(2) n)) times scale)."""

    op = Op.SWISH

    def _default_params(self) -> np.ndarray:
        return np.ones(self.n_in, np.float32)

    def _init_params(self, rng: np.random.Generator, scale: float) -> np.ndarray:
        return _swish_beta_init(rng, self.n_in, scale)


class Diag(_SameSize):
    """y = d * x with a learned scale per element (init 1)."""

    op = Op.DIAG

    def _default_params(self) -> np.ndarray:
        return np.ones(self.n_in, np.float32)


class ScalarScale(_SameSize):
    """y = s * x with one learned scalar s (init `init`, 0.5 by default)."""

    op = Op.SCALE

    def __init__(self, n: Optional[int] = None, init: float = 0.5) -> None:
        super().__init__(n)
        self.init = number("ScalarScale init", init, -1e30, 1e30, error=ShapeError)

    def _default_params(self) -> np.ndarray:
        return np.array([self.init], np.float32)

    def architecture(self) -> Dict[str, Any]:
        return {**super().architecture(), "init": self.init}


class RMSNorm(_SameSize):
    """y = g * x / sqrt(mean(x^2) + eps) with a learned gain g per element (init 1)."""

    op = Op.RMSNORM

    def __init__(self, n: Optional[int] = None, eps: float = 1e-6) -> None:
        super().__init__(n)
        self.eps = number("RMSNorm eps", eps, 0.0, 1e30, error=ShapeError)

    def _op_fields(self) -> Dict[str, Any]:
        return {"alpha": self.eps}

    def _default_params(self) -> np.ndarray:
        return np.ones(self.n_in, np.float32)

    def architecture(self) -> Dict[str, Any]:
        return {**super().architecture(), "eps": self.eps}


class DyT(_SameSize):
    """Dynamic tanh: y = g * tanh(a x) + b, with a scalar a (init 0.5), g (init 1) and b per element."""

    op = Op.DYT

    def _default_params(self) -> np.ndarray:
        return np.concatenate([[0.5], np.ones(self.n_in), np.zeros(self.n_in)]).astype(np.float32)

    def _init_params(self, rng: np.random.Generator, scale: float) -> np.ndarray:
        p = self._default_params()
        p[1 + self.n_in :] = _bias_init(rng, self.n_in, scale)
        return p


class SingleChannelConv1d(_Sized):
    """minidx's Conv1d: a single-channel valid cross-correlation (stride 1, no padding) of a flat input:
    SingleChannelConv1d(I, O, F) needs O = I - F + 1. (Conv1d is the multi-channel convolution of series.)"""

    op = Op.CONV1D

    def __init__(self, n_in: int, n_out: int, filter_size: int) -> None:
        super().__init__(n_in, n_out)
        self.filter_size = _check_size("SingleChannelConv1d filter size", filter_size)
        if self.n_out != self.n_in - self.filter_size + 1:
            raise ShapeError(
                f"SingleChannelConv1d({n_in}, {n_out}, {filter_size}): a filter of {filter_size} over {n_in} "
                f"inputs gives {n_in - filter_size + 1} outputs, not {n_out}"
            )

    def describe(self) -> str:
        return f"SingleChannelConv1d({self.n_in}, {self.n_out}, {self.filter_size})"

    def _op_fields(self) -> Dict[str, Any]:
        return {"k": self.filter_size}

    def _n_weights(self) -> int:
        return self.filter_size

    def _init_params(self, rng: np.random.Generator, scale: float) -> np.ndarray:
        return _glorot(rng, self.n_in, self.n_out, self.filter_size, scale)

    def architecture(self) -> Dict[str, Any]:
        return {**super().architecture(), "filter_size": self.filter_size}


# GLU gates by name ('sigmoid', 'relu', 'leaky_relu', 'tanh', 'swish'): the activations the core accepts as gates
_GATES = {g.name.lower(): g for g in sorted(GLU_GATES)}


class GLU(_Sized):
    """Gated linear unit: y = gate(x Wg + bg) * (x Wv + bv). gate is any activation the core accepts as a
    gate: sigmoid (default), relu, leaky_relu (slope alpha), tanh, silu, softplus or swish (a learned beta
    per output). Parameters: Wg, Wv (connection weights, [n_in][n_out] each), bg, bv, then swish's betas."""

    op = Op.GLU
    gate_default = "sigmoid"

    def __init__(self, n_in: int, n_out: int, gate: Optional[str] = None, alpha: float = 0.5) -> None:
        super().__init__(n_in, n_out)
        self.gate = gate or self.gate_default
        if self.gate not in _GATES:
            raise ShapeError(f"unknown GLU gate {self.gate!r}; choose one of {', '.join(_GATES)}")
        self.alpha = number(f"{type(self).__name__} alpha", alpha, -1e30, 1e30, error=ShapeError)

    def _op_fields(self) -> Dict[str, Any]:
        return {"kind": _GATES[self.gate], "alpha": self.alpha}

    def _n_weights(self) -> int:
        return 2 * self.n_in * self.n_out

    def _default_params(self) -> np.ndarray:
        p = np.zeros(self.param_count(), np.float32)
        if self.gate == "swish":
            p[-self.n_out :] = 1.0
        return p

    def _init_params(self, rng: np.random.Generator, scale: float) -> np.ndarray:
        io = self.n_in * self.n_out
        parts = [
            _glorot(rng, self.n_in, self.n_out, io, scale),
            _glorot(rng, self.n_in, self.n_out, io, scale),
            _bias_init(rng, self.n_out, scale),
            _bias_init(rng, self.n_out, scale),
        ]
        if self.gate == "swish":
            parts.append(_swish_beta_init(rng, self.n_out, scale))
        return np.concatenate(parts)

    def architecture(self) -> Dict[str, Any]:
        s = {**super().architecture(), "gate": self.gate}
        if self.gate == "leaky_relu":
            s["alpha"] = self.alpha
        return s


class SwiGLU(GLU):
    """GLU with a Swish gate (learned beta per output)."""

    gate_default = "swish"


class GLULeakyRelu(GLU):
    """GLU with a leaky-ReLU gate (slope alpha, 0.5 by default)."""

    gate_default = "leaky_relu"


class TanhGLU(GLU):
    """GLU with a tanh gate."""

    gate_default = "tanh"


class ReluGLU(GLU):
    """GLU with a ReLU gate."""

    gate_default = "relu"


# ---------------------------------------------------------------- parameter-free layers


class _Activation(_SameSize):
    """An elementwise activation without parameters."""

    op = Op.ACT
    act: Act = Act.RELU

    def _op_fields(self) -> Dict[str, Any]:
        return {"kind": self.act, "alpha": getattr(self, "alpha", 0.0)}


class Relu(_Activation):
    """max(0, x)."""

    act = Act.RELU


class LeakyRelu(_Activation):
    """x for x >= 0, alpha x below (alpha 0.5 by default, as minidx)."""

    act = Act.LEAKY_RELU

    def __init__(self, alpha: float = 0.5, n: Optional[int] = None) -> None:
        super().__init__(n)
        self.alpha = number(f"{type(self).__name__} alpha", alpha, -1e30, 1e30, error=ShapeError)

    def architecture(self) -> Dict[str, Any]:
        return {**super().architecture(), "alpha": self.alpha}


class Sigmoid(_Activation):
    """1 / (1 + e^-x)."""

    act = Act.SIGMOID


class Tanh(_Activation):
    """tanh(x)."""

    act = Act.TANH


class SiLU(_Activation):
    """x sigmoid(x)."""

    act = Act.SILU


class Softplus(_Activation):
    """log(1 + e^x), computed without overflow."""

    act = Act.SOFTPLUS


class Sine(_Activation):
    """sin(x)."""

    act = Act.SINE


class Cosine(_Activation):
    """cos(x)."""

    act = Act.COSINE


class Relu6(_Activation):
    """min(max(x, 0), 6) (MobileNet's activation; ONNX Clip(0, 6))."""

    act = Act.RELU6


class Dropout(_SameSize):
    """Dropout(rate, seed=0): while training on the host each value is zeroed with probability `rate` and the rest
    scaled by 1 / (1 - rate), new masks every step (drawn from the seed and a step counter, the layer's one
    parameter, so a resumed run draws the same ones); elsewhere (forward, the device) the identity. Export and
    import leave it out. A network with Dropout trains on one host thread."""

    op = Op.DROPOUT

    def __init__(self, rate: float = 0.5, n: Optional[int] = None, seed: int = 0) -> None:
        super().__init__(n)
        self.rate = number("Dropout rate", rate, 0.0, 1.0, hi_open=True, error=ShapeError)
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= 65535:
            raise ShapeError(f"Dropout seed must be a whole number from 0 to 65535, got {seed!r}")
        self.seed = seed

    def _op_fields(self) -> Dict[str, Any]:
        return {"alpha": self.rate, "k": self.seed}

    def _emit(self, b: ProgramBuilder) -> None:
        b.add(self.op, self.n_in, self.n_out, kind=1 if b.training else 0, name=self.describe(), **self._op_fields())  # type: ignore[arg-type]

    def architecture(self) -> Dict[str, Any]:
        return {**super().architecture(), "rate": self.rate, "seed": self.seed}


class Softmax(_SameSize):
    """exp(x / T) / sum(exp(x / T)) with temperature T (1.0 by default)."""

    op = Op.SOFTMAX

    def __init__(self, temperature: float = 1.0, n: Optional[int] = None) -> None:
        super().__init__(n)
        self.temperature = number("Softmax temperature", temperature, 0.0, 1e30, lo_open=True, error=ShapeError)

    def _op_fields(self) -> Dict[str, Any]:
        return {"alpha": self.temperature}

    def architecture(self) -> Dict[str, Any]:
        return {**super().architecture(), "temperature": self.temperature}


# Class name -> class, for architectures and model files (architecture.py looks names up case-insensitively
# and adds aliases). Every layer class is registered here, once.
LAYER_TYPES = {
    c.__name__: c
    for c in (
        Dense,
        Linear,
        Bias1d,
        Swish,
        Diag,
        ScalarScale,
        RMSNorm,
        DyT,
        SingleChannelConv1d,
        Conv1d,
        Conv2d,
        DepthwiseConv2d,
        MaxPool2d,
        AvgPool2d,
        GlobalAvgPool2d,
        MaxPool1d,
        AvgPool1d,
        GlobalAvgPool1d,
        Flatten,
        BatchNorm,
        GLU,
        SwiGLU,
        GLULeakyRelu,
        TanhGLU,
        ReluGLU,
        Relu,
        LeakyRelu,
        Sigmoid,
        Tanh,
        SiLU,
        Softplus,
        Sine,
        Cosine,
        Relu6,
        Dropout,
        Softmax,
    )
}
