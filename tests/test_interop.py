"""Models from other frameworks in, ONNX out: a PyTorch nn.Sequential exported by torch.onnx.export, a Keras 3
file written by Keras, fitted scikit-learn MLPs. Each imported network must predict what its source framework
predicts (onnxruntime, Keras and scikit-learn are the oracles) within float32 rounding, and its ONNX export
must give in onnxruntime what net.forward gives. Unsupported operators and layers, hostile files and a
missing optional package give one clear McuTrainError; the command line does the same end to end.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from foreign_models import (
    keras_mlp,
    ort_run,
    sklearn_data,
    sklearn_mlp,
    sklearn_outputs,
    torch_conv,
    torch_mlp,
    torch_onnx,
    torch_residual,
)
from layer_table import mixed_layers
from onnx import TensorProto, helper, numpy_helper

from helpers import cli, same_bits
from mcutrain import Residual, Sequential
from mcutrain import layers as L
from mcutrain.errors import ImportModelError, McuTrainError, MissingExtraError
from mcutrain.exporter import from_keras, from_keras_model, from_onnx, from_sklearn, import_model, to_onnx
from mcutrain.modelfile import load_model

# An imported network computes with mcutrain's own exp, tanh, sin and cos and its own summation order: its
# outputs (all of magnitude about 1 here) may differ from the source's in the last bits of a float32.
TOL = 1e-5


def max_diff(a: Any, b: Any) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, f"shapes {a.shape} and {b.shape}"
    return float(np.max(np.abs(a - b)))


def inputs(seed: int, n_in: int, n: int = 64) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((n, n_in)) * 1.5).astype(np.float32)


def assert_onnx_export_matches(net: Any, path: Path, x: np.ndarray) -> float:
    """to_onnx(net) run by onnxruntime gives net.forward's outputs; returns the largest difference relative to
    the largest output (or absolute, for outputs below 1)."""
    to_onnx(net, path)
    want = net.forward(x)
    d = max_diff(ort_run(path, x), want)
    scale = max(1.0, float(np.abs(want).max()))  # float32 rounding grows with the values' magnitude
    assert d <= TOL * scale, f"onnxruntime on the exported ONNX differs from net.forward by {d} (values up to {scale})"
    return d / scale


def kinds(net: Any) -> list:
    return [type(m).__name__ for m in net.layers()]


# ---------------------------------------------------------------- PyTorch-shaped ONNX


TORCH_NETS = {
    "mlp": (torch_mlp, 6, ["Linear", "Relu", "Linear", "Tanh", "LeakyRelu", "Linear", "Softmax"]),
    "conv": (torch_conv, 6, ["Linear", "SingleChannelConv1d", "Bias1d", "Softplus", "Linear", "Sigmoid"]),
    "residual": (
        torch_residual,
        5,
        [
            "Linear",
            "Linear",
            "Tanh",
            "Linear",
            "Sigmoid",
            "Diag",
            "ScalarScale",
            "Sine",
            "Linear",
            "SiLU",
            "Cosine",
            "Linear",
        ],
    ),
}


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("name", sorted(TORCH_NETS))
def test_torch_onnx_imports_and_predicts_what_onnxruntime_predicts(name: str, dynamo: bool, tmp_path: Path) -> None:
    make, n_in, want = TORCH_NETS[name]
    src = torch_onnx(make(seed=3), n_in, tmp_path / "src.onnx", dynamo=dynamo)
    net = from_onnx(src)
    assert kinds(net) == want, net.describe()
    x = inputs(1, n_in)
    d = max_diff(net.forward(x), ort_run(src, x))
    print(f"\nmax|diff| torch-ONNX {name} ({'dynamo' if dynamo else 'torchscript'}) vs onnxruntime: {d:.3g}")
    assert d <= TOL
    d2 = assert_onnx_export_matches(net, tmp_path / "back.onnx", x)
    print(f"max|diff| to_onnx of it in onnxruntime vs net.forward: {d2:.3g}")
    if name == "residual":
        assert sum(isinstance(m, Residual) for m in _walk(net)) == 2  # the nested block stays nested


def _walk(m: Any) -> list:
    out = [m]
    for c in m.children():
        out += _walk(c)
    return out


def test_torch_output_is_the_torch_output(tmp_path: Path) -> None:
    """Beyond onnxruntime: the imported network gives what the PyTorch module itself gives."""
    import torch

    module = torch_mlp(seed=8)
    net = from_onnx(torch_onnx(module, 6, tmp_path / "m.onnx"))
    x = inputs(2, 6)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    assert max_diff(net.forward(x), want) <= TOL


# ---------------------------------------------------------------- hand-made ONNX graphs


def make_onnx(
    path: Path,
    nodes: list,
    inits: dict,
    n_in: int = 4,
    n_out: Any = 4,
    opset: int = 13,
    in_shape: Any = None,
) -> Path:
    """An ONNX file of the given nodes, float32 initializers (name -> array), input x and output y."""
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape or ["batch", n_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n_out])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    path.write_bytes(m.SerializeToString())
    return path


def test_matmul_add_scale_diag_and_residual_graph(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    w1, b1 = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    w2 = rng.standard_normal((4, 4)).astype(np.float32)
    d = np.linspace(0.5, 2.0, 4).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"]),
        helper.make_node("Add", ["b1", "a"], ["b"]),  # the constant first: the same bias
        helper.make_node("Tanh", ["b"], ["c"]),
        helper.make_node("MatMul", ["c", "w2"], ["e"]),
        helper.make_node("Sigmoid", ["e"], ["f"]),
        helper.make_node("Add", ["c", "f"], ["g"]),  # residual around MatMul, Sigmoid
        helper.make_node("Mul", ["g", "d"], ["h"]),
        helper.make_node("Mul", ["s", "h"], ["i"]),
        helper.make_node("Sub", ["i", "s"], ["j"]),
        helper.make_node("Div", ["j", "s"], ["k"]),
        helper.make_node("Softmax", ["k"], ["y"], axis=-1),
    ]
    src = make_onnx(tmp_path / "m.onnx", nodes, {"w1": w1, "b1": b1, "w2": w2, "d": d, "s": np.float32(0.75)})
    net = from_onnx(src)
    assert kinds(net) == [
        "Linear",
        "Tanh",
        "Dense",
        "Sigmoid",
        "Diag",
        "ScalarScale",
        "Bias1d",
        "ScalarScale",
        "Softmax",
    ]
    assert same_bits(net[0].weight, w1) and same_bits(net[0].bias, b1)
    x = inputs(3, 4)
    assert max_diff(net.forward(x), ort_run(src, x)) <= TOL
    assert_onnx_export_matches(net, tmp_path / "back.onnx", x)


@pytest.mark.parametrize("head", [True, False], ids=["softmax", "logits"])
def test_every_mcutrain_layer_exports_to_onnx(head: bool, tmp_path: Path) -> None:
    """to_onnx knows every layer and composition; onnxruntime computes what the C core computes (also
    without the final softmax, whose output hides small differences)."""
    layers = [
        *mixed_layers(),
        # each gate in a residual block, which keeps the values' magnitude (a stack of GLUs shrinks them)
        Residual(L.GLU(6, 6, "leaky_relu")),
        Residual(L.ReluGLU(6, 6)),
        Residual(L.TanhGLU(6, 6)),
        Residual(L.GLU(6, 6, "silu")),
        Residual(L.GLU(6, 6, "softplus")),
        Residual(L.SwiGLU(6, 6)),
        Residual(L.GLULeakyRelu(6, 6)),
        Residual(L.GLU(6, 6)),
        *spatial_layers(),
        L.Linear(8, 4),
    ] + ([L.Softmax(0.8)] if head else [])
    net = Sequential(*layers).rand_params(seed=11)
    for m in net.layers():
        if isinstance(m, L.BatchNorm):  # running statistics of a trained network, not the initial ones
            m.params = running_statistics(m.channels, seed=m.channels)
    from mcutrain.layers import LAYER_TYPES

    if head:
        assert set(LAYER_TYPES) == {type(m).__name__ for m in net.layers()}, "a layer type is missing from this test"
    x = inputs(4, 8)
    assert np.abs(net.forward(x)).max() > (0.2 if head else 1.0), "the outputs are too small to compare"
    d = assert_onnx_export_matches(net, tmp_path / "all.onnx", x)
    print(
        f"\nmax|diff| every layer ({'softmax' if head else 'logits'}), relative: {d:.3g}, "
        f"max|y| {np.abs(net(x)).max():.3g}"
    )


def spatial_layers() -> list:
    """Every spatial layer from 6 to 8 features: images (same and explicit padding, strides, depthwise with a
    multiplier, pooling with padding, a residual block, one with a projection shortcut), then series; Linear adapters
    in between."""
    return [
        L.Linear(6, 72),
        L.Conv2d(2, 4, 3, stride=2, padding="same", input_shape=(6, 6, 2)),
        L.BatchNorm(4),
        L.Relu6(),
        L.Dropout(0.3),
        Residual(L.DepthwiseConv2d(4, 3, padding=1), L.Tanh()),
        L.DepthwiseConv2d(4, 2, depth_multiplier=2, bias=False),
        L.Conv2d(8, 4, 1, bias=False),
        L.MaxPool2d(2, stride=1, padding=(0, 1, 0, 1)),
        L.AvgPool2d(3, stride=1, padding=1),
        L.Flatten(),
        L.Linear(16, 24),
        L.Conv1d(2, 3, 3, stride=2, padding="same", input_shape=(12, 2)),
        Residual(L.Conv1d(3, 4, 3, padding="same"), L.Relu(), shortcut=[L.Conv1d(3, 4, 1), L.BatchNorm(4)]),
        L.MaxPool1d(2),
        L.AvgPool1d(3, stride=1, padding=1),
        L.BatchNorm(4),
        L.GlobalAvgPool1d(),
        L.Linear(4, 32),
        L.GlobalAvgPool2d(input_shape=(2, 2, 8)),
    ]


def running_statistics(channels: int, seed: int) -> np.ndarray:
    """BatchNorm parameters as training leaves them: gain, bias, running mean, running variance (positive)."""
    rng = np.random.default_rng(seed)
    g, b, mean = rng.uniform(0.5, 1.5, channels), rng.normal(0, 0.3, channels), rng.normal(0, 0.3, channels)
    return np.concatenate([g, b, mean, rng.uniform(0.5, 2.0, channels)]).astype(np.float32)


def test_round_trip_keeps_the_parameters_bit_for_bit(tmp_path: Path) -> None:
    net = Sequential(
        L.Linear(5, 7),
        L.LeakyRelu(0.3),
        Residual(L.Linear(7, 7), L.Sine()),
        L.Diag(7),
        L.SingleChannelConv1d(7, 5, 3),
        L.Cosine(),
        L.Linear(5, 3),
        L.Softmax(),
    ).rand_params(seed=2)
    to_onnx(net, tmp_path / "n.onnx")
    back = from_onnx(tmp_path / "n.onnx")
    assert back.describe() == net.describe()
    assert same_bits(back.params, net.params)
    x = inputs(6, 5)
    assert same_bits(back.forward(x), net.forward(x))


# ---------------------------------------------------------------- Keras


def test_keras_file_imports_and_predicts_what_keras_predicts(tmp_path: Path) -> None:
    model = keras_mlp(tmp_path / "m.keras", seed=4)
    net = from_keras(tmp_path / "m.keras")
    assert kinds(net) == [
        "Linear", "Relu", "Linear", "Tanh", "Dense", "Softplus", "Linear", "LeakyRelu", "Linear", "SiLU",
        "LeakyRelu", "Linear", "Sigmoid", "Relu", "Linear", "Softmax",
    ]  # fmt: skip
    x = inputs(7, 7)
    d = max_diff(net.forward(x), model.predict(x, verbose=0))
    print(f"\nmax|diff| Keras vs Keras.predict: {d:.3g}")
    assert d <= TOL
    d2 = assert_onnx_export_matches(net, tmp_path / "back.onnx", x)
    print(f"max|diff| to_onnx of it in onnxruntime vs net.forward: {d2:.3g}")
    in_memory = from_keras_model(model)  # the model object itself, without a file
    assert in_memory.describe() == net.describe() and same_bits(in_memory.params, net.params)


def test_keras_unsupported_layer_is_named(tmp_path: Path) -> None:
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6), keras.layers.LayerNormalization(name="ln")])
    model.save(str(tmp_path / "ln.keras"))
    with pytest.raises(ImportModelError, match=r"layer 'ln' \(LayerNormalization\).*mcutrain imports: Dense"):
        from_keras(tmp_path / "ln.keras")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="elu", name="d")])
    model.save(str(tmp_path / "elu.keras"))
    with pytest.raises(ImportModelError, match=r"layer 'd' \(Dense\): activation 'elu' is not supported"):
        from_keras(tmp_path / "elu.keras")
    inp = keras.Input((4,))
    functional = keras.Model(inp, keras.layers.Dense(2)(inp))
    functional.save(str(tmp_path / "f.keras"))  # a functional chain imports as a Sequential would
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(from_keras(tmp_path / "f.keras").forward(x), functional.predict(x, verbose=0), atol=1e-6)
    (tmp_path / "junk.keras").write_bytes(b"not a zip file")
    with pytest.raises(ImportModelError, match="not a Keras 3 .keras file"):
        from_keras(tmp_path / "junk.keras")


def _edit_keras(src: Path, dst: Path, edit: Callable[[dict], None]) -> Path:
    """A copy of a .keras archive with its config.json edited."""
    import json
    import zipfile

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                edit(config)
                data = json.dumps(config).encode()
            zout.writestr(item, data)
    return dst


def test_hostile_keras_files_are_refused_before_keras_allocates(tmp_path: Path) -> None:
    import keras

    keras.Sequential([keras.Input((4,)), keras.layers.Dense(6), keras.layers.Dense(3)]).save(str(tmp_path / "m.keras"))

    def units(*values: int) -> Callable[[dict], None]:
        def edit(config: dict) -> None:
            dense = [layer for layer in config["config"]["layers"] if layer["class_name"] == "Dense"]
            for layer, v in zip(dense, values):
                layer["config"]["units"] = v

        return edit

    wide = _edit_keras(tmp_path / "m.keras", tmp_path / "wide.keras", units(10**9))
    with pytest.raises(ImportModelError, match="units: size 1000000000 is not a whole number from 1 to 65535"):
        from_keras(wide)
    heavy = _edit_keras(tmp_path / "m.keras", tmp_path / "heavy.keras", units(60000, 60000))
    with pytest.raises(ImportModelError, match="layers hold 3,600,"):
        from_keras(heavy)
    # a zip that claims to unpack to more than mcutrain reads
    import zipfile

    with zipfile.ZipFile(tmp_path / "bomb.keras", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("config.json", b" " * (300 << 20))
    with pytest.raises(ImportModelError, match="unpacks to"):
        from_keras(tmp_path / "bomb.keras")


# ---------------------------------------------------------------- scikit-learn


@pytest.mark.parametrize("kind", ["multiclass", "binary", "multilabel", "regressor"])
def test_sklearn_mlp_imports_and_predicts_what_sklearn_predicts(kind: str, tmp_path: Path) -> None:
    est, x = sklearn_mlp(kind, seed=6)
    net = from_sklearn(est)
    want = sklearn_outputs(est, x)
    d = max_diff(net.forward(x), want)
    print(f"\nmax|diff| scikit-learn {kind} vs {'predict_proba' if kind != 'regressor' else 'predict'}: {d:.3g}")
    assert d <= TOL
    last = {"multiclass": "Softmax", "binary": "Sigmoid", "multilabel": "Sigmoid", "regressor": "Linear"}[kind]
    assert kinds(net)[-1] == last and net.n_out == want.shape[1]
    if kind == "binary":
        assert net.n_out == 1
    assert_onnx_export_matches(net, tmp_path / "back.onnx", x)


def test_sklearn_refuses_what_it_cannot_import() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    with pytest.raises(ImportModelError, match="LogisticRegression: mcutrain imports fitted"):
        from_sklearn(LogisticRegression())
    with pytest.raises(ImportModelError, match="not fitted: call fit"):
        from_sklearn(MLPClassifier())


def test_pickles_load_only_when_trusted(tmp_path: Path) -> None:
    est, x = sklearn_mlp("multiclass", seed=2)
    path = tmp_path / "mlp.pkl"
    path.write_bytes(pickle.dumps(est))
    with pytest.raises(ImportModelError, match="runs code stored in it"):
        import_model(path)
    assert max_diff(import_model(path, allow_pickle=True).forward(x), est.predict_proba(x)) <= TOL


# ---------------------------------------------------------------- what the ONNX importer refuses


def _gemm_graph(tmp_path: Path, extra: list, inits: dict, **kw: Any) -> Path:
    w = np.eye(4, dtype=np.float32)
    return make_onnx(
        tmp_path / "bad.onnx", [helper.make_node("Gemm", ["x", "w"], ["h"], name="fc")] + extra, {"w": w, **inits}, **kw
    )


def test_unsupported_operator_is_named_with_what_is_supported(tmp_path: Path) -> None:
    src = _gemm_graph(tmp_path, [helper.make_node("Elu", ["h"], ["y"], name="act")], {})
    with pytest.raises(
        ImportModelError, match=r"node 'act' \(Elu\): this operator is not supported\. mcutrain imports: Gemm"
    ):
        from_onnx(src)


@pytest.mark.parametrize(
    "nodes, inits, words",
    [
        ([helper.make_node("Softmax", ["h"], ["y"], axis=0, name="sm")], {}, r"'sm' \(Softmax\): it normalizes axis 0"),
        (
            [helper.make_node("Gemm", ["h", "nope"], ["y"], name="g2")],
            {},
            r"'g2' \(Gemm\): its input 'nope' is neither",
        ),
        ([helper.make_node("Mul", ["h", "h"], ["y"], name="sq")], {}, r"'sq' \(Mul\): a product of two values"),
        ([helper.make_node("Flatten", ["h"], ["y"], axis=0, name="fl")], {}, r"'fl' \(Flatten\).*mix samples"),
        (
            [helper.make_node("Reshape", ["h", "shape"], ["y"], name="rs")],
            {"shape": np.array([2, -1], np.int64)},
            r"'rs' \(Reshape\): Reshape to \[2, -1\] would mix samples",
        ),
        (
            [helper.make_node("Tanh", ["h"], ["t"]), helper.make_node("Relu", ["h"], ["y"], name="fork")],
            {},
            r"the branch that ends in 't' is never added back to the chain",  # a fork with no Add of both ends
        ),
        (
            [helper.make_node("Dropout", ["h", "", "mode"], ["y"], name="dr")],
            {"mode": np.array(True)},
            r"'dr' \(Dropout\): it is in training mode",
        ),
    ],
    ids=["softmax-axis", "missing-initializer", "square", "flatten-batch", "reshape-batch", "branch", "dropout-train"],
)
def test_graphs_outside_the_supported_shapes_fail_clearly(tmp_path: Path, nodes: list, inits: dict, words: str) -> None:
    with pytest.raises(ImportModelError, match=words):
        from_onnx(_gemm_graph(tmp_path, nodes, inits))


def test_conv_outside_mcutrain_is_refused(tmp_path: Path) -> None:
    """A dilated Conv, a grouped one whose groups are neither 1 nor the channels, and a Conv after a Reshape to
    channels-first (which mcutrain, keeping tensors channels-last, cannot follow) name what is wrong."""
    reshape = helper.make_node("Reshape", ["x", "shape"], ["u"])
    for in_shape, attrs, kernel, words in (
        (["b", 1, 12], {"dilations": [2]}, (1, 1, 3), "dilated windows are not supported"),
        (["b", 4, 3], {"group": 2}, (2, 2, 3), r"a grouped Conv \(2 groups of 4 channels"),
        (["b", 12], {}, (2, 4, 3), "its input went through a Transpose or Reshape that mcutrain cannot follow"),
    ):
        first = [reshape] if len(in_shape) == 2 else []
        nodes = first + [
            helper.make_node("Conv", ["u" if first else "x", "k"], ["c"], name="conv", **attrs),
            helper.make_node("Flatten", ["c"], ["y"]),
        ]
        consts = {"shape": np.array([-1, 4, 3], np.int64), "k": np.ones(kernel, np.float32)}
        src = make_onnx(tmp_path / "c.onnx", nodes, consts, in_shape=in_shape)
        with pytest.raises(ImportModelError, match=r"'conv' \(Conv\): " + words):
            from_onnx(src)


def raw_tensor(name: str, dims: list, raw: bytes) -> Any:
    """A float32 TensorProto with any dims and raw bytes (onnx.helper checks they agree; a hostile file need not)."""
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
    t.raw_data = raw
    return t


def test_hostile_onnx_files(tmp_path: Path) -> None:
    # a tensor that claims 2^40 values (and holds none): refused before anything is allocated
    big = raw_tensor("w", [1 << 20, 1 << 20], b"")
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])],
        [big],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    (tmp_path / "big.onnx").write_bytes(m.SerializeToString())
    with pytest.raises(ImportModelError, match="more than"):
        from_onnx(tmp_path / "big.onnx")
    # a tensor whose data is shorter than its dims say
    short = raw_tensor("w", [4, 4], b"\0" * 12)
    g.initializer[0].CopyFrom(short)
    (tmp_path / "short.onnx").write_bytes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    )
    with pytest.raises(ImportModelError, match="tensor 'w'"):
        from_onnx(tmp_path / "short.onnx")
    # data in another file: only a file next to the model, and only within its bounds
    for location in ("/etc/passwd", "../w.bin"):
        ext = raw_tensor("w", [4, 4], b"")
        ext.data_location = TensorProto.EXTERNAL
        ext.external_data.add(key="location", value=location)
        g.initializer[0].CopyFrom(ext)
        (tmp_path / "ext.onnx").write_bytes(
            helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
        )
        with pytest.raises(ImportModelError, match="external data only from a file next to the model"):
            from_onnx(tmp_path / "ext.onnx")
    ext.external_data[0].value = "w.bin"
    ext.external_data.add(key="offset", value="8")
    g.initializer[0].CopyFrom(ext)
    (tmp_path / "ext.onnx").write_bytes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    )
    with pytest.raises(ImportModelError, match="w.bin does not exist"):
        from_onnx(tmp_path / "ext.onnx")
    (tmp_path / "w.bin").write_bytes(b"\0" * 64)
    with pytest.raises(ImportModelError, match="needs 64 bytes at offset 8 of w.bin, which has 64"):
        from_onnx(tmp_path / "ext.onnx")
    (tmp_path / "w.bin").write_bytes(b"\0" * 8 + np.eye(4, dtype="<f4").tobytes())
    assert same_bits(from_onnx(tmp_path / "ext.onnx")[0].weight, np.eye(4, dtype=np.float32))
    # a feature dimension too large to build, an old opset, garbage, a folder
    huge = make_onnx(tmp_path / "huge.onnx", [helper.make_node("Relu", ["x"], ["y"])], {}, in_shape=["b", 1 << 30])
    with pytest.raises(ImportModelError, match="size 1073741824 is not a whole number from 1 to 65535"):
        from_onnx(huge)
    old = make_onnx(tmp_path / "old.onnx", [helper.make_node("Relu", ["x"], ["y"])], {}, opset=11)
    with pytest.raises(ImportModelError, match="opset 11; mcutrain imports opset 13 or later"):
        from_onnx(old)
    (tmp_path / "junk.onnx").write_bytes(b"\xff" * 100)
    with pytest.raises(ImportModelError, match="not an ONNX model"):
        from_onnx(tmp_path / "junk.onnx")
    with pytest.raises(ImportModelError, match="is a folder"):
        from_onnx(tmp_path)
    with pytest.raises(ImportModelError, match="unknown kind of model file '.h5'"):
        import_model(tmp_path / "m.h5")


def test_damaged_onnx_files_fail_with_import_model_error(tmp_path: Path) -> None:
    """Bytes of a valid file changed at random (and some files cut short): each either imports or raises
    ImportModelError; no other exception escapes."""
    net = Sequential(
        L.Linear(6, 8),
        L.LeakyRelu(0.2),
        Residual(L.Linear(8, 8), L.Tanh()),
        L.SingleChannelConv1d(8, 6, 3),
        L.Linear(6, 3),
        L.Softmax(),
    ).rand_params(seed=1)
    to_onnx(net, tmp_path / "ok.onnx")
    base = (tmp_path / "ok.onnx").read_bytes()
    rng = np.random.default_rng(0)
    imported = refused = 0
    for _ in range(600):
        b = bytearray(base)
        for j in rng.integers(0, len(b), rng.integers(1, 6)):
            b[j] = rng.integers(0, 256)
        if rng.random() < 0.1:
            b = b[: rng.integers(1, len(b))]
        (tmp_path / "f.onnx").write_bytes(bytes(b))
        try:
            from_onnx(tmp_path / "f.onnx")
            imported += 1
        except ImportModelError:
            refused += 1
    assert imported > 0 and refused > 0, (imported, refused)


def test_a_missing_extra_names_the_pip_command(tmp_path: Path) -> None:
    """In a Python where the onnx package cannot be imported (sys.modules['onnx'] = None), importing an ONNX
    file says which extra to install; `import mcutrain.exporter` itself loads none of the optional packages."""
    code = (
        "import sys; sys.modules['onnx'] = None\n"
        "import mcutrain.exporter as e\n"
        "assert not {'onnx', 'keras', 'sklearn', 'torch'} & {m for m in sys.modules if sys.modules[m] is not None}\n"
        "from mcutrain.errors import MissingExtraError\n"
        "try:\n"
        f"    e.from_onnx({str(tmp_path / 'm.onnx')!r})\n"
        "except MissingExtraError as x:\n"
        "    print(x)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "pip install 'mcutrain[onnx]'" in r.stdout
    assert issubclass(MissingExtraError, McuTrainError) and issubclass(ImportModelError, McuTrainError)


# ---------------------------------------------------------------- the command line


def _check_imported(mct: Path, reference: Callable[[np.ndarray], np.ndarray], n_in: int, loss: str) -> None:
    ck = load_model(mct)
    assert ck.metadata["loss"] == loss and ck.optimizer is None
    x = inputs(9, n_in)
    assert max_diff(ck.net.forward(x), reference(x)) <= TOL


def test_cli_import_and_export_onnx_end_to_end(tmp_path: Path) -> None:
    # ONNX from PyTorch
    src = torch_onnx(torch_mlp(seed=1), 6, tmp_path / "torch.onnx")
    r = cli("import", str(src), "-o", str(tmp_path / "t.mct"))
    assert r.exit_code == 0, r.output
    assert "Sequential(Linear(6, 12)" in r.stdout and "loss cross_entropy" in r.stdout
    _check_imported(tmp_path / "t.mct", lambda x: ort_run(src, x), 6, "cross_entropy")
    r = cli("import", str(src), "-o", str(tmp_path / "t.mct"))
    assert r.exit_code == 1 and "exists; pass --force" in r.stderr
    # Keras
    model = keras_mlp(tmp_path / "k.keras", seed=2)
    assert cli("import", str(tmp_path / "k.keras"), "-o", str(tmp_path / "k.mct")).exit_code == 0
    _check_imported(tmp_path / "k.mct", lambda x: model.predict(x, verbose=0), 7, "cross_entropy")
    # scikit-learn through joblib: refused without --trust-pickle, and the output is not written
    import joblib

    est, _ = sklearn_mlp("binary", seed=3)
    joblib.dump(est, tmp_path / "mlp.joblib")
    r = cli("import", str(tmp_path / "mlp.joblib"), "-o", str(tmp_path / "s.mct"))
    assert r.exit_code == 1 and "--trust-pickle" in r.stderr and not (tmp_path / "s.mct").exists()
    r = cli("import", str(tmp_path / "mlp.joblib"), "--trust-pickle", "-o", str(tmp_path / "s.mct"))
    assert r.exit_code == 0, r.output
    assert "probability of the second class" in r.stderr
    _check_imported(tmp_path / "s.mct", lambda x: est.predict_proba(x)[:, 1:], 6, "logit_bce")
    # an unsupported model: one line naming the node, exit code 1, nothing written
    bad = _gemm_graph(tmp_path, [helper.make_node("Elu", ["h"], ["y"], name="act")], {})
    r = cli("import", str(bad), "-o", str(tmp_path / "bad.mct"))
    assert r.exit_code == 1 and "node 'act' (Elu)" in r.stderr and not (tmp_path / "bad.mct").exists()
    # fine-tune the imported Keras model on a CSV, then export it to ONNX: onnxruntime agrees with the result
    x, y = sklearn_data(seed=4, n=60, n_in=7)
    labels = np.digitize(y[:, 0], [-1, 0, 1, 2])
    np.savetxt(tmp_path / "d.csv", np.column_stack([x, labels]), delimiter=",", fmt="%.7g")
    r = cli(
        "train", "--resume", str(tmp_path / "k.mct"), "--data", str(tmp_path / "d.csv"), "--classify",
        "--steps", "40", "--opt", "adam", "--lr", "0.01", "-o", str(tmp_path / "tuned.mct"), "-q",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    tuned = load_model(tmp_path / "tuned.mct")
    assert not np.array_equal(tuned.net.params, load_model(tmp_path / "k.mct").net.params)
    r = cli("export-onnx", str(tmp_path / "tuned.mct"))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "tuned.onnx").exists() and "opset 13" in r.stdout
    assert max_diff(ort_run(tmp_path / "tuned.onnx", x), tuned.net.forward(x)) <= TOL
    r = cli("export-onnx", str(tmp_path / "tuned.mct"))
    assert r.exit_code == 1 and "exists; pass --force" in r.stderr
    assert (
        cli("export-onnx", str(tmp_path / "tuned.mct"), "--force", "-o", str(tmp_path / "o" / "t.onnx")).exit_code == 0
    )
    for cmd in ("import", "export-onnx"):
        r = cli(cmd, "--help")
        assert r.exit_code == 0 and "Example:" in r.stdout


def test_keras_backend_is_chosen_without_tensorflow(tmp_path: Path) -> None:
    """With KERAS_BACKEND unset, from_keras picks a backend that is installed (no TensorFlow here)."""
    keras_mlp(tmp_path / "m.keras", seed=1)
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    code = f"from mcutrain.exporter import from_keras; print(from_keras({str(tmp_path / 'm.keras')!r}).n_out)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "5"
