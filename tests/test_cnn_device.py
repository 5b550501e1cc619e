"""Convolutional networks on the devices: a small 2-D CNN (conv, ReLU6, depthwise with stride, pointwise, max pooling,
a residual 2-D block, global average pooling, dense) trains on every simulated Cortex-M and RISC-V core in lockstep with
the host, bit for bit; a 1-D CNN does the same on the Uno in simavr; and the digits CNN of the issue, trained through
the CLI on scikit-learn's 8x8 digits (1,797 images, 360 held out), reaches 98.5% and runs bit for bit on the
nucleo_f401re in QEMU; the Uno's memory plan refuses it in f32 before anything is built and says what fits: a
full-integer int8 body with the head's biases training, which predicts and trains bit for bit in simavr.

Needs the cross compilers, QEMU and simavr that scripts/setup.sh installs (no skips)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.datasets import load_digits

from helpers import assert_device_equals_twin, assert_same_bits, onehot_samples, train_lockstep
from mcutrain import Checkpoint, Residual, Sequential, TrainParams, load_model, losses
from mcutrain import layers as L
from mcutrain.cli import main
from mcutrain.exporter import sim
from mcutrain.exporter.export import export_project
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.fold import fold_batchnorm, has_batchnorm
from mcutrain.module import Module

CORE_BOARDS = ["nano33ble", "bluepill", "pico", "teensy41", "nucleo_l552ze_q", "esp32c3"]
DIGITS_NET = "conv2d:8/3x3/same,relu,maxpool2d:2,conv2d:16/3x3/same,relu,maxpool2d:2,flatten,linear:64x10,softmax"


@pytest.fixture(scope="module", autouse=True)
def tool_dirs(pio_core: Path) -> Path:
    """The session's own PlatformIO core folder (see conftest.pio_core)."""
    return pio_core


def cnn_2d() -> Module:
    """6x6x1 images -> 3 classes through every 2-D layer kind."""
    return Sequential(
        L.Conv2d(1, 4, 3, padding="same"),
        L.Relu6(),
        L.DepthwiseConv2d(4, 3, stride=2, padding="same"),
        L.Relu(),
        L.Conv2d(4, 6, 1),
        L.MaxPool2d(2, stride=1),
        Residual(L.Conv2d(6, 6, 3, padding="same"), L.Tanh()),
        L.AvgPool2d(2, padding=(0, 1, 0, 1)),
        L.GlobalAvgPool2d(),
        L.Linear(6, 3),
        L.Softmax(),
        input_shape=(6, 6, 1),
    ).rand_params(seed=3)


def cnn_1d() -> Module:
    """A (12, 2) series -> 3 classes: small enough to train on the Uno's 2 KB (and its code fits the 32 KB of flash
    without max pooling, whose 3.3 KB the plan counts too)."""
    return Sequential(
        L.Conv1d(2, 4, 3, stride=2, padding="same"),
        L.Relu(),
        L.AvgPool1d(2),
        L.Conv1d(4, 4, 1, bias=False),
        L.GlobalAvgPool1d(),
        L.Linear(4, 3),
        L.Softmax(),
        input_shape=(12, 2),
    ).rand_params(seed=4)


def cnn_projection() -> Module:
    """6x6x2 images -> 3 classes through ResNet-8's kind of block: conv 3x3 stride 2 - BatchNorm - ReLU - conv 3x3 -
    BatchNorm added to a 1x1 stride-2 convolution of the block's input (with a BatchNorm of its own, which export
    folds as it folds the main body's), then an identity block."""
    return Sequential(
        L.Conv2d(2, 4, 3, padding="same"),
        L.BatchNorm(4),
        L.Relu(),
        Residual(
            L.Conv2d(4, 6, 3, stride=2, padding="same"),
            L.BatchNorm(6),
            L.Relu(),
            L.Conv2d(6, 6, 3, padding="same"),
            L.BatchNorm(6),
            shortcut=[L.Conv2d(4, 6, 1, stride=2), L.BatchNorm(6)],
        ),
        L.Relu(),
        Residual(L.Conv2d(6, 6, 3, padding="same"), L.Tanh()),
        L.GlobalAvgPool2d(),
        L.Linear(6, 3),
        L.Softmax(),
        input_shape=(6, 6, 2),
    ).rand_params(seed=6)


def lockstep(net: Module, board: str, opt_kind: str, tmp_path: Path, trainable: str = "all") -> None:
    """Export, then predict and train 30 samples on the device and on the host's twin of it: the same bits. A network
    with BatchNorm runs folded on the device: its predictions are the folded network's (mcutrain.fold)."""
    tp = TrainParams(lr=0.05, l2=1e-3, clip=1.0)
    opt = {"adam": net.new_adam, "sgd": net.new_sgd, "momentum": lambda t: net.new_momentum(t, 0.9)}[opt_kind](tp)
    r = export_project(
        Checkpoint(net, opt), board, tmp_path / "p", loss=losses.cross_entropy, sim=True, trainable=trainable
    )
    twin = DeviceTwin(r.model)
    rng = np.random.default_rng(5)
    n_in = net.n_in
    assert n_in is not None
    x_eval = rng.standard_normal((4, n_in)).astype(np.float32)
    xs, ts = onehot_samples(rng, 30, n_in, 3)
    reference = fold_batchnorm(net) if has_batchnorm(net) else net
    with sim.start(r.path, r.board) as s:
        assert_same_bits(s.device.predict(x_eval), reference.forward(x_eval), "PREDICT against the API's forward")
        assert_same_bits(s.device.predict(x_eval), twin.predict(x_eval), "PREDICT before training")
        train_lockstep(s.device, twin, xs, ts)
        assert_device_equals_twin(s.device, twin)
        assert_same_bits(s.device.predict(x_eval), twin.predict(x_eval), "PREDICT after training")
    assert not np.array_equal(twin.params, r.model.params), "training changed nothing"


@pytest.mark.parametrize("opt_kind", ["adam", "momentum"])
@pytest.mark.parametrize("board", CORE_BOARDS)
def test_a_2d_cnn_trains_bit_for_bit_on_every_core(board: str, opt_kind: str, tmp_path: Path) -> None:
    lockstep(cnn_2d(), board, opt_kind, tmp_path)


@pytest.mark.parametrize("trainable", ["biases", "last:2"])
def test_transfer_learning_modes_of_a_cnn_on_the_m4f(trainable: str, tmp_path: Path) -> None:
    """Bias-only training of a frozen CNN (each convolution's bias split off, one value per channel) and training
    the last two layers: the device trains what the host's twin trains, bit for bit; the frozen convolutions live
    in flash, so the RAM the parameters take shrinks from all of them to the trained ones."""
    from mcutrain.exporter.boards import get_board
    from mcutrain.exporter.export import board_device_model
    from mcutrain.exporter.memplan import plan

    net = cnn_2d()
    ck = Checkpoint(net, net.new_adam(TrainParams(lr=0.05)), {"loss": "cross_entropy"})
    board = get_board("nano33ble")
    rows = {mode: dict((r[0], r[1]) for r in plan(board_device_model(ck, board, mode), board).rows)
            for mode in ("all", trainable)}  # fmt: skip
    key = next(k for k in rows["all"] if k.startswith("parameters"))
    trained = sum(d.n_p for d in board_device_model(ck, board, trainable).program.layers if d.trainable)
    assert rows[trainable][key] == 4 * trained < rows["all"][key] == 4 * net.param_count()
    lockstep(net, "nano33ble", "adam", tmp_path, trainable=trainable)


@pytest.mark.parametrize("trainable", ["all", "last:3", "biases"])
def test_a_resnet_block_with_a_projection_trains_bit_for_bit_on_the_m4f(trainable: str, tmp_path: Path) -> None:
    """The projection block on the nucleo_f401re in QEMU: every layer trained, only the last three layers with
    parameters (the shortcut's convolution, the identity block's and the dense layer: the backward pass stops inside
    the projection block, after its shortcut branch), or only the biases (each convolution's split off, which moves
    the block's layers and re-points its partners)."""
    net = cnn_projection()
    lockstep(net, "nucleo_f401re", "adam", tmp_path, trainable=trainable)


def test_a_1d_cnn_trains_bit_for_bit_on_the_uno(tmp_path: Path) -> None:
    lockstep(cnn_1d(), "uno", "sgd", tmp_path)


def digits_files(tmp_path: Path) -> tuple:
    """scikit-learn's digits as (n, 8, 8, 1) images in [0, 1]: 1,437 to train on, 360 held out (seeded split)."""
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[..., None]
    order = np.random.default_rng(0).permutation(len(d.target))
    train, test = tmp_path / "train.npz", tmp_path / "test.npz"
    np.savez(train, x=x[order[360:]], y=d.target[order[360:]])
    np.savez(test, x=x[order[:360]], y=d.target[order[:360]])
    return train, test


def test_digits_cnn_through_the_cli_reaches_98_5_percent_and_runs_on_the_m4f(tmp_path: Path) -> None:
    train, test = digits_files(tmp_path)
    model = tmp_path / "cnn.mct"
    cli = CliRunner()
    args = ["train", "--net", DIGITS_NET, "--input-shape", "8x8x1", "--data", str(train), "--classify"]
    args += ["--epochs", "60", "--batch", "32", "--opt", "adam", "--lr", "0.003", "--val", "0", "-o", str(model)]
    res = cli.invoke(main, args)
    assert res.exit_code == 0, res.output
    res = cli.invoke(main, ["eval", str(model), "--data", str(test), "--classify"])
    assert res.exit_code == 0, res.output
    acc = float(re.search(r"accuracy\s+([\d.]+)%", res.output).group(1))  # type: ignore[union-attr]
    assert acc >= 98.5, res.output
    # info: every layer's shapes, parameters and MACs (23,680 MACs: 4,608 + 18,432 + 640)
    res = cli.invoke(main, ["info", str(model)])
    assert res.exit_code == 0, res.output
    assert "8x8x1" in res.output and "4x4x16" in res.output and "1,898 parameters" in res.output
    assert "23,680 MACs" in res.output
    # the nucleo_f401re in QEMU: predictions and a training step equal the host's bit for bit
    fw = tmp_path / "fw"
    res = cli.invoke(main, ["export", str(model), "--board", "nucleo_f401re", "-o", str(fw)])
    assert res.exit_code == 0, res.output
    ck = load_model(model)
    x = np.load(test)["x"][:8].reshape(8, -1)
    r = export_project(ck, "nucleo_f401re", tmp_path / "fw2", loss=losses.cross_entropy, sim=True)
    twin = DeviceTwin(r.model)
    y = np.eye(10, dtype=np.float32)[np.load(test)["y"][:8]]
    with sim.start(r.path, r.board) as s:
        got = s.device.predict(x)
        assert_same_bits(got, twin.predict(x), "PREDICT")
        assert_same_bits(got, ck.net.forward(x), "PREDICT against the host trainer's forward")
        train_lockstep(s.device, twin, x[:4], y[:4])
        assert_device_equals_twin(s.device, twin)
    # the Uno: in f32 the memory plan says it does not fit, before any build (exit code 3), and says what would
    res = cli.invoke(main, ["export", str(model), "--board", "uno", "-o", str(tmp_path / "uno")])
    assert res.exit_code == 3, res.output
    assert "does not fit" in res.output and "2,048 B" in res.output
    assert "--trainable biases --quant int8-full" in res.output, res.output
    assert not (tmp_path / "uno").exists()
    # ... which fits: a full-integer body (calibrated on the model's training data) and the head's 10 biases in RAM
    assert "--optimizer sgd" in res.output, res.output  # the model's Adam code does not fit the Uno's flash
    res = cli.invoke(main, ["export", str(model), "--board", "uno", "--trainable", "biases", "--quant", "int8-full",
                            "--optimizer", "sgd", "-o", str(tmp_path / "uno")])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert re.search(r"accuracy\s+f32 [\d.]+%\s+device [\d.]+%", res.output), res.output
    cal = np.load(train)["x"][:1000].reshape(1000, -1)
    r = export_project(ck, "uno", tmp_path / "uno-sim", quant="int8-full", trainable="biases", sim=True,
                       calibration=cal, loss=losses.cross_entropy, optimizer="sgd")  # fmt: skip
    assert r.model.n_trainable == 10 and r.plan.fits(), r.plan.table()
    assert [d.op.name for d in r.model.program.layers if d.trainable] == ["BIAS"]
    twin = DeviceTwin(r.model)
    with sim.start(r.path, r.board, measure=True) as s:
        assert_same_bits(s.device.predict(x), twin.predict(x), "PREDICT on the Uno")
        train_lockstep(s.device, twin, x, y)
        assert_device_equals_twin(s.device, twin)
        assert_same_bits(s.device.predict(x), twin.predict(x), "PREDICT on the Uno after training")
        rep = s.report()
    assert not np.array_equal(twin.params, r.model.params), "training changed nothing"
    assert rep["ram_static"] + rep["stack_peak"] <= r.plan.ram <= 2048, (rep, r.plan.table())


def test_ds_cnn_with_batchnorm_trains_its_last_layer_on_the_nucleo_f401re(tmp_path: Path) -> None:
    """The MLPerf Tiny DS-CNN (49x10x1 -> 12, BatchNorm after every convolution) trained a few steps on the host (so
    its running statistics are not 0 and 1), exported in f32 with --trainable last:1: the BatchNorms are folded, the
    frozen convolutions live in flash and their activations take turns in two regions, so it fits the F401's 96 KB;
    in QEMU its predictions equal the folded host network's and training the last layer matches bit for bit."""
    from mcutrain.exporter.boards import get_board
    from mcutrain.exporter.export import board_device_model
    from mcutrain.exporter.memplan import plan
    from mcutrain.fold import fold_batchnorm
    from mcutrain.tiny_models import ds_cnn

    net = ds_cnn().rand_params(seed=1)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(16, 49, 10, 1)).astype(np.float32)
    y = np.eye(12, dtype=np.float32)[rng.integers(0, 12, 16)]
    net.fit(net.new_adam(TrainParams(lr=1e-3)), losses.cross_entropy, x, y, epochs=2, batch=8)
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.01)), {"loss": "cross_entropy"})
    board = get_board("nucleo_f401re")
    m = board_device_model(ck, board, "last:1", sim=True)
    mp = plan(m, board, True)
    assert mp.fits() and mp.ram < 96 * 1024, mp.table()
    r = export_project(ck, "nucleo_f401re", tmp_path / "fw", trainable="last:1", sim=True)
    twin = DeviceTwin(r.model)
    folded = fold_batchnorm(net)
    xs = x[:3].reshape(3, -1)
    with sim.start(r.path, r.board) as s:
        got = s.device.predict(xs)
        assert_same_bits(got, twin.predict(xs), "PREDICT")
        assert_same_bits(got, folded.forward(xs), "PREDICT against the folded network on the host")
        np.testing.assert_allclose(got, net.forward(xs), atol=1e-4)  # folding changes only float32 rounding
        train_lockstep(s.device, twin, xs, y[:3])
        assert_device_equals_twin(s.device, twin)
