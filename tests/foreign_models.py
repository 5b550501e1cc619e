"""Models made with other frameworks, for the import tests: PyTorch networks exported to ONNX by
torch.onnx.export, Keras 3 files written by Keras itself (jax backend), fitted scikit-learn MLPs, and
onnxruntime to run ONNX files. Each framework is imported when first used."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Tuple, Union

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "jax")  # Keras runs here without TensorFlow


# ---------------------------------------------------------------- PyTorch -> ONNX


def torch_onnx(module: Any, n_in: Union[int, Tuple[int, ...]], path: Path, dynamo: bool = True) -> Path:
    """Export a torch module (in eval mode) with torch.onnx.export, batch dimension dynamic; dynamo=False uses
    the TorchScript exporter, whose graphs compute reshapes from Shape at run time. n_in: the features of a
    sample, or its shape ((C, H, W) for images)."""
    import torch

    module.eval()
    x = torch.randn(3, *(n_in if isinstance(n_in, tuple) else (n_in,)))
    if dynamo:
        torch.onnx.export(
            module,
            (x,),
            str(path),
            dynamo=True,
            input_names=["x"],
            output_names=["y"],
            dynamic_shapes=({0: torch.export.Dim("batch")},),
            verbose=False,
        )
    else:
        torch.onnx.export(
            module, (x,), str(path), dynamo=False, input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}}
        )
    return path


def torch_mlp(seed: int) -> Any:
    """Linear, ReLU, Dropout, Linear, Tanh, LeakyReLU, Linear, Softmax: an nn.Sequential classifier."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(6, 12),
        nn.ReLU(),
        nn.Dropout(0.2),
        nn.Linear(12, 10),
        nn.Tanh(),
        nn.LeakyReLU(0.1),
        nn.Linear(10, 4),
        nn.Softmax(dim=-1),
    )


def torch_conv(seed: int) -> Any:
    """A one-channel Conv1d between Unflatten and Flatten, Softplus (PyTorch exports its threshold), Sigmoid."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(6, 10),
        nn.Unflatten(1, (1, 10)),
        nn.Conv1d(1, 1, 3),
        nn.Flatten(),
        nn.Softplus(),
        nn.Identity(),
        nn.Linear(8, 3),
        nn.Sigmoid(),
    )


def torch_residual(seed: int) -> Any:
    """Residual blocks (one nested), scaling by a constant vector and a constant number, Sin, Cos, SiLU."""
    import torch
    from torch import nn

    class Residual(nn.Module):
        def __init__(self, *inner: nn.Module) -> None:
            super().__init__()
            self.inner = nn.Sequential(*inner)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.inner(x)

    class Scale(nn.Module):
        def __init__(self, v: torch.Tensor) -> None:
            super().__init__()
            self.register_buffer("v", v)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.v

    class Fn(nn.Module):
        def __init__(self, f: Any) -> None:
            super().__init__()
            self.f = f

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.f(x)

    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(5, 8),
        Residual(nn.Linear(8, 8), nn.Tanh(), Residual(nn.Linear(8, 8), nn.Sigmoid())),
        Scale(torch.linspace(0.5, 1.5, 8)),
        Scale(torch.tensor(0.7)),
        Fn(torch.sin),
        nn.Linear(8, 8),
        nn.SiLU(),
        Fn(torch.cos),
        nn.Linear(8, 2),
    )


def torch_cnn(seed: int) -> Any:
    """An image classifier on (3, 12, 12) inputs: Conv, BatchNorm, ReLU6, depthwise Conv with a multiplier,
    a ResNet block (identity shortcut), a BatchNorm the exporters cannot fold (after a ReLU), pooling (max,
    average with count_include_pad), Flatten of a channels-first tensor into Linear, Dropout, Softmax; batch
    statistics made up as training would leave them."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c, 1)
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x + self.body(x))

    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU6(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=8),
        nn.ReLU(),
        nn.BatchNorm2d(16),
        Block(16),
        nn.MaxPool2d(2),
        nn.AvgPool2d(3, stride=1, padding=1),
        nn.Flatten(),
        nn.Dropout(0.2),
        nn.Linear(16 * 3 * 3, 10),
        nn.ReLU(),
        nn.Linear(10, 4),
        nn.Softmax(dim=-1),
    )
    _made_up_statistics(net)
    return net


def torch_cnn1d(seed: int) -> Any:
    """A series classifier on (2, 16) inputs (channels, time): Conv1d with padding, BatchNorm1d, pooling,
    a strided Conv1d, global average pooling, Linear, Softmax."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Conv1d(2, 6, 5, padding=2),
        nn.ReLU(),
        nn.BatchNorm1d(6),
        nn.MaxPool1d(2),
        nn.Conv1d(6, 8, 3, stride=2),
        nn.ReLU6(),
        nn.AvgPool1d(2),
        nn.AdaptiveAvgPool1d(1),
        nn.Flatten(),
        nn.Linear(8, 3),
        nn.Softmax(dim=-1),
    )
    _made_up_statistics(net)
    return net


def _made_up_statistics(net: Any) -> None:
    """Give each BatchNorm of a torch module a gain, bias and running statistics away from their initial values."""
    import torch

    g = torch.Generator().manual_seed(0)
    for m in net.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            c = m.num_features
            with torch.no_grad():
                m.weight.copy_(0.5 + torch.rand(c, generator=g))
                m.bias.copy_(0.3 * torch.randn(c, generator=g))
                m.running_mean.copy_(0.3 * torch.randn(c, generator=g))
                m.running_var.copy_(0.5 + 1.5 * torch.rand(c, generator=g))


def ort_run(path: Path, x: np.ndarray) -> np.ndarray:
    """onnxruntime's output of an ONNX file for a float32 batch."""
    import onnxruntime as ort

    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: np.asarray(x, np.float32)})[0]


# ---------------------------------------------------------------- Keras


def keras_mlp(path: Path, seed: int) -> Any:
    """A keras.Sequential classifier through every supported layer and activation, saved to path (.keras)."""
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((7,)),
            keras.layers.Dense(12, activation="relu"),
            keras.layers.Dense(12, activation="tanh"),
            keras.layers.Dropout(0.3),
            keras.layers.Dense(10, activation="softplus", use_bias=False),
            keras.layers.Dense(10, activation="leaky_relu"),
            keras.layers.Dense(10, activation="silu"),
            keras.layers.LeakyReLU(negative_slope=0.2),
            keras.layers.Dense(8),
            keras.layers.Activation("sigmoid"),
            keras.layers.ReLU(),
            keras.layers.Dense(5),
            keras.layers.Softmax(),
        ]
    )
    model.save(str(path))
    return model


def keras_cnn(path: Path, seed: int, head: str = "flatten") -> Any:
    """A keras.Sequential image classifier on (12, 12, 3): Conv2D with relu6, BatchNormalization, DepthwiseConv2D
    (multiplier 2, strided, same), ReLU(max_value=6), SeparableConv2D, max and average pooling with 'same'
    padding, then Flatten, Dropout and Dense layers (head 'flatten') or global average pooling (head 'global');
    saved to path (.keras). The BatchNormalization's statistics are made up as training would leave them."""
    import keras

    keras.utils.set_random_seed(seed)
    top = (
        [keras.layers.Flatten(), keras.layers.Dropout(0.3), keras.layers.Dense(16, activation="relu")]
        if head == "flatten"
        else [keras.layers.GlobalAveragePooling2D()]
    )
    model = keras.Sequential(
        [
            keras.Input((12, 12, 3)),
            keras.layers.Conv2D(8, 3, padding="same", activation="relu6"),
            keras.layers.BatchNormalization(),
            keras.layers.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2),
            keras.layers.ReLU(max_value=6.0),
            keras.layers.SeparableConv2D(12, 3, activation="relu"),
            keras.layers.MaxPooling2D(2, padding="same"),
            keras.layers.AveragePooling2D(2, strides=1, padding="same"),
            *top,
            keras.layers.Dense(4, activation="softmax"),
        ]
    )
    _keras_statistics(model)
    model.save(str(path))
    return model


def keras_cnn1d(path: Path, seed: int) -> Any:
    """A keras.Sequential series classifier on (20, 3): causal and strided Conv1D, pooling, BatchNormalization,
    global average and max pooling; saved to path (.keras)."""
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((20, 3)),
            keras.layers.Conv1D(6, 5, padding="causal", activation="relu"),
            keras.layers.MaxPooling1D(2),
            keras.layers.Conv1D(8, 3, strides=2, padding="same"),
            keras.layers.BatchNormalization(momentum=0.9),
            keras.layers.Activation("tanh"),
            keras.layers.AveragePooling1D(2, padding="same"),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(3),
        ]
    )
    _keras_statistics(model)
    model.save(str(path))
    return model


def _keras_statistics(model: Any) -> None:
    """Give each BatchNormalization a gain, bias and moving statistics away from their initial values."""
    rng = np.random.default_rng(0)
    for layer in model.layers:
        if type(layer).__name__ == "BatchNormalization":
            c = layer.get_weights()[0].shape[0]
            stats = [rng.uniform(0.5, 1.5, c), rng.normal(0, 0.3, c), rng.normal(0, 0.3, c), rng.uniform(0.5, 2, c)]
            layer.set_weights([s.astype(np.float32) for s in stats])


# ---------------------------------------------------------------- scikit-learn


def sklearn_data(seed: int, n: int = 200, n_in: int = 6) -> Tuple[np.ndarray, np.ndarray]:
    """Inputs (n, n_in) float32 and a real-valued target (n, 2) with some structure to learn."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n_in)).astype(np.float32)
    y = np.column_stack([np.sin(x[:, 0]) + x[:, 1] * x[:, 2], np.tanh(x[:, 3] - x[:, 4])]).astype(np.float32)
    return x, y


def sklearn_mlp(kind: str, seed: int) -> Tuple[Any, np.ndarray]:
    """A fitted MLP and its training inputs. kind: 'multiclass' (relu, softmax), 'binary' (tanh, one logistic
    output), 'multilabel' (logistic hidden, logistic outputs) or 'regressor' (identity hidden, 2 outputs)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    x, y = sklearn_data(seed)
    if kind == "multiclass":
        est, target = (
            MLPClassifier(hidden_layer_sizes=(16, 8), activation="relu", random_state=seed),
            np.digitize(y[:, 0], [-1, 0, 1]),
        )
    elif kind == "binary":
        est, target = MLPClassifier(hidden_layer_sizes=(12,), activation="tanh", random_state=seed), y[:, 1] > 0
    elif kind == "multilabel":
        est, target = MLPClassifier(hidden_layer_sizes=(10,), activation="logistic", random_state=seed), y > 0
    elif kind == "regressor":
        est, target = MLPRegressor(hidden_layer_sizes=(10,), activation="identity", random_state=seed), y
    else:
        raise ValueError(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.set_params(max_iter=300)
        est.fit(x, target)
    return est, x


def sklearn_outputs(est: Any, x: np.ndarray) -> np.ndarray:
    """What the imported network must give: predict_proba (its second column for a binary classifier) or
    predict for a regressor."""
    if hasattr(est, "predict_proba"):
        p = est.predict_proba(x)
        return p[:, 1:] if est.n_outputs_ == 1 else p  # a binary classifier has one output: P(classes_[1])
    return est.predict(x)
