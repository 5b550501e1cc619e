"""The compiled form of a module: the C core's layer table and the sizes of its buffers.

A `Program` is what the C core runs. The host trainer builds one per module (`Module.program`),
and the exporter writes the same table into the firmware as C source.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, List

import numpy as np

from . import _core


class Op(IntEnum):
    """Layer operations, the values of `enum mct_op` in firmware/core/mct.h."""
    DENSE = 1
    BIAS = 2
    ACT = 3
    SOFTMAX = 4
    SWISH = 5
    GLU = 6
    DIAG = 7
    SCALE = 8
    RMSNORM = 9
    DYT = 10
    CONV1D = 11
    RES_BEGIN = 12
    RES_END = 13
    # full-integer int8 ops (exporter, quant='int8-full'): frozen, forward only, constants in the const blob
    QUANT = 14
    DEQUANT = 15
    QDENSE = 16
    QLUT = 17


class Act(IntEnum):
    """Elementwise activations, the values of `enum mct_act` in firmware/core/mct.h."""
    RELU = 0
    LEAKY_RELU = 1
    SIGMOID = 2
    TANH = 3
    SILU = 4
    SOFTPLUS = 5
    SINE = 6
    COSINE = 7
    SWISH = 8


# The C struct mct_layer, field for field (checked against sizeof(mct_layer) when the core loads).
LAYER_DTYPE = np.dtype([
    ("op", "u1"), ("kind", "u1"), ("trainable", "u1"), ("storage", "u1"),
    ("n_in", "<u2"), ("n_out", "<u2"), ("k", "<u2"), ("reserved2", "<u2"),
    ("alpha", "<f4"), ("lr_div", "<f4"),
    ("p_off", "<u4"), ("n_p", "<u4"), ("n_w", "<u4"),
    ("in_off", "<u4"), ("out_off", "<u4"), ("aux_off", "<u4"),
])


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
    storage: int = 0        # enum mct_storage: 0 RAM, 1 const f32, 2 const int8 weights, 3 full-integer op
    name: str = ""          # the Python layer it came from, for messages and generated comments


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
    cdata: bytes = b""       # const blob of layers kept in flash (storage != 0)
    max_width: int = field(init=False)

    def __post_init__(self) -> None:
        self.max_width = max([self.n_in] + [max(d.n_in, d.n_out) for d in self.layers])

    def table(self) -> np.ndarray:
        """The layer table as an array with the C struct's layout."""
        t = np.zeros(len(self.layers), LAYER_DTYPE)
        for i, d in enumerate(self.layers):
            t[i] = (int(d.op), d.kind, int(d.trainable), d.storage, d.n_in, d.n_out, d.k, 0, d.alpha, d.lr_div,
                    d.p_off, d.n_p, d.n_w, d.in_off, d.out_off, d.aux_off)
        return t

    def core(self) -> Any:
        """The C core running this layer table (see core_net)."""
        return core_net(self)


class ProgramBuilder:
    """Appends layers in execution order, giving each its parameter range and arena regions."""

    def __init__(self, n_in: int) -> None:
        self.layers: List[LayerDesc] = []
        self.n_in = n_in
        self.arena = n_in          # the network input sits at offset 0
        self.cur_off = 0           # where the current activation lives
        self.cur_n = n_in
        self.p = 0
        self.lr_div = 1.0

    def add(self, op: Op, n_in: int, n_out: int, *, kind: int = 0, k: int = 0, alpha: float = 0.0,
            n_p: int = 0, n_w: int = 0, aux: int = 0, alias: bool = False, name: str = "") -> int:
        """Append a layer reading the current activation; returns its index."""
        if n_in != self.cur_n:
            raise AssertionError(f"internal: {name} reads {n_in} values, {self.cur_n} are there")
        d = LayerDesc(op=op, kind=int(kind), n_in=n_in, n_out=n_out, k=k, alpha=float(alpha),
                      lr_div=self.lr_div, p_off=self.p, n_p=n_p, n_w=n_w, in_off=self.cur_off, aux=aux, name=name)
        if alias:
            d.out_off = self.cur_off
        else:
            d.out_off = self.arena
            self.arena += n_out
        d.aux_off = self.arena
        self.arena += aux
        self.p += n_p
        self.cur_off, self.cur_n = d.out_off, n_out
        self.layers.append(d)
        return len(self.layers) - 1

    def build(self) -> Program:
        """The finished program."""
        return Program(self.layers, self.n_in, self.cur_n, self.p, self.arena, 0, self.cur_off)



def core_net(p: Program) -> Any:
    """The C core's view of a program (its layer table checked by mct_net_check)."""
    if _core.LAYER_SIZE != LAYER_DTYPE.itemsize:
        raise ImportError(f"mcutrain._core was built for another layer table layout ({_core.LAYER_SIZE} bytes, "
                          f"expected {LAYER_DTYPE.itemsize}): rebuild with `pip install -e .`")
    return _core.CoreNet(p.table().view(np.uint8).ravel(), len(p.layers), p.n_in, p.n_out, p.max_width,
                         p.n_params, p.arena, p.in_off, p.out_off, bytes(p.cdata))
