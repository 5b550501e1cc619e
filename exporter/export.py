"""Export: a model file becomes a PlatformIO project for one board.

Steps: pick which layers keep training on the device, build the device's layer table, check the
memory plan (fail before writing anything if it does not fit), generate model.h/model.c and lay out
the project. The output folder is checked before any work, locked, built complete (the model file
included) next to its final place and exchanged with the old project in one step (exporter/folders.py):
an interrupt, a kill or a second export never leaves no project or a mix of two.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np

from mcutrain.files import read_bounded
from mcutrain.fold import fold_checkpoint, has_batchnorm
from mcutrain.losses import Loss
from mcutrain.modelfile import MAX_MODEL_BYTES, Checkpoint, ModelFileError, decode_model, encode_model

from ..errors import McuTrainError
from .boards import Board, get_board
from .cgen import config_h, model_c, model_h
from .device import DeviceSpecError, build_device_model, device_optimizer
from .device_model import DeviceModel
from .folders import LOCK_WAIT, check_folder, folder_lock, recover, replace_folder
from .library import library_json, library_name, library_properties, write_library
from .memplan import MemoryPlan, check_fits, plan
from .project import CALIBRATION, HOST_MODEL, write_project
from .protocol import MAX_FRAME_PAYLOAD
from .quantize import QuantError, QuantReport, evaluate
from .selftest import expected_h


class ExportError(McuTrainError, ValueError):
    """An export that cannot be done; the message says what to change."""


@dataclass
class ExportResult:
    """What export_project produced."""

    path: Path
    board: Board
    model: DeviceModel
    plan: MemoryPlan
    hash: str
    quant_report: Optional[QuantReport] = None  # the device model against the f32 network (with eval_data)

    @property
    def optimizer(self) -> str:
        """The optimizer kind the device trains with."""
        return optimizer_name(self.model)


def _advice(
    ck: Checkpoint,
    board: Board,
    loss: Optional[Loss],
    current: str,
    quant: str,
    sim: bool,
    calibration: Any = None,
    optimizer: Optional[str] = None,
    save: str = "all",
) -> str:
    """What to change so the model fits: the same layers with SGD (an optimizer without state) when that is
    enough, else the most trainable layers that still fit, biases only, int8 (full-integer int8 when
    calibration data was given), each with the model's optimizer or else SGD, or a bigger board."""
    opt = device_optimizer(ck, optimizer)
    sgd = device_optimizer(ck, "sgd")
    if opt is not None and opt.kind != "sgd":
        try:
            m = build_device_model(ck, current, quant, loss, sgd, board=board, calibration=calibration, save=save)
            if plan(m, board, sim).fits():
                return f"train with plain SGD, which keeps no optimizer state (--optimizer sgd; {opt.kind} keeps some)"
        except DeviceSpecError:
            pass
    n_with = sum(1 for d in ck.net.program.layers if d.n_p)
    current = current.strip().lower()  # as trainable_flags reads it
    start = n_with - 1 if current == "all" else int(current[5:]) - 1 if current.startswith("last:") else -1
    tries = [current] + [f"last:{k}" for k in range(start, 0, -1)] + ["biases", "none"]
    quants = [quant] + (["int8"] if quant == "f32" else [])
    if calibration is not None and quant != "int8-full":
        quants.append("int8-full")
    opts = [opt] + ([sgd] if opt is not None and opt.kind != "sgd" else [])
    for t in tries:
        for q in quants:
            for o in opts:
                if t == current and q == quant:  # tried above
                    continue
                try:
                    m = build_device_model(ck, t, q, loss, o, board=board, calibration=calibration, save=save)
                except DeviceSpecError:
                    continue
                if plan(m, board, sim).fits():
                    return _mode_advice(t, q, quant) + (" with plain SGD (--optimizer sgd)" if o is not opt else "")
    return "use a smaller network or a board with more RAM"


def _mode_advice(t: str, q: str, quant: str) -> str:
    """The advice's words for trainable mode t with quantization q (the export asked for quant)."""
    if t == "biases" and q == "int8-full":  # over a full-integer body only the head's biases train
        return "train only the last layer's biases on the device, over a full-integer int8 body (--trainable " + (
            "biases --quant int8-full)" if q != quant else "biases)"
        )
    what = {
        "biases": "train only the biases on the device (--trainable biases)",
        "none": "freeze every layer (--trainable none): the device then only predicts",
    }.get(t, f"train only the last {t[5:]} layer(s) on the device (--trainable {t})")
    hints = {
        "int8": " with int8 weights in flash (--quant int8)",
        "int8-full": " with the frozen layers in full-integer int8 (--quant int8-full)",
    }
    return what + (hints.get(q, "") if q != quant else "")


def board_device_model(
    ck: Checkpoint,
    board: Board,
    trainable: str = "all",
    quant: str = "f32",
    loss: Optional[Loss] = None,
    optimizer: Optional[str] = None,
    save: Optional[str] = None,
    sim: bool = False,
    calibration: Any = None,
    source: str = "model",
) -> DeviceModel:
    """The device model of an export for a board: trained with the optimizer kind given (default: the model's),
    its saves keeping what save says (default: 'all' where two saves of the parameters and the optimizer state
    fit the board's storage, else 'params'). DeviceSpecError for a choice that cannot be made."""
    if has_batchnorm(ck.net):
        ck = fold_checkpoint(ck)
    opt = device_optimizer(ck, optimizer)
    m = build_device_model(ck, trainable, quant, loss, opt, board=board, source=source, calibration=calibration)
    if save is None:
        save = "all" if plan(m, board, sim).save_bytes <= board.storage else "params"
    if save == m.save:
        return m
    return build_device_model(
        ck, trainable, quant, loss, opt, board=board, source=source, calibration=calibration, save=save
    )


def export_project(
    model: Union[str, Path, Checkpoint],
    board_name: str,
    out: Union[str, Path],
    quant: str = "f32",
    trainable: str = "all",
    loss: Optional[Loss] = None,
    force: bool = False,
    sim: bool = False,
    calibration: Any = None,
    eval_data: Optional[Tuple[Any, Any]] = None,
    optimizer: Optional[str] = None,
    save: Optional[str] = None,
    library: bool = False,
    lock_wait: float = LOCK_WAIT,
) -> ExportResult:
    """Write a PlatformIO project for board_name into out; returns what was written.

    sim=True checks the memory plan against the board's simulated stand-in (which may have less RAM).
    quant: 'f32', 'int8' (int8 weights, float math) or 'int8-full' (full-integer frozen layers; needs
    calibration, sample inputs (n, n_in)). eval_data=(x, y): the device model is run on the host through
    the same C kernels and compared with the f32 network (loss, accuracy, output change): the result's
    quant_report, also written to mcutrain.json. optimizer: the kind the device trains with (sgd, momentum,
    rmsprop, rmsprop_momentum, adam; default: the model's). save: what a device save keeps, 'params' or 'all'
    (default: all where two saves of it fit the board's storage, else params). library=True writes an
    Arduino/PlatformIO library for the user's own firmware (exporter/library.py) instead of a project.

    The project (or library) holds the model file (model.mct: the file's own bytes, or the checkpoint encoded) and, for
    int8-full, its calibration inputs. out is checked before any work (folders.FolderError); force replaces
    only a folder that mcutrain exported (NotOurFolderError otherwise). Another export to the same folder is
    waited for up to lock_wait seconds (FolderBusyError after that)."""
    kind = "library" if library else "project"
    dst = check_folder(out, kind, force)
    with folder_lock(dst, lock_wait):
        recover(dst)  # first put back what an interrupted export moved aside, then check what is there
        check_folder(dst, kind, force)  # again, under the lock: another export may have just finished
        return _export_locked(
            model, board_name, dst, quant, trainable, loss, sim, calibration, eval_data, optimizer, save, library
        )


def _export_locked(
    model: Union[str, Path, Checkpoint],
    board_name: str,
    dst: Path,
    quant: str,
    trainable: str,
    loss: Optional[Loss],
    sim: bool,
    calibration: Any,
    eval_data: Optional[Tuple[Any, Any]],
    optimizer: Optional[str],
    save: Optional[str],
    library: bool,
) -> ExportResult:
    """export_project's work, holding the folder's lock."""
    board = get_board(board_name)
    if isinstance(model, Checkpoint):
        ck, source = model, "a checkpoint"
        model_bytes = encode_model(ck.net, ck.optimizer, ck.metadata)
    else:
        model_bytes = read_bounded(model, MAX_MODEL_BYTES, "model file", ModelFileError)
        ck, source = decode_model(model_bytes, str(Path(model))), Path(model).name
    if has_batchnorm(ck.net):  # the device runs the folded network; the project's model file is that one
        ck = fold_checkpoint(ck)
        model_bytes = encode_model(ck.net, ck.optimizer, ck.metadata)
    try:
        m = board_device_model(ck, board, trainable, quant, loss, optimizer, save, sim, calibration, source)
    except DeviceSpecError as e:
        raise ExportError(str(e)) from None
    save = m.save
    sample = 4 * (m.program.n_in + m.program.n_out)  # a TRAIN frame's payload: the input and the target, f32
    if not library and sample > MAX_FRAME_PAYLOAD:
        raise ExportError(
            f"a sample of {m.program.n_in:,} inputs does not fit the firmware's protocol frame (TRAIN carries "
            f"{sample:,} B, a frame at most {MAX_FRAME_PAYLOAD:,} B): export it as a library (--library) and give it "
            "its inputs from your own code, or use a smaller input (e.g. a lower resolution)"
        )
    mp = plan(m, board, sim)
    if not mp.fits():
        check_fits(mp, _advice(ck, board, loss, trainable, quant, sim, calibration, optimizer, save))
    report: Optional[QuantReport] = None
    if eval_data is not None:
        try:
            ex, ey = eval_data
        except (TypeError, ValueError):
            raise ExportError("eval_data must be a pair (inputs, targets)") from None
        try:
            report = evaluate(ck, m, ex, ey, loss, trainable)
        except QuantError as e:
            raise ExportError(str(e)) from None
    files: Dict[str, Union[str, bytes]] = {
        HOST_MODEL: model_bytes,
        "src/model.h": model_h(m),
        "src/model.c": model_c(m),
        "test/test_model/expected.h": expected_h(m),
        "mcutrain.json": json.dumps(
            {
                "kind": "library" if library else "project",
                "device_optimizer": optimizer_name(m),
                "save": m.save,
                "board": board.name,
                "hash": m.hash().hex(),
                "quant": quant,
                "trainable": trainable,
                "n_in": m.program.n_in,
                "n_out": m.program.n_out,
                "n_params": m.program.n_params,
                "n_trainable": m.n_trainable,
                "loss": str(_loss_of(m)),
                "segments": m.segments,
                "optimizer": (ck.optimizer.config() if ck.optimizer else None),
                "memory": {
                    "ram": mp.ram,
                    "flash": mp.flash,
                    "ram_budget": mp.ram_budget,
                    "flash_budget": mp.flash_budget,
                    "f32_ram": mp.baseline_ram,
                    "f32_flash": mp.baseline_flash,
                },
                "quant_report": report.to_dict() if report else None,
                "calibration_samples": (
                    int(np.asarray(calibration).reshape(-1, m.program.n_in).shape[0])
                    if quant == "int8-full" and calibration is not None
                    else None  # f32, int8, or an imported model's own int8 ranges
                ),
                "source": source,
                "architecture": ck.net.architecture(),
            },
            indent=2,
            sort_keys=True,
        )
        + "\n",
    }
    if quant == "int8-full" and calibration is not None and not library:
        files[CALIBRATION] = _npz_bytes(calibration)
    if library:
        name = library_name(dst.name)
        del files["test/test_model/expected.h"]
        files.pop(HOST_MODEL, None)  # a library carries the C model only
        files.update(
            {
                "src/mct_config.h": config_h(m),
                "library.json": library_json(name, board, m.build_flags()),
                "library.properties": library_properties(name, board),
            }
        )
        replace_folder(dst, lambda folder: write_library(folder, files))
    else:
        replace_folder(dst, lambda folder: write_project(folder, board, files, source, m.build_flags()))
    return ExportResult(dst, board, m, mp, m.hash().hex(), report)


def _npz_bytes(x: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, x=np.asarray(x, np.float32))
    return buf.getvalue()


def optimizer_name(m: DeviceModel) -> str:
    """The name of the optimizer kind the device model trains with (sgd, momentum, ..., adam)."""
    return m.opt_kind.name.lower()


def _loss_of(m: DeviceModel) -> Loss:
    from .quantize import loss_of_model

    return loss_of_model(m.loss_kind, m.loss_param)
