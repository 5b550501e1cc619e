"""Compositions: Sequential (positional, nestable), Residual (y = x + M(x), or y = M(x) + S(x) with a shortcut) and
LR (M learns at lr / divisor)."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np

from .checks import number
from .conv_layers import BatchNorm, _Spatial
from .errors import ShapeError
from .module import Module
from .program import Op, ProgramBuilder


class _Composite(Module):
    """A module made of sub-modules whose parameters share one buffer. The buffer is allocated when the
    parameters are first used (Module._ensure_buf), so building a network from a file's architecture
    costs nothing until its size has been checked against the file."""

    def _finish(self) -> None:
        """The sizes are known: count the parameters once (the architecture is fixed from here on)."""
        self.param_count()

    def param_count(self) -> int:
        n = getattr(self, "_n_params", None)  # the architecture is fixed once sized: count once
        if n is None:
            n = sum(c.param_count() for c in self.children())
            if self.n_in is not None:
                self._n_params = n
        return n

    def _init_params(self, rng: np.random.Generator, scale: float) -> np.ndarray:
        parts = [c._init_params(rng, scale) for c in self.children()]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def _resolve(self, n: int) -> None:
        """A composite's sizes are fixed at construction: check them."""
        if self.n_in != n:
            raise ShapeError(f"{self.describe()} takes {self.n_in} values, the layer before gives {n}")


class Sequential(_Composite):
    """Layers run one after another. Sizes must chain: Sequential(Linear(20, 35), Linear(36, 10))
    fails at construction with a message naming both layers and both sizes.

    Thread-safe like every Module: the network and its layers share one lock (`lock`), held by each call
    that reads or writes the parameters or optimizer state (forward, train_batch, fit chunks, update,
    save_model, ...), so calls from several threads run one at a time and every update is kept."""

    def __init__(self, *modules: Module, input_shape: Optional[Sequence[int]] = None) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], (list, tuple)):
            modules = tuple(modules[0])
        if not modules:
            raise ShapeError("Sequential needs at least one layer")
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise ShapeError(f"Sequential: item {i + 1} is {m!r}, not a layer")
        self.modules: Tuple[Module, ...] = tuple(modules)
        first = self.modules[0]
        shape = tuple(int(d) for d in input_shape) if input_shape is not None else first.in_shape
        if shape is None:
            if _takes_shape(first):
                return  # sized later, by the composition around it (a block of spatial layers)
            raise ShapeError(
                f"Sequential: the first layer {first.describe()} needs a size, e.g. {type(first).__name__}(20)"
            )
        self._chain(shape)

    def _chain(self, shape: Tuple[int, ...]) -> None:
        """Size every layer from the input shape, checking that each one takes what the one before gives."""
        self._shape = shape if len(shape) > 1 else None
        n = int(np.prod(shape))
        for i, m in enumerate(self.modules):
            prev = self.modules[i - 1] if i else None
            try:
                m._resolve_shape(shape)  # size-agnostic and spatial layers adopt it; the rest are checked below
            except ShapeError as e:
                if _takes_shape(m):
                    where = (
                        f"the input {_text(shape)}"
                        if prev is None
                        else f"layer {i} {prev.describe()} outputs {_text(shape)}"
                    )
                    raise ShapeError(f"Sequential: {where} but layer {i + 1}: {e}") from None
            if m.n_in != n:
                where = "the input has" if prev is None else f"layer {i} {prev.describe()} outputs"
                what = f"{n} values" if len(shape) == 1 else f"{_text(shape)} ({n} values)"
                raise ShapeError(f"Sequential: {where} {what} but layer {i + 1} {m.describe()} takes {m.n_in}")
            assert m.n_out is not None and m.out_shape is not None
            shape = m.out_shape
            n = m.n_out
        self.n_in, self.n_out = self.modules[0].n_in, n
        self._out_shape = shape
        self._finish()

    def _resolve_shape(self, shape: Tuple[int, ...]) -> None:
        if self.n_in is None:
            self._chain(tuple(shape))
        elif self.in_shape != tuple(shape) and self.n_in != int(np.prod(shape)):
            raise ShapeError(f"{self.describe()} takes {_text(self.in_shape)}, the layer before gives {_text(shape)}")

    def _resolve(self, n: int) -> None:
        self._resolve_shape((n,))

    @property
    def out_shape(self) -> Optional[Tuple[int, ...]]:
        return getattr(self, "_out_shape", None) or super().out_shape

    def children(self) -> Tuple[Module, ...]:
        return self.modules

    def _emit(self, b: ProgramBuilder) -> None:
        for m in self.modules:
            m._emit(b)

    def describe(self) -> str:
        return "Sequential(" + ", ".join(m.describe() for m in self.modules) + ")"

    def architecture(self) -> Dict[str, Any]:
        a: Dict[str, Any] = {"type": "Sequential", "layers": [m.architecture() for m in self.modules]}
        if self._shape is not None:
            a["input_shape"] = list(self._shape)
        return a

    def __len__(self) -> int:
        return len(self.modules)

    def __getitem__(self, i: int) -> Module:
        return self.modules[i]


class Residual(_Composite):
    """y = x + M(x), M the layers given (it must map its input's shape to itself); or, with a shortcut,
    y = M(x) + S(x): `Residual(*body, shortcut=[...])` adds a projection of the block's input (ResNet's 1x1
    convolution with stride 2, with or without BatchNorm), and both branches must give the same shape."""

    def __init__(self, module: Module, *more: Module, shortcut: Union[Module, Sequence[Module], None] = None) -> None:
        super().__init__()
        inner = module if not more else Sequential(module, *more)
        self.inner = inner
        self.shortcut: Optional[Module] = None
        if shortcut is not None:
            if isinstance(shortcut, (list, tuple)):
                if not shortcut:
                    raise ShapeError(
                        f"Residual({inner.describe()}): the shortcut is empty; give it its layers, or leave "
                        "shortcut out for y = x + M(x)"
                    )
                for i, m in enumerate(shortcut):
                    if not isinstance(m, Module):
                        raise ShapeError(f"Residual: shortcut item {i + 1} is {m!r}, not a layer")
                shortcut = shortcut[0] if len(shortcut) == 1 else Sequential(*shortcut)
            if not isinstance(shortcut, Module):
                raise ShapeError(f"Residual: the shortcut is {shortcut!r}, not a layer or a list of layers")
            self.shortcut = shortcut
        for what, m in self._branches():
            if m.n_in is None and not _takes_shape(m):
                raise ShapeError(
                    f"Residual({m.describe()}): give the {what}'s first layer a size, e.g. {type(m).__name__}(20)"
                )
        if any(m.n_in is None for _, m in self._branches()):
            return  # a block of spatial layers: sized by the Sequential around it
        self._check_inner()

    def _branches(self) -> Tuple[Tuple[str, Module], ...]:
        """(name, module) of the main body and, when there is one, the shortcut."""
        main = ("main body" if self.shortcut is not None else "body", self.inner)
        return (main,) if self.shortcut is None else (main, ("shortcut", self.shortcut))

    def _check_inner(self) -> None:
        inner, sc = self.inner, self.shortcut
        if sc is None:
            if inner.n_out != inner.n_in or (inner.out_shape != inner.in_shape and len(inner.in_shape or ()) > 1):
                raise ShapeError(
                    f"Residual({inner.describe()}): the inner module maps {_text(inner.in_shape)} to "
                    f"{_text(inner.out_shape)}; a residual block needs the same shape in and out "
                    "(or a shortcut that maps its input to the body's output: Residual(..., shortcut=[...]))"
                )
        else:
            if inner.n_in != sc.n_in:
                raise ShapeError(
                    f"Residual: the main body {inner.describe()} takes {_text(inner.in_shape)} but the shortcut "
                    f"{sc.describe()} takes {_text(sc.in_shape)}; both branches read the block's input"
                )
            if inner.n_out != sc.n_out or (inner.out_shape != sc.out_shape and len(inner.out_shape or ()) > 1):
                raise ShapeError(
                    f"Residual: the main body {inner.describe()} maps {_text(inner.in_shape)} to "
                    f"{_text(inner.out_shape)} but the shortcut {sc.describe()} maps it to {_text(sc.out_shape)}; "
                    "the block adds them, so both branches must give the same shape"
                )
        self.n_in, self.n_out = inner.n_in, inner.n_out
        self._shape = inner.in_shape if len(inner.in_shape or ()) > 1 else None
        self._finish()

    def _resolve_shape(self, shape: Tuple[int, ...]) -> None:
        if self.n_in is None:
            for _, m in self._branches():
                if m.n_in is None:
                    m._resolve_shape(tuple(shape))
                elif m.n_in != int(np.prod(shape)):
                    m._resolve(int(np.prod(shape)))  # a sized branch: its own message
            self._check_inner()
        else:
            self._resolve(int(np.prod(shape)))

    @property
    def out_shape(self) -> Optional[Tuple[int, ...]]:
        return self.in_shape if self.shortcut is None else self.inner.out_shape

    def children(self) -> Tuple[Module, ...]:
        return (self.inner,) if self.shortcut is None else (self.inner, self.shortcut)

    def _emit(self, b: ProgramBuilder) -> None:
        n, m = self.n_in, self.n_out
        assert n is not None and m is not None
        begin = b.add(Op.RES_BEGIN, n, n, alias=True, name="Residual begin")
        self.inner._emit(b)
        added = begin  # RES_END adds the input of this layer: the block's, or (with a shortcut) the main body's output
        if self.shortcut is not None:
            added = b.add(Op.RES_SHORTCUT, m, n, k=begin, out_at=b.layers[begin].out_off, name="Residual shortcut")
            self.shortcut._emit(b)
        end = b.add(Op.RES_END, m, m, k=added, name="Residual end")
        b.layers[begin].k = end

    def describe(self) -> str:
        if self.shortcut is None:
            return f"Residual({self.inner.describe()})"
        return f"Residual({self.inner.describe()}, shortcut={self.shortcut.describe()})"

    def architecture(self) -> Dict[str, Any]:
        a: Dict[str, Any] = {"type": "Residual", "inner": self.inner.architecture()}
        if self.shortcut is not None:
            a["shortcut"] = self.shortcut.architecture()
        return a


class LR(_Composite):
    """M learns with the learning rate divided by `divisor` (nested LR wrappers multiply)."""

    def __init__(self, module: Module, divisor: float) -> None:
        super().__init__()
        self.inner = module
        self.divisor = number("LR divisor", divisor, 0.0, 1e30, lo_open=True, error=ShapeError)
        self.n_in, self.n_out = module.n_in, module.n_out
        if self.n_in is not None:
            self._finish()

    def children(self) -> Tuple[Module, ...]:
        return (self.inner,)

    def _resolve(self, n: int) -> None:
        self.inner._resolve(n)
        self.n_in, self.n_out = self.inner.n_in, self.inner.n_out
        self._finish()

    def _emit(self, b: ProgramBuilder) -> None:
        saved = b.lr_div
        b.lr_div = float(np.float32(saved * self.divisor))
        self.inner._emit(b)
        b.lr_div = saved

    def describe(self) -> str:
        return f"LR({self.inner.describe()}, {self.divisor:g})"

    def architecture(self) -> Dict[str, Any]:
        return {"type": "LR", "divisor": self.divisor, "inner": self.inner.architecture()}


def _takes_shape(m: Module) -> bool:
    """Does m take its size from an input shape (spatial layers and BatchNorm, and compositions that start with
    one)?"""
    if isinstance(m, (_Spatial, BatchNorm)):
        return True
    kids = m.children()
    return bool(kids) and _takes_shape(kids[0])


def _text(shape: Optional[Tuple[int, ...]]) -> str:
    """A shape for messages: 8x8x1, or '16 values' when flat."""
    if shape is None:
        return "?"
    return f"{shape[0]} values" if len(shape) == 1 else "x".join(str(d) for d in shape)


def flatten_names(module: Module, prefix: Optional[str] = None) -> Dict[str, Module]:
    """Map the leaf layers' positions to them, for messages and plots: '0', '1', ... for the layers of a
    Sequential, with one more '.i' per level of nesting (the body of a Residual or LR is its child 0,
    e.g. '1.0', and a Sequential inside it gives '1.0.0', '1.0.1', ...; a Residual's shortcut is its child 1)."""
    out: Dict[str, Module] = {}
    kids = module.children()
    if not kids:
        out[prefix or "0"] = module
        return out
    for i, c in enumerate(kids):
        out.update(flatten_names(c, f"{prefix}.{i}" if prefix else str(i)))
    return out
