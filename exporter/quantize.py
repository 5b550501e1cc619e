"""Quantization for the exporter, and the accuracy report of every quantization mode.

Modes (`build_device_model(quant=...)`):
- 'f32': every frozen Dense/Linear and convolution keeps f32 weights in flash.
- 'int8': frozen Dense/Linear layers and convolutions (Conv2d, Conv1d, depthwise Conv2d) keep int8 weights
  (symmetric, one f32 scale per output channel) in flash (MCT_STORE_I8), for targets with an FPU: for a
  Dense/Linear the device quantizes each input once (symmetric, per sample), sums integer products and applies
  one float scale per output; a convolution sums its f32 inputs times the int8 weights in f32 and scales each
  output channel once.
- 'int8-full': full-integer int8 for targets without an FPU. Each run of consecutive frozen Dense/Linear,
  Conv2d, depthwise Conv2d, pooling layers and elementwise activations before the first trainable layer (with
  at least one layer with weights in it) becomes QUANT -> QDENSE / QCONV2D / QDWCONV2D / QMAXPOOL2D /
  QAVGPOOL2D / QLUT ... -> DEQUANT (enum mct_op in firmware/core/mct.h):
  * activations are asymmetric int8 with a zero point; every tensor entering or leaving a layer of the
    run gets its scale and zero point from the min/max (widened to include 0) that the f32 network
    reaches on the user's calibration inputs;
  * weights are symmetric int8 per output channel (the same scheme as 'int8'), the bias is int32 at
    scale sx * sw[o] with the input's zero point folded in (so the device sums plain products), and the
    output is requantized with a fixed-point multiplier and shift per channel (a convolution subtracts the
    input's zero point per tap instead, so windows over padding stay exact); pooling keeps its input's
    scale and zero point, as TFLite's does; a ReLU or ReLU6 right after a convolution is fused into it
    (its output takes the activation's range, and saturation does the clamping);
  * each activation becomes a 256-entry table T[q] = Q_out(act(D_in(q))), where D_in is the device's
    DEQUANT, act is the C core's own f32 activation (run through the core) and Q_out the device's QUANT,
    so the table is exactly what the device would compute in float from the dequantized input.
  * a residual block whose layers all convert becomes an int8 block: RES_BEGIN / RES_SHORTCUT of kind 1 keep
    and re-read its int8 input, and its end is a QRES_END, TFLite's int8 ADD of the two branches with their own
    scales and zero points (qadd_consts; a ReLU after it fused); other blocks' layers stay f32;
  * an imported .tflite's int8 SOFTMAX (a Softmax whose record says so) becomes QSOFTMAX, TFLite's int8 softmax
    (output scale 1/256, zero point -128; constants from qsoftmax_blob).
  Trainable layers (and frozen layers that cannot be converted: mcutrain's own Softmax, RMSNorm, GLU, ...) stay f32;
  frozen Dense/Linear layers and convolutions after the first trainable layer keep int8 weights as in 'int8'.
  A Conv1d is a Conv2d on (1, T, C) with a 1 x K kernel (and the 1-D pools the 2-D ones with h = 1) in the
  core, so it becomes a QCONV2D with that geometry.
  Rounding on the device is to nearest with ties away from zero; the host rounds the constants
  (weights, biases) to nearest even (numpy rint).

`evaluate` runs the device's layer table on the host through the same C kernels (DeviceModel.core())
and compares it with the f32 network: loss, accuracy (one-hot targets) and the largest output change.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from mcutrain.corefacts import QSHIFT_TFLITE, RESIDUAL_OPS, WRITES_I8, Act, LossKind, Op, Storage, layer_size_of
from mcutrain.inputsteps import host_forward
from mcutrain.losses import Loss
from mcutrain.modelfile import Checkpoint
from mcutrain.program import LayerDesc, Program

from ..errors import McuTrainError

QUANT_MODES = ("f32", "int8", "int8-full")
INT32_MAX = 2**31 - 1
# ops whose output is an int8 tensor in the arena (mct_i8_floats(n) floats per sample), as the core lists them
I8_OUT_OPS = WRITES_I8
STORE_Q = Storage.Q


class QuantError(McuTrainError, ValueError):
    """Quantization that cannot be done (missing or unusable calibration data); the message says why."""


# ----------------------------------------------------------------------------- weights


def quantize_weights(
    w: np.ndarray, n_in: int, n_out: int, scale: Optional[np.ndarray] = None
) -> Tuple[np.ndarray, np.ndarray]:
    """Symmetric per-output-channel int8 weights of a Dense W [n_in][n_out]: (q int8 [n_in][n_out], scale f32
    [n_out]) with W ~= q * scale, scale = max|W[:, o]| / 127 (1 for an all-zero column) unless given (an imported
    model's own scales), q in [-127, 127]."""
    wi = np.asarray(w, np.float32).reshape(n_in, n_out)
    if scale is None:
        amax = np.abs(wi).max(axis=0)
        scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    scale = np.asarray(scale, np.float32).reshape(n_out)
    q = np.clip(np.rint(wi / scale), -127, 127).astype(np.int8)
    return q, scale


# ----------------------------------------------------------------------------- activations


@dataclass(frozen=True)
class QParams:
    """Asymmetric int8 quantization of a tensor: real = (q - zero_point) * scale."""

    scale: float  # a float32 value
    zero_point: int  # in [-128, 127]

    @staticmethod
    def from_range(lo: float, hi: float) -> QParams:
        """Parameters covering [lo, hi] widened to include 0 (so 0 is exact), 255 steps."""
        lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise QuantError(f"calibration range [{lo}, {hi}] is not finite")
        span = hi - lo
        scale = np.float32(span / 255.0) if span > 1e-30 else np.float32(1.0)
        if scale == 0 or not np.isfinite(scale):
            scale = np.float32(1.0)
        zp = int(np.clip(np.rint(-128.0 - lo / float(scale)), -128, 127))
        return QParams(float(scale), zp)

    @property
    def inv_scale(self) -> np.float32:
        """The f32 multiplier QUANT uses (1 / scale rounded to float32)."""
        return np.float32(1.0 / float(np.float32(self.scale)))

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """int8 codes exactly as the device's QUANT computes them (f32 product, ties away from zero)."""
        return quantize_like_core(np.asarray(x, np.float32), self.inv_scale, self.zero_point)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        """f32 values exactly as the device's DEQUANT computes them."""
        return (np.asarray(q, np.int32) - np.int32(self.zero_point)).astype(np.float32) * np.float32(self.scale)


def quantize_like_core(x: np.ndarray, inv_scale: np.float32, zp: int) -> np.ndarray:
    """The C core's QUANT on the host: clamp(round(x * inv_scale) + zp, -128, 127) with the product in f32,
    ties away from zero, NaN -> -128."""
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.asarray(x, np.float32) * np.float32(inv_scale)
        nan = ~(v > np.float32(-512.0))
        v = np.clip(np.where(nan, np.float32(-512.0), v), np.float32(-512.0), np.float32(512.0))
    t = np.trunc(v)
    f = v - t
    q = t.astype(np.int32) + (f >= np.float32(0.5)).astype(np.int32) - (f <= np.float32(-0.5)).astype(np.int32)
    return np.clip(q + int(zp), -128, 127).astype(np.int8)


def requant_multiplier(real: float) -> Tuple[int, int]:
    """Fixed-point form (mult, shift) of a positive real multiplier: real ~= mult / 2^shift with mult in
    [2^30, 2^31) and shift in [1, 62] (a multiplier below 2^-32 gets shift 62 and a smaller mult, one at or
    above 2^30 saturates to (2^31 - 1, 1))."""
    if not real > 0 or not math.isfinite(real):
        return 0, 31
    f, e = math.frexp(real)  # real = f * 2^e, f in [0.5, 1)
    mult, shift = int(round(f * 2**31)), 31 - e
    if mult == 2**31:
        mult, shift = 2**30, shift - 1
    if shift > 62:
        mult, shift = int(round(real * 2.0**62)), 62
    if shift < 1:
        mult, shift = INT32_MAX, 1
    return mult, shift


def tflite_quantize_multiplier(real: float) -> Tuple[int, int]:
    """TensorFlow Lite's QuantizeMultiplier of a positive real: (mult, e) with real ~= mult 2^(e - 31), mult the
    frexp mantissa times 2^31 rounded half away from zero, in [2^30, 2^31); (0, 0) below 2^-32 or not positive."""
    if not real > 0 or not math.isfinite(real):
        return 0, 0
    f, e = math.frexp(real)
    mult = int(math.floor(f * 2**31 + 0.5))
    if mult == 2**31:
        mult, e = 2**30, e + 1
    if e < -31:
        return 0, 0
    return mult, e


def tflite_multiplier(real: float) -> Tuple[int, int]:
    """(mult, shift word) of a real multiplier as TensorFlow Lite computes it (tflite_quantize_multiplier), the shift
    word n = 31 - TFLite's shift flagged with QSHIFT_TFLITE so the core rounds as TensorFlow Lite Micro does (see
    MCT_OP_QDENSE in mct.h)."""
    mult, e = tflite_quantize_multiplier(real)
    if mult == 0:
        return 0, 31 | QSHIFT_TFLITE  # TFLite's multiplier 0: every output is the zero point
    return mult, max(1, 31 - e) | QSHIFT_TFLITE


SOFTMAX_QPARAMS = QParams(1.0 / 256.0, -128)  # TFLite's fixed int8 softmax output: (q + 128) / 256


def qsoftmax_blob(beta: float, in_scale: float) -> bytes:
    """Constants of a QSOFTMAX op (i32 mult, left shift, diff_min; see MCT_OP_QSOFTMAX in mct.h), as TensorFlow Lite
    Micro's Prepare computes them for an int8 softmax of f32 `beta` over an input of f32 scale `in_scale`: the
    multiplier of beta * in_scale * 2^26 (5 integer bits of the scaled difference; capped at 2^31 - 1), and diff_min =
    -floor(31 * 2^26 / 2^shift). QuantError when the product is not above 1 (TFLite refuses it too)."""
    real = min(float(np.float32(beta)) * float(np.float32(in_scale)) * 2.0**26, 2.0**31 - 1.0)
    mult, shift = tflite_quantize_multiplier(real)
    if not real > 1.0 or not 0 <= shift <= 31:
        raise QuantError(
            f"an int8 softmax with beta {beta} over an input of scale {in_scale}: beta * scale * 2^26 = {real:.6g} "
            "must lie in (1, 2^31) (TensorFlow Lite's int8 softmax needs it too)"
        )
    diff_min = -int(math.floor(31.0 * 2.0**26 / 2.0**shift))
    return np.array([mult, shift, diff_min], "<i4").tobytes()


def pad4(b: bytes) -> bytes:
    """b with zero bytes up to a multiple of 4 (the const blob holds little-endian words)."""
    return b + b"\0" * (-len(b) % 4)


def quant_blob(qp: QParams) -> bytes:
    """Constants of a QUANT op: f32 inv_scale, i32 zero point."""
    return np.array([qp.inv_scale], "<f4").tobytes() + np.array([qp.zero_point], "<i4").tobytes()


def dequant_blob(qp: QParams) -> bytes:
    """Constants of a DEQUANT op: f32 scale, i32 zero point."""
    return np.array([qp.scale], "<f4").tobytes() + np.array([qp.zero_point], "<i4").tobytes()


@dataclass
class QDenseConsts:
    """The integer constants of a QDENSE layer (see MCT_OP_QDENSE)."""

    zx: int
    zy: int
    bias: np.ndarray  # int64 [n_out], within int32; includes -zx * sum_i w[o][i]
    mult: np.ndarray  # int64 [n_out]
    shift: np.ndarray  # int64 [n_out]
    w: np.ndarray  # int8 [n_out][n_in]

    def blob(self) -> bytes:
        """The layer's bytes in the const blob."""
        return pad4(
            np.array([self.zx, self.zy], "<i4").tobytes()
            + self.bias.astype("<i4").tobytes()
            + self.mult.astype("<i4").tobytes()
            + self.shift.astype("<i4").tobytes()
            + np.ascontiguousarray(self.w, np.int8).tobytes()
        )


def qdense_consts(
    w: np.ndarray,
    b: Optional[np.ndarray],
    n_in: int,
    n_out: int,
    qin: QParams,
    qout: QParams,
    w_scale: Optional[np.ndarray] = None,
    tflite: bool = False,
) -> QDenseConsts:
    """Integer form of y = x W (+ b) between the input quantization qin and the output quantization qout (the input
    zero point folded into the bias, see MCT_OP_QDENSE); w_scale: the weights' scales (default: quantize_weights');
    tflite: requantize as TensorFlow Lite Micro (tflite_multiplier)."""
    q, sw = quantize_weights(w, n_in, n_out, w_scale)
    sx, sy = float(qin.scale), float(qout.scale)
    acc_scale = sx * sw.astype(np.float64)
    bias = np.zeros(n_out, np.float64)
    if b is not None:
        bias = np.rint(np.asarray(b, np.float64) / acc_scale)
    # sum_i (x[i] - zx) W[o][i] = sum_i x[i] W[o][i] - zx sum_i W[o][i]: the second term goes into the bias, so
    # the device sums plain products. It is an integer below 2^30 in magnitude, exact in float64 next to any
    # bias below 2^53; a larger bias saturates either way.
    bias = bias - float(qin.zero_point) * q.astype(np.float64).sum(axis=0)
    bias = np.clip(bias, -INT32_MAX, INT32_MAX).astype(np.int64)
    ms = [(tflite_multiplier if tflite else requant_multiplier)(float(a) / sy) for a in acc_scale]
    return QDenseConsts(
        qin.zero_point,
        qout.zero_point,
        bias,
        np.array([m for m, _ in ms], np.int64),
        np.array([s for _, s in ms], np.int64),
        np.ascontiguousarray(q.T),
    )


def qconv_consts(
    d: LayerDesc,
    params: np.ndarray,
    qin: QParams,
    qout: QParams,
    w_scale: Optional[np.ndarray] = None,
    tflite: bool = False,
) -> QDenseConsts:
    """Integer constants of a Conv2d or depthwise Conv2d layer d (its f32 parameters W [kh][kw][c_in][c_out] or
    [kh][kw][c_out], then b [c_out] if kind 1) between qin and qout, as MCT_OP_QCONV2D / MCT_OP_QDWCONV2D take them:
    weights symmetric per output channel, laid out [c_out][kh][kw][c_in] (QCONV2D) or [kh][kw][c_out] (QDWCONV2D),
    and the bias at scale sx * sw[o] without the input zero point (the kernel subtracts it per tap); w_scale: the
    weights' scales (default: quantize_weights'); tflite: requantize as TensorFlow Lite Micro (tflite_multiplier)."""
    g = d.geometry
    co = int(g["c_out"])
    taps = int(g["kh"]) * int(g["kw"]) * (int(g["c_in"]) if d.op == Op.CONV2D else 1)
    w = params[d.p_off : d.p_off + taps * co]
    q, sw = quantize_weights(w, taps, co, w_scale)
    acc_scale = float(qin.scale) * sw.astype(np.float64)
    bias = np.zeros(co, np.float64)
    if d.kind == 1:
        bias = np.rint(np.asarray(params[d.p_off + taps * co : d.p_off + taps * co + co], np.float64) / acc_scale)
    ms = [(tflite_multiplier if tflite else requant_multiplier)(float(a) / float(qout.scale)) for a in acc_scale]
    return QDenseConsts(
        qin.zero_point,
        qout.zero_point,
        np.clip(bias, -INT32_MAX, INT32_MAX).astype(np.int64),
        np.array([m for m, _ in ms], np.int64),
        np.array([s for _, s in ms], np.int64),
        np.ascontiguousarray(q.T if d.op == Op.CONV2D else q),
    )


def act_through_core(kind: int, alpha: float, x: np.ndarray) -> np.ndarray:
    """The C core's f32 activation `kind` (enum mct_act) of every value of x, through a one-layer program."""
    from mcutrain.module import core_net

    x = np.ascontiguousarray(np.asarray(x, np.float32).ravel())
    n = x.shape[0]
    d = LayerDesc(
        op=Op.ACT,
        kind=int(kind),
        n_in=n,
        n_out=n,
        alpha=float(alpha),
        in_off=0,
        out_off=n,
        aux_off=2 * n,
        trainable=False,
        name="activation",
    )
    prog = Program([d], n, n, 0, 2 * n, 0, n)
    return core_net(prog).forward(np.zeros(0, np.float32), x[None, :])[0]


def qlut_table(kind: int, alpha: float, qin: QParams, qout: QParams) -> np.ndarray:
    """The 256 int8 outputs of a QLUT for activation `kind`: T[q + 128] = Q_out(act(D_in(q)))."""
    codes = np.arange(-128, 128, dtype=np.int32)
    return qout.quantize(act_through_core(kind, alpha, qin.dequantize(codes)))


def qop_const_bytes(d: LayerDesc) -> int:
    """Bytes a layer takes in the const blob, as the core computes it (a full-integer op's constants; 0 for a
    layer in RAM)."""
    return layer_size_of(d).consts


def arena_floats(d: LayerDesc) -> int:
    """Floats per sample the layer's output takes in the arena, as the core computes it (int8 tensors:
    mct_i8_floats)."""
    return layer_size_of(d).out


# ----------------------------------------------------------------------------- the frozen prefix


# frozen ops full-integer int8 replaces, and their int8 ops (an activation becomes a QLUT table)
FULL_INTEGER_OPS = {
    Op.DENSE: Op.QDENSE,
    Op.ACT: Op.QLUT,
    Op.CONV2D: Op.QCONV2D,
    Op.DWCONV2D: Op.QDWCONV2D,
    Op.MAXPOOL2D: Op.QMAXPOOL2D,
    Op.AVGPOOL2D: Op.QAVGPOOL2D,
}
WEIGHTED_OPS = (Op.DENSE, Op.CONV2D, Op.DWCONV2D)
POOL_OPS = (Op.MAXPOOL2D, Op.AVGPOOL2D)  # int8 pooling keeps its input's scale and zero point (as TFLite's)
FUSED_ACTS = (Act.RELU, Act.RELU6)  # activations an int8 convolution's saturation applies (fused, as in TFLite)


def int8_blocks(layers: Sequence[LayerDesc]) -> Dict[int, int]:
    """The residual blocks int8-full converts whole, {RES_BEGIN index: RES_END index}: blocks before the first
    trainable layer whose every layer is a frozen convertible layer (FULL_INTEGER_OPS, parameters in RAM), their
    RES_SHORTCUT or a nested block converted whole (trainable flags must be set)."""
    first = next((i for i, d in enumerate(layers) if d.trainable), len(layers))
    whole: Dict[int, int] = {}
    for b in sorted((i for i, d in enumerate(layers) if d.op == Op.RES_BEGIN), reverse=True):  # inner blocks first
        e, j, ok = layers[b].k, b + 1, True
        if e >= first:
            continue
        while ok and j < e:
            d = layers[j]
            if d.op == Op.RES_BEGIN and j in whole:
                j = whole[j] + 1
                continue
            ok = (d.op == Op.RES_SHORTCUT and d.k == b) or (d.op in FULL_INTEGER_OPS and d.storage == Storage.RAM)
            j += 1
        if ok:
            whole[b] = e
    return whole


def _int8_softmax(rec: Optional[Dict[str, Any]]) -> bool:
    """Does an imported layer's quantization record make its Softmax TFLite's int8 softmax (QSOFTMAX)?"""
    return bool(rec and rec.get("softmax") == "tflite")


def convertible_runs(
    layers: Sequence[LayerDesc], fixed: Optional[Sequence[Optional[Dict[str, Any]]]] = None
) -> List[Tuple[int, int]]:
    """Maximal runs [a, b) of frozen Dense/Linear, Conv2d, depthwise Conv2d, pooling and elementwise activation
    layers and of residual blocks made only of them (int8_blocks) before the first trainable layer that contain at
    least one layer with weights (trainable flags must be set); the layers inside other residual blocks are left
    out (they stay f32). fixed: an imported model's quantization records (see full_integer_layers); a frozen
    Softmax whose record is TFLite's int8 softmax joins a run too."""
    recs = list(fixed) if fixed is not None else [None] * len(layers)
    first = next((i for i, d in enumerate(layers) if d.trainable), len(layers))
    whole = int8_blocks(layers)
    in_whole = {j for b, e in whole.items() for j in range(b, e + 1)}
    runs: List[Tuple[int, int]] = []
    a = None
    depth = 0  # residual blocks open at layer i that stay f32: their layers stay f32 too
    for i in range(first + 1):
        f32_block = i < first and i not in in_whole and layers[i].op in RESIDUAL_OPS
        if f32_block and layers[i].op == Op.RES_BEGIN:
            depth += 1
        convertible = i < first and (
            layers[i].op in FULL_INTEGER_OPS or (layers[i].op == Op.SOFTMAX and _int8_softmax(recs[i]))
        )
        ok = i < first and (i in in_whole or (depth == 0 and convertible and layers[i].storage == Storage.RAM))
        if f32_block and layers[i].op == Op.RES_END:
            depth -= 1
        if ok and a is None:
            a = i
        elif not ok and a is not None:
            if any(layers[j].op in WEIGHTED_OPS for j in range(a, i)):
                runs.append((a, i))
            a = None
    return runs


ADD_LEFT_SHIFT = 20  # TFLite's int8 ADD: inputs shifted left by 20 bits before their multipliers (MCT_OP_QRES_END)


@dataclass
class QAddConsts:
    """The integer constants of a QRES_END (see MCT_OP_QRES_END): x + s requantized to the output."""

    zx: int
    zs: int
    zy: int
    mult_x: int
    shift_x: int
    mult_s: int
    shift_s: int
    mult_y: int
    shift_y: int
    lo: int
    hi: int

    def blob(self) -> bytes:
        """The layer's 44 bytes in the const blob."""
        return np.array(
            [getattr(self, f) for f in ("zx", "zs", "zy", "mult_x", "shift_x", "mult_s", "shift_s", "mult_y",
                                        "shift_y", "lo", "hi")],
            "<i4",
        ).tobytes()  # fmt: skip


def qadd_consts(qx: QParams, qs: QParams, qy: QParams, relu: bool = False) -> QAddConsts:
    """Integer form of y = x + s from the quantizations of x, s and y as TFLite's int8 ADD prepares it (each input
    by its scale over twice the larger one, the sum by that over 2^20 sy); relu: a ReLU after the add, fused as the
    lower clamp lo = zy."""
    m2 = 2.0 * max(float(qx.scale), float(qs.scale))
    mx, nx = requant_multiplier(float(qx.scale) / m2)
    ms, ns = requant_multiplier(float(qs.scale) / m2)
    my, ny = requant_multiplier(m2 / (2.0**ADD_LEFT_SHIFT * float(qy.scale)))
    lo = qy.zero_point if relu else -128
    return QAddConsts(qx.zero_point, qs.zero_point, qy.zero_point, mx, nx, ms, ns, my, ny, lo, 127)


def as_calibration(x: Any, n_in: int) -> np.ndarray:
    """Calibration inputs as a float32 batch (n, n_in); QuantError when missing, misshapen or not finite."""
    from mcutrain.module import ShapeError, as_batch

    if x is None:
        raise QuantError(
            "--quant int8-full needs calibration inputs (sample inputs of the network, shape "
            f"(n, {n_in})) to choose the int8 ranges of the activations: pass calibration=... "
            "(a few hundred typical inputs), or export with --quant int8 or f32"
        )
    try:
        xb, _ = as_batch(x, n_in, "calibration data")
    except ShapeError as e:
        raise QuantError(str(e)) from None
    if not np.all(np.isfinite(xb)):
        raise QuantError("calibration data has NaN or infinite values")
    return xb


def own_regions(program: Program) -> Program:
    """A copy of program in which every layer's output has an arena region of its own (a device table lets the
    outputs of a frozen prefix take turns in two shared regions, so after a forward pass only the last two are
    still there; calibration reads them all)."""
    layers = [replace(d) for d in program.layers]
    top, cur = program.n_in, 0
    for d in layers:
        size = layer_size_of(d)
        d.in_off = cur
        if d.op == Op.RES_BEGIN:
            d.out_off = cur
        elif d.op == Op.RES_SHORTCUT:
            d.out_off = layers[d.k].out_off  # the block's input again, where the shortcut body starts
        else:
            d.out_off = top
            top += size.out
        d.aux_off, d.aux = top, size.aux
        top += size.aux
        cur = d.out_off
    return Program(layers, program.n_in, program.n_out, program.n_params, top, 0, cur, cdata=program.cdata)


def calibrate(
    program: Program, params: np.ndarray, x: np.ndarray
) -> List[Tuple[Tuple[float, float], Tuple[float, float]]]:
    """(min, max) of each layer's input and output over the calibration batch x, running `program` (an f32
    layer table) through the C core: one ((in_lo, in_hi), (out_lo, out_hi)) per layer."""
    from mcutrain.module import core_net

    nb = x.shape[0]
    buf = np.ascontiguousarray(params, np.float32)
    program = own_regions(program)
    _, arena = core_net(program).traced_forward(buf, np.ascontiguousarray(x, np.float32))

    def rng(off: int, n: int) -> Tuple[float, float]:
        t = arena[off * nb : off * nb + n * nb]
        if not np.all(np.isfinite(t)):
            raise QuantError("the f32 network produces NaN or infinite values on the calibration data")
        return float(t.min()), float(t.max())

    return [(rng(d.in_off, d.n_in), rng(d.out_off, d.n_out)) for d in program.layers]


def full_integer_layers(
    layers: List[LayerDesc],
    host_params: np.ndarray,
    f32_program: Program,
    f32_params: np.ndarray,
    calibration: Any,
    fixed: Optional[Sequence[Optional[Dict[str, Any]]]] = None,
) -> Tuple[List[LayerDesc], Dict[int, bytes]]:
    """Replace each convertible run of `layers` (trainable flags set, p_off still into host_params) by
    QUANT -> QDENSE/QLUT ... -> DEQUANT; returns the new list and the const blob bytes of each new op,
    keyed by id(layer). f32_program/f32_params: the same layers as an f32 table (for calibration).
    fixed: an imported model's own quantization, one record or None per layer ({"in": [scale, zp], "out": [scale,
    zp], "w_scale": [...], "rounding": "tflite"}, see tflite_import): a run whose layers all have one uses it and
    needs no calibration; a Softmax with {"softmax": "tflite", "beta": beta} becomes QSOFTMAX (TFLite's int8 softmax,
    output SOFTMAX_QPARAMS).
    A residual block made only of convertible layers becomes an int8 block: its RES_BEGIN and RES_SHORTCUT get
    kind 1 (they carry int8 tensors) and its RES_END a QRES_END (qadd_consts; a ReLU after it fused). Residual
    partners (k) are re-pointed at the new indices."""
    recs = list(fixed) if fixed is not None else [None] * len(layers)
    if len(recs) != len(layers):
        raise AssertionError("internal: the imported quantization does not match the device layers")
    runs = convertible_runs(layers, recs)
    if not runs:
        raise QuantError(
            "--quant int8-full converts frozen Dense/Linear layers before the first trainable layer, "
            "and there are none: freeze layers (--trainable none, or last:N with a smaller N), or "
            "export with --quant int8 or f32"
        )
    if len(f32_program.layers) != len(layers) or any(a.op != b.op for a, b in zip(f32_program.layers, layers)):
        raise AssertionError("internal: the f32 calibration table does not match the device layers")
    covered = all(recs[j] is not None for a, b in runs for j in range(a, b))
    ranges = [] if covered else calibrate(f32_program, f32_params, as_calibration(calibration, f32_program.n_in))

    def qin_of(j: int) -> QParams:
        r = recs[j]
        return QParams(float(np.float32(r["in"][0])), int(r["in"][1])) if r else QParams.from_range(*ranges[j][0])

    def qout_of(j: int) -> QParams:
        r = recs[j]
        return QParams(float(np.float32(r["out"][0])), int(r["out"][1])) if r else QParams.from_range(*ranges[j][1])

    def w_scale(j: int) -> Optional[np.ndarray]:
        r = recs[j]
        return np.asarray(r["w_scale"], np.float32) if r and r.get("w_scale") is not None else None

    def tfl(j: int) -> bool:
        r = recs[j]
        return bool(r and r.get("rounding") == "tflite")

    partner = {id(d): layers[d.k] for d in layers if d.op in RESIDUAL_OPS}
    new_of: Dict[int, LayerDesc] = {}  # id(a residual layer of an int8 block) -> the layer that replaces it
    out: List[LayerDesc] = []
    blobs: Dict[int, bytes] = {}

    def q_op(
        op: Op,
        n_in: int,
        n_out: int,
        data: bytes,
        name: str,
        kind: int = 0,
        alpha: float = 0.0,
        geometry: Optional[Dict[str, float]] = None,
    ) -> None:
        d = LayerDesc(
            op=op,
            kind=kind,
            n_in=n_in,
            n_out=n_out,
            alpha=alpha,
            trainable=False,
            storage=int(Storage.Q),
            name=name,
            geometry=dict(geometry or {}),
        )
        out.append(d)
        blobs[id(d)] = data

    starts = {a: b for a, b in runs}
    i = 0
    while i < len(layers):
        if i not in starts:
            out.append(layers[i])
            i += 1
            continue
        a, b = i, starts[i]
        qcur = qin_of(a)
        q_op(Op.QUANT, layers[a].n_in, layers[a].n_in, quant_blob(qcur), f"quantize input of {layers[a].name}")
        j = a
        q_in: Dict[int, QParams] = {}  # RES_BEGIN / RES_SHORTCUT index -> the quantization of its input
        while j < b:
            d = layers[j]
            qnext = qcur if d.op in POOL_OPS + (Op.RES_BEGIN,) else qout_of(j)
            if d.op == Op.SOFTMAX:  # TFLite's int8 softmax (only an imported model's, see convertible_runs)
                qnext = SOFTMAX_QPARAMS
                data = qsoftmax_blob(float(recs[j]["beta"]), qcur.scale)  # type: ignore[index]
                q_op(Op.QSOFTMAX, d.n_in, d.n_out, data, f"{d.name} (int8)")
            elif d.op in (Op.RES_BEGIN, Op.RES_SHORTCUT):
                # an int8 block (kind 1): RES_BEGIN keeps the block's int8 input, the shortcut body reads it again
                q_in[j] = qcur
                if d.op == Op.RES_SHORTCUT:
                    qnext = q_in[d.k]
                new_of[id(d)] = replace(d, kind=1)
                out.append(new_of[id(d)])
            elif d.op == Op.RES_END:
                # y = x + the input of layer k (the block's input, or the main body's output), a ReLU after it fused
                name, je = f"{d.name} (int8)", j
                relu = j + 1 < b and layers[j + 1].op == Op.ACT and layers[j + 1].kind in FUSED_ACTS
                if relu:
                    j += 1
                    qnext = qout_of(j)
                    name = f"{d.name} + {layers[j].name} (int8)"
                c = qadd_consts(qcur, q_in[d.k], qnext, relu)
                q_op(Op.QRES_END, d.n_in, d.n_out, c.blob(), name)
                new_of[id(d)] = out[-1]
                partner[id(out[-1])] = layers[d.k]
                del partner[id(layers[je])]
            elif d.op in POOL_OPS:
                q_op(FULL_INTEGER_OPS[d.op], d.n_in, d.n_out, b"", f"{d.name} (int8)", geometry=d.geometry)
            elif d.op in (Op.CONV2D, Op.DWCONV2D):
                name, jc = f"{d.name} (int8)", j
                if j + 1 < b and layers[j + 1].op == Op.ACT and layers[j + 1].kind in FUSED_ACTS:
                    # a ReLU / ReLU6 after the convolution is fused, as TFLite fuses it: the output takes the
                    # activation's range (0 is the zero point, code -128), so saturating to int8 clamps at 0
                    j += 1
                    qnext = qout_of(j)
                    name = f"{d.name} + {layers[j].name} (int8)"
                c = qconv_consts(d, host_params, qcur, qnext, w_scale(jc), tfl(jc))
                q_op(FULL_INTEGER_OPS[d.op], d.n_in, d.n_out, c.blob(), name, geometry=d.geometry)
            elif d.op == Op.DENSE:
                io = d.n_in * d.n_out
                w = host_params[d.p_off : d.p_off + io]
                bias = host_params[d.p_off + io : d.p_off + io + d.n_out] if d.kind == 1 else None
                c = qdense_consts(w, bias, d.n_in, d.n_out, qcur, qnext, w_scale(j), tfl(j))
                q_op(Op.QDENSE, d.n_in, d.n_out, c.blob(), f"{d.name} (int8)")
            else:
                t = qlut_table(d.kind, d.alpha, qcur, qnext)
                q_op(
                    Op.QLUT,
                    d.n_in,
                    d.n_out,
                    t.astype(np.int8).tobytes(),
                    f"{d.name} (int8 table)",
                    kind=d.kind,
                    alpha=d.alpha,
                )
            qcur = qnext
            j += 1
        q_op(
            Op.DEQUANT,
            layers[b - 1].n_out,
            layers[b - 1].n_out,
            dequant_blob(qcur),
            f"dequantize output of {layers[b - 1].name}",
        )
        i = b
    for old_id, d in list(new_of.items()):
        if old_id in partner and d.op != Op.QRES_END:
            partner[id(d)] = partner.pop(old_id)
    pos = {id(d): n for n, d in enumerate(out)}
    for d in out:
        if id(d) in partner:
            p = partner[id(d)]
            d.k = pos[id(new_of.get(id(p), p))]
    return out, blobs


# ----------------------------------------------------------------------------- accuracy report


@dataclass
class QuantReport:
    """The device model against the f32 network on the user's evaluation data."""

    quant: str
    trainable: str
    samples: int
    loss: str
    f32_loss: float
    device_loss: float
    f32_accuracy: Optional[float]  # None unless the targets are one-hot
    device_accuracy: Optional[float]
    max_abs_diff: float  # largest |device output - f32 output|
    mean_abs_diff: float

    @property
    def loss_change(self) -> float:
        """device loss - f32 loss."""
        return self.device_loss - self.f32_loss

    @property
    def accuracy_change(self) -> Optional[float]:
        """device accuracy - f32 accuracy (None without one-hot targets)."""
        if self.f32_accuracy is None or self.device_accuracy is None:
            return None
        return self.device_accuracy - self.f32_accuracy

    def to_dict(self) -> Dict[str, Any]:
        """Plain data (for mcutrain.json)."""
        d = asdict(self)
        d["loss_change"] = self.loss_change
        d["accuracy_change"] = self.accuracy_change
        return d

    def summary(self) -> str:
        """One paragraph for people."""
        lines = [
            f"quantization {self.quant} (trainable {self.trainable}) on {self.samples} evaluation samples:",
            f"  {self.loss} loss  f32 {self.f32_loss:.6g}  device {self.device_loss:.6g}  "
            f"change {self.loss_change:+.3g}",
        ]
        if self.f32_accuracy is not None and self.device_accuracy is not None:
            lines.append(
                f"  accuracy  f32 {self.f32_accuracy:.2%}  device {self.device_accuracy:.2%}  "
                f"change {100 * (self.device_accuracy - self.f32_accuracy):+.2f} points"
            )
        lines.append(f"  outputs differ by at most {self.max_abs_diff:.3g} (mean {self.mean_abs_diff:.3g})")
        return "\n".join(lines)


def loss_of_model(kind: int, param: float) -> Loss:
    """The Loss object of a loss kind (enum mct_loss_kind) and parameter."""
    from mcutrain import losses as losses_mod

    if kind == LossKind.HUBER:
        return losses_mod.huber(param)
    for candidate in (losses_mod.mse, losses_mod.logit_bce, losses_mod.cross_entropy, losses_mod.cosine):
        if candidate.kind == kind:
            return candidate
    raise ValueError(f"unknown loss kind {kind}: the core has {', '.join(f'{k.name}={int(k)}' for k in LossKind)}")


def _one_hot(y: np.ndarray) -> bool:
    return bool(np.all((y == 0) | (y == 1)) and np.all(y.sum(axis=1) == 1))


def evaluate(
    ck: Checkpoint, device_model: Any, x: Any, y: Any, loss: Optional[Loss] = None, trainable: str = ""
) -> QuantReport:
    """Compare the f32 network of ck with the device model run on the host through the same C kernels
    (DeviceModel.core().forward) on inputs x (n, n_in) and targets y (n, n_out): loss (the device model's
    unless given), accuracy for one-hot targets, and the largest output difference."""
    from mcutrain.module import ShapeError, as_batch

    p = device_model.program
    try:
        xb, _ = as_batch(x, p.n_in, "evaluation inputs")
        yb, _ = as_batch(y, p.n_out, "evaluation targets")
    except ShapeError as e:
        raise QuantError(str(e)) from None
    if xb.shape[0] != yb.shape[0]:
        raise QuantError(f"evaluation data: {xb.shape[0]} inputs but {yb.shape[0]} targets")
    if not (np.all(np.isfinite(xb)) and np.all(np.isfinite(yb))):
        raise QuantError("evaluation data has NaN or infinite values")
    loss = loss or loss_of_model(device_model.loss_kind, device_model.loss_param)
    y_ref = np.asarray(host_forward(ck, xb), np.float32)
    y_dev = device_model.core().forward(np.ascontiguousarray(device_model.params, np.float32), xb)
    acc_ref = acc_dev = None
    if _one_hot(yb):
        cls = yb.argmax(axis=1)
        acc_ref = float(np.mean(y_ref.argmax(axis=1) == cls))
        acc_dev = float(np.mean(y_dev.argmax(axis=1) == cls))
    diff = np.abs(y_dev.astype(np.float64) - y_ref.astype(np.float64))
    return QuantReport(
        quant=device_model.quant,
        trainable=trainable,
        samples=int(xb.shape[0]),
        loss=str(loss),
        f32_loss=loss(y_ref, yb)[0],
        device_loss=loss(y_dev, yb)[0],
        f32_accuracy=acc_ref,
        device_accuracy=acc_dev,
        max_abs_diff=float(diff.max()),
        mean_abs_diff=float(diff.mean()),
    )


__all__ = [
    "QUANT_MODES",
    "QuantError",
    "quantize_weights",
    "QParams",
    "quantize_like_core",
    "requant_multiplier",
    "tflite_multiplier",
    "tflite_quantize_multiplier",
    "qsoftmax_blob",
    "SOFTMAX_QPARAMS",
    "qdense_consts",
    "qconv_consts",
    "QDenseConsts",
    "qlut_table",
    "act_through_core",
    "qop_const_bytes",
    "arena_floats",
    "convertible_runs",
    "int8_blocks",
    "qadd_consts",
    "QAddConsts",
    "calibrate",
    "full_integer_layers",
    "QuantReport",
    "evaluate",
    "as_calibration",
    "quant_blob",
    "dequant_blob",
]
