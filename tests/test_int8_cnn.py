"""Full-integer int8 CNNs (issue 21): the spatial int8 ops (QCONV2D, QDWCONV2D, QMAXPOOL2D, QAVGPOOL2D in
firmware/core/layer_quant.c) through the C core equal a re-derivation written here with NumPy integers from the
documented semantics (mct.h, "Full-integer int8 ops") and the exported constants; the exporter's calibration sees
every layer's output; and the digits CNN exported with --quant int8-full loses at most one point of test accuracy
and runs bit for bit as the host's int8 model on the M4F, M3 and M0+ in QEMU and on the Uno in simavr.

Needs the cross compilers, QEMU and simavr that scripts/setup.sh installs (no skips)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
from sklearn.datasets import load_digits

from helpers import assert_device_equals_twin, assert_same_bits, cli_ok, train_lockstep
from mcutrain import Checkpoint, Sequential, TrainParams, load_model, losses
from mcutrain import layers as L
from mcutrain.corefacts import Op
from mcutrain.exporter import sim
from mcutrain.exporter.device import build_device_model
from mcutrain.exporter.export import export_project
from mcutrain.exporter.quantize import calibrate
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.module import core_net
from mcutrain.program import LayerDesc, Program

INT32_MAX = 2**31 - 1


@pytest.fixture(scope="module", autouse=True)
def tool_dirs(pio_core: Path) -> Path:
    """The session's own PlatformIO core folder (see conftest.pio_core)."""
    return pio_core


def every_spatial_op_net() -> Sequential:
    """5x6x2 images -> 3 classes through every spatial layer the int8 path converts: strided and padded
    convolutions (ReLU fused, Tanh as a table), depthwise convolutions with multiplier 1 (strided, 5 channels: one
    group of four and one left over) and 2 (ReLU6), 1x1 convolutions on 3x3 = 9 pixels (an odd count: the last
    one without a partner) with 5 -> 5 and 10 -> 8 channels (no multiples of four), max and average pooling with
    padding, global average pooling."""
    return Sequential(
        L.Conv2d(2, 5, 3, stride=(2, 1), padding="same"),
        L.Relu(),
        L.DepthwiseConv2d(5, 3, stride=(1, 2), padding="same"),
        L.Relu(),
        L.Conv2d(5, 5, 1),
        L.Relu(),
        L.DepthwiseConv2d(5, 3, padding="same", depth_multiplier=2),
        L.Relu6(),
        L.Conv2d(10, 8, 1),
        L.Tanh(),
        L.MaxPool2d(2, padding=(1, 0, 1, 0)),
        L.AvgPool2d(2, stride=1, padding=(0, 1, 0, 1)),
        L.GlobalAvgPool2d(),
        L.Linear(8, 3),
        L.Softmax(),
        input_shape=(5, 6, 2),
    ).rand_params(seed=11)


# ----------------------------------------------------------------------------- the re-derivation


def i32(blob: bytes, off: int, n: int = 1) -> np.ndarray:
    """n little-endian int32 of the const blob at byte off, as int64."""
    return np.frombuffer(blob, "<i4", n, off).astype(np.int64)


def requantize(acc: np.ndarray, mult: np.ndarray, shift: np.ndarray, zy: int) -> np.ndarray:
    """The documented output step: acc saturated to +-(2^31 - 1), round(acc * mult / 2^shift) half away from zero
    (shift clamped to [1, 62]; the product is below 2^62, exact in int64), + zy, saturated to int8."""
    acc = np.clip(acc, -INT32_MAX, INT32_MAX)
    n = np.clip(shift, 1, 62)
    p = acc * mult
    r = (np.abs(p) + (np.int64(1) << (n - 1))) >> n
    return np.clip(np.where(p >= 0, r, -r) + zy, -128, 127)


def windows(g: Dict[str, float]) -> List[tuple]:
    """(oy, ox, [(ky, kx, iy, ix) of the taps inside the input]) of every output position, in order."""
    out = []
    for oy in range(int(g["h_out"])):
        for ox in range(int(g["w_out"])):
            taps = []
            for ky in range(int(g["kh"])):
                for kx in range(int(g["kw"])):
                    iy, ix = oy * int(g["sh"]) - int(g["pt"]) + ky, ox * int(g["sw"]) - int(g["pl"]) + kx
                    if 0 <= iy < int(g["h_in"]) and 0 <= ix < int(g["w_in"]):
                        taps.append((ky, kx, iy, ix))
            out.append((oy, ox, taps))
    return out


def rederive(d: LayerDesc, blob: bytes, xq: np.ndarray) -> np.ndarray:
    """The int8 output (nb, n_out) of a full-integer layer d from its int8 input xq (nb, n_in), as mct.h documents
    it, with its constants read from the blob."""
    nb = xq.shape[0]
    c = d.p_off
    if d.op == Op.QDENSE:
        zy = int(np.clip(i32(blob, c + 4)[0], -128, 127))
        o = d.n_out
        bias, mult, shift = i32(blob, c + 8, o), i32(blob, c + 8 + 4 * o, o), i32(blob, c + 8 + 8 * o, o)
        w = np.frombuffer(blob, np.int8, o * d.n_in, c + 8 + 12 * o).astype(np.int64).reshape(o, d.n_in)
        return requantize(bias + xq @ w.T, mult, shift, zy)
    if d.op == Op.QLUT:
        table = np.frombuffer(blob, np.int8, 256, c).astype(np.int64)
        return table[xq + 128]
    g = d.geometry
    h, w_, ci, co = int(g["h_in"]), int(g["w_in"]), int(g["c_in"]), int(g["c_out"])
    x = xq.reshape(nb, h, w_, ci)
    y = np.zeros((nb, int(g["h_out"]), int(g["w_out"]), co), np.int64)
    if d.op in (Op.QMAXPOOL2D, Op.QAVGPOOL2D):
        for oy, ox, taps in windows(g):
            t = np.stack([x[:, iy, ix, :] for _, _, iy, ix in taps], axis=1)
            if d.op == Op.QMAXPOOL2D:
                y[:, oy, ox, :] = t.max(axis=1)
            else:  # round(sum / n), ties away from zero
                s, n = t.sum(axis=1), len(taps)
                y[:, oy, ox, :] = np.sign(s) * ((np.abs(s) + n // 2) // n)
        return y.reshape(nb, -1)
    zx, zy = (int(np.clip(v, -128, 127)) for v in i32(blob, c, 2))
    bias, mult, shift = i32(blob, c + 8, co), i32(blob, c + 8 + 4 * co, co), i32(blob, c + 8 + 8 * co, co)
    kh, kw = int(g["kh"]), int(g["kw"])
    if d.op == Op.QCONV2D:  # W [c_out][kh][kw][c_in]
        wt = np.frombuffer(blob, np.int8, co * kh * kw * ci, c + 8 + 12 * co).astype(np.int64)
        wt = wt.reshape(co, kh, kw, ci)
        for oy, ox, taps in windows(g):
            acc = bias + sum((x[:, iy, ix, :] - zx) @ wt[:, ky, kx, :].T for ky, kx, iy, ix in taps)
            y[:, oy, ox, :] = requantize(acc, mult, shift, zy)
    else:  # QDWCONV2D: W [kh][kw][c_out], output o reads input channel o / m
        wt = np.frombuffer(blob, np.int8, kh * kw * co, c + 8 + 12 * co).astype(np.int64).reshape(kh, kw, co)
        src = np.arange(co) // (co // ci)
        for oy, ox, taps in windows(g):
            acc = bias + sum((x[:, iy, ix, src] - zx) * wt[ky, kx, :] for ky, kx, iy, ix in taps)
            y[:, oy, ox, :] = requantize(acc, mult, shift, zy)
    return y.reshape(nb, -1)


def int8_tensor(arena: np.ndarray, d: LayerDesc, nb: int) -> np.ndarray:
    """Layer d's int8 output (nb, n_out) read from the arena at the documented layout (ceil(n / 4) floats a
    sample)."""
    f = (d.n_out + 3) // 4
    raw = arena[d.out_off * nb : (d.out_off + f) * nb].view(np.int8)
    return raw.reshape(nb, 4 * f)[:, : d.n_out].astype(np.int64)


def run_int8(m: Any, x: np.ndarray) -> Tuple[np.ndarray, np.ndarray, Program, np.ndarray]:
    """Run an int8-full device model on x with every layer's output in an arena region of its own (readable after the
    pass): (the outputs, the arena, that program, the QUANT layer's int8 codes re-derived from x, checked against
    the arena's)."""
    from mcutrain.exporter.quantize import own_regions

    prog = own_regions(m.program)
    y, arena = core_net(prog).traced_forward(np.ascontiguousarray(m.params, np.float32), x)
    q0 = prog.layers[0]
    inv = float(np.frombuffer(prog.cdata, "<f4", 1, q0.p_off)[0])
    v = (x * np.float32(inv)).astype(np.float64)
    zq = int(i32(prog.cdata, q0.p_off + 4)[0])
    cur = np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5) + zq, -128, 127).astype(np.int64)
    assert np.array_equal(int8_tensor(arena, q0, x.shape[0]), cur)
    return y, arena, prog, cur


def test_every_spatial_int8_op_equals_the_integer_rederivation() -> None:
    net = every_spatial_op_net()
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.01)), {"loss": "cross_entropy"})
    rng = np.random.default_rng(3)
    cal = rng.normal(size=(200, net.n_in)).astype(np.float32)
    m = build_device_model(ck, "last:1", "int8-full", calibration=cal)
    ops = [d.op.name for d in m.program.layers]
    # the ReLU and ReLU6 after convolutions are fused into them (as TFLite fuses them); Tanh becomes a table
    assert ops == ["QUANT", "QCONV2D", "QDWCONV2D", "QCONV2D", "QDWCONV2D", "QCONV2D", "QLUT", "QMAXPOOL2D",
                   "QAVGPOOL2D", "QAVGPOOL2D", "DEQUANT", "DENSE", "SOFTMAX"]  # fmt: skip
    x = rng.normal(size=(16, net.n_in)).astype(np.float32)
    nb = x.shape[0]
    y, arena, prog, cur = run_int8(m, x)
    blob = prog.cdata
    for d in prog.layers[1:-3]:
        want = rederive(d, blob, cur)
        got = int8_tensor(arena, d, nb)
        assert np.array_equal(got, want), f"{d.op.name} ({d.name}): {np.argwhere(got != want)[:5]}"
        cur = want
    # and the int8 network stays close to the f32 one (a few output steps of the last int8 tensor)
    assert np.abs(y - net.forward(x)).max() < 0.1


def test_calibration_reads_every_layer_of_a_frozen_prefix() -> None:
    """The device table lets a frozen prefix's outputs take turns in two arena regions; calibration still gets
    every layer's own range (the same ranges as the host network's table, where every output has its region)."""
    from mcutrain.tiny_models import digits_cnn

    net = digits_cnn().rand_params(seed=2)
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.01)), {"loss": "cross_entropy"})
    base = build_device_model(ck, "none", "f32")
    x = np.random.default_rng(1).uniform(0, 1, size=(50, 64)).astype(np.float32)
    shared = {d.out_off for d in base.program.layers}
    assert len(shared) < len(base.program.layers)  # the device table does share regions
    got = calibrate(base.program, base.params, x)
    host = net.program
    assert [d.op for d in host.layers] == [d.op for d in base.program.layers]
    assert got == calibrate(host, net.params, x)
    acts = [r for d, r in zip(base.program.layers, got) if d.op == Op.ACT]
    assert acts and all(lo >= 0.0 for (_, (lo, _)) in acts)  # a ReLU's output is never negative


# ----------------------------------------------------------------------------- the digits CNN


def digits_split() -> tuple:
    """scikit-learn's digits as flat 8x8x1 images in [0, 1] with one-hot labels: 1,437 to train on, 360 held out
    (the seeded split of test_cnn_device)."""
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32).reshape(-1, 64)
    y = np.eye(10, dtype=np.float32)[d.target]
    order = np.random.default_rng(0).permutation(len(d.target))
    return x[order[360:]], y[order[360:]], x[order[:360]], y[order[:360]]


def test_digits_cnn_int8_full_loses_at_most_a_point_and_runs_bit_for_bit(tmp_path: Path) -> None:
    xtr, ytr, xte, yte = digits_split()
    train = tmp_path / "train.npz"
    np.savez(train, x=xtr.reshape(-1, 8, 8, 1), y=ytr.argmax(axis=1))
    model = tmp_path / "cnn.mct"
    cli_ok("train", "--arch", "digits_cnn", "--data", str(train), "--classify", "--epochs", "40", "--batch", "32",
           "--opt", "adam", "--lr", "0.003", "--val", "0", "-o", str(model))  # fmt: skip
    # the CLI's export: full-integer int8 everywhere (the whole CNN frozen), with the accuracy report
    out = cli_ok("export", str(model), "--board", "nucleo_f401re", "--quant", "int8-full", "--trainable", "none",
                 "-o", str(tmp_path / "fw-cli")).output  # fmt: skip
    assert re.search(r"accuracy\s+f32 [\d.]+%\s+device [\d.]+%", out), out
    assert "full-integer layers (flash)" in out, out
    ck = load_model(model)
    cal = xtr[:500]
    m = build_device_model(ck, "none", "int8-full", calibration=cal)
    assert [d.op.name for d in m.program.layers] == ["QUANT", "QCONV2D", "QMAXPOOL2D", "QCONV2D", "QMAXPOOL2D",
                                                     "QDENSE", "DEQUANT", "SOFTMAX"]  # fmt: skip
    x = xte[:24]
    for board in ("nucleo_f401re", "bluepill", "pico", "uno"):  # M4F, M3, M0+ in QEMU; the ATmega328P in simavr
        r = export_project(ck, board, tmp_path / board, quant="int8-full", trainable="none", sim=True,
                           calibration=cal, eval_data=(xte, yte), loss=losses.cross_entropy)  # fmt: skip
        rep = r.quant_report
        assert rep is not None and rep.f32_accuracy is not None and rep.device_accuracy is not None
        assert rep.f32_accuracy >= 0.97, rep.summary()
        assert rep.device_accuracy >= rep.f32_accuracy - 0.01, rep.summary()  # at most one point lost
        twin = DeviceTwin(r.model)
        with sim.start(r.path, r.board) as s:
            got = s.device.predict(x)
        assert_same_bits(got, twin.predict(x), f"PREDICT on {board} against the host's int8 model")
        if board == "uno":  # the int8 activations (8x8x8 = 512 B) fit the Uno's 2 KB, weights in flash
            assert r.plan.fits() and r.plan.ram <= 2048, r.plan.table()


@pytest.mark.parametrize("board", ["nano33ble", "teensy41", "nucleo_l552ze_q"])
def test_int8_cnn_with_every_spatial_op_on_the_dsp_cores(board: str, tmp_path: Path) -> None:
    """On the Cortex-M4F, M7 and M33 (QCONV2D through SMLAD: windows with padding, strides, 5 output channels and
    windows of 18 and 10 values, no multiples of four; the 1x1 ones two pixels by two channels at a time, 5 -> 5
    and 10 -> 8 channels on an odd number of pixels; QDWCONV2D through SMLABB/SMLATT with multipliers 1 and 2;
    QMAXPOOL2D through SEL) the int8 body predicts what the host's int8 model (the reference kernels) predicts,
    and training the f32 head behind it matches bit for bit."""
    net = every_spatial_op_net()
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.05)), {"loss": "cross_entropy"})
    rng = np.random.default_rng(4)
    cal = rng.normal(size=(200, net.n_in)).astype(np.float32)
    r = export_project(ck, board, tmp_path / "fw", quant="int8-full", trainable="last:1", sim=True,
                       calibration=cal, loss=losses.cross_entropy)  # fmt: skip
    twin = DeviceTwin(r.model)
    x = rng.normal(size=(12, net.n_in)).astype(np.float32)
    t = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 4)]
    with sim.start(r.path, r.board) as s:
        assert_same_bits(s.device.predict(x), twin.predict(x), f"PREDICT on {board}")
        train_lockstep(s.device, twin, x[:4], t)
        assert_device_equals_twin(s.device, twin)
        assert_same_bits(s.device.predict(x), twin.predict(x), f"PREDICT on {board} after training")


def test_frozen_int8_ds_cnn_trains_its_f32_last_layer_on_the_nucleo_f401re(tmp_path: Path) -> None:
    """Issue 21's Done-when: the MLPerf Tiny DS-CNN (49x10x1 -> 12, BatchNorm trained a few steps on the host and
    folded at export) with a frozen full-integer int8 body and a trainable f32 last layer, calibrated on random
    inputs: the plan for the real nucleo_f401re fits its 96 KB and says how much is left; in QEMU the firmware's
    static RAM plus its measured stack peak stays within the plan; PREDICT and a TRAIN step match the host twin
    bit for bit."""
    from mcutrain.exporter.boards import get_board
    from mcutrain.exporter.export import board_device_model
    from mcutrain.exporter.memplan import plan
    from mcutrain.tiny_models import ds_cnn

    net = ds_cnn().rand_params(seed=1)
    rng = np.random.default_rng(21)
    x = rng.normal(size=(16, 49, 10, 1)).astype(np.float32)
    y = np.eye(12, dtype=np.float32)[rng.integers(0, 12, 16)]
    net.fit(net.new_adam(TrainParams(lr=1e-3)), losses.cross_entropy, x, y, epochs=1, batch=8)
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.01)), {"loss": "cross_entropy"})
    cal = rng.normal(size=(100, net.n_in)).astype(np.float32)
    board = get_board("nucleo_f401re")
    m = board_device_model(ck, board, "last:1", "int8-full", calibration=cal)
    assert m.program.layers[0].op == Op.QUANT and m.program.layers[-1].op == Op.SOFTMAX
    assert sum(d.op == Op.QDWCONV2D for d in m.program.layers) == 4
    assert m.program.n_params == 64 * 12 + 12  # only the f32 head lives in RAM
    real = plan(m, board)
    table = real.table()
    assert real.fits() and real.ram_left == 96 * 1024 - real.ram > 0, table
    assert re.search(rf"\n\s+left\s+{real.ram_left:,}\s+{real.flash_left:,}\n", table), table
    r = export_project(ck, "nucleo_f401re", tmp_path / "fw", quant="int8-full", trainable="last:1", sim=True,
                       calibration=cal, loss=losses.cross_entropy)  # fmt: skip
    assert r.plan.fits(), r.plan.table()
    twin = DeviceTwin(r.model)
    xs = x[:3].reshape(3, -1)
    with sim.start(r.path, r.board, measure=True) as s:
        assert_same_bits(s.device.predict(xs), twin.predict(xs), "PREDICT")
        train_lockstep(s.device, twin, xs[:2], y[:2])
        assert_device_equals_twin(s.device, twin)
        assert_same_bits(s.device.predict(xs), twin.predict(xs), "PREDICT after training")
        rep = s.report()
    used = rep["ram_static"] + rep["stack_peak"]
    assert 0 < used <= r.plan.ram <= 96 * 1024, (rep, r.plan.table())
    print(f"\nDS-CNN int8-full, last:1 on nucleo_f401re: plan {real.ram:,} B RAM ({real.ram_left:,} B left), "
          f"measured {rep['ram_static']:,} B static + {rep['stack_peak']:,} B stack = {used:,} B; "
          f"PREDICT {rep['predict']:,.0f}, TRAIN {rep['train']:,.0f} instructions")  # fmt: skip


def rounded(a: np.ndarray, mult: int, shift: int) -> np.ndarray:
    """round(a * mult / 2^shift) half away from zero (shift clamped to [1, 62]; |a| < 2^31, |mult| < 2^31, so the
    product is exact in int64), saturated to +-2^30: the core's requantization before a zero point is added."""
    n = int(np.clip(shift, 1, 62))
    p = np.asarray(a, np.int64) * np.int64(mult)
    r = (np.abs(p) + (np.int64(1) << (n - 1))) >> n
    return np.clip(np.where(p >= 0, r, -r), -(2**30), 2**30)


def rederive_add(blob: bytes, c: int, x: np.ndarray, s: np.ndarray) -> np.ndarray:
    """QRES_END's int8 output from its int8 input x and the int8 skip tensor s, as mct.h documents it (TFLite's int8
    ADD: both inputs shifted left by 20 bits and requantized, the sum saturated and requantized), constants read
    from the blob at byte c."""
    zx, zs, zy, mx, nx, ms, ns, my, ny, lo, hi = (int(v) for v in i32(blob, c, 11))
    zx, zs, zy, lo, hi = (int(np.clip(v, -128, 127)) for v in (zx, zs, zy, lo, hi))
    acc = rounded((x - zx) << 20, mx, nx) + rounded((s - zs) << 20, ms, ns)
    acc = np.clip(acc, -INT32_MAX, INT32_MAX)
    return np.clip(zy + rounded(acc, my, ny), max(lo, -128), min(hi, 127))


def residual_net(shortcut: bool, c: int = 4) -> Sequential:
    """6x6x1 -> 3 classes through a residual block of c channels (conv 3x3 and ReLU, then identity or a 1x1 projection
    shortcut) with a ReLU after it, between a convolution and a pooled dense head. With c = 30 the block's
    convolution has windows of 270 values, more than the Cortex-M4/M7/M33 QCONV2D gathers at once (it takes two
    kernel rows, then one), and 30 output channels (not a multiple of four); with c = 17 windows of 153 values, which
    it takes two output pixels at a time (as ResNet-8's 16-channel 3x3 convolutions)."""
    from mcutrain import Residual

    kw = {"shortcut": [L.Conv2d(c, c, 1)]} if shortcut else {}
    block = Residual(L.Conv2d(c, c, 3, padding="same"), L.Relu(), **kw)
    layers = [L.Conv2d(1, c, 3, padding="same"), L.Relu(), block, L.Relu(), L.GlobalAvgPool2d(), L.Linear(c, 3)]
    return Sequential(*layers, L.Softmax(), input_shape=(6, 6, 1)).rand_params(seed=0)


BLOCKS = {"identity": (False, 4), "projection": (True, 4), "paired": (False, 17), "wide": (False, 30)}


@pytest.mark.parametrize("block", list(BLOCKS))
def test_int8_residual_add_equals_the_integer_rederivation(block: str) -> None:
    """`--quant int8-full` converts a residual block made of convertible layers whole: RES_BEGIN (and RES_SHORTCUT)
    of kind 1 carry the block's int8 input, the bodies are int8 ops, and the add is a QRES_END with the ReLU after it
    fused. Every int8 tensor the core computes equals the NumPy re-derivation (the add with the skip tensor being
    the block's input, or the main body's output with a projection), and the outputs track the f32 network."""

    shortcut, c = BLOCKS[block]
    net = residual_net(shortcut, c)
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.05)), {"loss": "cross_entropy"})
    rng = np.random.default_rng(0)
    cal = rng.normal(size=(64, net.n_in)).astype(np.float32)
    m = build_device_model(ck, "none", "int8-full", calibration=cal)
    body = ["RES_BEGIN", "QCONV2D"] + (["RES_SHORTCUT", "QCONV2D"] if shortcut else []) + ["QRES_END"]
    ops = [d.op.name for d in m.program.layers]
    assert ops == ["QUANT", "QCONV2D", *body, "QAVGPOOL2D", "QDENSE", "DEQUANT", "SOFTMAX"], ops
    assert all(d.kind == 1 for d in m.program.layers if d.op in (Op.RES_BEGIN, Op.RES_SHORTCUT))
    x = rng.normal(size=(16, net.n_in)).astype(np.float32)
    nb = x.shape[0]
    y, arena, prog, cur = run_int8(m, x)
    blob = prog.cdata
    inputs: Dict[int, np.ndarray] = {}  # layer index -> its int8 input
    for i, d in enumerate(prog.layers[1:-2], start=1):
        inputs[i] = cur
        if d.op == Op.RES_BEGIN:
            continue
        if d.op == Op.RES_SHORTCUT:
            cur = inputs[d.k]  # the shortcut body reads the block's input again
            continue
        want = rederive_add(blob, d.p_off, cur, inputs[d.k]) if d.op == Op.QRES_END else rederive(d, blob, cur)
        got = int8_tensor(arena, d, nb)
        assert np.array_equal(got, want), f"{d.op.name} ({d.name}): {np.argwhere(got != want)[:5]}"
        cur = want
    assert np.abs(y - net.forward(x)).max() < 0.02
    # the device's arena, where outputs share regions while the block keeps its input, computes the same bits
    assert_same_bits(m.core().forward(np.ascontiguousarray(m.params, np.float32), x), y, "the device's arena plan")


def test_resnet8_int8_full_plan_keeps_three_activations_alive() -> None:
    """ResNet-8 (BatchNorm folded) exported int8-full converts whole, its three residual blocks as int8 blocks; the
    arena keeps each block's int8 input while its body runs, and outputs share regions otherwise, so the int8 part
    of the plan is three 32x32x16 tensors (the first block's input, its second convolution's output and the sum:
    49,152 B, CMSIS-NN's figure) and it fits the nucleo_f401re's 96 KB. The device's arena gives the bits of one
    where every output has its own region, and the outputs track the f32 network."""
    from mcutrain.exporter.boards import get_board
    from mcutrain.exporter.export import board_device_model
    from mcutrain.exporter.memplan import plan
    from mcutrain.exporter.quantize import own_regions
    from mcutrain.tiny_models import resnet8

    net = resnet8().rand_params(seed=1)
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.01)))
    board = get_board("nucleo_f401re")
    cal = np.random.default_rng(0).random((20, net.n_in), dtype=np.float32)
    m = board_device_model(ck, board, "none", "int8-full", calibration=cal)
    ops = [d.op.name for d in m.program.layers]
    assert ops.count("QRES_END") == 3 and ops.count("QUANT") == 1 and "RES_END" not in ops, ops
    p = plan(m, board)
    rows = {name: ram for name, ram, _ in p.rows}
    assert rows["int8 activations (arena)"] == 3 * 32 * 32 * 16, p.table()
    assert p.fits(), p.table()
    params = np.ascontiguousarray(m.params, np.float32)
    y = m.core().forward(params, cal)
    assert_same_bits(y, core_net(own_regions(m.program)).forward(params, cal), "ResNet-8's shared arena")
    assert np.abs(y - net.forward(cal)).max() < 0.01


def residual_block_runs_bit_for_bit(block: str, board: str, tmp_path: Path) -> None:
    """residual_net(*BLOCKS[block]) exported int8-full (every layer frozen) for board predicts in its simulator
    exactly what the host's int8 model (the reference kernels) predicts, its residual add a QRES_END."""
    net = residual_net(*BLOCKS[block])
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.05)), {"loss": "cross_entropy"})
    x = np.random.default_rng(0).normal(size=(64, net.n_in)).astype(np.float32)
    r = export_project(ck, board, tmp_path / "fw", quant="int8-full", trainable="none", sim=True, calibration=x)
    ops = [d.op.name for d in r.model.program.layers]
    assert "QRES_END" in ops and "RES_END" not in ops and ops.count("QUANT") == 1, ops
    assert r.plan.fits(), r.plan.table()
    twin = DeviceTwin(r.model)
    assert np.abs(twin.predict(x) - net.forward(x)).max() < 0.02
    with sim.start(r.path, r.board) as s:
        assert_same_bits(s.device.predict(x[:12]), twin.predict(x[:12]), f"PREDICT of the int8 ResNet block on {board}")


@pytest.mark.parametrize("block", list(BLOCKS))
def test_int8_full_residual_block_runs_bit_for_bit_on_the_m4f(block: str, tmp_path: Path) -> None:
    """The int8 residual block (identity, with a 1x1 projection shortcut, identity over 17 channels, whose windows of
    153 values the M4F takes two pixels at a time, or over 30 channels, whose windows it sums in parts) exported for
    the nucleo_f401re predicts in QEMU exactly what the host's int8 model (the reference kernels) predicts."""
    residual_block_runs_bit_for_bit(block, "nucleo_f401re", tmp_path)


@pytest.mark.parametrize("block", ["identity", "projection"])
def test_int8_full_residual_block_runs_bit_for_bit_on_the_uno(block: str, tmp_path: Path) -> None:
    """The same on the Uno in simavr (int is 16 bits there: QRES_END's 2^20 left shifts must be done in 32 bits),
    with the plan counting QRES_END's AVR code (memplan.AVR_OP_CODE)."""
    residual_block_runs_bit_for_bit(block, "uno", tmp_path)


# ----------------------------------------------------------------------------- 1-D CNNs (Conv1d, 1-D pooling)


def every_1d_op_net() -> Sequential:
    """(20, 3) series -> 3 classes through every 1-D layer the int8 path converts (each the 2-D op with h = 1): a
    strided Conv1d with 'same' padding (ReLU fused), a Conv1d with (left, right) padding and Tanh as a table, max
    and average pooling with padding, a 1x1 Conv1d without bias, global average pooling, Linear."""
    return Sequential(
        L.Conv1d(3, 6, 5, stride=2, padding="same"),
        L.Relu(),
        L.Conv1d(6, 5, 3, padding=(2, 1)),
        L.Tanh(),
        L.MaxPool1d(3, stride=2, padding=1),
        L.AvgPool1d(2, stride=1, padding=(0, 1)),
        L.Conv1d(5, 4, 1, bias=False),
        L.GlobalAvgPool1d(),
        L.Linear(4, 3),
        L.Softmax(),
        input_shape=(20, 3),
    ).rand_params(seed=12)


def test_every_1d_int8_op_equals_the_integer_rederivation() -> None:
    """A Conv1d on (T, C) is QCONV2D on (1, T, C) with a 1 x K kernel (weights OHWI = [c_out][1][k][c_in]), the 1-D
    pools QMAXPOOL2D / QAVGPOOL2D with h = 1: the core's int8 tensors equal the NumPy re-derivation layer by
    layer."""
    net = every_1d_op_net()
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.01)), {"loss": "cross_entropy"})
    rng = np.random.default_rng(5)
    cal = rng.normal(size=(200, net.n_in)).astype(np.float32)
    m = build_device_model(ck, "last:1", "int8-full", calibration=cal)
    layers = m.program.layers
    assert [d.op.name for d in layers] == ["QUANT", "QCONV2D", "QCONV2D", "QLUT", "QMAXPOOL2D", "QAVGPOOL2D",
                                           "QCONV2D", "QAVGPOOL2D", "DEQUANT", "DENSE", "SOFTMAX"]  # fmt: skip
    assert all(d.geometry["h_in"] == 1 == d.geometry["kh"] for d in layers if d.geometry)
    x = rng.normal(size=(16, net.n_in)).astype(np.float32)
    y, arena, prog, cur = run_int8(m, x)
    blob = prog.cdata
    for d in prog.layers[1:-3]:
        want = rederive(d, blob, cur)
        got = int8_tensor(arena, d, x.shape[0])
        assert np.array_equal(got, want), f"{d.op.name} ({d.name}): {np.argwhere(got != want)[:5]}"
        cur = want
    assert np.abs(y - net.forward(x)).max() < 0.1


MOTIONS = ("still", "walk", "shake", "tap")


def sensor_windows(n: int, seed: int, t: int = 32) -> tuple:
    """A synthesized 3-axis accelerometer task (no sensor data set can be downloaded here): windows of t samples,
    (n, t, 3) in g, of four motions, with gravity on a slightly tilted z axis and Gaussian noise (0.15 g) on every
    axis: 'still' (gravity and noise), 'walk' (a 1.5-3 cycle sway on z and half as much on y, random phase and
    amplitude 0.4-0.9 g), 'shake' (7-11 cycles on x, 0.5-1.2 g), 'tap' (a decaying spike of 1.5-3 g on a random
    axis at a random time). Returns (x, one-hot y)."""
    rng = np.random.default_rng(seed)
    k = rng.integers(0, len(MOTIONS), n)
    tt = np.arange(t, dtype=np.float64) / t
    x = rng.normal(0.0, 0.15, (n, t, 3))
    x += rng.normal(0.0, 0.1, (n, 1, 3)) + np.array([0.0, 0.0, 1.0])  # gravity, tilted
    for i, c in enumerate(k):
        if c == 1:
            a, f, ph = rng.uniform(0.4, 0.9), rng.uniform(1.5, 3.0), rng.uniform(0, 2 * np.pi)
            x[i, :, 2] += a * np.sin(2 * np.pi * f * tt + ph)
            x[i, :, 1] += 0.5 * a * np.sin(2 * np.pi * f * tt + ph + 1.0)
        elif c == 2:
            a, f, ph = rng.uniform(0.5, 1.2), rng.uniform(7.0, 11.0), rng.uniform(0, 2 * np.pi)
            x[i, :, 0] += a * np.sin(2 * np.pi * f * tt + ph)
        elif c == 3:
            at, ax = rng.integers(2, t - 4), rng.integers(0, 3)
            x[i, at : at + 4, ax] += rng.uniform(1.5, 3.0) * np.array([1.0, 0.5, 0.25, 0.1])
    return x.reshape(n, -1).astype(np.float32), np.eye(len(MOTIONS), dtype=np.float32)[k]


def motion_cnn() -> Sequential:
    """A 1-D CNN for (32, 3) accelerometer windows: Conv1d 3->8 (k 5, stride 2, 'same') - ReLU - MaxPool1d 2 -
    Conv1d 8->8 (k 3, padding 1) - ReLU - AvgPool1d 2 - Linear 32->4 - Softmax."""
    return Sequential(
        L.Conv1d(3, 8, 5, stride=2, padding="same"),
        L.Relu(),
        L.MaxPool1d(2),
        L.Conv1d(8, 8, 3, padding=1),
        L.Relu(),
        L.AvgPool1d(2),
        L.Flatten(),
        L.Linear(32, 4),
        L.Softmax(),
        input_shape=(32, 3),
    )


def test_1d_cnn_int8_full_on_a_sensor_task_loses_at_most_a_point_and_runs_bit_for_bit(tmp_path: Path) -> None:
    """The motion CNN trained on the synthesized accelerometer windows, exported --quant int8-full with every layer
    frozen: test accuracy within one point of f32, and the nucleo_f401re (QEMU) and the Uno (simavr) predict the
    host's int8 model bit for bit."""
    xtr, ytr = sensor_windows(1600, seed=1)
    xte, yte = sensor_windows(600, seed=2)
    net = motion_cnn().rand_params(seed=3)
    net.fit(net.new_adam(TrainParams(lr=3e-3)), losses.cross_entropy, xtr, ytr, epochs=30, batch=32, shuffle=1)
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.01)), {"loss": "cross_entropy"})
    cal = xtr[:400]
    m = build_device_model(ck, "none", "int8-full", calibration=cal)
    assert [d.op.name for d in m.program.layers] == ["QUANT", "QCONV2D", "QMAXPOOL2D", "QCONV2D", "QAVGPOOL2D",
                                                     "QDENSE", "DEQUANT", "SOFTMAX"]  # fmt: skip
    x = xte[:24]
    for board in ("nucleo_f401re", "uno"):
        r = export_project(ck, board, tmp_path / board, quant="int8-full", trainable="none", sim=True,
                           calibration=cal, eval_data=(xte, yte), loss=losses.cross_entropy)  # fmt: skip
        rep = r.quant_report
        assert rep is not None and rep.f32_accuracy is not None and rep.device_accuracy is not None
        assert rep.f32_accuracy >= 0.95, rep.summary()
        assert rep.device_accuracy >= rep.f32_accuracy - 0.01, rep.summary()  # at most one point lost
        assert r.plan.fits(), r.plan.table()
        twin = DeviceTwin(r.model)
        with sim.start(r.path, r.board) as s:
            got = s.device.predict(x)
        assert_same_bits(got, twin.predict(x), f"PREDICT on {board} against the host's int8 model")
    print(f"\nmotion CNN on synthesized accelerometer windows (600 held out): f32 {rep.f32_accuracy:.1%}, "
          f"int8-full {rep.device_accuracy:.1%}")  # fmt: skip


# ----------------------------------------------------------------------------- --quant int8 (weights only)


def test_digits_cnn_int8_weights_lose_at_most_a_point_save_flash_and_run_bit_for_bit(tmp_path: Path) -> None:
    """`--quant int8 --trainable last:1`: the frozen convolutions keep int8 weights with a scale per output channel in
    flash (MCT_STORE_I8, f32 math): at most one point of test accuracy lost against f32, the plan shows the flash
    saved against the f32 export (the core's const bytes of each layer), and on the nucleo_f401re in QEMU PREDICT and
    TRAIN of the f32 head match the host twin bit for bit."""
    from mcutrain.corefacts import Storage, layer_size_of
    from mcutrain.exporter.memplan import extra_code
    from mcutrain.tiny_models import digits_cnn

    xtr, ytr, xte, yte = digits_split()
    net = digits_cnn().rand_params(seed=0)
    net.fit(net.new_adam(TrainParams(lr=0.003)), losses.cross_entropy, xtr, ytr, epochs=40, batch=32, shuffle=1)
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.01)), {"loss": "cross_entropy"})
    r = export_project(ck, "nucleo_f401re", tmp_path / "fw", quant="int8", trainable="last:1", sim=True,
                       eval_data=(xte, yte), loss=losses.cross_entropy)  # fmt: skip
    rep = r.quant_report
    assert rep is not None and rep.f32_accuracy is not None and rep.device_accuracy is not None
    assert rep.f32_accuracy >= 0.97, rep.summary()
    assert rep.device_accuracy >= rep.f32_accuracy - 0.01, rep.summary()  # at most one point lost
    layers, base = r.model.program.layers, r.model.baseline.program.layers
    convs = [(d, f) for d, f in zip(layers, base) if d.op == Op.CONV2D]
    assert len(convs) == 2 and all(d.storage == Storage.I8 and f.storage == Storage.F32 for d, f in convs)
    saved = sum(layer_size_of(f).consts - layer_size_of(d).consts for d, f in convs)
    assert saved > 0.7 * sum(layer_size_of(f).consts for _, f in convs)
    table = r.plan.table()
    # the plan's saving: the const bytes, less the code of the int8-weight kernels (its estimate, extra_code)
    code = extra_code(r.model, r.board) - extra_code(r.model.baseline, r.board)
    assert r.plan.flash_saved == saved - code > 0 and re.search(rf"int8 saves\s+0\s+{saved - code:,}\n", table), table
    assert re.search(rf"frozen layers \(flash\)\s+0\s+{len(bytes(r.model.program.cdata)):,}\n", table), table
    twin = DeviceTwin(r.model)
    x = xte[:16]
    with sim.start(r.path, r.board) as s:
        assert_same_bits(s.device.predict(x), twin.predict(x), "PREDICT with int8-weight convolutions")
        train_lockstep(s.device, twin, x[:4], yte[:4])
        assert_device_equals_twin(s.device, twin)
        assert_same_bits(s.device.predict(x), twin.predict(x), "PREDICT after training")
    print(f"\ndigits CNN --quant int8 last:1: f32 {rep.f32_accuracy:.1%}, int8 weights {rep.device_accuracy:.1%}; "
          f"convolution weights {sum(layer_size_of(f).consts for _, f in convs):,} B -> "
          f"{sum(layer_size_of(d).consts for d, _ in convs):,} B of flash")  # fmt: skip


def test_int8_weight_convolutions_pass_gradients_back_bit_for_bit(tmp_path: Path) -> None:
    """`--quant int8 --trainable biases`: every convolution splits into frozen int8 weights (flash) and a trainable
    bias, so training sends dL/dx back through each int8-weight Conv2d and depthwise Conv2d (multipliers 1 and 2):
    the nucleo_f401re (QEMU) trains as the host twin does, bit for bit, and its gradients stay near the f32
    export's (the first steps' parameter changes agree within a few percent)."""
    from mcutrain.corefacts import Storage

    net = every_spatial_op_net()
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.05)), {"loss": "cross_entropy"})
    rng = np.random.default_rng(8)
    x = rng.normal(size=(6, net.n_in)).astype(np.float32)
    t = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 6)]
    r = export_project(ck, "nucleo_f401re", tmp_path / "fw", quant="int8", trainable="biases", sim=True,
                       loss=losses.cross_entropy)  # fmt: skip
    assert sum(d.storage == Storage.I8 for d in r.model.program.layers) == 6  # 5 convolutions, the Linear's W
    twin, f32 = DeviceTwin(r.model), DeviceTwin(r.model.baseline)
    for xs, ts in zip(x, t):
        f32.train(xs, ts)
    with sim.start(r.path, r.board) as s:
        train_lockstep(s.device, twin, x, t)
        assert_device_equals_twin(s.device, twin)
        assert_same_bits(s.device.predict(x), twin.predict(x), "PREDICT after training")
    d_i8, d_f32 = twin.params - r.model.params, f32.params - r.model.baseline.params
    assert np.abs(d_f32).max() > 1e-3
    assert np.abs(d_i8 - d_f32).max() < 0.05 * np.abs(d_f32).max()
