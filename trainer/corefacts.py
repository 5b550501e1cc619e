"""What the C core says about itself: its enumerations, its struct layouts and its size computations.

Every fact here is asked from the compiled core (mcutrain._core, generated from the X-macro lists in
firmware/core/mct_lists.h), never typed again in Python: the layer ops and activations, losses,
optimizers (with their slot counts), learning-rate schedules, storage modes and statuses become IntEnums;
struct mct_layer, mct_opt and mct_train_state become numpy dtypes with the core's offsets and sizeof; and
what a layer needs (parameters, aux trace, output floats, scratch, const blob bytes) comes from the layer's
own C code. Consumers (the trainer, the exporter, the CLI) import these instead of writing numbers down.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Dict, FrozenSet, List, Tuple, Type

import numpy as np

from . import _core

_LISTS: Dict[str, Tuple[Tuple[str, ...], List[Tuple[Any, ...]]]] = _core.core_lists()
_STRUCTS: Dict[str, Tuple[int, List[Tuple[str, int, int, str]]]] = _core.core_structs()


def _enum(cls_name: str, list_name: str, doc: str) -> Type[IntEnum]:
    """An IntEnum of one of the core's lists (member names as in mct_lists.h)."""
    _, rows = _LISTS[list_name]
    e = IntEnum(cls_name, [(r[0], r[2]) for r in rows], module=__name__)  # type: ignore[misc]
    e.__doc__ = doc
    return e


def _attr(list_name: str, attr: str) -> Dict[int, int]:
    """{value: attribute} of one attribute of a list."""
    names, rows = _LISTS[list_name]
    i = 3 + names.index(attr)
    return {r[2]: r[i] for r in rows}


Op = _enum("Op", "op", "Layer operations (enum mct_op, MCT_OP_LIST in firmware/core/mct_lists.h).")
Act = _enum("Act", "act", "Elementwise activations (enum mct_act): kind of an ACT layer, gate of a GLU.")
LossKind = _enum("LossKind", "loss", "Losses (enum mct_loss_kind).")
OptKind = _enum("OptKind", "opt", "Optimizers (enum mct_opt_kind).")
Schedule = _enum("Schedule", "schedule", "Learning-rate schedules (enum mct_schedule).")
Storage = _enum("Storage", "storage", "Where a layer's parameters live (enum mct_storage).")
Status = _enum("Status", "status", "Statuses of the core's checked entry points (enum mct_status).")
Cmd = _enum("Cmd", "cmd", "Commands of the device protocol (MCT_CMD_LIST, docs/protocol.md).")
ReplyStatus = _enum("ReplyStatus", "reply", "Status bytes of the device protocol's replies (MCT_REPLY_LIST).")
# the format versions (MCT_FORMAT_LIST): what each format that crosses a host/device boundary carries
FORMAT_VERSIONS: Dict[str, int] = {r[0]: r[2] for r in _LISTS["format"][1]}
PROTOCOL_VERSION = FORMAT_VERSIONS["PROTOCOL"]  # byte 1 of every frame
BLOB_VERSION = FORMAT_VERSIONS["BLOB"]  # the device state blob (saves, pull/push)
MODEL_VERSION = FORMAT_VERSIONS["MODEL"]  # the model file (.mct)

_C_NAMES: Dict[Tuple[str, int], str] = {
    (cls.__name__, r[2]): r[1]
    for cls, list_name in (
        (Op, "op"),
        (Act, "act"),
        (LossKind, "loss"),
        (OptKind, "opt"),
        (Schedule, "schedule"),
        (Storage, "storage"),
        (Status, "status"),
    )
    for r in _LISTS[list_name][1]
}


def c_name(member: IntEnum) -> str:
    """The C identifier of a member of one of these enums, e.g. c_name(Op.DENSE) == 'MCT_OP_DENSE'."""
    return _C_NAMES[(type(member).__name__, int(member))]


# ---- op facts (columns of MCT_OP_LIST) ----
_CALLS = {0: "param", 1: "const", 2: "qop", 3: "net"}
OP_CALL: Dict[Any, str] = {Op(v): _CALLS[c] for v, c in _attr("op", "call").items()}
CONST_STORAGE_OPS: FrozenSet[Any] = frozenset(op for op, c in OP_CALL.items() if c == "const")
# the ops of residual blocks (RES_BEGIN, RES_SHORTCUT, RES_END, QRES_END): they read other layers' regions, and k is
# the index of a partner, which a table that moves layers must re-point
RESIDUAL_OPS: FrozenSet[Any] = frozenset(op for op, c in OP_CALL.items() if c == "net")
READS_I8: FrozenSet[Any] = frozenset(Op(v) for v, f in _attr("op", "reads_i8").items() if f)
WRITES_I8: FrozenSet[Any] = frozenset(Op(v) for v, f in _attr("op", "writes_i8").items() if f)
# full-integer int8 ops, as the core's MCT_OPS_QOP: call QOP, or any op that reads or writes int8 (QRES_END)
QUANT_OPS: FrozenSet[Any] = frozenset(op for op, c in OP_CALL.items() if c == "qop") | READS_I8 | WRITES_I8
# ---- activation facts ----
ACT_LAYER_KINDS: FrozenSet[Any] = frozenset(Act(v) for v, f in _attr("act", "layer").items() if f)
GLU_GATES: FrozenSet[Any] = frozenset(Act(v) for v, f in _attr("act", "gate").items() if f)
# ---- optimizer facts ----
OPT_SLOTS: Dict[Any, int] = {OptKind(v): s for v, s in _attr("opt", "slots").items()}


def names(enum: Type[IntEnum]) -> List[str]:
    """The members' names in lower case, in value order (the names Python's API uses: 'sgd', 'cosine', ...)."""
    return [m.name.lower() for m in sorted(enum, key=int)]


def by_name(enum: Type[IntEnum], name: str) -> Any:
    """The member of enum called name (any case); ValueError naming the choices otherwise."""
    try:
        return enum[name.strip().upper()]
    except KeyError:
        raise ValueError(f"unknown {enum.__name__} {name!r}; the core has {', '.join(names(enum))}") from None


def opt_slots(kind: Any) -> int:
    """Per-parameter optimizer slots of an optimizer kind (an OptKind, its value or its name)."""
    return OPT_SLOTS[by_name(OptKind, kind) if isinstance(kind, str) else OptKind(int(kind))]


def opt_asks_reg(opt_cfg: np.ndarray) -> bool:
    """Does an optimizer config (one OPT_DTYPE record) ask for gradient clipping or L1/L2 (mct_opt_asks_reg)?"""
    return bool(_core.opt_asks_reg(np.ascontiguousarray(opt_cfg).view(np.uint8).ravel()))


# ---- struct layouts ----
def _dtype(struct: str) -> np.dtype:
    size, fields = _STRUCTS[struct]
    return np.dtype(
        {
            "names": [f[0] for f in fields],
            "formats": [f"<{f[3]}{f[2]}" for f in fields],
            "offsets": [f[1] for f in fields],
            "itemsize": size,
        }
    )


LAYER_DTYPE = _dtype("mct_layer")  # struct mct_layer, one row of a layer table
# the fields of struct mct_layer after aux_off: the spatial ops' geometry and BatchNorm's momentum
GEOMETRY_FIELDS: Tuple[str, ...] = LAYER_DTYPE.names[LAYER_DTYPE.names.index("aux_off") + 1 :]
OPT_DTYPE = _dtype("mct_opt")  # struct mct_opt, an optimizer configuration
TRAIN_STATE_DTYPE = _dtype("mct_train_state")  # struct mct_train_state


def train_state_init() -> np.ndarray:
    """A fresh train state (mct_train_state_init: step 0, Adam powers 1), one TRAIN_STATE_DTYPE record."""
    return np.frombuffer(_core.train_state_init(), TRAIN_STATE_DTYPE).copy()


# ---- sizes ----
@dataclass(frozen=True)
class LayerSize:
    """What one layer needs, as its op's own C code computes it (mct_layer_size_of)."""

    valid: bool  # the op is known and the layer's op-specific fields suit it
    params: int  # parameter count
    aux: int  # floats of aux trace per sample
    out: int  # floats of arena per sample its output takes (an int8 tensor: i8_floats)
    scratch: int  # floats of backward scratch for the nb samples asked for
    consts: int  # bytes in the const blob (a const-stored Dense, a full-integer op), else 0


def layer_size(
    op: int,
    n_in: int,
    n_out: int,
    kind: int = 0,
    k: int = 0,
    alpha: float = 0.0,
    storage: int = 0,
    nb: int = 1,
    host: bool = False,
    **geometry: float,
) -> LayerSize:
    """What a layer of this op and these fields needs (nb samples; host: scratch with the host's transposes);
    geometry: the spatial ops' fields (GEOMETRY_FIELDS: h_in, w_in, c_in, ..., beta)."""
    r = np.zeros(1, LAYER_DTYPE)
    r["op"], r["kind"], r["storage"], r["n_in"], r["n_out"], r["k"] = int(op), int(kind), int(storage), n_in, n_out, k
    r["alpha"], r["lr_div"] = alpha, 1.0
    for name, value in geometry.items():
        if name not in GEOMETRY_FIELDS:
            raise TypeError(f"layer_size: {name!r} is not a geometry field of struct mct_layer")
        r[name] = value
    ok, params, aux, out, scratch, consts = _core.layer_size(r.view(np.uint8), nb, int(host))
    return LayerSize(bool(ok), int(params), int(aux), int(out), int(scratch), int(consts))


def layer_size_of(d: Any, nb: int = 1, host: bool = False) -> LayerSize:
    """layer_size of a layer description (anything with op, kind, n_in, n_out, k, alpha, storage and the geometry
    fields in a dict `geometry`, such as mcutrain.program.LayerDesc)."""
    return layer_size(
        d.op,
        d.n_in,
        d.n_out,
        kind=d.kind,
        k=d.k,
        alpha=d.alpha,
        storage=d.storage,
        nb=nb,
        host=host,
        **getattr(d, "geometry", {}),
    )


def i8_floats(n: int) -> int:
    """Floats of arena per sample an int8 tensor of n values takes (mct_i8_floats)."""
    return int(_core.i8_floats(n))


SAVE_MAGIC, SAVE_HEADER = (int(v) for v in _core.save_layout())
I8_WEIGHTS_BIT = int(_core.i8_weights_bit())  # the MCT_OPS_MASK bit of int8-weight const layers
QSHIFT_TFLITE = int(_core.qshift_tflite())  # a shift word's flag: requantize as TensorFlow Lite Micro


def save_slot_bytes(n_params: int, slots: int) -> int:
    """Bytes of one of the firmware's two save slots: header, RAM parameters, optimizer slots, train state."""
    return int(_core.save_slot_bytes(n_params, slots))


__all__ = [
    "Op",
    "Act",
    "LossKind",
    "OptKind",
    "Schedule",
    "Storage",
    "Status",
    "Cmd",
    "ReplyStatus",
    "FORMAT_VERSIONS",
    "PROTOCOL_VERSION",
    "BLOB_VERSION",
    "MODEL_VERSION",
    "c_name",
    "names",
    "by_name",
    "OP_CALL",
    "QUANT_OPS",
    "CONST_STORAGE_OPS",
    "RESIDUAL_OPS",
    "READS_I8",
    "WRITES_I8",
    "ACT_LAYER_KINDS",
    "GLU_GATES",
    "OPT_SLOTS",
    "opt_slots",
    "opt_asks_reg",
    "LAYER_DTYPE",
    "GEOMETRY_FIELDS",
    "OPT_DTYPE",
    "TRAIN_STATE_DTYPE",
    "train_state_init",
    "LayerSize",
    "layer_size",
    "layer_size_of",
    "i8_floats",
    "SAVE_MAGIC",
    "I8_WEIGHTS_BIT",
    "SAVE_HEADER",
    "save_slot_bytes",
]
