"""C serialization: the generated model.h / model.c of a firmware project.

The output is deterministic (same model, same bytes): floats are written as the shortest decimal
that reads back to the same float32, and nothing depends on time or paths.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from mcutrain import __version__
from mcutrain.program import Op, Program

OP_NAMES = {op: f"MCT_OP_{op.name}" for op in Op}
OPT_KINDS = ["MCT_OPT_SGD", "MCT_OPT_MOMENTUM", "MCT_OPT_RMSPROP", "MCT_OPT_RMSPROP_MOMENTUM", "MCT_OPT_ADAM"]


Segments = Sequence[Tuple[int, int, int]]   # (device RAM offset, host offset, count) of each RAM block


def segments_to_host(segments: Segments, ram: np.ndarray, host_params: np.ndarray) -> np.ndarray:
    """A copy of the host network's values (parameters, or one optimizer slot) with the device's RAM
    values written in, block by block."""
    out = np.array(host_params, np.float32, copy=True)
    for r, h, n in segments:
        out[h:h + n] = ram[r:r + n]
    return out


def segments_from_host(segments: Segments, host_params: np.ndarray, n: int) -> np.ndarray:
    """The device's n RAM values taken from the host network's values, block by block."""
    out = np.zeros(n, np.float32)
    for r, h, c in segments:
        out[r:r + c] = host_params[h:h + c]
    return out


@dataclass
class DeviceModel:
    """Everything the firmware is generated from."""
    program: Program            # the layer table as the device runs it (trainable flags set)
    params: np.ndarray          # float32 parameters, in the program's order
    opt_cfg: np.ndarray         # one struct mct_opt (OPT_DTYPE)
    opt_slots: int
    loss_kind: int
    loss_param: float
    scratch: int                # floats of scratch: mct_scratch_size(net, 1, 0, 0) + n_out
    rx_max: int                 # bytes of the firmware's frame buffer
    source: str = "model"       # where it came from, for the header comment
    segments: List[Tuple[int, int, int]] = field(default_factory=list)  # (RAM offset, host offset, count)
    quant: str = "f32"          # 'f32', 'int8' or 'int8-full' (see mcutrain.exporter.quantize)
    # the f32 export with the same trainable layers, for quantized models (the memory plan's comparison)
    baseline: Optional["DeviceModel"] = field(default=None, repr=False, compare=False)

    def build_flags(self) -> List[str]:
        """Compiler flags that leave out of the firmware what this model does not use (see mct.h)."""
        ops = acts = 0
        for d in self.program.layers:
            ops |= 1 << int(d.op)
            if d.op == Op.DENSE and d.storage in (1, 2):
                ops |= 1
            if d.op in (Op.ACT, Op.GLU):
                acts |= 1 << d.kind
        if ops & (1 << int(Op.QUANT)) or ops & (1 << int(Op.QDENSE)):
            ops |= (1 << int(Op.QUANT)) | (1 << int(Op.DEQUANT)) | (1 << int(Op.QDENSE)) | (1 << int(Op.QLUT))
        return [f"-DMCT_OPT_ONLY={int(self.opt_cfg[0]['kind'])}", f"-DMCT_LOSS_ONLY={self.loss_kind}",
                f"-DMCT_OPS_MASK=0x{ops:x}u", f"-DMCT_ACTS_MASK=0x{acts:x}u"]

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
    def n_trainable(self) -> int:
        """Parameters of trainable layers."""
        return sum(d.n_p for d in self.program.layers if d.trainable)

    def hash(self) -> bytes:
        """8 bytes identifying this export: layer table, optimizer, loss, parameters."""
        h = hashlib.sha256()
        h.update(b"mcutrain-model-v1")
        h.update(self.program.table().tobytes())
        h.update(np.array([self.program.n_in, self.program.n_out, self.program.n_params, self.program.arena],
                          "<u4").tobytes())
        h.update(self.opt_cfg.tobytes())
        h.update(np.array([self.loss_kind], "<u4").tobytes() + np.float32(self.loss_param).tobytes())
        h.update(np.ascontiguousarray(self.params, "<f4").tobytes())
        h.update(bytes(self.program.cdata))
        return h.digest()[:8]


def c_float(v: float) -> str:
    """A C float literal that reads back to exactly the float32 v."""
    f = np.float32(v)
    if not np.isfinite(f):
        raise ValueError(f"cannot export a non-finite value ({f}): the model has NaN or inf parameters")
    s = str(f)
    if "e" not in s and "." not in s:
        s += ".0"
    return s + "f"


def _float_rows(values: np.ndarray, per_line: int = 8) -> List[str]:
    vals = [c_float(v) for v in np.asarray(values, np.float32)]
    return ["    " + ", ".join(vals[i:i + per_line]) + "," for i in range(0, len(vals), per_line)]


def model_h(m: DeviceModel) -> str:
    """The generated model.h."""
    p = m.program
    return f"""/* model.h - generated by mcutrain {__version__} from {m.source}; do not edit.
 * Sizes of every buffer the firmware needs, as compile-time constants. */
#ifndef MCT_MODEL_H
#define MCT_MODEL_H

#include "mct.h"

#define MCT_MODEL_N_IN {p.n_in}
#define MCT_MODEL_N_OUT {p.n_out}
#define MCT_MODEL_N_LAYERS {len(p.layers)}
#define MCT_MODEL_N_PARAMS {p.n_params}          /* float parameters in RAM */
#define MCT_MODEL_N_TRAINABLE {m.n_trainable}
#define MCT_MODEL_SLOTS {m.opt_slots}            /* optimizer slots per parameter */
#define MCT_MODEL_ARENA {p.arena}               /* floats of trace arena (one sample) */
#define MCT_MODEL_SCRATCH {m.scratch}             /* floats of backward scratch */
#define MCT_MODEL_RX_MAX {m.rx_max}              /* bytes of the frame buffer */
#define MCT_MODEL_LOSS_KIND {m.loss_kind}
#define MCT_MODEL_LOSS_PARAM {c_float(m.loss_param)}
#define MCT_MODEL_CONST_BYTES {len(bytes(p.cdata))}     /* frozen layers in flash */

/* The network, the optimizer used by TRAIN, and the hash INFO reports. */
extern const mct_net mct_model;
extern const mct_opt mct_model_opt;
extern const uint8_t mct_model_hash[8];
/* Copy the exported parameters into a RAM buffer of MCT_MODEL_N_PARAMS floats. */
void mct_model_load_init(float *params);

#endif /* MCT_MODEL_H */
"""


def model_c(m: DeviceModel) -> str:
    """The generated model.c."""
    p = m.program
    rows = []
    for i, d in enumerate(p.layers):
        rows.append(f"    /* {i}: {d.name} */\n"
                    f"    {{.op = {OP_NAMES[d.op]}, .kind = {d.kind}, .trainable = {int(d.trainable)}, "
                    f".storage = {d.storage}, "
                    f".n_in = {d.n_in}, .n_out = {d.n_out}, .k = {d.k}, .alpha = {c_float(d.alpha)}, "
                    f".lr_div = {c_float(d.lr_div)},\n     .p_off = {d.p_off}, .n_p = {d.n_p}, .n_w = {d.n_w}, "
                    f".in_off = {d.in_off}, .out_off = {d.out_off}, .aux_off = {d.aux_off}}},")
    o = m.opt_cfg[0]
    opt = (f"    .kind = {OPT_KINDS[int(o['kind'])]}, .schedule = {int(o['schedule'])}, "
           f".scale_by_loss = {int(o['scale_by_loss'])},\n"
           f"    .decay_steps = {int(o['decay_steps'])}u, .warmup_steps = {int(o['warmup_steps'])}u,\n"
           + "".join(f"    .{f} = {c_float(o[f])},\n" for f in
                     ("lr", "lr_final", "l1", "l2", "clip", "momentum", "beta", "beta1", "eps", "sim_penalty")))
    hash_bytes = ", ".join(f"0x{b:02x}" for b in m.hash())
    init = "\n".join(_float_rows(m.params)) if p.n_params else "    0.0f,"
    blob = bytes(p.cdata)
    words = np.frombuffer(blob + b"\0" * (-len(blob) % 4), "<u4") if blob else np.zeros(1, "<u4")
    cdata = "\n".join("    " + ", ".join(f"0x{int(w):08x}u" for w in words[i:i + 8]) + ","
                      for i in range(0, len(words), 8))
    cdata_decl = (f"/* frozen layers kept in flash (see enum mct_storage), as little-endian words */\n"
                  f"static const uint32_t cdata[{len(words)}] MCT_CONST = {{\n{cdata}\n}};\n\n") if blob else ""
    return f"""/* model.c - generated by mcutrain {__version__} from {m.source}; do not edit. */
#include "model.h"

{cdata_decl}static const mct_layer layers[MCT_MODEL_N_LAYERS] MCT_CONST = {{
{chr(10).join(rows)}
}};

const mct_net mct_model = {{
    .layers = layers, .n_layers = MCT_MODEL_N_LAYERS, .n_in = MCT_MODEL_N_IN, .n_out = MCT_MODEL_N_OUT,
    .max_width = {p.max_width}, .n_params = MCT_MODEL_N_PARAMS, .arena = MCT_MODEL_ARENA,
    .in_off = {p.in_off}, .out_off = {p.out_off},
    .cdata = {"(const uint8_t *)cdata" if blob else "0"}, .cdata_size = {len(blob)}u,
}};

const mct_opt mct_model_opt = {{
{opt}}};

const uint8_t mct_model_hash[8] = {{{hash_bytes}}};

static const float init_params[{max(p.n_params, 1)}] MCT_CONST = {{
{init}
}};

void mct_model_load_init(float *params) {{
    mct_const_copy(params, init_params, sizeof(float) * MCT_MODEL_N_PARAMS);
}}
"""
