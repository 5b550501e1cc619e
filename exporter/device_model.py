"""The device model: everything an export is generated from (the device's layer table, its RAM parameters,
optimizer and loss), how the device's RAM parameters map back to the host network's, and the build flags
that leave out of the firmware what the model does not use. mcutrain.exporter.device builds it from a
checkpoint; cgen writes it out as C; twin runs it on the host.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from mcutrain.corefacts import (
    CONST_STORAGE_OPS,
    I8_WEIGHTS_BIT,
    RESIDUAL_OPS,
    Op,
    OptKind,
    Storage,
    layer_size_of,
    opt_asks_reg,
)
from mcutrain.program import LayerDesc, Program

Segments = Sequence[Tuple[int, int, int]]  # (device RAM offset, host offset, count) of each RAM block


def segments_to_host(segments: Segments, ram: np.ndarray, host_params: np.ndarray) -> np.ndarray:
    """A copy of the host network's values (parameters, or one optimizer slot) with the device's RAM
    values written in, block by block."""
    out = np.array(host_params, np.float32, copy=True)
    for r, h, n in segments:
        out[h : h + n] = ram[r : r + n]
    return out


def segments_from_host(segments: Segments, host_params: np.ndarray, n: int) -> np.ndarray:
    """The device's n RAM values taken from the host network's values, block by block."""
    out = np.zeros(n, np.float32)
    for r, h, c in segments:
        out[r : r + c] = host_params[h : h + c]
    return out


def int8_boundary(layers: Sequence[LayerDesc]) -> bool:
    """Can the device run only the int8 body of this layer table, quantizing the input as it arrives and
    dequantizing the output as it leaves (mct_forward_layers)? A frozen full-integer network can, without residual
    blocks or traces, whose first layer is QUANT and last DEQUANT: its arena is then the int8 buffer alone, its f32
    input and output lying above it, in the host's arena only (mcutrain.exporter.device._relayout)."""
    return (
        len(layers) >= 3
        and layers[0].op == Op.QUANT
        and layers[-1].op == Op.DEQUANT
        and not any((d.trainable and d.n_p) or d.op in RESIDUAL_OPS or layer_size_of(d).aux for d in layers)
    )


@dataclass
class DeviceModel:
    """Everything the firmware is generated from."""

    program: Program  # the layer table as the device runs it (trainable flags set)
    params: np.ndarray  # float32 parameters, in the program's order
    opt_cfg: np.ndarray  # one struct mct_opt (corefacts.OPT_DTYPE)
    opt_slots: int
    loss_kind: int
    loss_param: float
    scratch: int  # floats of scratch: mct_scratch_size(net, 1, 0, 0) + n_out
    rx_max: int  # bytes of the firmware's frame buffer
    source: str = "model"  # where it came from, for the header comment
    segments: List[Tuple[int, int, int]] = field(default_factory=list)  # (RAM offset, host offset, count)
    quant: str = "f32"  # 'f32', 'int8' or 'int8-full' (see mcutrain.exporter.quantize)
    save: str = "all"  # what a device save keeps: 'all' (parameters, optimizer slots) or 'params'
    class_names: Optional[List[str]] = None  # the outputs' class names (text labels), for the generated code
    input_steps: str = ""  # how the model's input steps run on the device (mcutrain.exporter.device._input_steps)
    # the f32 export with the same trainable layers, for quantized models (the memory plan's comparison)
    baseline: Optional[DeviceModel] = field(default=None, repr=False, compare=False)
    # the feature pipeline and normalisation of a model trained on raw windows (mcutrain.featdata.FrontEnd)
    frontend: Any = field(default=None, repr=False, compare=False)

    @property
    def feat(self) -> Any:
        """The front end when the model computes features from raw windows on the device, else None."""
        return self.frontend if self.frontend is not None and self.frontend.spec is not None else None

    def build_flags(self) -> List[str]:
        """Compiler flags that leave out of the firmware what this model does not use (see mct.h)."""
        ops = acts = 0
        for d in self.program.layers:
            ops |= 1 << int(d.op)
            if d.op in CONST_STORAGE_OPS and d.storage in (Storage.F32, Storage.I8):
                ops |= 1  # bit 0: layers kept in the const blob
            if d.op in CONST_STORAGE_OPS and d.storage == Storage.I8:
                ops |= 1 << I8_WEIGHTS_BIT  # int8 weights (MCT_I8_WEIGHTS_BIT)
            if d.op in (Op.ACT, Op.GLU):
                acts |= 1 << d.kind
        return [
            f"-DMCT_OPT_ONLY={int(self.opt_kind)}",
            f"-DMCT_LOSS_ONLY={self.loss_kind}",
            f"-DMCT_SCHED_ONLY={int(self.opt_cfg[0]['schedule'])}",
            f"-DMCT_OPS_MASK=0x{ops:x}u",
            f"-DMCT_ACTS_MASK=0x{acts:x}u",
            f"-DMCT_LAST_OP={int(self.program.layers[-1].op)}",
            f"-DMCT_REGULARIZE={int(opt_asks_reg(self.opt_cfg))}",
        ]

    def core(self) -> Any:
        """The host's C core running this very layer table (flash blob included)."""
        from mcutrain.module import core_net

        return core_net(self.program)

    def to_host_params(self, ram: np.ndarray, host_params: np.ndarray) -> np.ndarray:
        """The host network's parameters with the device's RAM parameters written in."""
        return segments_to_host(self.segments, ram, host_params)

    def from_host_params(self, host_params: np.ndarray) -> np.ndarray:
        """The device's RAM parameters taken from the host network's."""
        return segments_from_host(self.segments, host_params, self.program.n_params)

    @property
    def opt_kind(self) -> OptKind:
        """The optimizer kind the device trains with (its name: opt_kind.name.lower(), e.g. 'sgd')."""
        return OptKind(int(self.opt_cfg[0]["kind"]))

    @property
    def save_slots(self) -> int:
        """Optimizer slots per parameter that a device save keeps (none with save='params')."""
        return self.opt_slots if self.save == "all" else 0

    @property
    def int8_io(self) -> bool:
        """Does the firmware take the input and give the output as int8 at its boundary (int8_boundary), its arena
        the int8 buffer alone, with no training buffers (a model computing its features on the device does not:
        they are f32)? TRAIN then answers UNSUPPORTED: nothing in the model trains."""
        return self.feat is None and int8_boundary(self.program.layers)

    @property
    def app_arena(self) -> int:
        """Floats of arena the firmware allocates: the int8 buffer below the f32 input for int8_io models, else the
        whole arena of the layer table."""
        return self.program.in_off if self.int8_io else self.program.arena

    @property
    def app_target(self) -> int:
        """Floats of training target the firmware keeps: none for an int8_io model (it keeps no training buffers)."""
        return 0 if self.int8_io else self.program.n_out

    @property
    def n_trainable(self) -> int:
        """Parameters of trainable layers."""
        return sum(d.n_p for d in self.program.layers if d.trainable)

    def hash(self) -> bytes:
        """8 bytes identifying this export: layer table, optimizer, loss, parameters."""
        h = hashlib.sha256()
        h.update(b"mcutrain-model-v1")
        h.update(self.program.table().tobytes())
        h.update(
            np.array(
                [self.program.n_in, self.program.n_out, self.program.n_params, self.program.arena], "<u4"
            ).tobytes()
        )
        h.update(self.opt_cfg.tobytes())
        h.update(np.array([self.loss_kind], "<u4").tobytes() + np.float32(self.loss_param).tobytes())
        h.update(np.ascontiguousarray(self.params, "<f4").tobytes())
        h.update(bytes(self.program.cdata))
        fe = self.feat
        if fe is not None:  # the pipeline and its normalisation are part of the model
            h.update(fe.spec.cfg_bytes())
            for a in (fe.mean, fe.scale):
                h.update(b"-" if a is None else np.ascontiguousarray(a, "<f4").tobytes())
        return h.digest()[:8]
