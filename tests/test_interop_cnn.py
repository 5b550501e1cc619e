"""Convolutional networks from other frameworks in, ONNX out: PyTorch CNNs (images and series) exported to ONNX by
both of torch's exporters and Keras 3 CNNs import into mcutrain's channels-last layers and predict what
onnxruntime, PyTorch and Keras predict (within float32 rounding); their ONNX export gives in onnxruntime what
net.forward gives; a ResNet block with a projection shortcut imports as a Residual with a shortcut. Imported through the
CLI, they fine-tune with `mcutrain train --resume` and, exported with `mcutrain export --board native`, predict
and train on the native firmware bit for bit with the host (needs gcc and PlatformIO, as test_firmware_native)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Tuple

import numpy as np
import pytest
from click.testing import CliRunner
from foreign_models import keras_cnn, keras_cnn1d, ort_run, torch_cnn, torch_cnn1d, torch_onnx
from onnx import TensorProto, helper, numpy_helper

from helpers import assert_device_equals_twin, assert_same_bits, train_lockstep
from mcutrain import Residual, load_model, losses
from mcutrain import layers as L
from mcutrain.cli import main
from mcutrain.errors import ImportModelError
from mcutrain.exporter import from_keras, from_keras_model, from_onnx, sim, to_onnx
from mcutrain.exporter.boards import get_board
from mcutrain.exporter.export import export_project
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.fold import fold_batchnorm

TOL = 1e-5  # float32 rounding between mcutrain's C core and the source framework (as in test_interop.py)


def max_diff(a: Any, b: Any) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, f"shapes {a.shape} and {b.shape}"
    return float(np.max(np.abs(a - b)))


def channels_last(x: np.ndarray) -> np.ndarray:
    """A channels-first batch (N, C, H, W) or (N, C, T) as mcutrain takes it: (N, H, W, C) or (N, T, C)."""
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


def kinds(net: Any) -> list:
    return [type(m).__name__ for m in net.layers()]


def walk(m: Any) -> list:
    out = [m]
    for c in m.children():
        out += walk(c)
    return out


def assert_onnx_export_matches(net: Any, path: Path, x: np.ndarray) -> float:
    """to_onnx(net) run by onnxruntime on channels-last x gives net.forward's outputs."""
    to_onnx(net, path)
    d = max_diff(ort_run(path, x), net.forward(x))
    assert d <= TOL, f"onnxruntime on the exported ONNX differs from net.forward by {d}"
    return d


# ---------------------------------------------------------------- PyTorch through ONNX

TORCH_CNNS = {
    # name: (module maker, input shape channels-first, layer kinds that must appear)
    "image": (
        torch_cnn,
        (3, 12, 12),
        {"Conv2d", "Relu6", "DepthwiseConv2d", "BatchNorm", "MaxPool2d", "AvgPool2d", "Diag", "Linear"},
    ),
    # (the dynamo exporter pools a series as an image of one row: GlobalAvgPool2d after a Flatten)
    "series": (torch_cnn1d, (2, 16), {"Conv1d", "BatchNorm", "MaxPool1d", "AvgPool1d", "Relu6", "Softmax"}),
}


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("name", sorted(TORCH_CNNS))
def test_torch_cnn_imports_and_predicts_what_onnxruntime_and_torch_predict(
    name: str, dynamo: bool, tmp_path: Path
) -> None:
    import torch

    make, shape, want = TORCH_CNNS[name]
    module = make(seed=5)
    src = torch_onnx(module, shape, tmp_path / "src.onnx", dynamo=dynamo)
    net = from_onnx(src)
    assert want <= set(kinds(net)), net.describe()
    assert net.in_shape == shape[1:] + shape[:1], "the input is channels-last"
    if name == "image":
        blocks = [m for m in walk(net) if isinstance(m, Residual)]
        assert len(blocks) == 1 and blocks[0].in_shape == (6, 6, 16)
    x = (np.random.default_rng(1).standard_normal((16, *shape)) * 1.5).astype(np.float32)
    got = net.forward(channels_last(x))
    d = max_diff(got, ort_run(src, x))
    with torch.no_grad():
        d_torch = max_diff(got, module(torch.from_numpy(x)).numpy())
    exporter = "dynamo" if dynamo else "torchscript"
    print(f"\nmax|diff| torch CNN {name} ({exporter}) vs onnxruntime {d:.3g}, torch {d_torch:.3g}")
    assert d <= TOL and d_torch <= TOL
    assert np.abs(got).max() > 0.1, "the outputs are too small to compare"
    d2 = assert_onnx_export_matches(net, tmp_path / "back.onnx", channels_last(x))
    print(f"max|diff| to_onnx of it in onnxruntime vs net.forward: {d2:.3g}")
    back = from_onnx(tmp_path / "back.onnx")  # mcutrain's own export comes back as the same network
    assert back.describe() == net.describe() and np.array_equal(back.params, net.params)


class _Projected:
    """A ResNet block as PyTorch writes it: relu(body(x) + shortcut(x)), the body conv 3x3 stride 2 - BatchNorm -
    ReLU - conv 3x3 - BatchNorm, the shortcut a 1x1 stride-2 conv with a BatchNorm (ResNet-8's has none)."""

    @staticmethod
    def make(seed: int, classes: int = 5, softmax: bool = False) -> Any:
        import torch
        from torch import nn

        class Projected(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.body = nn.Sequential(
                    nn.Conv2d(4, 8, 3, stride=2, padding=1),
                    nn.BatchNorm2d(8),
                    nn.ReLU(),
                    nn.Conv2d(8, 8, 3, padding=1),
                    nn.BatchNorm2d(8),
                )
                self.shortcut = nn.Sequential(nn.Conv2d(4, 8, 1, stride=2), nn.BatchNorm2d(8))

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return torch.relu(self.body(x) + self.shortcut(x))

        torch.manual_seed(seed)
        head = [nn.Linear(72, classes)] + ([nn.Softmax(dim=1)] if softmax else [])
        net = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), Projected(), nn.Flatten(), *head)
        for m in net.modules():  # running statistics of a trained network, not the initial 0 and 1
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.3, 0.3)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.3, 0.3)
        return net.eval()


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_projection_shortcut_imports_and_predicts_what_onnxruntime_and_torch_predict(
    dynamo: bool, tmp_path: Path
) -> None:
    """A ResNet block whose shortcut is a 1x1 stride-2 Conv with BatchNorm: the graph's second branch becomes the
    Residual's shortcut; the import predicts what onnxruntime and PyTorch predict, its ONNX export comes back the
    same, and folded (as export folds it) it predicts the same within float32 rounding."""
    import torch

    module = _Projected.make(seed=2)
    src = torch_onnx(module, (2, 6, 6), tmp_path / "p.onnx", dynamo=dynamo)
    net = from_onnx(src)
    blocks = [m for m in walk(net) if isinstance(m, Residual)]
    assert len(blocks) == 1 and blocks[0].shortcut is not None, net.describe()
    assert blocks[0].in_shape == (6, 6, 4) and blocks[0].out_shape == (3, 3, 8)
    assert "Conv2d" in kinds(blocks[0].shortcut)  # (the exporters may fold its BatchNorm into the Conv themselves)
    x = (np.random.default_rng(1).standard_normal((16, 2, 6, 6)) * 1.5).astype(np.float32)
    got = net.forward(channels_last(x))
    d = max_diff(got, ort_run(src, x))
    with torch.no_grad():
        d_torch = max_diff(got, module(torch.from_numpy(x)).numpy())
    print(f"\nmax|diff| torch projection block vs onnxruntime {d:.3g}, torch {d_torch:.3g}")
    assert d <= TOL and d_torch <= TOL
    assert np.abs(got).max() > 0.1, "the outputs are too small to compare"
    assert_onnx_export_matches(net, tmp_path / "back.onnx", channels_last(x))
    back = from_onnx(tmp_path / "back.onnx")
    assert back.describe() == net.describe() and np.array_equal(back.params, net.params)
    folded = fold_batchnorm(net)
    assert "BatchNorm" not in kinds(folded)
    assert max_diff(folded.forward(channels_last(x)), got) <= TOL


def test_a_branch_that_never_joins_is_refused(tmp_path: Path) -> None:
    """Two branches from one value whose ends are not added: no residual block, a clear error."""
    w = np.ones((3, 3), np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("MatMul", ["a", "w"], ["c"]),
        helper.make_node("Mul", ["b", "c"], ["y"]),
    ]
    src = make_onnx(tmp_path / "m.onnx", nodes, {"w": w}, ["N", 3], ["N", 3])
    with pytest.raises(ImportModelError, match=r"a product of two values is supported only as x \* Sigmoid\(x\)"):
        from_onnx(src)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("MatMul", ["a", "w"], ["y"]),
    ]
    src = make_onnx(tmp_path / "n.onnx", nodes, {"w": w}, ["N", 3], ["N", 3])
    with pytest.raises(ImportModelError, match=r"the branch that ends in 'b' is never added back"):
        from_onnx(src)


def make_onnx(path: Path, nodes: list, inits: dict, in_shape: list, out_shape: list) -> Path:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    path.write_bytes(m.SerializeToString())
    return path


def test_channels_last_graph_with_transposes(tmp_path: Path) -> None:
    """A graph that takes (N, H, W, C) and transposes around its Conv (as TensorFlow's converters write them) is
    taken as it is: the input stays channels-last, the Transposes move no values, and a Flatten of the
    channels-last value reads the Gemm's rows in their own order; a SAME_UPPER pooling and Clip(0) as Relu."""
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((6, 2, 3, 3)).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    fc = rng.standard_normal((2 * 2 * 6, 5)).astype(np.float32)
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["t", "w", "b"], ["c"], pads=[1, 0, 1, 0], strides=[1, 2]),
        helper.make_node("Clip", ["c", "zero"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_UPPER"),
        helper.make_node("Transpose", ["p"], ["back"], perm=[0, 2, 3, 1]),
        helper.make_node("Flatten", ["back"], ["f"]),
        helper.make_node("Gemm", ["f", "fc"], ["y"]),
    ]
    src = make_onnx(
        tmp_path / "nhwc.onnx", nodes, {"w": w, "b": b, "fc": fc, "zero": np.float32(0)}, ["n", 4, 7, 2], ["n", 5]
    )
    net = from_onnx(src)
    assert kinds(net) == ["Conv2d", "Relu", "MaxPool2d", "Dense"] and net.in_shape == (4, 7, 2)
    x = rng.standard_normal((8, 4, 7, 2)).astype(np.float32)
    assert max_diff(net.forward(x), ort_run(src, x)) <= TOL


def test_avgpool_counting_the_padding_is_exact(tmp_path: Path) -> None:
    """count_include_pad=1 with padding (PyTorch's default) divides by every tap: AvgPool then a fixed Diag. A
    network that ends in an image gives it channels-last; one that flattens it channels-first is refused."""
    pool = helper.make_node(
        "AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 1], pads=[1, 1, 1, 1], count_include_pad=1
    )
    src = make_onnx(tmp_path / "avg.onnx", [pool], {}, ["n", 2, 5, 4], ["n", 2, 3, 4])
    net = from_onnx(src)
    assert kinds(net) == ["AvgPool2d", "Diag"]
    x = np.random.default_rng(4).standard_normal((6, 2, 5, 4)).astype(np.float32)
    assert max_diff(net.forward(channels_last(x)), channels_last(ort_run(src, x)).reshape(6, -1)) <= TOL
    pool.output[0] = "p"
    flat = make_onnx(
        tmp_path / "flat.onnx", [pool, helper.make_node("Flatten", ["p"], ["y"])], {}, ["n", 2, 5, 4], ["n", 24]
    )
    with pytest.raises(ImportModelError, match="the graph's output 'y' ends in a Transpose or Reshape"):
        from_onnx(flat)


def test_a_network_ending_in_an_image_exports_and_comes_back(tmp_path: Path) -> None:
    """A channels-last network whose output is an image exports with its input (N, H, W, C) and its output flat,
    channels-last; onnxruntime computes what the C core computes, and the file imports as the same network with
    its BatchNorm folded into the convolution before it."""
    from mcutrain import Sequential

    net = Sequential(
        L.Conv2d(2, 3, 3, padding="same", input_shape=(5, 5, 2)),
        L.BatchNorm(3),
        L.Relu6(),
        L.DepthwiseConv2d(3, 3, padding=1, depth_multiplier=2),
        L.AvgPool2d(2),
    ).rand_params(seed=1)
    rng = np.random.default_rng(2)  # BatchNorm: gain, bias, running mean, running variance
    net[1].params = np.concatenate([rng.uniform(0.5, 1.5, 3), rng.normal(0, 0.3, 6), rng.uniform(0.5, 2, 3)])
    x = rng.standard_normal((4, 5, 5, 2)).astype(np.float32)
    assert_onnx_export_matches(net, tmp_path / "img.onnx", x)
    back, folded = from_onnx(tmp_path / "img.onnx"), fold_batchnorm(net)  # an import folds the BatchNorm
    assert "BatchNorm" not in back.describe() and back.describe() == folded.describe()
    assert np.array_equal(back.params, folded.params)
    assert max_diff(back.forward(x), net.forward(x)) <= TOL


# ---------------------------------------------------------------- Keras 3

KERAS_CNNS = {
    # name: (model maker, input shape, layer kinds that must appear)
    "image-flatten": (
        lambda path: keras_cnn(path, seed=6),
        (12, 12, 3),
        ["Conv2d", "Relu6", "BatchNorm", "DepthwiseConv2d", "Relu6", "DepthwiseConv2d", "Conv2d", "Relu",
         "MaxPool2d", "AvgPool2d", "Linear", "Relu", "Linear", "Softmax"],
    ),
    "image-global": (
        lambda path: keras_cnn(path, seed=7, head="global"),
        (12, 12, 3),
        ["Conv2d", "Relu6", "BatchNorm", "DepthwiseConv2d", "Relu6", "DepthwiseConv2d", "Conv2d", "Relu",
         "MaxPool2d", "AvgPool2d", "GlobalAvgPool2d", "Linear", "Softmax"],
    ),
    "series": (
        lambda path: keras_cnn1d(path, seed=8),
        (20, 3),
        ["Conv1d", "Relu", "MaxPool1d", "Conv1d", "Tanh", "AvgPool1d", "GlobalAvgPool1d", "Linear"],  # BN folded
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(KERAS_CNNS))
def test_keras_cnn_imports_and_predicts_what_keras_predicts(name: str, tmp_path: Path) -> None:
    make, shape, want = KERAS_CNNS[name]
    model = make(tmp_path / "m.keras")
    net = from_keras(tmp_path / "m.keras")
    assert kinds(net) == want, net.describe()
    assert net.in_shape == shape
    x = (np.random.default_rng(2).standard_normal((16, *shape)) * 1.5).astype(np.float32)
    got = net.forward(x)
    d = max_diff(got, model.predict(x, verbose=0))
    print(f"\nmax|diff| Keras CNN {name} vs Keras.predict: {d:.3g}")
    assert d <= TOL
    assert np.abs(got).max() > 0.1, "the outputs are too small to compare"
    d2 = assert_onnx_export_matches(net, tmp_path / "back.onnx", x)
    print(f"max|diff| to_onnx of it in onnxruntime vs net.forward: {d2:.3g}")
    in_memory = from_keras_model(model)
    assert in_memory.describe() == net.describe() and np.array_equal(in_memory.params, net.params)


def keras_resnet(path: Path, seed: int) -> Any:
    """A functional Keras ResNet on (8, 8, 3) as the MLPerf Tiny reference writes it: a stem, a block whose shortcut
    is a 1x1 stride-2 Conv2D (main body conv-BatchNormalization-ReLU-conv-BatchNormalization), the shortcut's
    output read second by the Add, then an identity block; saved to path (.keras)."""
    import keras
    from keras import layers as K

    keras.utils.set_random_seed(seed)
    x = keras.Input((8, 8, 3))
    h = K.Conv2D(4, 3, padding="same", activation="relu")(x)
    a = K.Conv2D(8, 3, strides=2, padding="same")(h)
    a = K.ReLU()(K.BatchNormalization()(a))
    a = K.BatchNormalization()(K.Conv2D(8, 3, padding="same")(a))
    y = K.ReLU()(K.Add()([a, K.Conv2D(8, 1, strides=2)(h)]))
    y = K.Add()([y, K.Conv2D(8, 3, padding="same", activation="tanh")(y)])
    model = keras.Model(x, K.Dense(3, activation="softmax")(K.GlobalAveragePooling2D()(y)))
    rng = np.random.default_rng(seed)
    for layer in model.layers:  # statistics as training would leave them
        if isinstance(layer, K.BatchNormalization):
            layer.moving_mean.assign(rng.uniform(-0.3, 0.3, 8).astype(np.float32))
            layer.moving_variance.assign(rng.uniform(0.5, 2.0, 8).astype(np.float32))
    model.save(path)
    return model


def test_keras_functional_resnet_imports_and_predicts_what_keras_predicts(tmp_path: Path) -> None:
    """The two branches from one value become Residual(main body, shortcut=[Conv2d]); the Add of the chain's value
    and an earlier one a Residual; BatchNorm folded at import."""
    model = keras_resnet(tmp_path / "r.keras", seed=4)
    net = from_keras(tmp_path / "r.keras")
    blocks = [m for m in walk(net) if isinstance(m, Residual)]
    assert [b.shortcut is not None for b in blocks] == [True, False], net.describe()
    assert kinds(blocks[0].shortcut) == ["Conv2d"] and "BatchNorm" not in kinds(net)
    x = (np.random.default_rng(2).standard_normal((16, 8, 8, 3)) * 1.5).astype(np.float32)
    got = net.forward(x)
    d = max_diff(got, model.predict(x, verbose=0))
    print(f"\nmax|diff| Keras functional ResNet vs Keras.predict: {d:.3g}")
    assert d <= TOL and np.abs(got).max() > 0.1
    assert_onnx_export_matches(net, tmp_path / "back.onnx", x)


def test_keras_functional_graphs_other_than_residual_blocks_are_named(tmp_path: Path) -> None:
    import keras
    from keras import layers as K

    x = keras.Input((6,))
    a = K.Dense(4)(x)
    b = K.Dense(4)(a)
    c = K.Dense(4)(a)  # a second branch from a, joined by a product
    with pytest.raises(ImportModelError, match="Multiply.*this layer is not supported"):
        from_keras_model(keras.Model(x, K.Multiply()([b, c])))
    with pytest.raises(ImportModelError, match="an Add of 3 values"):
        from_keras_model(keras.Model(x, K.Add()([a, b, K.Dense(4)(x)])))


def test_keras_layers_mcutrain_cannot_run_are_named(tmp_path: Path) -> None:
    import keras

    for layers, words in (
        ([keras.Input((6, 6, 2)), keras.layers.Conv2D(4, 3, dilation_rate=2)], "dilated windows"),
        ([keras.Input((6, 6, 2)), keras.layers.Dense(3)], "a Dense layer on .6, 6, 2. values works on their last axis"),
        ([keras.Input((6, 6, 2)), keras.layers.ReLU(max_value=4.0)], "a cap other than 6"),
        ([keras.Input((6, 6, 2)), keras.layers.BatchNormalization(axis=1)], "normalises axis 1"),
    ):
        model = keras.Sequential(layers)
        with pytest.raises(ImportModelError, match=words):
            from_keras_model(model)
    model = keras.Sequential([keras.Input((4, 4, 2)), keras.layers.BatchNormalization()])
    model.layers[-1].set_weights([np.ones(2), np.zeros(2), np.zeros(2), np.array([1.0, -0.5])])
    with pytest.raises(ImportModelError, match="moving variance is missing or has negative values"):
        from_keras_model(model)


def test_onnx_batchnorm_with_a_negative_variance_is_refused(tmp_path: Path) -> None:
    ones, neg = np.ones(2, np.float32), np.array([1.0, -0.5], np.float32)
    bn = helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"], name="bn")
    src = make_onnx(
        tmp_path / "bn.onnx", [bn], {"g": ones, "b": ones, "m": ones, "v": neg}, ["n", 2, 3, 3], ["n", 2, 3, 3]
    )
    with pytest.raises(ImportModelError, match=r"'bn' \(BatchNormalization\): its running variance has negative"):
        from_onnx(src)


def test_keras_cnn_with_heavy_filters_is_refused_before_keras_allocates(tmp_path: Path) -> None:
    """A config whose convolutions ask for more weights than mcutrain imports (each size within bounds) is
    refused from config.json alone."""
    import json
    import zipfile

    import keras

    keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3), keras.layers.DepthwiseConv2D(3)]).save(
        str(tmp_path / "m.keras")
    )
    with zipfile.ZipFile(tmp_path / "m.keras") as zin, zipfile.ZipFile(tmp_path / "heavy.keras", "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                for layer in config["config"]["layers"]:
                    if layer["class_name"] == "Conv2D":
                        layer["config"].update(filters=60000, kernel_size=[9, 9])
                    elif layer["class_name"] == "DepthwiseConv2D":
                        layer["config"].update(depth_multiplier=5000)
                data = json.dumps(config).encode()
            zout.writestr(item, data)
    with pytest.raises(ImportModelError, match=r"layers hold 3,014,640,000 weights or more"):
        from_keras(tmp_path / "heavy.keras")


# ---------------------------------------------------------------- fine-tuning and the native firmware


def cnn_source(kind: str, tmp_path: Path) -> Tuple[Path, Tuple[int, ...]]:
    """A model file of the other framework and the channels-last input shape of its import."""
    if kind == "torch":
        return torch_onnx(torch_cnn(seed=9), (3, 12, 12), tmp_path / "src.onnx"), (12, 12, 3)
    if kind == "torch-projection":  # a ResNet block whose shortcut is a 1x1 stride-2 Conv with BatchNorm
        model = _Projected.make(seed=9, classes=4, softmax=True)
        return torch_onnx(model, (2, 6, 6), tmp_path / "src.onnx"), (6, 6, 2)
    keras_cnn(tmp_path / "src.keras", seed=9)
    return tmp_path / "src.keras", (12, 12, 3)


def cross_entropy(p: np.ndarray, labels: np.ndarray) -> float:
    return float(-np.mean(np.log(np.maximum(p[np.arange(len(labels)), labels], 1e-30))))


@pytest.mark.parametrize("kind", ["torch", "torch-projection", "keras"])
def test_imported_cnn_fine_tunes_and_runs_on_the_native_firmware_bit_for_bit(
    kind: str, tmp_path: Path, pio_core: Path
) -> None:
    """mcutrain import, then train --resume on an NPZ of (n, H, W, C) images (the loss falls), then export
    --board native: the firmware is the export of the tuned model, predicts the host's bits and trains in
    lockstep with its host twin."""
    src, shape = cnn_source(kind, tmp_path)
    cli = CliRunner()
    r = cli.invoke(main, ["import", str(src), "-o", str(tmp_path / "m.mct")])
    assert r.exit_code == 0, r.output
    assert "loss cross_entropy" in r.stdout
    assert (f"the input is {'x'.join(map(str, shape))}, channels-last" in r.stderr) == kind.startswith("torch")
    rng = np.random.default_rng(10)
    x = rng.standard_normal((48, *shape)).astype(np.float32)
    labels = (x[..., 0].mean(axis=(1, 2)) > 0).astype(int) + 2 * (x[..., 1].mean(axis=(1, 2)) > 0)  # 4 classes
    np.savez(tmp_path / "d.npz", x=x, y=labels)
    before = load_model(tmp_path / "m.mct").net
    train = ["train", "--resume", str(tmp_path / "m.mct"), "--data", str(tmp_path / "d.npz"), "--classify"]
    train += ["--epochs", "15", "--batch", "8", "--opt", "adam", "--lr", "0.003", "--val", "0"]
    r = cli.invoke(main, train + ["-o", str(tmp_path / "tuned.mct"), "-q"])
    assert r.exit_code == 0, r.output
    ck = load_model(tmp_path / "tuned.mct")
    loss_before, loss_after = cross_entropy(before.forward(x), labels), cross_entropy(ck.net.forward(x), labels)
    print(f"\n{kind}: training loss {loss_before:.4f} before fine-tuning, {loss_after:.4f} after")
    assert loss_after < 0.8 * loss_before
    # the native firmware of `mcutrain export`
    fw = tmp_path / "fw"
    r = cli.invoke(main, ["export", str(tmp_path / "tuned.mct"), "--board", "native", "-o", str(fw)])
    assert r.exit_code == 0, r.output
    ref = export_project(ck, "native", tmp_path / "ref", loss=losses.cross_entropy)  # its host twin
    twin = DeviceTwin(ref.model)
    x_eval = x[:6]
    with sim.start(fw, get_board("native")) as s:
        assert s.device.info().hash == ref.hash, "the CLI's export is the export of the tuned model"
        assert_same_bits(s.device.predict(x_eval), ck.net.forward(x_eval), "PREDICT against the tuned model")
        targets = np.eye(4, dtype=np.float32)[labels[6:26]]
        device_losses = train_lockstep(s.device, twin, x[6:26].reshape(20, -1), targets)
        assert_device_equals_twin(s.device, twin)
        assert_same_bits(s.device.predict(x_eval), twin.predict(x_eval.reshape(6, -1)), "PREDICT after training")
    assert np.isfinite(device_losses).all() and not np.array_equal(twin.params, ref.model.params)
