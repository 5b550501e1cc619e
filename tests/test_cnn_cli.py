"""Convolutional networks from the command line and the API's shape checks: the MLPerf Tiny reference
architectures print the parameters and MACs their references state, inline and file networks take an input shape,
and a wrong shape or a missing size is a one-line error that names what to change."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from mcutrain import Sequential, ShapeError, load_model
from mcutrain import layers as L
from mcutrain.architecture import ArchitectureError, load_architecture_file, parse_inline
from mcutrain.cli import main


@pytest.mark.parametrize(
    "arch,macs,shape",
    [
        ("digits_cnn", 23_680, "8x8x1"),  # the digits CNN: 4,608 + 18,432 + 640
        ("ds_cnn", 2_656_768, "49x10x1"),  # MLPerf Tiny KWS reference
        ("fc_autoencoder", 264_192, None),  # MLPerf Tiny AD reference
        ("mobilenet_v1_025", 7_489_664, "96x96x3"),  # MLPerf Tiny VWW reference (MobileNetV1 0.25, 96x96)
        ("resnet8", 12_501_632, "32x32x3"),  # MLPerf Tiny IC reference (ResNet-8, CIFAR-10)
    ],
)
def test_info_prints_the_reference_architectures(arch: str, macs: int, shape: str) -> None:
    res = CliRunner().invoke(main, ["info", "--arch", arch])
    assert res.exit_code == 0, res.output
    assert f"{macs:,} MACs per sample" in res.output
    if shape:
        assert f"input shape {shape}" in res.output
    total = re.search(r"([\d,]+) parameters", res.output)
    assert total is not None and int(total.group(1).replace(",", "")) > 0
    if arch == "resnet8":  # the Keras reference's count (with the BatchNorm statistics), and its two projections
        assert int(total.group(1).replace(",", "")) == 78_666
        assert re.search(r"Conv2d\(16->32, 1x1, stride 2\)\s+conv2d\s+32x32x16\s+16x16x32\s+544\s+131,072", res.output)
        assert res.output.count("res_shortcut") == 2


def test_resnet8_trains_from_the_cli_and_resumes(tmp_path: Path) -> None:
    """--arch resnet8 on 16 random 32x32x3 images: trains (BatchNorm in both branches of its projection blocks),
    saves the shortcuts in the model file and resumes."""
    rng = np.random.default_rng(0)
    data = tmp_path / "cifar.npz"
    np.savez(data, x=rng.normal(size=(16, 32, 32, 3)).astype(np.float32), y=rng.integers(0, 10, 16))
    model = tmp_path / "r8.mct"
    cli = CliRunner()
    args = ["train", "--arch", "resnet8", "--data", str(data), "--classify", "--epochs", "1", "--batch", "8"]
    res = cli.invoke(main, [*args, "-o", str(model)])
    assert res.exit_code == 0, res.output
    ck = load_model(model)
    assert ck.net.in_shape == (32, 32, 3) and ck.net.n_out == 10 and ck.net.param_count() == 78_666
    assert ck.net.describe().count("shortcut=Conv2d") == 2
    res = cli.invoke(main, ["train", "--resume", str(model), "--epochs", "2"])
    assert res.exit_code == 0, res.output
    assert load_model(model).net.describe() == ck.net.describe()


def test_ds_cnn_trains_from_the_cli_and_resumes(tmp_path: Path) -> None:
    """--arch ds_cnn on 24 random (49, 10, 1) MFCC-shaped samples: trains, saves, and resumes."""
    rng = np.random.default_rng(0)
    data = tmp_path / "kws.npz"
    np.savez(data, x=rng.normal(size=(24, 49, 10, 1)).astype(np.float32), y=rng.integers(0, 12, 24))
    model = tmp_path / "ds.mct"
    cli = CliRunner()
    args = ["train", "--arch", "ds_cnn", "--data", str(data), "--classify", "--epochs", "1", "--batch", "8"]
    res = cli.invoke(main, [*args, "-o", str(model)])
    assert res.exit_code == 0, res.output
    ck = load_model(model)
    assert ck.net.in_shape == (49, 10, 1) and ck.net.n_out == 12
    res = cli.invoke(main, ["train", "--resume", str(model), "--epochs", "2"])
    assert res.exit_code == 0, res.output
    res = cli.invoke(main, [*args, "--input-shape", "49x10x1", "-o", str(tmp_path / "x.mct")])
    assert res.exit_code != 0 and "--arch ds_cnn fixes its input shape" in res.output


def test_inline_spatial_layers_and_their_errors() -> None:
    net = parse_inline("conv2d:4/3x3/s2/same,relu6,dwconv2d:3x3/x2/same,maxpool2d:2,flatten,linear:32x3", (8, 8, 1))
    assert [m.out_shape for m in net.modules][:4] == [(4, 4, 4), (4, 4, 4), (4, 4, 8), (2, 2, 8)]
    with pytest.raises(ArchitectureError, match="--input-shape 8x8x1"):
        parse_inline("conv2d:4/3x3,relu")
    with pytest.raises(ArchitectureError, match="needs its output channels and window"):
        parse_inline("conv2d:4", (8, 8, 1))
    with pytest.raises(ArchitectureError, match=r"'q7' is not a part of conv2d"):
        parse_inline("conv2d:4/3x3/q7", (8, 8, 1))


def test_a_network_file_with_an_input_shape(tmp_path: Path) -> None:
    f = tmp_path / "net.toml"
    f.write_text(
        'input_shape = [12, 2]\n[[layers]]\ntype = "Conv1d"\nin_channels = 2\nout_channels = 4\nkernel_size = 3\n'
        'padding = "same"\n[[layers]]\ntype = "GlobalAvgPool1d"\n[[layers]]\ntype = "Linear"\nn_in = 4\nn_out = 2\n'
    )
    net = load_architecture_file(f)
    assert net.in_shape == (12, 2) and net.n_out == 2
    f.write_text(f.read_text().replace("input_shape = [12, 2]\n", ""))
    with pytest.raises(ArchitectureError, match=r"add input_shape = \[H, W, C\]"):
        load_architecture_file(f)


def test_shape_errors_name_both_layers_and_both_shapes() -> None:
    with pytest.raises(ShapeError) as e:
        Sequential(L.Conv2d(1, 8, 3, input_shape=(8, 8, 1)), L.Conv2d(4, 16, 3))
    msg = str(e.value)
    assert "Conv2d(1->8, 3x3) outputs 6x6x8" in msg and "layer 2" in msg and "takes 4 input channels, not 8" in msg
    with pytest.raises(ShapeError, match=r"outputs 3x3x8 \(72 values\) but layer 2 Linear\(64, 10\) takes 64"):
        Sequential(L.Conv2d(1, 8, 3, input_shape=(5, 5, 1)), L.Linear(64, 10))
    with pytest.raises(ShapeError, match="a window of 5 does not fit 4 rows"):
        Sequential(L.Conv2d(1, 2, 5, input_shape=(4, 9, 1)))
    with pytest.raises(ShapeError, match=r"padding 3/3 rows must be less than the window \(3\)"):
        L.Conv2d(1, 2, 3, padding=3, input_shape=(4, 4, 1))
    with pytest.raises(ShapeError, match="at most 65535"):
        L.Conv2d(3, 64, 3, padding="same", input_shape=(96, 96, 3))


def test_an_input_larger_than_a_protocol_frame_is_refused_before_the_export(tmp_path: Path) -> None:
    """MobileNetV1 0.25 takes 96x96x3 = 27,648 f32 inputs: a TRAIN frame would carry 110,600 B, over the u16 payload
    length of the firmware's protocol. A project export is refused at once, naming the sizes and what to do, and
    writes nothing; a library export (the user's own code gives the inputs) is written; the client refuses to send
    such a frame instead of failing inside struct."""
    from mcutrain import Checkpoint, TrainParams
    from mcutrain.exporter.export import ExportError, export_project
    from mcutrain.exporter.protocol import ProtocolError, encode
    from mcutrain.tiny_models import mobilenet_v1_025

    net = mobilenet_v1_025().rand_params(seed=1)
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.01)))
    with pytest.raises(
        ExportError, match=r"27,648 inputs does not fit .* 110,600 B, a frame at most 65,535 B.*--library"
    ):
        export_project(ck, "teensy41", tmp_path / "p", trainable="none")
    assert not (tmp_path / "p").exists()
    r = export_project(ck, "teensy41", tmp_path / "lib", trainable="none", library=True)
    assert r.plan.fits() and (tmp_path / "lib" / "library.json").is_file()
    assert len(encode(1, bytes(65535))) == 65535 + 7
    with pytest.raises(ProtocolError, match="65,536 B payload does not fit a protocol frame"):
        encode(1, bytes(65536))
