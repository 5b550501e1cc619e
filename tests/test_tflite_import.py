"""Importing a full-integer int8 .tflite (issue 21, TFLite interop): the converter's digits CNN
(tests/fixtures/digits_cnn_int8.tflite, made by scripts/make_tflite_fixture.py with TensorFlow 2.21) imports with
its quantization, and its int8-full device model computes, bit for bit, the int8 logits that TensorFlow Lite
Micro computes (the oracle an MCU runs; tflite-micro from the package index) on 100 digits; exported for the
nucleo_f401re in QEMU the board predicts the twin's bits and fine-tunes its f32 head over the frozen int8 body in
lockstep with the twin. Bad files fail with errors naming the operator or tensor.

The file's int8 SOFTMAX becomes QSOFTMAX (TFLite's int8 softmax in gemmlowp fixed point) when the whole model is
frozen: the comparison is on the int8 FULLY_CONNECTED output and on the model's output, TFLM's int8 softmax codes, both
with 0 differences; random logits over several input scales and betas check QSOFTMAX against TFLM's SOFTMAX alone.
With a trainable f32 head the softmax stays f32."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Tuple

import numpy as np
import pytest
from sklearn.datasets import load_digits

from helpers import assert_device_equals_twin, assert_same_bits, cli_ok, train_lockstep
from mcutrain import load_model, losses
from mcutrain.corefacts import Op, Storage, layer_size_of
from mcutrain.errors import ImportModelError
from mcutrain.exporter import sim
from mcutrain.exporter.device import build_device_model
from mcutrain.exporter.export import export_project
from mcutrain.exporter.quantize import QParams, dequant_blob, own_regions, qsoftmax_blob, quant_blob
from mcutrain.exporter.tflite_import import QUANT_KEY, from_tflite, from_tflite_bytes, parse
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.module import core_net
from mcutrain.program import LayerDesc, Program

runtime = pytest.importorskip("tflite_micro.python.tflite_micro.runtime", reason="tflite-micro (the test extra)")

FIXTURE = Path(__file__).parent / "fixtures" / "digits_cnn_int8.tflite"


@pytest.fixture(scope="module", autouse=True)
def tool_dirs(pio_core: Path) -> Path:
    """The session's own PlatformIO core folder (see conftest.pio_core)."""
    return pio_core


def digits(n: int = 100) -> Tuple[np.ndarray, np.ndarray]:
    """The last n digits (not among the 1,500 the fixture was trained on) as (n, 64) in [0, 1], and labels."""
    d = load_digits()
    return (d.images[-n:] / 16.0).reshape(n, 64).astype(np.float32), d.target[-n:]


def io_quant() -> Tuple[Tuple[float, int], int]:
    """((input scale, zero point), index of the FULLY_CONNECTED output tensor) read from the fixture."""
    m = parse(FIXTURE.read_bytes(), str(FIXTURE))
    g = m.subgraphs[0]
    q = g.tensors[g.inputs[0]].quantization
    fc = [op for op in g.operators if m.operatorCodes[op.opcodeIndex].builtinCode == 9]  # FULLY_CONNECTED
    assert len(fc) == 1
    return (float(q.scale[0]), int(q.zeroPoint[0])), int(fc[0].outputs[0])


def tflm(xq: np.ndarray, fc_out: int) -> Tuple[np.ndarray, np.ndarray]:
    """TFLM's (int8 logits, int8 softmax outputs) of each int8 input (n, 64)."""
    it = runtime.Interpreter.from_file(
        str(FIXTURE), arena_size=1 << 20, intrepreter_config=runtime.InterpreterConfig.kPreserveAllTensors
    )
    logits, probs = [], []
    for row in xq:
        it.set_input(row.reshape(1, 8, 8, 1), 0)
        it.invoke()
        logits.append(np.asarray(it.GetTensor(fc_out, 0)["tensor_data"], np.int8).ravel())
        probs.append(np.asarray(it.get_output(0), np.int8).ravel())
    return np.array(logits), np.array(probs)


def device_logits(dm: Any, x: np.ndarray) -> np.ndarray:
    """The int8 codes the device model's QDENSE writes (the DEQUANT's input), read from the C core's arena (an int8
    tensor of n values takes mct_i8_floats(n) floats per sample, its codes in their first n bytes)."""
    prog = own_regions(dm.program)
    d = next(d for d in prog.layers if d.op == Op.QDENSE)
    nb = x.shape[0]
    _, arena = core_net(prog).traced_forward(np.ascontiguousarray(dm.params, np.float32), x)
    floats = layer_size_of(d).out
    region = arena[d.out_off * nb : (d.out_off + floats) * nb].view(np.int8)
    return region.reshape(nb, floats * 4)[:, : d.n_out].copy()


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture imported through the CLI."""
    out = tmp_path_factory.mktemp("tfl") / "digits.mct"
    r = cli_ok("import", str(FIXTURE), "-o", str(out))
    assert "parameters" in r.output
    return out


def test_imported_int8_model_equals_tflm_bit_for_bit(imported: Path) -> None:
    ck = load_model(imported)
    assert ck.metadata[QUANT_KEY]["source"] == "tflite"
    dm = build_device_model(ck, "none", "int8-full", losses.cross_entropy)  # no calibration: the file's ranges
    assert [Op(d.op).name for d in dm.program.layers] == [
        "QUANT", "QCONV2D", "QMAXPOOL2D", "QCONV2D", "QDWCONV2D", "QAVGPOOL2D", "QDENSE", "QSOFTMAX", "DEQUANT"
    ]  # fmt: skip
    x, labels = digits()
    (s, zp), fc_out = io_quant()
    xq = np.clip(np.rint(x / s) + zp, -128, 127).astype(np.int8)
    x_dev = ((xq.astype(np.int32) - zp).astype(np.float32) * np.float32(s)).astype(np.float32)  # QUANT gives xq back
    want_logits, want_probs = tflm(xq, fc_out)
    got = device_logits(dm, x_dev)
    diff = np.flatnonzero(got != want_logits)
    assert diff.size == 0, (
        f"{diff.size} of {got.size} int8 logits differ from TFLM; first at {diff[0]}: "
        f"{got.ravel()[diff[0]]} != {want_logits.ravel()[diff[0]]}"
    )
    # the model's output: TFLM's int8 softmax codes q, which the device returns as (q + 128) / 256
    y = DeviceTwin(dm).predict(x_dev)
    want = (want_probs.astype(np.float32) + 128) / 256
    diff = np.flatnonzero(y != want)
    assert diff.size == 0, (
        f"{diff.size} of {y.size} softmax outputs differ from TFLM's; first at {diff[0]}: "
        f"{y.ravel()[diff[0]] * 256 - 128} != {want_probs.ravel()[diff[0]]}"
    )
    assert np.mean(y.argmax(axis=1) == labels) >= 0.9


def softmax_alone(n: int, scale: float, zp: int, beta: float) -> bytes:
    """The fixture cut down to its SOFTMAX alone, reading an int8 input of n values at (scale, zp) with this beta."""
    import flatbuffers

    m = parse(FIXTURE.read_bytes(), str(FIXTURE))
    g = m.subgraphs[0]
    op = g.operators[-1]
    assert m.operatorCodes[op.opcodeIndex].builtinCode == 25  # SOFTMAX
    t_in, t_out = g.tensors[op.inputs[0]], g.tensors[op.outputs[0]]
    t_in.shape, t_out.shape = np.array([1, n], np.int32), np.array([1, n], np.int32)
    t_in.shapeSignature = t_out.shapeSignature = None
    t_in.quantization.scale, t_in.quantization.zeroPoint = [scale], [zp]
    op.builtinOptions.beta = beta
    g.operators, g.inputs, g.outputs = [op], [op.inputs[0]], [op.outputs[0]]
    b = flatbuffers.Builder(0)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def qsoftmax_codes(q: np.ndarray, scale: float, beta: float) -> np.ndarray:
    """QSOFTMAX's int8 outputs for int8 inputs q (rows), through the C core: QUANT (codes in) -> QSOFTMAX -> DEQUANT
    (codes out), its constants from qsoftmax_blob."""
    nb, n = q.shape
    one = QParams(1.0, 0)
    blobs = [quant_blob(one), qsoftmax_blob(beta, scale), dequant_blob(one)]
    layers, off = [], 0
    for op, data in zip((Op.QUANT, Op.QSOFTMAX, Op.DEQUANT), blobs):
        layers.append(
            LayerDesc(op=op, kind=0, n_in=n, n_out=n, trainable=False, storage=Storage.Q, p_off=off, name=op.name)
        )
        off += len(data)
    prog = own_regions(Program(layers, n, n, 0, 0, 0, 0, cdata=b"".join(blobs)))
    y = core_net(prog).forward(np.zeros(0, np.float32), np.ascontiguousarray(q, np.float32))
    return y.astype(np.int32)


def test_qsoftmax_equals_tflm_softmax_on_random_logits() -> None:
    """QSOFTMAX against TFLM's int8 SOFTMAX over input scales from 0.01 to 4 (where diff_min cuts off codes more than
    6 below the largest) and three betas, on random codes, near-equal codes and rows with one large code."""
    rng = np.random.default_rng(21)
    for n in (10, 37):
        for scale in (0.24348978698253632, 0.01, 0.0625, 0.7, 4.0):
            for beta in (1.0, 0.5, 2.5):
                zp = int(rng.integers(-20, 20))
                rows = [rng.integers(-128, 128, size=(60, n)), rng.integers(-3, 4, size=(20, n)) + 100]
                spike = rng.integers(-128, -100, size=(20, n))
                spike[np.arange(20), rng.integers(0, n, 20)] = 127
                q = np.clip(np.concatenate(rows + [spike]), -128, 127).astype(np.int8)
                it = runtime.Interpreter.from_bytes(softmax_alone(n, scale, zp, beta), arena_size=1 << 16)
                want = []
                for row in q:
                    it.set_input(row.reshape(1, n), 0)
                    it.invoke()
                    want.append(np.asarray(it.get_output(0), np.int8).ravel())
                got = qsoftmax_codes(q, float(np.float32(scale)), beta)
                bad = np.flatnonzero(got != np.array(want, np.int32))
                assert bad.size == 0, (
                    f"n {n}, scale {scale}, beta {beta}: {bad.size} of {got.size} codes differ from TFLM's, first "
                    f"{got.ravel()[bad[0]]} != {np.array(want).ravel()[bad[0]]} on row {q[bad[0] // n]}"
                )
    # rows whose exact softmax lies within 2e-4 of a rounding tie (k + 1/2) / 256: there only the fixed-point
    # arithmetic gives TFLM's codes (a float64 softmax rounded to nearest misses some of them)
    ties, float_misses = 0, 0
    for scale in np.linspace(0.01, 1.0, 1500).astype(np.float32):
        z = -np.arange(1, 60) * np.float64(scale)  # rows (0, -k): p = 1 / (1 + e^z), e^z / (1 + e^z)
        p = np.stack([1 / (1 + np.exp(z)), np.exp(z) / (1 + np.exp(z))], axis=1) * 256
        near = np.flatnonzero(np.any(np.abs(p - np.floor(p) - 0.5) < 2e-4, axis=1))
        if near.size == 0:
            continue
        q = np.stack([np.zeros(near.size), -(near + 1)], axis=1).astype(np.int8)
        it = runtime.Interpreter.from_bytes(softmax_alone(2, float(scale), 0, 1.0), arena_size=1 << 16)
        want = []
        for row in q:
            it.set_input(row.reshape(1, 2), 0)
            it.invoke()
            want.append(np.asarray(it.get_output(0), np.int8).ravel())
        want_a = np.array(want, np.int32)
        assert np.array_equal(qsoftmax_codes(q, float(scale), 1.0), want_a), f"scale {scale}: rows {q} near a tie"
        ties += q.shape[0]
        float_misses += int(np.sum(np.clip(np.rint(p[near]) - 128, -128, 127) != want_a))
    assert ties >= 10 and float_misses > 0, (ties, float_misses)


def test_imported_tflite_on_the_m4f_predicts_and_fine_tunes_its_head_as_the_twin(
    imported: Path, tmp_path: Path
) -> None:
    ck = load_model(imported)
    r = export_project(
        ck, "nucleo_f401re", tmp_path / "fw", quant="int8-full", trainable="last:1", sim=True, loss=losses.cross_entropy
    )
    ops = [Op(d.op).name for d in r.model.program.layers]
    assert ops[:7] == ["QUANT", "QCONV2D", "QMAXPOOL2D", "QCONV2D", "QDWCONV2D", "QAVGPOOL2D", "DEQUANT"], ops
    twin = DeviceTwin(r.model)
    x, labels = digits(12)
    t = np.eye(10, dtype=np.float32)[labels]
    with sim.start(r.path, r.board) as s:
        assert_same_bits(s.device.predict(x), twin.predict(x), "PREDICT on the M4F against the twin")
        train_lockstep(s.device, twin, x[:6], t[:6])
        assert_device_equals_twin(s.device, twin)
        assert_same_bits(s.device.predict(x), twin.predict(x), "PREDICT on the M4F after fine-tuning")


def test_frozen_imported_tflite_on_the_m4f_returns_tflms_softmax_codes(imported: Path, tmp_path: Path) -> None:
    """Every layer frozen: the M4F runs the int8 body through QSOFTMAX and returns the twin's bits, which are TFLM's
    int8 softmax codes dequantized ((q + 128) / 256)."""
    ck = load_model(imported)
    r = export_project(
        ck, "nucleo_f401re", tmp_path / "fw", quant="int8-full", trainable="none", sim=True, loss=losses.cross_entropy
    )
    assert [Op(d.op).name for d in r.model.program.layers][-3:] == ["QDENSE", "QSOFTMAX", "DEQUANT"]
    x, _ = digits(12)
    (s, zp), fc_out = io_quant()
    xq = np.clip(np.rint(x / s) + zp, -128, 127).astype(np.int8)
    _, want_probs = tflm(xq, fc_out)
    want = (want_probs.astype(np.float32) + 128) / 256
    twin = DeviceTwin(r.model)
    x_dev = ((xq.astype(np.int32) - zp).astype(np.float32) * np.float32(s)).astype(np.float32)
    assert np.array_equal(twin.predict(x_dev), want)
    with sim.start(r.path, r.board) as sess:
        assert_same_bits(sess.device.predict(x_dev), want, "PREDICT on the M4F against TFLM's softmax codes")


def test_bad_tflite_files_are_refused_by_name(tmp_path: Path) -> None:
    data = bytearray(FIXTURE.read_bytes())
    with pytest.raises(ImportModelError, match="TFL3"):
        from_tflite_bytes(b"\0" * 64, "junk.tflite")
    # an operator the importer does not map: turn the model's SOFTMAX opcode into TANH
    m = parse(bytes(data), "x")
    import flatbuffers
    from ai_edge_litert import schema_py_generated as fb

    for oc in m.operatorCodes:
        if oc.builtinCode == fb.BuiltinOperator.SOFTMAX:
            oc.builtinCode = oc.deprecatedBuiltinCode = fb.BuiltinOperator.TANH
    b = flatbuffers.Builder(0)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    with pytest.raises(ImportModelError, match=r"operator 7 \(TANH\).*not supported"):
        from_tflite_bytes(bytes(b.Output()), "tanh.tflite")
    # a float tensor where int8 is expected
    m = parse(bytes(data), "x")
    m.subgraphs[0].tensors[m.subgraphs[0].inputs[0]].type = fb.TensorType.FLOAT32
    b = flatbuffers.Builder(0)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    with pytest.raises(ImportModelError, match=r"operator 0 \(CONV_2D\).*FLOAT32, not int8"):
        from_tflite_bytes(bytes(b.Output()), "float.tflite")
    assert from_tflite(FIXTURE).net.n_in == 64
