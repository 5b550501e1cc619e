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

from trainer import losses as losses_mod
from trainer.losses import Loss
from trainer.modelfile import Checkpoint, load_model

from .boards import Board, get_board
from .cgen import DeviceModel, model_c, model_h
from .device import DeviceSpecError, build_device_model
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


def _advice(ck: Checkpoint, board: Board, loss: Optional[Loss], current: str, quant: str, sim: bool) -> str:
    """What to change so the model fits: the most trainable layers that still fit, biases only, int8,
    or a bigger board."""
    n_with = sum(1 for d in ck.net.program.layers if d.n_p)
    start = n_with - 1 if current == "all" else int(current[5:]) - 1 if current.startswith("last:") else -1
    tries = [f"last:{k}" for k in range(start, 0, -1)] + ["biases", "none"]
    for t in tries:
        for q in ([quant, "int8"] if quant == "f32" else [quant]):
            if t == current and q == quant:
                continue
            m = build_device_model(ck, t, q, loss, board=board)
            if plan(m, board, sim).fits():
                what = {"biases": "train only the biases on the device (--trainable biases)",
                        "none": "freeze every layer (--trainable none): the device then only predicts"
                        }.get(t, f"train only the last {t[5:]} layer(s) on the device (--trainable {t})")
                return what + (" with int8 weights in flash (--quant int8)" if q != quant else "")
    return "use a smaller network or a board with more RAM"


def export_project(model: Union[str, Path, Checkpoint], board_name: str, out: Union[str, Path],
                   quant: str = "f32", trainable: str = "all", loss: Optional[Loss] = None,
                   force: bool = False, sim: bool = False) -> ExportResult:
    """Write a PlatformIO project for board_name into out; returns what was written.

    sim=True checks the memory plan against the board's simulated stand-in (which may have less RAM)."""
    board = get_board(board_name)
    ck = model if isinstance(model, Checkpoint) else load_model(model)
    source = Path(model).name if not isinstance(model, Checkpoint) else "a checkpoint"
    dst = Path(out)
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())) and not force:
        raise ExportError(f"{dst} exists and is not empty; pass --force to replace it")
    try:
        m = build_device_model(ck, trainable, quant, loss, board=board, source=source)
    except DeviceSpecError as e:
        raise ExportError(str(e)) from None
    mp = plan(m, board, sim)
    if not mp.fits():
        check_fits(mp, _advice(ck, board, loss, trainable, quant, sim))
    files = {"src/model.h": model_h(m), "src/model.c": model_c(m),
             "mcutrain.json": json.dumps({
                 "board": board.name, "hash": m.hash().hex(), "quant": quant, "trainable": trainable,
                 "n_in": m.program.n_in, "n_out": m.program.n_out, "n_params": m.program.n_params,
                 "n_trainable": m.n_trainable, "loss": str(_loss_of(m)), "segments": m.segments,
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
    for candidate in (losses_mod.mse, losses_mod.logit_bce, losses_mod.cross_entropy, losses_mod.cosine):
        if candidate.kind == m.loss_kind:
            return candidate
    return losses_mod.huber(m.loss_param)
