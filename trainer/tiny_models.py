"""Reference architectures of embedded ML, built from mcutrain's layers: the MLPerf Tiny models (keyword spotting
DS-CNN, the anomaly-detection autoencoder, ResNet-8 for image classification, MobileNetV1 0.25 for visual wake
words) and the small CNN on 8x8 digits that the tests and benchmarks train. `mcutrain train --arch NAME` and
`mcutrain info --arch NAME` use them.

Shapes follow the MLPerf Tiny reference models (channels last); Dropout is left out (it is the identity at export),
and BatchNorm is folded into the layer before it when the model is exported.
"""

from __future__ import annotations

from typing import Callable, Dict, List

from . import layers as L
from .compose import Residual, Sequential
from .module import Module


def digits_cnn() -> Sequential:
    """8x8x1 digits -> 10: conv 3x3 1->8, max pool 2, conv 3x3 8->16, max pool 2, dense 64->10 (23,680 MACs)."""
    return Sequential(
        L.Conv2d(1, 8, 3, padding="same"),
        L.Relu(),
        L.MaxPool2d(2),
        L.Conv2d(8, 16, 3, padding="same"),
        L.Relu(),
        L.MaxPool2d(2),
        L.Flatten(),
        L.Linear(64, 10),
        L.Softmax(),
        input_shape=(8, 8, 1),
    )


def ds_cnn(batchnorm: bool = True) -> Sequential:
    """MLPerf Tiny keyword spotting: 49x10x1 MFCC -> 12 classes. Conv 64 10x4 stride 2 (same), then 4 x (depthwise
    3x3 + pointwise 64), each followed by BatchNorm and ReLU; average pool over 25x5, dense 12 (2,656,768 MACs)."""

    def bn() -> List[Module]:
        return [L.BatchNorm(64)] if batchnorm else []

    mods: List[Module] = [L.Conv2d(1, 64, (10, 4), stride=2, padding="same"), *bn(), L.Relu()]
    for _ in range(4):
        mods += [L.DepthwiseConv2d(64, 3, padding="same"), *bn(), L.Relu()]
        mods += [L.Conv2d(64, 64, 1), *bn(), L.Relu()]
    mods += [L.AvgPool2d((25, 5)), L.Flatten(), L.Linear(64, 12), L.Softmax()]
    return Sequential(*mods, input_shape=(49, 10, 1))


def fc_autoencoder(batchnorm: bool = True) -> Sequential:
    """MLPerf Tiny anomaly detection: 640 -> 128 x4 -> 8 -> 128 x4 -> 640, each hidden Dense with BatchNorm and
    ReLU (264,192 MACs); trained with MSE to reproduce its input."""
    sizes = [640, 128, 128, 128, 128, 8, 128, 128, 128, 128]
    mods: List[Module] = []
    for a, b in zip(sizes, sizes[1:]):
        mods += [L.Linear(a, b), *([L.BatchNorm(b)] if batchnorm else []), L.Relu()]
    mods.append(L.Linear(128, 640))
    return Sequential(*mods)


def resnet8(classes: int = 10) -> Sequential:
    """MLPerf Tiny image classification (CIFAR-10, 32x32x3): conv 3x3 to 16 channels with BatchNorm and ReLU, then
    three residual stacks of 16, 32 and 64 filters, each conv 3x3 (stride 1, 2, 2) - BatchNorm - ReLU - conv 3x3 -
    BatchNorm, added to the block's input (the first stack) or to a 1x1 convolution of it with the same stride and no
    BatchNorm (the other two, as in the reference), then ReLU; average pooling over the 8x8 map and a dense layer
    (78,666 parameters with the BatchNorm statistics, as Keras counts them; 12,501,632 MACs)."""
    mods: List[Module] = [L.Conv2d(3, 16, 3, padding="same"), L.BatchNorm(16), L.Relu()]
    c = 16
    for filters, stride in ((16, 1), (32, 2), (64, 2)):
        body: List[Module] = [
            L.Conv2d(c, filters, 3, stride=stride, padding="same"),
            L.BatchNorm(filters),
            L.Relu(),
            L.Conv2d(filters, filters, 3, padding="same"),
            L.BatchNorm(filters),
        ]
        shortcut = None if stride == 1 and filters == c else [L.Conv2d(c, filters, 1, stride=stride)]
        mods += [Residual(*body, shortcut=shortcut), L.Relu()]
        c = filters
    mods += [L.AvgPool2d(8), L.Flatten(), L.Linear(c, classes), L.Softmax()]
    return Sequential(*mods, input_shape=(32, 32, 3))


def mobilenet_v1_025(classes: int = 2) -> Sequential:
    """MobileNetV1 with width 0.25 on 96x96x3 (visual wake words): conv 3x3 stride 2 to 8 channels, then 13
    depthwise-separable blocks (depthwise 3x3 with BatchNorm and ReLU6, pointwise with BatchNorm and ReLU6), global
    average pooling and a dense layer."""
    blocks = [(16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2)] + [(128, 1)] * 5 + [(256, 2), (256, 1)]
    mods: List[Module] = [L.Conv2d(3, 8, 3, stride=2, padding="same"), L.BatchNorm(8), L.Relu6()]
    c = 8
    for out, stride in blocks:
        mods += [L.DepthwiseConv2d(c, 3, stride=stride, padding="same"), L.BatchNorm(c), L.Relu6()]
        mods += [L.Conv2d(c, out, 1), L.BatchNorm(out), L.Relu6()]
        c = out
    mods += [L.GlobalAvgPool2d(), L.Linear(c, classes), L.Softmax()]
    return Sequential(*mods, input_shape=(96, 96, 3))


ARCHITECTURES: Dict[str, Callable[[], Sequential]] = {
    "digits_cnn": digits_cnn,
    "ds_cnn": ds_cnn,
    "fc_autoencoder": fc_autoencoder,
    "mobilenet_v1_025": mobilenet_v1_025,
    "resnet8": resnet8,
}  # the names `--arch` takes


def build(name: str) -> Sequential:
    """The architecture called name (see ARCHITECTURES); ValueError naming the choices otherwise."""
    try:
        return ARCHITECTURES[name.strip().lower().replace("-", "_")]()
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; choose one of {', '.join(ARCHITECTURES)}") from None
