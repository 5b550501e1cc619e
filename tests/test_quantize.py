"""Quantized exports: int8 weights, full-integer int8 (quant='int8-full') and the accuracy report.

The full-integer ops (QUANT, QDENSE, QLUT, DEQUANT in firmware/core/layer_quant.c) are checked against
re-derivations written here from the documented semantics (mct.h): Python integers for QDENSE, float64
rounding for QUANT. Exports of the README network (ModularAddition10) are checked end to end: the
native firmware, built with PlatformIO offline, predicts and trains exactly as the host's C core runs
the same layer table. Run with -s to see the accuracy reports.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import List, Sequence, Tuple

import numpy as np
import pytest

from helpers import assert_device_equals_twin, assert_same_bits, readme_net, train_lockstep
from mcutrain import TrainParams, losses, train_batch
from mcutrain.exporter.boards import get_board
from mcutrain.exporter.device import DeviceSpecError, build_device_model
from mcutrain.exporter.export import ExportError, export_project
from mcutrain.exporter.memplan import AVR_I8_WEIGHTS_CODE, AVR_OP_CODE, plan
from mcutrain.exporter.quantize import (
    QDenseConsts,
    QParams,
    dequant_blob,
    evaluate,
    qdense_consts,
    qlut_table,
    quant_blob,
    quantize_weights,
    requant_multiplier,
)
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.modelfile import Checkpoint
from mcutrain.module import core_net
from mcutrain.problems import ModularAddition10
from mcutrain.program import Act, LayerDesc, Op, Program

INT32_MAX = 2**31 - 1
I8_OUT = (Op.QUANT, Op.QDENSE, Op.QLUT)


# ----------------------------------------------------------------------------- helpers


def i8_floats(n: int) -> int:
    """Arena floats per sample of an int8 tensor of n values (documented: ceil(n / 4))."""
    return (n + 3) // 4


def q_program(ops: Sequence[Tuple[Op, int, int, bytes]], kind: int = 0) -> Program:
    """A frozen program of full-integer ops (op, n_in, n_out, constants), laid out as mct.h documents:
    input at 0, each output after the previous, int8 outputs taking ceil(n / 4) floats."""
    layers: List[LayerDesc] = []
    blob = b""
    top, cur = ops[0][1], 0
    for op, n_in, n_out, data in ops:
        assert len(data) % 4 == 0
        d = LayerDesc(
            op=op,
            kind=kind if op == Op.QLUT else 0,
            n_in=n_in,
            n_out=n_out,
            p_off=len(blob),
            in_off=cur,
            out_off=top,
            aux_off=0,
            trainable=False,
            storage=3,
        )
        blob += data
        top += i8_floats(n_out) if op in I8_OUT else n_out
        cur = d.out_off
        layers.append(d)
    return Program(layers, ops[0][1], ops[-1][2], 0, top, 0, cur, cdata=blob)


def run(prog: Program, x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(outputs, arena) of a program on a batch, through the C core."""
    return core_net(prog).traced_forward(np.zeros(1, np.float32), np.ascontiguousarray(x, np.float32))


def arena_i8(arena: np.ndarray, d: LayerDesc, nb: int) -> np.ndarray:
    """The int8 output tensor (nb, n_out) of layer d, read from the arena at the documented layout."""
    stride = 4 * i8_floats(d.n_out)
    raw = arena[d.out_off * nb : d.out_off * nb + i8_floats(d.n_out) * nb].view(np.int8)
    return raw.reshape(nb, stride)[:, : d.n_out]


def quant_ref(x: np.ndarray, inv_scale: float, zp: int) -> np.ndarray:
    """QUANT re-derived: the f32 product, rounded half away from zero in float64, plus zp, saturated;
    NaN gives -128."""
    v = (np.asarray(x, np.float32) * np.float32(inv_scale)).astype(np.float64)
    with np.errstate(invalid="ignore"):
        r = np.sign(v) * np.floor(np.abs(v) + 0.5) + zp
        r = np.where(np.isnan(v), -128.0, r)
    return np.clip(r, -128, 127).astype(np.int64)


def qdense_ref(xq: np.ndarray, c: QDenseConsts) -> np.ndarray:
    """QDENSE re-derived with Python integers: acc = bias + sum x w (the input zero point is in the bias, zx is not
    read), saturated to 31 bits, then round(acc * mult / 2^shift) half away from zero (shift clamped to [1, 62]),
    + zy, saturated."""
    nb, n_in = xq.shape
    n_out = c.w.shape[0]
    zy = min(127, max(-128, c.zy))
    out = np.zeros((nb, n_out), np.int64)
    for s in range(nb):
        d = [int(v) for v in xq[s]]
        for o in range(n_out):
            acc = int(c.bias[o]) + sum(d[i] * int(c.w[o, i]) for i in range(n_in))
            acc = max(-INT32_MAX, min(INT32_MAX, acc))
            n = min(62, max(1, int(c.shift[o])))
            p = acc * int(c.mult[o])
            r = (abs(p) + (1 << (n - 1))) >> n
            out[s, o] = max(-128, min(127, (r if p >= 0 else -r) + zy))
    return out


@pytest.fixture(scope="module")
def trained() -> Checkpoint:
    """The README example trained as in the README (5000 batches of 10, RMSProp with momentum), saved
    with SGD as the device's optimizer."""
    net = readme_net(seed=456645, scale=1.0)
    opt = net.new_rmsprop_with_momentum(TrainParams(lr=2e-2), 0.85, 0.8)
    problem = ModularAddition10(seed=1)
    for _ in range(5000):
        train_batch(opt, net, losses.logit_bce, *problem.sample_batch(10))
    return Checkpoint(net, net.new_momentum(TrainParams(lr=0.05), 0.9), {"loss": "logit_bce"})


@pytest.fixture(scope="module")
def calibration() -> np.ndarray:
    """Calibration inputs: 300 fresh ModularAddition10 samples."""
    return ModularAddition10(seed=5).sample_batch(300)[0]


@pytest.fixture(scope="module")
def eval_data() -> Tuple[np.ndarray, np.ndarray]:
    """Evaluation data: 2000 fresh ModularAddition10 samples."""
    return ModularAddition10(seed=777).sample_batch(2000)


@pytest.fixture(scope="module")
def native_tools(pio_core: Path) -> Path:
    """PlatformIO and gcc, which the native firmware needs (a missing one fails with what to install), and
    the session's own PlatformIO core folder (conftest.pio_core)."""
    from mcutrain.exporter.pio import PioError, pio_command

    try:
        pio_command()
    except PioError as e:
        pytest.fail(f"PlatformIO is not available: {e}")
    if shutil.which("gcc") is None:
        pytest.fail("gcc is not installed: the native firmware needs a C compiler (apt-get install gcc)")
    return pio_core


# ----------------------------------------------------------------------------- weights and constants


def test_weight_quantization_is_symmetric_per_output_channel() -> None:
    """Each output column gets its own scale max|w| / 127; codes are in [-127, 127], the largest weight of
    a column maps to +-127, every weight is within half a step of its code, an all-zero column gets
    scale 1 and zero codes."""
    rng = np.random.default_rng(3)
    n_in, n_out = 9, 6
    w = rng.normal(size=(n_in, n_out)).astype(np.float32) * np.array([1e-3, 0.1, 1, 10, 300, 0], np.float32)
    q, scale = quantize_weights(w.ravel(), n_in, n_out)
    assert q.dtype == np.int8 and q.shape == (n_in, n_out) and scale.dtype == np.float32
    assert q.min() >= -127 and q.max() <= 127
    for o in range(n_out - 1):
        amax = np.abs(w[:, o]).max()
        assert scale[o] == np.float32(amax / np.float32(127.0))
        assert np.abs(q[:, o]).max() == 127
        err = np.abs(w[:, o].astype(np.float64) - q[:, o].astype(np.float64) * float(scale[o]))
        assert err.max() <= 0.5 * float(scale[o]) * (1 + 1e-6)
        assert np.array_equal(np.sign(q[:, o]), np.sign(np.round(w[:, o] / scale[o])))
    assert scale[-1] == 1.0 and not q[:, -1].any()
    # a column scaled by a power of two keeps its codes: the scale is per column
    w2 = w.copy()
    w2[:, 1] *= 8
    q2, s2 = quantize_weights(w2.ravel(), n_in, n_out)
    assert np.array_equal(q2, q) and s2[1] == scale[1] * 8


def test_requant_multiplier_is_accurate() -> None:
    """mult / 2^shift approximates the real multiplier to 2^-30 relative, mult in [2^30, 2^31), shift in
    [1, 62]; tiny multipliers keep shift 62, huge ones saturate."""
    for real in np.geomspace(1e-9, 1e8, 400):
        m, s = requant_multiplier(float(real))
        assert 1 <= s <= 62
        assert 2**30 <= m < 2**31
        assert abs(m / 2.0**s - real) <= real * 2.0**-30
    m, s = requant_multiplier(2.0**-40)
    assert s == 62 and m == 2**22
    assert requant_multiplier(2.0**31) == (INT32_MAX, 1)
    assert requant_multiplier(0.0)[0] == 0


def test_activation_ranges_include_zero() -> None:
    """Calibrated ranges are widened to include 0, which is then exactly representable."""
    for lo, hi in [(0.0, 1.0), (0.2, 3.0), (-5.0, -1.0), (-2.0, 6.0), (0.0, 0.0)]:
        qp = QParams.from_range(lo, hi)
        assert -128 <= qp.zero_point <= 127 and qp.scale > 0
        assert qp.dequantize(np.array([qp.zero_point]))[0] == 0.0
        top = qp.dequantize(np.array([127]))[0]
        bottom = qp.dequantize(np.array([-128]))[0]
        assert bottom <= min(lo, 0.0) + qp.scale and top >= max(hi, 0.0) - qp.scale


# ----------------------------------------------------------------------------- the C kernels


def test_quant_and_dequant_match_rederivation() -> None:
    """QUANT then DEQUANT through the C core equal the documented formulas for random scales and zero
    points, on values at and next to ties, beyond the int8 range, inf and NaN; the host's copy of QUANT
    (QParams.quantize, used for the tables) agrees too."""
    rng = np.random.default_rng(11)
    n = 64
    for trial in range(12):
        qp = QParams(float(np.float32(rng.uniform(0.001, 0.5))), int(rng.integers(-128, 128)))
        inv = qp.inv_scale
        codes = rng.integers(-140, 140, n).astype(np.float64)
        x = ((codes + rng.choice([0.0, 0.5, -0.5, 0.4999, 0.5001], n)) / float(inv)).astype(np.float32)
        if trial == 0:
            x[:4] = [np.nan, np.inf, -np.inf, 1e30]
        prog = q_program([(Op.QUANT, n, n, quant_blob(qp)), (Op.DEQUANT, n, n, dequant_blob(qp))])
        y, arena = run(prog, x[None, :])
        q = quant_ref(x, float(inv), qp.zero_point)
        assert np.array_equal(arena_i8(arena, prog.layers[0], 1)[0], q)
        want = (q - qp.zero_point).astype(np.float32) * np.float32(qp.scale)
        assert np.array_equal(y[0], want)
        assert np.array_equal(qp.quantize(x), q)


def test_quant_rounds_one_ulp_around_every_tie() -> None:
    """QUANT with inv_scale 1 (the product is the input, exactly) on every tie k + 1/2 of the int8 range and
    beyond, and on the floats just below and above each (0.49999997 must give 0, not 1): the core equals the
    float64 rounding half away from zero, and so does the host's copy."""
    qp = QParams(1.0, 0)
    halves = np.arange(-300, 300, dtype=np.float32) + np.float32(0.5)
    x = np.concatenate(
        [halves, np.nextafter(halves, np.float32(np.inf)), np.nextafter(halves, np.float32(-np.inf))]
    ).astype(np.float32)
    x = np.concatenate([x, np.float32([511.5, -511.5, 512.5, -512.5, 1023.9, -1023.9, 0.0, -0.0])])
    n = x.shape[0]
    prog = q_program([(Op.QUANT, n, n, quant_blob(qp)), (Op.DEQUANT, n, n, dequant_blob(qp))])
    _, arena = run(prog, x[None, :])
    q = quant_ref(x, 1.0, 0)
    assert np.array_equal(arena_i8(arena, prog.layers[0], 1)[0], q)
    assert np.array_equal(qp.quantize(x), q)
    small = np.abs(x) < 100
    assert set(np.unique(q[small] - np.trunc(x[small]))) == {-1, 0, 1}  # both directions of rounding occur


def random_qdense(rng: np.random.Generator, n_in: int, n_out: int) -> QDenseConsts:
    """QDENSE constants that reach the limits: int8 weights including -128, any zero points, biases up to
    +-2^31-1, multipliers up to 2^31-1 and shifts outside [1, 62] (clamped by the kernel)."""
    bias = rng.integers(-3000, 3000, n_out)
    bias[:2] = [INT32_MAX, -INT32_MAX]
    mult = rng.integers(2**30, 2**31, n_out)
    shift = rng.integers(34, 42, n_out)
    shift[2:5] = [0, 63, 62]
    mult[5] = INT32_MAX
    return QDenseConsts(
        int(rng.integers(-128, 128)),
        int(rng.integers(-128, 128)),
        bias.astype(np.int64),
        mult.astype(np.int64),
        shift.astype(np.int64),
        rng.integers(-128, 128, (n_out, n_in)).astype(np.int8),
    )


def test_qdense_equals_integer_rederivation() -> None:
    """QDENSE through the C core equals the integer re-derivation exactly, for constants the exporter
    computes and for constants at the limits, on batches (each sample at its own stride)."""
    rng = np.random.default_rng(5)
    for n_in, n_out, nb in [(7, 9, 5), (24, 12, 8), (1, 3, 2), (33, 6, 4)]:
        qin = QParams.from_range(-2.0, 3.0)
        qout = QParams.from_range(-4.0, 5.0)
        w = rng.normal(0, 0.5, n_in * n_out).astype(np.float32)
        b = rng.normal(0, 0.5, n_out).astype(np.float32)
        cases = [qdense_consts(w, b, n_in, n_out, qin, qout), qdense_consts(w, None, n_in, n_out, qin, qout)]
        if n_out >= 9:  # six limit columns, the rest ordinary
            cases.append(random_qdense(rng, n_in, n_out))
        for c in cases:
            prog = q_program(
                [
                    (Op.QUANT, n_in, n_in, quant_blob(qin)),
                    (Op.QDENSE, n_in, n_out, c.blob()),
                    (Op.DEQUANT, n_out, n_out, dequant_blob(QParams(qout.scale, c.zy))),
                ]
            )
            x = rng.uniform(-2.5, 3.5, (nb, n_in)).astype(np.float32)
            y, arena = run(prog, x)
            xq = arena_i8(arena, prog.layers[0], nb)
            assert np.array_equal(xq, quant_ref(x, float(qin.inv_scale), qin.zero_point))
            want = qdense_ref(xq.astype(np.int64), c)
            got = arena_i8(arena, prog.layers[1], nb)
            assert np.array_equal(got, want), (n_in, n_out)
            assert np.array_equal(y, (want - max(-128, min(127, c.zy))).astype(np.float32) * np.float32(qout.scale))
            assert len(np.unique(want)) > 3  # not everything saturated


def test_qdense_constants_approximate_the_float_layer() -> None:
    """With the exporter's constants, QDENSE's dequantized output is within a few output steps of the
    f32 layer on the dequantized input (weights, bias and requantization each round once)."""
    rng = np.random.default_rng(8)
    n_in, n_out = 16, 8
    qin, qout = QParams.from_range(-1.0, 1.0), QParams.from_range(-3.0, 3.0)
    w = rng.normal(0, 0.3, n_in * n_out).astype(np.float32)
    b = rng.normal(0, 0.3, n_out).astype(np.float32)
    c = qdense_consts(w, b, n_in, n_out, qin, qout)
    x = rng.uniform(-1, 1, (50, n_in)).astype(np.float32)
    xq = quant_ref(x, float(qin.inv_scale), qin.zero_point)
    xd = (xq - qin.zero_point) * float(qin.scale)
    ref = xd @ w.reshape(n_in, n_out).astype(np.float64) + b
    got = (qdense_ref(xq, c) - qout.zero_point) * float(qout.scale)
    inside = np.abs(ref) < 2.9
    assert np.abs(got - ref)[inside].max() <= 1.5 * float(qout.scale)


ACTS = [
    (Act.RELU, 0.0),
    (Act.LEAKY_RELU, 0.5),
    (Act.LEAKY_RELU, 0.1),
    (Act.SIGMOID, 0.0),
    (Act.TANH, 0.0),
    (Act.SILU, 0.0),
    (Act.SOFTPLUS, 0.0),
    (Act.SINE, 0.0),
    (Act.COSINE, 0.0),
]
NUMPY_ACT = {
    Act.RELU: lambda x, a: np.maximum(x, 0.0),
    Act.LEAKY_RELU: lambda x, a: np.where(x < 0, a * x, x),
    Act.SIGMOID: lambda x, a: 1 / (1 + np.exp(-x)),
    Act.TANH: lambda x, a: np.tanh(x),
    Act.SILU: lambda x, a: x / (1 + np.exp(-x)),
    Act.SOFTPLUS: lambda x, a: np.log1p(np.exp(x)),
    Act.SINE: lambda x, a: np.sin(x),
    Act.COSINE: lambda x, a: np.cos(x),
}


@pytest.mark.parametrize("kind,alpha", ACTS, ids=[f"{k.name.lower()}_{a}" for k, a in ACTS])
def test_qlut_tables(kind: Act, alpha: float) -> None:
    """The table of each activation is the quantized activation of each dequantized input code (checked
    against float64 NumPy: equal but for codes next to a rounding tie, exact for the piecewise-linear
    ones), and the QLUT op applies it: QUANT -> QLUT -> DEQUANT on every code gives the table's values."""
    qin = QParams.from_range(-4.0, 3.0)
    f = NUMPY_ACT[kind]
    ys = f(np.linspace(-4.0, 3.0, 1001), alpha)
    qout = QParams.from_range(ys.min(), ys.max())
    table = qlut_table(int(kind), alpha, qin, qout)
    assert table.dtype == np.int8 and table.shape == (256,)
    codes = np.arange(-128, 128)
    xin = (codes - qin.zero_point).astype(np.float32) * np.float32(qin.scale)
    v = f(xin.astype(np.float64), alpha) / float(qout.scale)
    ref = np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5) + qout.zero_point, -128, 127)
    diff = np.abs(table.astype(np.int64) - ref)
    assert diff.max() <= 1
    if kind not in (Act.RELU, Act.LEAKY_RELU):  # smooth: ties are rare
        assert (diff == 0).mean() >= 0.97
    else:
        # piecewise linear: f32 arithmetic as documented (alpha * x, then x * inv_scale) gives every code
        y32 = np.where(xin < 0, np.float32(alpha) * xin, xin) if kind == Act.LEAKY_RELU else np.maximum(xin, 0)
        assert np.array_equal(table, quant_ref(y32, float(qout.inv_scale), qout.zero_point))
    assert len(np.unique(table)) > 20  # the table really spans the output range
    prog = q_program(
        [
            (Op.QUANT, 256, 256, quant_blob(qin)),
            (Op.QLUT, 256, 256, table.tobytes()),
            (Op.DEQUANT, 256, 256, dequant_blob(qout)),
        ],
        kind=int(kind),
    )
    y, arena = run(prog, xin[None, :])
    assert np.array_equal(arena_i8(arena, prog.layers[0], 1)[0], codes)
    assert np.array_equal(arena_i8(arena, prog.layers[1], 1)[0], table)
    assert np.array_equal(y[0], (table.astype(np.int64) - qout.zero_point).astype(np.float32) * np.float32(qout.scale))


# ----------------------------------------------------------------------------- device models


def ops(m: object) -> List[str]:
    """Op names of a device model's layer table."""
    return [d.op.name for d in m.program.layers]  # type: ignore[attr-defined]


def test_int8_full_device_model(trained: Checkpoint, calibration: np.ndarray) -> None:
    """The frozen Dense/activation prefix becomes QUANT -> QDENSE -> QLUT ... -> DEQUANT before the first
    layer that cannot be converted (Softmax) or trainable (last:1); the Q ops are frozen constants in the
    blob, trainable layers keep their f32 parameters in RAM; the input quantization comes from the
    calibration inputs' range (one-hot: [0, 1]) and the output dequantization from the f32 network's
    outputs of the last converted layer on them."""
    m = build_device_model(trained, "none", "int8-full", calibration=calibration)
    assert ops(m) == ["QUANT", "QDENSE", "QLUT", "QDENSE", "DEQUANT", "SOFTMAX"]
    assert all(not d.trainable for d in m.program.layers) and m.program.n_params == 0
    assert [d.storage for d in m.program.layers[:5]] == [3] * 5
    first = m.program.layers[0]
    inv, zp = (
        np.frombuffer(m.program.cdata[first.p_off : first.p_off + 8], "<f4")[0],
        int(np.frombuffer(m.program.cdata[first.p_off + 4 : first.p_off + 8], "<i4")[0]),
    )
    assert zp == -128 and inv == np.float32(1 / np.float32(1 / 255))
    # DEQUANT: the range of Linear(35, 10)'s outputs (before Softmax), recomputed in float64
    net = trained.net
    p = net.params.astype(np.float64)
    h = 1 / (1 + np.exp(-(calibration @ p[:700].reshape(20, 35) + p[700:735])))
    z = h @ p[735:1085].reshape(35, 10) + p[1085:1095]
    last = m.program.layers[4]
    scale = float(np.frombuffer(m.program.cdata[last.p_off : last.p_off + 4], "<f4")[0])
    assert scale == pytest.approx((max(z.max(), 0) - min(z.min(), 0)) / 255, rel=1e-5)

    m1 = build_device_model(trained, "last:1", "int8-full", calibration=calibration)
    assert ops(m1) == ["QUANT", "QDENSE", "QLUT", "DEQUANT", "DENSE", "SOFTMAX"]
    dense = m1.program.layers[4]
    assert dense.trainable and dense.storage == 0 and m1.program.n_params == 35 * 10 + 10
    assert np.array_equal(m1.params, trained.net.params[735:1095])
    # int8 activations take a quarter of the arena floats (QUANT 5, QDENSE 9, QLUT 9), and the frozen layers' outputs
    # share one buffer, each at the end its input does not use: as large as one layer's input and output together
    # at most (QLUT's 9 and DEQUANT's 35 f32; the 20 input floats and QUANT's 5 fit); DENSE and SOFTMAX are kept
    assert m1.program.arena == (9 + 35) + 10 + 10


def test_int8_full_needs_calibration(trained: Checkpoint, tmp_path: Path) -> None:
    """Missing calibration data (or data of the wrong shape, or nothing to convert) is a clear error, and
    export writes nothing."""
    with pytest.raises(DeviceSpecError, match="int8-full needs calibration inputs"):
        build_device_model(trained, "none", "int8-full")
    out = tmp_path / "p"
    with pytest.raises(ExportError, match=r"calibration.*\(n, 20\)"):
        export_project(trained, "native", out, quant="int8-full", trainable="none")
    assert not out.exists()
    with pytest.raises(ExportError, match="calibration data"):
        export_project(
            trained, "native", out, quant="int8-full", trainable="none", calibration=np.zeros((5, 7), np.float32)
        )
    with pytest.raises(ExportError, match="NaN"):
        export_project(
            trained,
            "native",
            out,
            quant="int8-full",
            trainable="none",
            calibration=np.full((5, 20), np.nan, np.float32),
        )
    with pytest.raises(ExportError, match="no frozen|there are none"):
        export_project(
            trained, "native", out, quant="int8-full", trainable="all", calibration=np.zeros((5, 20), np.float32)
        )
    with pytest.raises(ExportError, match="must be one of"):
        export_project(trained, "native", out, quant="int4", trainable="none")
    assert not out.exists()


def test_accuracy_report_on_modadd10(
    trained: Checkpoint, calibration: np.ndarray, eval_data: Tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    """Every quant mode reports loss, accuracy and output change against the f32 network on the user's
    evaluation data; f32 changes nothing, int8 weights and full-integer int8 change the accuracy of the
    trained README network by at most half a point; the report is in the result and in mcutrain.json."""
    x, y = eval_data
    cls = y.argmax(axis=1)
    f32_out = trained.net.forward(x)
    f32_acc = float(np.mean(f32_out.argmax(axis=1) == cls))
    assert f32_acc >= 0.95
    print()
    for quant, trainable in [("f32", "none"), ("int8", "none"), ("int8-full", "none"), ("int8-full", "last:1")]:
        r = export_project(
            trained,
            "native",
            tmp_path / f"{quant}-{trainable[:4]}",
            quant=quant,
            trainable=trainable,
            calibration=calibration,
            eval_data=eval_data,
        )
        rep = r.quant_report
        assert rep is not None
        print(rep.summary())
        dev_out = r.model.core().forward(np.concatenate([r.model.params, np.zeros(1, np.float32)]), x)
        assert rep.samples == 2000 and rep.quant == quant and rep.loss == "logit_bce"
        assert rep.f32_accuracy == f32_acc
        assert rep.device_accuracy == float(np.mean(dev_out.argmax(axis=1) == cls))
        assert rep.max_abs_diff == float(np.abs(dev_out.astype(np.float64) - f32_out).max())
        assert rep.f32_loss == pytest.approx(losses.logit_bce(f32_out, y)[0], rel=1e-12)
        assert rep.device_loss == pytest.approx(losses.logit_bce(dev_out, y)[0], rel=1e-12)
        if quant == "f32":
            assert rep.max_abs_diff == 0.0 and rep.loss_change == 0.0 and rep.accuracy_change == 0.0
        else:
            assert rep.max_abs_diff > 0.0
            assert rep.accuracy_change is not None and rep.accuracy_change >= -0.005
            assert abs(rep.loss_change) <= 0.01
        saved = json.loads((r.path / "mcutrain.json").read_text())
        assert saved["quant"] == quant and saved["quant_report"]["device_accuracy"] == rep.device_accuracy
        assert saved["quant_report"]["max_abs_diff"] == rep.max_abs_diff
        assert saved["calibration_samples"] == (300 if quant == "int8-full" else None)
    # without evaluation data there is no report
    r = export_project(trained, "native", tmp_path / "plain", quant="int8")
    assert r.quant_report is None and json.loads((r.path / "mcutrain.json").read_text())["quant_report"] is None


def test_accuracy_report_of_a_less_certain_network(
    calibration: np.ndarray, eval_data: Tuple[np.ndarray, np.ndarray]
) -> None:
    """After only 150 README steps (about 70 % accuracy, outputs far from saturation) full-integer int8
    visibly changes the outputs, while loss and accuracy stay close to the f32 network's."""
    net = readme_net(seed=456645, scale=1.0)
    opt = net.new_rmsprop_with_momentum(TrainParams(lr=2e-2), 0.85, 0.8)
    problem = ModularAddition10(seed=2)
    for _ in range(150):
        train_batch(opt, net, losses.logit_bce, *problem.sample_batch(10))
    ck = Checkpoint(net, None, {"loss": "logit_bce"})
    m = build_device_model(ck, "none", "int8-full", calibration=calibration)
    rep = evaluate(ck, m, *eval_data, trainable="none")
    print("\n" + rep.summary())
    assert rep.f32_accuracy is not None and rep.accuracy_change is not None
    assert 0.4 < rep.f32_accuracy < 0.95
    assert rep.max_abs_diff > 1e-3
    assert abs(rep.accuracy_change) <= 0.03 and abs(rep.loss_change) <= 0.02 * rep.f32_loss


def test_memory_plan_shows_int8_savings(trained: Checkpoint, calibration: np.ndarray) -> None:
    """The plan of a quantized export shows its own rows and what it saves against the f32 export with the
    same trainable layers: int8 weights save flash; full-integer int8 saves arena RAM and constants, and on
    AVR its integer kernels cost code (memplan.AVR_OP_CODE), which the flash total includes."""
    board = get_board("uno")
    m32 = build_device_model(trained, "none", "f32", board=board)
    f32 = plan(m32, board)
    i8 = plan(build_device_model(trained, "none", "int8", board=board), board)
    m = build_device_model(trained, "none", "int8-full", board=board, calibration=calibration)
    full = plan(m, board)
    assert f32.baseline_ram is None and f32.ram_saved == 0
    assert i8.baseline_ram == f32.ram and i8.baseline_flash == f32.flash
    # int8 weights: the frozen layers' constants shrink, less the int8-weight kernels' code on AVR
    flash32 = {n: f for n, _, f in f32.rows}
    shrink = flash32["frozen layers (flash)"] - {n: f for n, _, f in i8.rows}["frozen layers (flash)"]
    assert shrink > 0.6 * flash32["frozen layers (flash)"]  # the f32 biases and per-row scales stay
    assert i8.ram_saved == 0 and i8.flash_saved == f32.flash - i8.flash
    assert i8.flash_saved == shrink - round(AVR_I8_WEIGHTS_CODE * board.op_code_scale) > 1000
    rows = {name: (ram, flash) for name, ram, flash in full.rows}
    # documented sizes: int8 tensors ceil(n / 4) floats; QUANT/DEQUANT 8 B, QDENSE 8 + 12 O + pad4(I O), QLUT 256
    # the frozen layers' outputs share one buffer (mcutrain.exporter.device._relayout), each at the end its input does
    # not use: the low end holds QDENSE 35 (then QDENSE 10), the high end QUANT 20 (then QLUT 35); the row counts both
    assert rows["int8 activations (arena)"][0] == 4 * (i8_floats(35) + max(i8_floats(20), i8_floats(35)))
    assert rows["full-integer layers (flash)"][1] == 8 + (8 + 12 * 35 + 700) + 256 + (8 + 12 * 10 + 352) + 8
    assert rows["full-integer layers (flash)"][1] == len(m.program.cdata)
    assert rows["full-integer layers (flash)"][1] < flash32["frozen layers (flash)"]  # the constants shrink
    # the rest of the flash difference: a longer layer table (QUANT/DEQUANT) and the integer kernels' code
    assert full.flash - f32.flash == (
        rows["full-integer layers (flash)"][1]
        + rows["frozen layers (flash)"][1]
        - flash32["frozen layers (flash)"]
        + rows["layer table"][1]
        - flash32["layer table"]
        + AVR_OP_CODE[Op.QDENSE]
    )
    assert full.ram_saved == f32.ram - full.ram > 0 and full.flash_saved == f32.flash - full.flash
    assert full.ram_saved == 4 * (m32.program.arena - m.program.arena) + 4 * (m32.scratch - m.scratch)
    table = full.table()
    assert "int8-full saves" in table and f"{full.ram_saved:,}" in table and f"{full.flash_saved:,}" in table
    assert "f32 export" in table


# ----------------------------------------------------------------------------- native firmware


@pytest.mark.parametrize("trainable", ["none", "last:1"])
def test_native_firmware_int8_full_equals_host(
    trained: Checkpoint, calibration: np.ndarray, native_tools: Path, tmp_path: Path, trainable: str
) -> None:
    """The native firmware of an int8-full export (built with PlatformIO offline) predicts exactly what the
    host's C core computes with the same layer table; with the last layer trainable it also trains on the
    device exactly as core.train_fused does on the host (losses, parameters, optimizer state)."""
    from mcutrain.exporter import sim

    r = export_project(
        trained, "native", tmp_path / "p", quant="int8-full", trainable=trainable, calibration=calibration
    )
    m = r.model
    twin = DeviceTwin(m)
    x, y = ModularAddition10(seed=31).sample_batch(25)
    x[3] = 0.5  # inputs off the calibration grid too
    x[4] = -0.25
    with sim.start(r.path, get_board("native")) as s:
        d = s.device
        assert d.info().hash == r.hash
        want = twin.predict(x)
        assert_same_bits(d.predict(x), want, "PREDICT")
        assert not np.array_equal(want, trained.net.forward(x))  # it really is the quantized model
        if trainable == "none":
            return
        train_lockstep(d, twin, x, y)
        assert not np.array_equal(twin.params, m.params)  # training moved the trainable layer
        assert_device_equals_twin(d, twin)
        assert_same_bits(d.predict(x), twin.predict(x), "PREDICT after training")
