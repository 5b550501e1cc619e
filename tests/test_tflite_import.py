"""Importing a full-integer int8 .tflite (issue 21, TFLite interop): the converter's digits CNN
(tests/fixtures/digits_cnn_int8.tflite, made by scripts/make_tflite_fixture.py with TensorFlow 2.21) imports with
its quantization, and its int8-full device model computes, bit for bit, the int8 logits that TensorFlow Lite
Micro computes (the oracle an MCU runs; tflite-micro from the package index) on 100 digits; exported for the
nucleo_f401re in QEMU the board predicts the twin's bits and fine-tunes its f32 head over the frozen int8 body in
lockstep with the twin. Bad files fail with errors naming the operator or tensor.

The SOFTMAX of the file runs in f32 on the device (on the dequantized logits): the comparison is on the int8
FULLY_CONNECTED output, the last int8 tensor both compute, and on the predicted classes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Tuple

import numpy as np
import pytest
from sklearn.datasets import load_digits

from helpers import assert_device_equals_twin, assert_same_bits, cli_ok, train_lockstep
from mcutrain import load_model, losses
from mcutrain.corefacts import Op, layer_size_of
from mcutrain.errors import ImportModelError
from mcutrain.exporter import sim
from mcutrain.exporter.device import build_device_model
from mcutrain.exporter.export import export_project
from mcutrain.exporter.quantize import own_regions
from mcutrain.exporter.tflite_import import QUANT_KEY, from_tflite, from_tflite_bytes, parse
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.module import core_net

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
        "QUANT", "QCONV2D", "QMAXPOOL2D", "QCONV2D", "QDWCONV2D", "QAVGPOOL2D", "QDENSE", "DEQUANT", "SOFTMAX"
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
    twin = DeviceTwin(dm)
    pred = twin.predict(x_dev).argmax(axis=1)
    assert np.array_equal(pred, want_probs.astype(np.int32).argmax(axis=1)) or np.array_equal(
        pred, want_logits.astype(np.int32).argmax(axis=1)
    )
    assert np.mean(pred == labels) >= 0.9


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
