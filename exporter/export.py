"""Export: a model file becomes a PlatformIO project for one board.

Steps: pick which layers keep training on the device, build the device's layer table, check the
memory plan (fail before writing anything if it does not fit), generate model.h/model.c and lay out
the project. The output folder is written next to its final place and renamed into it, so an
existing project is never half overwritten.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import numpy as np

from trainer import losses as losses_mod
from trainer.losses import Loss
from trainer.modelfile import Checkpoint, load_model
from trainer.optim import SLOTS, Optimizer, TrainParams

from .boards import Board, get_board
from .cgen import DeviceModel, model_c, model_h
from .memplan import MemoryPlan, check_fits, plan
from .project import write_project


class ExportError(ValueError):
    """An export that cannot be done; the message says what to change."""


@dataclass
class ExportResult:
    """What export_project produced."""
    path: Path
    board: Board
    model: DeviceModel
    plan: MemoryPlan
    hash: str


def first_trainable(prog_layers: list, trainable: str) -> int:
    """Index of the first trainable layer for 'all', 'none' or 'last:N' (N parameterised layers)."""
    with_params = [i for i, d in enumerate(prog_layers) if d.n_p]
    t = trainable.strip().lower()
    if t == "all":
        return 0
    if t == "none":
        return len(prog_layers)
    if t.startswith("last:") and t[5:].isdigit():
        n = int(t[5:])
        if n == 0:
            return len(prog_layers)
        if n > len(with_params):
            raise ExportError(f"--trainable {trainable}: the network has only {len(with_params)} layers with "
                              f"parameters")
        return with_params[len(with_params) - n]
    raise ExportError(f"--trainable must be all, none or last:N, got {trainable!r}")


def device_model(ck: Checkpoint, trainable: str = "all", loss: Optional[Loss] = None,
                 optimizer: Optional[Optimizer] = None, rx_floats: Optional[int] = None,
                 board: Optional[Board] = None, source: str = "model") -> DeviceModel:
    """The firmware's view of a checkpoint: layer table with trainable flags, parameters, optimizer, loss."""
    net = ck.net
    prog = net.program.with_trainable(first_trainable(net.program.layers, trainable))
    opt = optimizer or ck.optimizer or Optimizer("sgd", TrainParams(), net.param_count())
    if loss is None:
        name = ck.metadata.get("loss")
        loss = losses_mod.by_name(name) if name else losses_mod.mse
    core = net._corenet()
    scratch = int(core.scratch_size(1, 0)) + prog.max_width
    if rx_floats is None:
        rx_floats = 16 if board is not None and board.core == "avr" else 64
    rx_max = max(5 + 4 * rx_floats, 32)
    return DeviceModel(program=prog, params=net.params.copy(), opt_cfg=opt._cfg.view(np.uint8).copy().view(
        __import__("trainer.optim", fromlist=["OPT_DTYPE"]).OPT_DTYPE), opt_slots=SLOTS[opt.kind],
        loss_kind=loss.kind, loss_param=loss.param, scratch=scratch, rx_max=rx_max, source=source)


def _advice(ck: Checkpoint, board: Board, loss: Optional[Loss], current: str, sim: bool) -> str:
    """What to change so the model fits: the most trainable layers that still fit, else int8 or a bigger board."""
    n_with = sum(1 for d in ck.net.program.layers if d.n_p)
    start = n_with - 1 if current == "all" else int(current[5:]) - 1 if current.startswith("last:") else -1
    for k in range(start, -1, -1):
        m = device_model(ck, f"last:{k}", loss, board=board)
        if plan(m, board, sim).fits():
            if k == 0:
                return "freeze every layer (--trainable none): the device then only predicts"
            return f"train only the last {k} layer(s) on the device (--trainable last:{k})"
    return "use a smaller network or a board with more RAM"


def export_project(model: Union[str, Path, Checkpoint], board_name: str, out: Union[str, Path],
                   quant: str = "f32", trainable: str = "all", loss: Optional[Loss] = None,
                   force: bool = False, sim: bool = False) -> ExportResult:
    """Write a PlatformIO project for board_name into out; returns what was written.

    sim=True checks the memory plan against the board's simulated stand-in (which may have less RAM)."""
    board = get_board(board_name)
    ck = model if isinstance(model, Checkpoint) else load_model(model)
    source = Path(model).name if not isinstance(model, Checkpoint) else "a checkpoint"
    if quant != "f32":
        raise ExportError(f"--quant {quant} is not available yet; use f32")
    dst = Path(out)
    if dst.exists() and any(dst.iterdir()) and not force:
        raise ExportError(f"{dst} exists and is not empty; pass --force to replace it")
    m = device_model(ck, trainable, loss, board=board, source=source)
    mp = plan(m, board, sim)
    if not mp.fits():
        check_fits(mp, _advice(ck, board, loss, trainable, sim))
    files = {"src/model.h": model_h(m), "src/model.c": model_c(m),
             "mcutrain.json": json.dumps({
                 "board": board.name, "hash": m.hash().hex(), "quant": quant, "trainable": trainable,
                 "n_in": m.program.n_in, "n_out": m.program.n_out, "n_params": m.program.n_params,
                 "n_trainable": m.n_trainable, "loss": losses_mod.Loss.__str__(
                     losses_mod.by_name("mse") if m.loss_kind == 0 else _loss_of(m)),
                 "optimizer": (ck.optimizer.config() if ck.optimizer else None),
                 "memory": {"ram": mp.ram, "flash": mp.flash, "ram_budget": mp.ram_budget,
                            "flash_budget": mp.flash_budget},
                 "source": source, "architecture": ck.net.spec()}, indent=2, sort_keys=True) + "\n"}
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=str(dst.parent)))
    try:
        write_project(tmp / "p", board, files, source)
        if dst.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dst.name}.old.", dir=str(dst.parent)))
            dst.rename(old / "p")
            (tmp / "p").rename(dst)
            shutil.rmtree(old)
        else:
            (tmp / "p").rename(dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ExportResult(dst, board, m, mp, m.hash().hex())


def _loss_of(m: DeviceModel) -> Loss:
    for l in (losses_mod.mse, losses_mod.logit_bce, losses_mod.cross_entropy, losses_mod.cosine):
        if l.kind == m.loss_kind:
            return l
    return losses_mod.huber(m.loss_param)
