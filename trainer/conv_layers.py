"""Convolutional layers on channels-last tensors, as TFLite and CMSIS-NN lay them out: an image sample is
(H, W, C), a series (T, C) (the C core runs it as H = 1). Each layer is one spatial op of the C core (see
"Spatial ops" in firmware/core/mct.h); its output shape follows from its input shape, which it takes from the layer
before in a Sequential or from `input_shape=`.

Padding: "valid" (no padding), "same" (TFLite's and Keras': ceil(n / stride) outputs, the odd padding below and
right), an int p (p on every side), a pair (rows, columns) padded on both sides, or (top, bottom, left, right);
padding is always less than the window. Taps in the padding are skipped, so average pooling divides by the taps
inside the input (TFLite's rule; PyTorch's count_include_pad=False).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .checks import number
from .errors import ShapeError
from .layer_base import _bias_init, _check_size, _CoreLayer, _glorot
from .module import Module
from .program import Op, ProgramBuilder

Padding = Union[str, int, Sequence[int]]
Shape = Tuple[int, ...]


def _pair(name: str, v: Any) -> Tuple[int, int]:
    """An int or a pair of ints (rows, columns), each from 1 to 255."""
    vals = list(v) if isinstance(v, (tuple, list)) else [v, v]
    if len(vals) != 2:
        raise ShapeError(f"{name} must be a number or a pair (rows, columns), got {v!r}")
    out = []
    for x in vals:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 1 <= x <= 255:
            raise ShapeError(f"{name} must be a whole number from 1 to 255, got {v!r}")
        out.append(int(x))
    return out[0], out[1]


def _padding(padding: Padding) -> Union[str, Tuple[int, int, int, int]]:
    """'valid', 'same', or explicit (top, bottom, left, right)."""
    if isinstance(padding, str):
        p = padding.strip().lower()
        if p not in ("valid", "same"):
            raise ShapeError(f"padding must be 'valid', 'same' or numbers, got {padding!r}")
        return p
    vals = list(padding) if isinstance(padding, (tuple, list)) else [padding]
    if any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x <= 255 for x in vals):
        raise ShapeError(f"padding numbers must be whole numbers from 0 to 255, got {padding!r}")
    if len(vals) == 1:
        return (vals[0],) * 4  # type: ignore[return-value]
    if len(vals) == 2:
        return (vals[0], vals[0], vals[1], vals[1])
    if len(vals) == 4:
        return tuple(int(x) for x in vals)  # type: ignore[return-value]
    raise ShapeError(f"padding must be 'valid', 'same', p, (rows, columns) or (top, bottom, left, right): {padding!r}")


def _axis(n: int, k: int, s: int, padding: Any, before: int, after: int, what: str) -> Tuple[int, int]:
    """(outputs, padding before) along one axis of n inputs for a window k and stride s."""
    if padding == "same":
        out = -(-n // s)
        before = max((out - 1) * s + k - n, 0) // 2
        after = max((out - 1) * s + k - n, 0) - before
    elif padding == "valid":
        before = after = 0
    if before >= k or after >= k:
        raise ShapeError(f"padding {before}/{after} {what} must be less than the window ({k})")
    if n + before + after < k:
        raise ShapeError(f"a window of {k} does not fit {n} {what} (with padding {before}/{after})")
    out = (n + before + after - k) // s + 1
    return out, before


def _shape_text(shape: Optional[Shape]) -> str:
    return "?" if shape is None else "x".join(str(d) for d in shape)


class _Spatial(_CoreLayer):
    """A spatial op: its sizes come from its input shape ((H, W, C), or (T, C) for rank 1)."""

    rank = 2  # spatial dimensions of its input: 2 for images, 1 for series

    def __init__(self, input_shape: Optional[Sequence[int]] = None) -> None:
        super().__init__()
        self._geom: Dict[str, int] = {}
        self._out: Optional[Shape] = None
        if input_shape is not None:
            if not isinstance(input_shape, (tuple, list)):
                raise ShapeError(f"{type(self).__name__} input_shape must be a tuple such as (49, 10, 1)")
            self._resolve_shape(tuple(_check_size(f"{type(self).__name__} input_shape", d) for d in input_shape))

    # what the subclass says
    def _plan(self, h: int, w: int, c: int) -> Dict[str, int]:
        """The geometry for an h x w x c input: h_out, w_out, c_out, kh, kw, sh, sw, pt, pl."""
        raise NotImplementedError

    def _settings(self) -> Dict[str, Any]:
        """Constructor arguments besides input_shape (for architecture())."""
        return {}

    # shapes
    def _resolve_shape(self, shape: Shape) -> None:
        shape = tuple(int(d) for d in shape)
        if len(shape) == 1 and self._shape is not None and shape[0] == self.n_in:
            return  # a flat input of the right size (a Dense layer's output) is read as this layer's shape
        if self.rank == 1 and len(shape) == 1:
            shape = (shape[0], 1)  # a flat series is one channel
        want = "(H, W, C)" if self.rank == 2 else "(T, C)"
        if len(shape) != self.rank + 1:
            raise ShapeError(f"{self.describe()} takes {want} inputs, not {_shape_text(shape)}")
        if self._shape is not None:
            if self._shape != shape:
                raise ShapeError(f"{self.describe()} takes {_shape_text(self._shape)}, not {_shape_text(shape)}")
            return
        h, w, c = (1, shape[0], shape[1]) if self.rank == 1 else shape
        g = self._plan(h, w, c)
        g.update(h_in=h, w_in=w, c_in=c)
        n_in, n_out = h * w * c, g["h_out"] * g["w_out"] * g["c_out"]
        if n_in > 65535 or n_out > 65535:
            raise ShapeError(
                f"{self.describe()} on {_shape_text(shape)}: {max(n_in, n_out)} values per sample; the core "
                f"takes at most 65535 per tensor"
            )
        self._geom, self._shape = g, shape
        self.n_in, self.n_out = n_in, n_out
        self._out = (g["w_out"], g["c_out"]) if self.rank == 1 else (g["h_out"], g["w_out"], g["c_out"])

    def _resolve(self, n: int) -> None:
        if self.n_in is None:
            want = "(H, W, C)" if self.rank == 2 else "(T, C)"
            raise ShapeError(
                f"{self.describe()} needs a {want} input shape: put it after a layer with one or give it "
                f"input_shape=..."
            )
        if n != self.n_in:
            raise ShapeError(f"{self.describe()} takes {self.n_in} values, the layer before gives {n}")

    @property
    def out_shape(self) -> Optional[Shape]:
        return self._out

    def _geometry(self) -> Dict[str, float]:
        return dict(self._geom)

    def architecture(self) -> Dict[str, Any]:
        a: Dict[str, Any] = {"type": type(self).__name__, **self._settings()}
        if self._shape is not None:
            a["input_shape"] = list(self._shape)
        return a

    def describe(self) -> str:
        return f"{type(self).__name__}({', '.join(self._describe_parts())})"

    def _describe_parts(self) -> List[str]:
        return []


class _Window(_Spatial):
    """A layer with a kernel window, a stride and padding."""

    def __init__(self, kernel_size: Any, stride: Any, padding: Padding, input_shape: Optional[Sequence[int]]) -> None:
        if self.rank == 1:
            k, s = _pair("kernel_size", (1, kernel_size))[1], _pair("stride", (1, stride))[1]
            self.kernel_size: Any = k
            self.stride: Any = s
            self._k, self._s = (1, k), (1, s)
        else:
            self._k, self._s = _pair("kernel_size", kernel_size), _pair("stride", stride)
            self.kernel_size = self._k if self._k[0] != self._k[1] else self._k[0]
            self.stride = self._s if self._s[0] != self._s[1] else self._s[0]
        self._pad = _padding(padding)
        if self.rank == 1 and isinstance(self._pad, tuple):
            if not isinstance(padding, (tuple, list)) or len(padding) == 1:
                p = self._pad[0]
                self._pad = (0, 0, p, p)
            elif len(padding) == 2:
                self._pad = (0, 0, int(padding[0]), int(padding[1]))
            else:
                raise ShapeError(f"a 1-D padding is 'valid', 'same', p or (left, right), got {padding!r}")
        self.padding: Any = self._pad if isinstance(self._pad, str) else list(self._pad)
        super().__init__(input_shape)

    def _window(self, h: int, w: int) -> Dict[str, int]:
        (kh, kw), (sh, sw) = self._k, self._s
        pad = self._pad
        t, b, left, r = (0, 0, 0, 0) if isinstance(pad, str) else pad
        ho, pt = _axis(h, kh, sh, pad, t, b, "rows")
        wo, pl = _axis(w, kw, sw, pad, left, r, "columns")
        return {"h_out": ho, "w_out": wo, "kh": kh, "kw": kw, "sh": sh, "sw": sw, "pt": pt, "pl": pl}

    def _window_parts(self, default_stride: Tuple[int, int]) -> List[str]:
        """'3x3', 'stride 2', 'same' or the explicit padding, for describe()."""
        k = str(self._k[1]) if self.rank == 1 else f"{self._k[0]}x{self._k[1]}"
        parts = [k]
        if self._s != default_stride:
            parts.append(f"stride {self._s[1] if self.rank == 1 else self.stride}")
        if self._pad == "same":
            parts.append("same")
        elif isinstance(self._pad, tuple) and any(self._pad):
            parts.append("pad " + ",".join(str(v) for v in (self._pad[2:] if self.rank == 1 else self._pad)))
        return parts

    def _window_settings(self) -> Dict[str, Any]:
        s: Dict[str, Any] = {"kernel_size": self.kernel_size, "stride": self.stride}
        if self.rank == 1 and isinstance(self._pad, tuple):
            s["padding"] = [self._pad[2], self._pad[3]]
        else:
            s["padding"] = self.padding
        return s


class Conv2d(_Window):
    """2-D convolution (cross-correlation, as every framework computes it) of an (H, W, C) input:
    Conv2d(in_channels, out_channels, kernel_size, stride=1, padding='valid', bias=True). Parameters: W
    [kh][kw][in][out] (connection weights; the layout of a Dense layer at each tap), then the bias [out]."""

    op = Op.CONV2D

    def __init__(
        self,
        in_channels: Optional[int],
        out_channels: int,
        kernel_size: Any = 3,
        stride: Any = 1,
        padding: Padding = "valid",
        bias: bool = True,
        input_shape: Optional[Sequence[int]] = None,
    ) -> None:
        self.in_channels: Optional[int] = (  # None: the input's channels
            None if in_channels is None else _check_size(f"{type(self).__name__} in_channels", in_channels)
        )
        self.out_channels = _check_size(f"{type(self).__name__} out_channels", out_channels)
        if not isinstance(bias, bool):
            raise ShapeError(f"{type(self).__name__} bias must be True or False, got {bias!r}")
        self.bias = bias
        super().__init__(kernel_size, stride, padding, input_shape)

    def _plan(self, h: int, w: int, c: int) -> Dict[str, int]:
        if self.in_channels is not None and c != self.in_channels:
            raise ShapeError(f"{self.describe()} takes {self.in_channels} input channels, not {c}")
        g = {**self._window(h, w), "c_out": self.out_channels}
        self.in_channels = c
        return g

    def _settings(self) -> Dict[str, Any]:
        return {
            "in_channels": self.in_channels,
            "out_channels": self.out_channels,
            **self._window_settings(),
            "bias": self.bias,
        }

    def _describe_parts(self) -> List[str]:
        c_in = "?" if self.in_channels is None else self.in_channels
        return [f"{c_in}->{self.out_channels}", *self._window_parts((1, 1))] + ([] if self.bias else ["no bias"])

    def _op_fields(self) -> Dict[str, Any]:
        return {"kind": 1 if self.bias else 0}

    def _n_weights(self) -> int:
        return self._k[0] * self._k[1] * self.in_channels * self.out_channels

    def _fans(self) -> Tuple[int, int]:
        taps = self._k[0] * self._k[1]
        return taps * self.in_channels, taps * self.out_channels

    def _init_params(self, rng: np.random.Generator, scale: float) -> np.ndarray:
        fan_in, fan_out = self._fans()
        w = _glorot(rng, fan_in, fan_out, self._n_weights(), scale)
        if not self.bias:
            return w
        return np.concatenate([w, _bias_init(rng, self.out_channels, scale)])

    @property
    def weight(self) -> np.ndarray:
        """W as a (kh, kw, in_channels, out_channels) view."""
        return self.params[: self._n_weights()].reshape(*self._k, self.in_channels, self.out_channels)


class DepthwiseConv2d(_Window):
    """Depthwise 2-D convolution: each input channel convolved with its own depth_multiplier filters
    (out channel o reads input channel o // depth_multiplier). A pointwise convolution is Conv2d with a 1x1
    kernel. Parameters: W [kh][kw][channels * depth_multiplier] (TFLite's layout), then the bias."""

    op = Op.DWCONV2D

    def __init__(
        self,
        channels: Optional[int] = None,
        kernel_size: Any = 3,
        stride: Any = 1,
        padding: Padding = "valid",
        depth_multiplier: int = 1,
        bias: bool = True,
        input_shape: Optional[Sequence[int]] = None,
    ) -> None:
        self.channels: Optional[int] = (  # None: the input's channels
            None if channels is None else _check_size("DepthwiseConv2d channels", channels)
        )
        self.depth_multiplier = _check_size("DepthwiseConv2d depth_multiplier", depth_multiplier)
        if not isinstance(bias, bool):
            raise ShapeError(f"DepthwiseConv2d bias must be True or False, got {bias!r}")
        self.bias = bias
        super().__init__(kernel_size, stride, padding, input_shape)

    def _plan(self, h: int, w: int, c: int) -> Dict[str, int]:
        if self.channels is not None and c != self.channels:
            raise ShapeError(f"{self.describe()} takes {self.channels} input channels, not {c}")
        g = {**self._window(h, w), "c_out": c * self.depth_multiplier}
        self.channels = c
        return g

    def _settings(self) -> Dict[str, Any]:
        s: Dict[str, Any] = {"channels": self.channels, **self._window_settings()}
        if self.depth_multiplier != 1:
            s["depth_multiplier"] = self.depth_multiplier
        s["bias"] = self.bias
        return s

    def _describe_parts(self) -> List[str]:
        m = [f"x{self.depth_multiplier}"] if self.depth_multiplier != 1 else []
        c = "?" if self.channels is None else str(self.channels)
        return [c, *m, *self._window_parts((1, 1))] + ([] if self.bias else ["no bias"])

    def _op_fields(self) -> Dict[str, Any]:
        return {"kind": 1 if self.bias else 0}

    def _n_weights(self) -> int:
        return self._k[0] * self._k[1] * self.channels * self.depth_multiplier

    def _init_params(self, rng: np.random.Generator, scale: float) -> np.ndarray:
        taps = self._k[0] * self._k[1]
        w = _glorot(rng, taps, taps * self.depth_multiplier, self._n_weights(), scale)
        if not self.bias:
            return w
        return np.concatenate([w, _bias_init(rng, self.channels * self.depth_multiplier, scale)])


class _Pool(_Window):
    """Pooling over windows, channel by channel (no parameters); the stride defaults to the window."""

    def __init__(
        self,
        kernel_size: Any = 2,
        stride: Any = None,
        padding: Padding = "valid",
        input_shape: Optional[Sequence[int]] = None,
    ) -> None:
        super().__init__(kernel_size, kernel_size if stride is None else stride, padding, input_shape)

    def _plan(self, h: int, w: int, c: int) -> Dict[str, int]:
        return {**self._window(h, w), "c_out": c}

    def _settings(self) -> Dict[str, Any]:
        return self._window_settings()

    def _describe_parts(self) -> List[str]:
        return self._window_parts(self._k)


class MaxPool2d(_Pool):
    """Max pooling: MaxPool2d(kernel_size=2, stride=kernel_size, padding='valid')."""

    op = Op.MAXPOOL2D


class AvgPool2d(_Pool):
    """Average pooling over the taps inside the input: AvgPool2d(kernel_size=2, stride=kernel_size, padding)."""

    op = Op.AVGPOOL2D


class MaxPool1d(MaxPool2d):
    """Max pooling of a (T, C) series: MaxPool1d(kernel_size=2, stride=kernel_size, padding='valid')."""

    rank = 1


class AvgPool1d(AvgPool2d):
    """Average pooling of a (T, C) series: AvgPool1d(kernel_size=2, stride=kernel_size, padding='valid')."""

    rank = 1


class GlobalAvgPool2d(_Spatial):
    """The mean of each channel over the whole (H, W, C) input: the output is flat, (C,)."""

    op = Op.AVGPOOL2D

    def _plan(self, h: int, w: int, c: int) -> Dict[str, int]:
        return {"h_out": 1, "w_out": 1, "c_out": c, "kh": h, "kw": w, "sh": 1, "sw": 1, "pt": 0, "pl": 0}

    def _resolve_shape(self, shape: Shape) -> None:
        super()._resolve_shape(shape)
        self._out = (self._geom["c_out"],)


class GlobalAvgPool1d(GlobalAvgPool2d):
    """The mean of each channel over the whole (T, C) series: the output is flat, (C,)."""

    rank = 1


class Conv1d(Conv2d):
    """1-D convolution of a (T, C) series (channels last, as Keras' Conv1D):
    Conv1d(in_channels, out_channels, kernel_size, stride=1, padding='valid', bias=True); padding is 'valid',
    'same', p or (left, right). Parameters: W [kernel][in][out], then the bias. (minidx's single-channel
    convolution of a flat input is SingleChannelConv1d.)"""

    rank = 1

    def _fans(self) -> Tuple[int, int]:
        return self._k[1] * self.in_channels, self._k[1] * self.out_channels


class Flatten(Module):
    """(H, W, C) or (T, C) -> flat (H * W * C,): the values stay where they are (channels last), so it is no op of
    the core; a Dense layer may also follow a spatial one directly."""

    def __init__(self) -> None:
        super().__init__()

    def _resolve_shape(self, shape: Shape) -> None:
        n = int(np.prod(shape))
        if self.n_in is not None and self.n_in != n:
            raise ShapeError(f"Flatten takes {self.n_in} values, the layer before gives {n}")
        self.n_in = self.n_out = n
        self._shape = tuple(int(d) for d in shape)

    def _resolve(self, n: int) -> None:
        self._resolve_shape((n,))

    def _emit(self, b: ProgramBuilder) -> None:
        pass  # nothing to run

    def architecture(self) -> Dict[str, Any]:
        return {"type": "Flatten"}

    def describe(self) -> str:
        return "Flatten()"


class BatchNorm(_CoreLayer):
    """Batch normalisation of the last axis (channels): BatchNorm(channels, eps=1e-5, momentum=0.1). Training
    (train_batch, fit) normalises with the batch's mean and variance over the samples and positions and moves the
    running statistics by `momentum` (PyTorch's convention; Keras' momentum m is 1 - m here); forward and the
    device use the running statistics. `mcutrain export` folds it into the convolution or dense layer before it.
    Parameters: gain, bias, running mean, running variance (channels each; only gain and bias are learned).
    A network with BatchNorm trains on one thread (the batch statistics need the whole batch)."""

    op = Op.BATCHNORM

    def __init__(
        self,
        channels: Optional[int] = None,
        eps: float = 1e-5,
        momentum: float = 0.1,
        input_shape: Optional[Sequence[int]] = None,
    ) -> None:
        super().__init__()
        self.channels: Optional[int] = (  # None: the input's channels (last axis)
            None if channels is None else _check_size("BatchNorm channels", channels)
        )
        self.eps = number("BatchNorm eps", eps, 0.0, 1.0, lo_open=True, error=ShapeError)
        self.momentum = number("BatchNorm momentum", momentum, 0.0, 1.0, error=ShapeError)
        if input_shape is not None:
            self._resolve_shape(tuple(int(d) for d in input_shape))

    def _resolve_shape(self, shape: Shape) -> None:
        shape = tuple(int(d) for d in shape)
        if len(shape) == 1 and self._shape is not None and shape[0] == self.n_in:
            return  # a flat input of the right size is read as this layer's shape
        if self.channels is None:
            self.channels = shape[-1]
        if shape[-1] != self.channels:
            raise ShapeError(f"{self.describe()} normalises {self.channels} channels, its input has {shape[-1]}")
        n = int(np.prod(shape))
        if self.n_in is not None and self.n_in != n:
            raise ShapeError(f"{self.describe()} takes {self.n_in} values, the layer before gives {n}")
        self.n_in = self.n_out = n
        self._shape = shape if len(shape) > 1 else None

    def _resolve(self, n: int) -> None:
        if self.n_in is None and self.channels is not None and n != self.channels:
            raise ShapeError(f"{self.describe()} on a flat input needs {self.channels} values, not {n}")
        self._resolve_shape(self.in_shape if self.n_in is not None else (n,))  # type: ignore[arg-type]
        if n != self.n_in:
            raise ShapeError(f"{self.describe()} takes {self.n_in} values, the layer before gives {n}")

    @property
    def out_shape(self) -> Optional[Shape]:
        return self.in_shape

    def _op_fields(self) -> Dict[str, Any]:
        return {"alpha": self.eps}

    def _geometry(self) -> Dict[str, float]:
        return {"c_in": self.channels, "beta": self.momentum}

    def _emit(self, b: ProgramBuilder) -> None:
        b.add(
            self.op,
            self.n_in,  # type: ignore[arg-type]
            self.n_out,  # type: ignore[arg-type]
            kind=1 if b.training else 0,
            alpha=self.eps,
            name=self.describe(),
            **self._geometry(),
        )

    def _default_params(self) -> np.ndarray:
        c = self.channels
        return np.concatenate([np.ones(c), np.zeros(c), np.zeros(c), np.ones(c)]).astype(np.float32)

    def architecture(self) -> Dict[str, Any]:
        a: Dict[str, Any] = {"type": "BatchNorm", "channels": self.channels, "eps": self.eps, "momentum": self.momentum}
        if self.in_shape is not None:
            a["input_shape"] = list(self.in_shape)
        return a

    def describe(self) -> str:
        return f"BatchNorm({'' if self.channels is None else self.channels})"
