"""One source for every fact of the C core: the X-macro lists of firmware/core/mct_lists.h drive the C enums,
the dispatch and, through the binding, Python's enums and dtypes (mcutrain.corefacts).

These tests check the mechanism: the compiled binding says what the header says (a stale build shows up
here), the struct dtypes have the compiler's sizes, the Python layer classes cover exactly the core's
non-quantized ops and their sizes are the ones each op's C code computes, and the trainer's own copies of
core facts (until they import corefacts) still agree. That every op of the list has a forward and a backward
dispatch is checked in C (test_op_list_dispatch in tests/c/test_core.c, run by test_c_core.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

import layer_table
import numpy as np
import pytest

from mcutrain import TrainParams, _core
from mcutrain import corefacts as cf
from mcutrain import layers as layer_mod
from mcutrain.compose import Residual, Sequential
from mcutrain.module import Module

ROOT = Path(__file__).resolve().parent.parent
LISTS_H = ROOT / "firmware" / "core" / "mct_lists.h"


def header_list(macro: str) -> List[Tuple[str, int]]:
    """(NAME, value) of each X(...) entry of one list macro in mct_lists.h, read as text."""
    text = LISTS_H.read_text()
    m = re.search(r"#define " + macro + r"\(X\)(.*?)(?:\n\n|\n#define|\n/\*)", text, flags=re.S)
    assert m, f"{macro} not found in {LISTS_H}"
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    return [(n, int(v)) for n, v in re.findall(r"X\((\w+),\s*(\d+)", body)]


ENUMS = [
    (cf.Op, "MCT_OP_LIST"),
    (cf.Act, "MCT_ACT_LIST"),
    (cf.LossKind, "MCT_LOSS_LIST"),
    (cf.OptKind, "MCT_OPT_LIST"),
    (cf.Schedule, "MCT_SCHEDULE_LIST"),
    (cf.Storage, "MCT_STORAGE_LIST"),
    (cf.Status, "MCT_STATUS_LIST"),
]


@pytest.mark.parametrize("enum,macro", ENUMS, ids=[m for _, m in ENUMS])
def test_python_enums_are_the_headers_lists(enum: Any, macro: str) -> None:
    """Each IntEnum has the entries of its X-macro list, in order (else _core was built from another
    header: rebuild with pip install -e .)."""
    assert [(m.name, int(m)) for m in enum] == header_list(macro)


def test_c_names() -> None:
    """The C identifiers come from the core's tables, the way generated model.c names things."""
    assert cf.c_name(cf.Op.RES_END) == "MCT_OP_RES_END"
    assert cf.c_name(cf.Storage.I8) == "MCT_STORE_I8"
    assert cf.c_name(cf.Schedule.COSINE) == "MCT_LR_COSINE"
    assert cf.c_name(cf.Status.E_NONFINITE_GRAD) == "MCT_E_NONFINITE_GRAD"


def test_struct_dtypes_have_the_compilers_sizes() -> None:
    """sizeof of each struct, from the compiler, equals the dtype's itemsize; fields do not overlap."""
    for dt, size in (
        (cf.LAYER_DTYPE, _core.LAYER_SIZE),
        (cf.OPT_DTYPE, _core.OPT_SIZE),
        (cf.TRAIN_STATE_DTYPE, _core.TRAIN_STATE_SIZE),
    ):
        assert dt.itemsize == size
        spans = sorted((off, off + f.itemsize) for f, off in (dt.fields[n][:2] for n in dt.names))
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_train_state_init_and_save_layout() -> None:
    ts = cf.train_state_init()
    assert int(ts["step"][0]) == 0 and float(ts["b1t"][0]) == 1.0 and float(ts["b2t"][0]) == 1.0
    assert cf.SAVE_HEADER == 28  # magic, sequence, size, CRC-32, 8-byte model hash, blob version
    n, slots = 37, 2
    assert cf.save_slot_bytes(n, slots) == cf.SAVE_HEADER + 4 * n * (1 + slots) + cf.TRAIN_STATE_DTYPE.itemsize


def test_optimizer_slots_are_the_cores() -> None:
    for kind in cf.OptKind:
        assert cf.opt_slots(kind) == _core.opt_slots(int(kind)) == cf.opt_slots(kind.name.lower())


_TABLE = {name: make for name, make in layer_table.ROWS if name in layer_mod.LAYER_TYPES}


def example_layers() -> Dict[str, Module]:
    """One instance of every Python layer class (LAYER_TYPES), sized."""
    out: Dict[str, Module] = {}
    for name, cls in layer_mod.LAYER_TYPES.items():
        if name in _TABLE:  # the spatial layers need an input shape: their rows in the layer table
            out[name] = _TABLE[name]()
        elif cls is layer_mod.SingleChannelConv1d:
            out[name] = cls(6, 4, 3)
        elif issubclass(cls, layer_mod._Sized):
            out[name] = cls(5, 4)
        else:
            out[name] = cls(n=4)
    out["Residual"] = Residual(layer_mod.Linear(4, 4))
    out["Residual with a shortcut"] = Residual(layer_mod.Linear(4, 3), shortcut=[layer_mod.Dense(4, 3)])
    return out


def test_python_layers_cover_exactly_the_non_quantized_ops() -> None:
    """The Python layers (LAYER_TYPES plus Residual, with and without a shortcut) emit every op of the core that is
    not a full-integer op, and no other."""
    ops = {d.op for m in example_layers().values() for d in m.program.layers}
    assert {cf.Op(int(o)) for o in ops} == set(cf.Op) - cf.QUANT_OPS


@pytest.mark.parametrize("name", sorted(example_layers()))
def test_python_layer_sizes_are_the_cores(name: str) -> None:
    """Each layer's parameter count and aux trace, as the Python layer puts them in the table, equal what
    its op's C code computes (mct_<stem>_size) and the core accepts the row."""
    m = example_layers()[name]
    for d in m.program.layers:
        s = cf.layer_size_of(d)
        assert s.valid, f"{name}: the core rejects {d}"
        assert (d.n_p, d.aux) == (s.params, s.aux), name


def test_binding_takes_empty_parameter_buffers() -> None:
    """A network without parameters runs on an empty parameter buffer (no padding float needed)."""
    net = Sequential(layer_mod.Relu(3), layer_mod.Tanh())
    core = _core.CoreNet(
        net.program.table().view(np.uint8).ravel(),
        len(net.program.layers),
        3,
        3,
        net.program.max_width,
        0,
        net.program.arena,
        0,
        net.program.out_off,
    )
    x = np.array([[-1.0, 0.5, 2.0]], np.float32)
    y = core.forward(np.zeros(0, np.float32), x)
    assert np.allclose(y, np.tanh(np.maximum(x, 0)), atol=1e-6)
    with pytest.raises(ValueError, match="params"):
        _core.CoreNet(layer_mod.Linear(3, 2).program.table().view(np.uint8).ravel(), 1, 3, 2, 3, 8, 5, 0, 3).forward(
            np.zeros(2, np.float32), x
        )


def test_train_batch_core_statuses() -> None:
    """The batch update reports the core's statuses (enum mct_status)."""
    net = layer_mod.Linear(2, 1).rand_params(0)
    opt = net.new_sgd(TrainParams(lr=0.1))
    core = net._corenet()
    x = np.array([[np.nan, 1.0]], np.float32)
    t = np.zeros((1, 1), np.float32)
    st, _ = core.train_batch(opt._cfg, opt._ts, net._ensure_buf(), opt._state_buf, int(cf.LossKind.MSE), 0.0, x, t, 1)
    assert st == cf.Status.E_NONFINITE_INPUT
    st, _ = core.train_batch(
        opt._cfg,
        opt._ts,
        net._ensure_buf(),
        opt._state_buf,
        int(cf.LossKind.MSE),
        0.0,
        np.ones((1, 2), np.float32),
        t,
        1,
    )
    assert st == cf.Status.OK
