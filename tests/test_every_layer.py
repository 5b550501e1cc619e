"""The layer table (tests/layer_table.py) is complete, and every row survives a model file.

Completeness is checked both ways: every layer class registered in mcutrain.layers.LAYER_TYPES, every GLU gate
and every activation the core offers has a row, and the rows (with the compositions) emit every op of the C
core's op list (firmware/core/mct_lists.h) except the full-integer ones the exporter makes; a row whose class is
not registered fails too. The gradient, parity and model-file tests take their layers from the same table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import layer_table
import numpy as np
import pytest

from helpers import assert_same_bits
from mcutrain import LR, Residual, TrainParams, load_model, save_model
from mcutrain import corefacts as cf
from mcutrain import layers as L
from mcutrain.module import Module

ROW_IDS = [name for name, _ in layer_table.ROWS]


def leaves(m: Module) -> list:
    """The leaf layers of a module."""
    return list(m.layers())


def test_every_registered_layer_class_has_a_row() -> None:
    """LAYER_TYPES and the classes of the rows' leaf layers are the same set."""
    in_table = {type(leaf) for _, make in layer_table.ROWS for leaf in leaves(make())}
    registered = set(L.LAYER_TYPES.values())
    assert registered - in_table == set(), f"layers without a row: {sorted(c.__name__ for c in registered - in_table)}"
    assert in_table - registered == set(), (
        f"rows of unregistered layers: {sorted(c.__name__ for c in in_table - registered)}"
    )


def test_every_gate_and_activation_of_the_core_has_a_row() -> None:
    """Each GLU gate the core accepts and each activation kind usable as a layer appears in a row."""
    rows = [leaf for _, make in layer_table.ROWS for leaf in leaves(make())]
    gates = {leaf.gate for leaf in rows if isinstance(leaf, L.GLU)}
    assert gates == {g.name.lower() for g in cf.GLU_GATES}
    acts = {cf.Act(d.kind) for leaf in rows for d in leaf.program.layers if d.op == cf.Op.ACT}
    assert acts == set(cf.ACT_LAYER_KINDS)


def test_the_rows_emit_every_op_of_the_core_but_the_exporters() -> None:
    """The rows' layer tables use every op of the C op list except the full-integer ops (which only the
    exporter's int8-full quantization makes), and no other."""
    ops = {cf.Op(int(d.op)) for _, make in layer_table.ROWS for d in make().program.layers}
    assert ops == set(cf.Op) - cf.QUANT_OPS


def test_compositions_are_rows_too() -> None:
    """Residual and LR (the two compositions besides Sequential) each have a row."""
    kinds = {type(make()) for _, make in layer_table.ROWS}
    assert {Residual, LR} <= kinds


def test_every_layer_net_holds_every_row() -> None:
    """The network the parity and model-file tests train chains one instance of each row."""
    net = layer_table.every_layer_net()
    kinds = [type(m).__name__ for m in net.modules]
    for name, make in layer_table.ROWS:
        assert (type(make()).__name__ in kinds) == (name not in layer_table.HOST_TRAINING_ONLY), name
    assert net.n_in == 6 and net.n_out == 4


@pytest.mark.parametrize("make", [m for _, m in layer_table.ROWS], ids=ROW_IDS)
def test_each_row_survives_a_model_file(tmp_path: Path, make: Callable[[], Module]) -> None:
    """Saved with an Adam optimizer after one step and loaded: the same architecture, parameters, optimizer
    state and outputs, bit for bit."""
    m = make().rand_params(seed=5)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, m.n_in)).astype(np.float32)
    opt = m.new_adam(TrainParams(lr=0.01))
    y, trace = m.traced_forward(x)
    _, grads = m.backprop(trace, np.ones_like(y))
    m.update(opt, grads)
    save_model(tmp_path / "row.mct", m, opt)
    ck = load_model(tmp_path / "row.mct")
    assert ck.net.architecture() == m.architecture()
    assert_same_bits(ck.net.params, m.params, "parameters")
    assert ck.optimizer is not None
    assert_same_bits(ck.optimizer.state, opt.state, "optimizer state")
    assert_same_bits(ck.net.forward(x), m.forward(x), "outputs")
