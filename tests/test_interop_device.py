"""The whole path for a model the user already has, on a simulated board: a PyTorch network exported to ONNX,
a Keras 3 file and a scikit-learn MLP each import, predict what their source predicts, fine-tune on the host,
export to the nano33ble's simulated stand-in (Cortex-M4F under QEMU), train on the device bit for bit with
the host, come back with what the device learned (in Python and with `mcutrain device pull`), and export to
ONNX (to_onnx and `mcutrain export-onnx`), where onnxruntime agrees with them.

Needs what tests/test_sim_qemu.py needs (qemu-system-arm, gcc-arm-none-eabi, libnewlib-arm-none-eabi,
PlatformIO) plus the test extra's torch, onnx, onnxruntime, keras, jax and scikit-learn."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Tuple

import numpy as np
import pytest
from click.testing import CliRunner
from foreign_models import keras_mlp, ort_run, sklearn_data, sklearn_mlp, sklearn_outputs, torch_mlp, torch_onnx

from helpers import assert_device_equals_twin, assert_same_bits, onehot_samples, train_lockstep
from mcutrain import Checkpoint, TrainParams, losses, train_batch
from mcutrain.cli.commands import main
from mcutrain.exporter import from_keras, from_onnx, from_sklearn, sim, to_onnx
from mcutrain.exporter.export import export_project
from mcutrain.exporter.interop import suggested_loss
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.modelfile import load_model, save_model
from mcutrain.module import Module

BOARD = "nano33ble"
TOL = 1e-5  # float32 rounding between mcutrain's C core and the source framework (see test_interop.py)
HOST_STEPS = 30
DEVICE_STEPS = 40


@pytest.fixture(scope="module", autouse=True)
def tool_dirs(pio_core: Path) -> Path:
    """The session's own PlatformIO core folder and caches (see conftest.pio_core)."""
    return pio_core


Source = Tuple[Module, Callable[[np.ndarray], np.ndarray], np.ndarray, np.ndarray, Any]


def torch_source(tmp_path: Path) -> Source:
    """A PyTorch classifier through ONNX; trained with Adam on one-hot targets."""
    src = torch_onnx(torch_mlp(seed=12), 6, tmp_path / "torch.onnx")
    xs, ts = onehot_samples(np.random.default_rng(12), HOST_STEPS + DEVICE_STEPS, 6, 4)
    return from_onnx(src), lambda x: ort_run(src, x), xs, ts, lambda n: n.new_adam(TrainParams(lr=5e-3))


def keras_source(tmp_path: Path) -> Source:
    """A Keras classifier from its .keras file; trained with momentum."""
    model = keras_mlp(tmp_path / "m.keras", seed=13)
    xs, ts = onehot_samples(np.random.default_rng(13), HOST_STEPS + DEVICE_STEPS, 7, 5)
    net = from_keras(tmp_path / "m.keras")
    return net, lambda x: model.predict(x, verbose=0), xs, ts, lambda n: n.new_momentum(TrainParams(lr=0.02), 0.9)


def sklearn_source(tmp_path: Path) -> Source:
    """A scikit-learn regressor; fine-tuned on its own kind of data with RMSProp and momentum."""
    est, _ = sklearn_mlp("regressor", seed=14)
    xs, ts = sklearn_data(seed=15, n=HOST_STEPS + DEVICE_STEPS)
    opt: Callable[[Module], Any] = lambda n: n.new_rmsprop_with_momentum(TrainParams(lr=1e-3), 0.8, 0.9)  # noqa: E731
    return from_sklearn(est), lambda x: sklearn_outputs(est, x), xs, ts, opt


SOURCES = {"torch-onnx": torch_source, "keras": keras_source, "sklearn": sklearn_source}


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_imported_model_fine_tunes_trains_on_the_device_and_goes_back_to_onnx(kind: str, tmp_path: Path) -> None:
    net, oracle, xs, ts, make_opt = SOURCES[kind](tmp_path)
    loss = losses.by_name(suggested_loss(net))
    x_eval = xs[:8]
    # 1. it predicts what the source framework predicts
    d = float(np.max(np.abs(net.forward(x_eval) - oracle(x_eval))))
    assert d <= TOL, f"{kind}: the imported network differs from its source by {d}"
    # 2. fine-tune on the host (batches of 5 from the first samples)
    opt = make_opt(net)
    before = net.params.copy()
    first = [train_batch(opt, net, loss, xs[i : i + 5], ts[i : i + 5]) for i in range(0, HOST_STEPS, 5)]
    assert not np.array_equal(net.params, before), "fine-tuning changed nothing"
    assert np.isfinite(first).all()
    # 3. export to the simulated board; it predicts the host's bits, then trains in lockstep with the host
    save_model(tmp_path / "tuned.mct", net, opt)
    r = export_project(Checkpoint(net, opt), BOARD, tmp_path / "fw", loss=loss, sim=True)
    twin = DeviceTwin(r.model)
    dev_x, dev_t = xs[HOST_STEPS:], ts[HOST_STEPS:]
    with sim.start(r.path, r.board) as s:
        assert_same_bits(s.device.predict(x_eval), net.forward(x_eval), "PREDICT of the fine-tuned import")
        losses_dev = train_lockstep(s.device, twin, dev_x, dev_t)
        assert_device_equals_twin(s.device, twin)
        # 4. pull what the device learned into the host network
        params, _, _ = s.device.pull()
        tuned = net.params.copy()
        net.params = r.model.to_host_params(params, net.params)
        assert not np.array_equal(net.params, tuned), "training on the device changed nothing"
        assert_same_bits(s.device.predict(x_eval), net.forward(x_eval), "PREDICT after training vs the pulled network")
        # the same through the command line: device pull, then export-onnx
        learned = tmp_path / "learned.mct"
        pull = ["device", "pull", "--port", s.extra["port"], "--project", str(r.path)]
        r_pull = CliRunner().invoke(main, pull + ["--model", str(tmp_path / "tuned.mct"), "-o", str(learned)])
        assert r_pull.exit_code == 0, r_pull.output
    assert np.isfinite(losses_dev).all()
    assert_same_bits(load_model(learned).net.params, net.params, "parameters pulled by `mcutrain device pull`")
    # 5. back to ONNX: onnxruntime gives what the learned network gives
    to_onnx(net, tmp_path / "learned_py.onnx")
    d = float(np.max(np.abs(ort_run(tmp_path / "learned_py.onnx", x_eval) - net.forward(x_eval))))
    assert d <= TOL, f"{kind}: onnxruntime differs from the learned network by {d}"
    r_onnx = CliRunner().invoke(main, ["export-onnx", str(learned)])
    assert r_onnx.exit_code == 0, r_onnx.output
    from_cli = ort_run(learned.with_suffix(".onnx"), x_eval)
    assert_same_bits(from_cli, ort_run(tmp_path / "learned_py.onnx", x_eval), "onnxruntime on `mcutrain export-onnx`")
