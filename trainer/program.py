"""The compiled form of a module: the C core's layer table and the sizes of its buffers.

A `Program` is what the C core runs. The host trainer builds one per module (`Module.program`),
and the exporter writes the same table into the firmware as C source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

from . import _core
from .corefacts import GEOMETRY_FIELDS, LAYER_DTYPE, Act, Op, Storage, layer_size

__all__ = ["Op", "Act", "LAYER_DTYPE", "LayerDesc", "Program", "ProgramBuilder", "core_net"]


@dataclass
class LayerDesc:
    """One row of the layer table (see struct mct_layer)."""

    op: Op
    kind: int
    n_in: int
    n_out: int
    k: int = 0
    alpha: float = 0.0
    lr_div: float = 1.0
    p_off: int = 0
    n_p: int = 0
    n_w: int = 0
    in_off: int = 0
    out_off: int = 0
    aux_off: int = 0
    aux: int = 0
    trainable: bool = True
    storage: int = int(Storage.RAM)  # enum mct_storage (corefacts.Storage)
    name: str = ""  # the Python layer it came from, for messages and generated comments
    # a spatial op's fields of struct mct_layer (corefacts.GEOMETRY_FIELDS: h_in, w_in, c_in, ..., beta), by name
    geometry: Dict[str, float] = field(default_factory=dict)


@dataclass
class Program:
    """A layer table plus the buffer sizes the C core needs for it."""

    layers: List[LayerDesc]
    n_in: int
    n_out: int
    n_params: int
    arena: int
    in_off: int
    out_off: int
    cdata: bytes = b""  # const blob of layers kept in flash (storage != 0)
    max_width: int = field(init=False)

    def __post_init__(self) -> None:
        self.max_width = max([self.n_in] + [max(d.n_in, d.n_out) for d in self.layers])

    def table(self) -> np.ndarray:
        """The layer table as an array with the C struct's layout."""
        t = np.zeros(len(self.layers), LAYER_DTYPE)
        for name in LAYER_DTYPE.names:  # the core's fields, by name (reserved ones stay 0)
            if name == "op" or name == "trainable":
                t[name] = [int(getattr(d, name)) for d in self.layers]
            elif name in GEOMETRY_FIELDS:
                t[name] = [d.geometry.get(name, 0) for d in self.layers]
            elif hasattr(LayerDesc, name) or name in LayerDesc.__dataclass_fields__:
                t[name] = [getattr(d, name) for d in self.layers]
        return t

    def core(self) -> Any:
        """The C core running this layer table (see core_net)."""
        return core_net(self)


class ProgramBuilder:
    """Appends layers in execution order, giving each its parameter range and arena regions."""

    def __init__(self, n_in: int, training: bool = False) -> None:
        self.training = training  # the table training runs (BatchNorm on batch statistics)
        self.layers: List[LayerDesc] = []
        self.n_in = n_in
        self.arena = n_in  # the network input sits at offset 0
        self.cur_off = 0  # where the current activation lives
        self.cur_n = n_in
        self.p = 0
        self.lr_div = 1.0

    def add(
        self,
        op: Op,
        n_in: int,
        n_out: int,
        *,
        kind: int = 0,
        k: int = 0,
        alpha: float = 0.0,
        n_w: int = 0,
        alias: bool = False,
        out_at: Optional[int] = None,
        name: str = "",
        **geometry: float,
    ) -> int:
        """Append a layer reading the current activation; returns its index. Its parameter count, aux trace
        and output floats are what the op's own C code says (corefacts.layer_size); alias: its output is its
        input (a residual block's start); out_at: its output is this earlier region (a residual shortcut: the
        block's input); geometry: a spatial op's fields (corefacts.GEOMETRY_FIELDS)."""
        if n_in != self.cur_n:
            raise AssertionError(f"internal: {name} reads {n_in} values, {self.cur_n} are there")
        size = layer_size(op, n_in, n_out, kind=kind, k=k, alpha=alpha, **geometry)
        if not size.valid:
            raise AssertionError(f"internal: the C core does not accept {name} ({op.name} {n_in} -> {n_out})")
        d = LayerDesc(
            op=op,
            kind=int(kind),
            n_in=n_in,
            n_out=n_out,
            k=k,
            alpha=float(alpha),
            lr_div=self.lr_div,
            p_off=self.p,
            n_p=size.params,
            n_w=n_w,
            in_off=self.cur_off,
            aux=size.aux,
            name=name,
            geometry=dict(geometry),
        )
        if alias:
            d.out_off = self.cur_off
        elif out_at is not None:
            d.out_off = out_at
        else:
            d.out_off = self.arena
            self.arena += size.out
        d.aux_off = self.arena
        self.arena += size.aux
        self.p += size.params
        self.cur_off, self.cur_n = d.out_off, n_out
        self.layers.append(d)
        return len(self.layers) - 1

    def build(self) -> Program:
        """The finished program."""
        return Program(self.layers, self.n_in, self.cur_n, self.p, self.arena, 0, self.cur_off)


def core_net(p: Program) -> Any:
    """The C core's view of a program (its layer table checked by mct_net_check)."""
    if _core.LAYER_SIZE != LAYER_DTYPE.itemsize:
        raise ImportError(
            f"mcutrain._core was built for another layer table layout ({_core.LAYER_SIZE} bytes, "
            f"expected {LAYER_DTYPE.itemsize}): rebuild with `pip install -e .`"
        )
    return _core.CoreNet(
        p.table().view(np.uint8).ravel(),
        len(p.layers),
        p.n_in,
        p.n_out,
        p.max_width,
        p.n_params,
        p.arena,
        p.in_off,
        p.out_off,
        bytes(p.cdata),
    )
