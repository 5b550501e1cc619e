"""The convolutional layers against float64 PyTorch, layer by layer: forward, dL/dx and the parameter gradients
for random inputs and output gradients, from mcutrain's documented layouts (channels last; Conv2d W [kh][kw][in][out],
depthwise W [kh][kw][out]; padding taps skipped, so average pooling is count_include_pad=False)."""

from __future__ import annotations

from typing import Callable, Tuple

import numpy as np
import pytest
import torch

from mcutrain import Sequential
from mcutrain import layers as L
from mcutrain.module import Module

F = torch.nn.functional
Tensor = torch.Tensor


def nchw(x: Tensor) -> Tensor:
    return x.permute(0, 3, 1, 2)


def nhwc(x: Tensor) -> Tensor:
    return x.permute(0, 2, 3, 1)


def conv(cin: int, cout: int, k: int, s: int, pad: Tuple[int, int, int, int], bias: bool = True) -> Callable:
    """PyTorch's conv2d on explicit (left, right, top, bottom) zero padding."""

    def f(x: Tensor, p: Tensor) -> Tensor:
        nw = k * k * cin * cout
        w = p[:nw].reshape(k, k, cin, cout).permute(3, 2, 0, 1)
        return nhwc(F.conv2d(F.pad(nchw(x), pad), w, p[nw:] if bias else None, stride=s))

    return f


def depthwise(c: int, k: int, s: int, pad: int, m: int = 1) -> Callable:
    def f(x: Tensor, p: Tensor) -> Tensor:
        nw = k * k * c * m
        w = p[:nw].reshape(k, k, c * m).permute(2, 0, 1).unsqueeze(1)
        return nhwc(F.conv2d(nchw(x), w, p[nw:], stride=s, padding=pad, groups=c))

    return f


def conv1d(cin: int, cout: int, k: int, s: int, pad: int) -> Callable:
    def f(x: Tensor, p: Tensor) -> Tensor:
        nw = k * cin * cout
        w = p[:nw].reshape(k, cin, cout).permute(2, 1, 0)
        return F.conv1d(x.permute(0, 2, 1), w, p[nw:], stride=s, padding=pad).permute(0, 2, 1)

    return f


CASES = [
    ("conv valid", L.Conv2d(3, 5, 3), (6, 7, 3), conv(3, 5, 3, 1, (0, 0, 0, 0))),
    # 'same' with stride 2 on 7 rows: 4 outputs, 2 padding rows split 1 above, 1 below (TFLite's rule)
    ("conv same stride 2", L.Conv2d(3, 5, 3, stride=2, padding="same"), (7, 7, 3), conv(3, 5, 3, 2, (1, 1, 1, 1))),
    # 'same' with stride 2 on 8: 4 outputs, 1 padding row, below (the odd one goes below and right)
    ("conv same even", L.Conv2d(2, 4, 3, stride=2, padding="same"), (8, 8, 2), conv(2, 4, 3, 2, (0, 1, 0, 1))),
    ("conv explicit no bias", L.Conv2d(2, 4, 3, 2, 1, bias=False), (6, 6, 2), conv(2, 4, 3, 2, (1, 1, 1, 1), False)),
    ("pointwise", L.Conv2d(4, 6, 1), (3, 5, 4), conv(4, 6, 1, 1, (0, 0, 0, 0))),
    ("depthwise", L.DepthwiseConv2d(4, 3, padding=1), (5, 6, 4), depthwise(4, 3, 1, 1)),
    ("depthwise x2 stride 2", L.DepthwiseConv2d(2, 3, 2, 1, depth_multiplier=2), (5, 6, 2), depthwise(2, 3, 2, 1, 2)),
    ("max pool", L.MaxPool2d(2), (6, 6, 3), lambda x, p: nhwc(F.max_pool2d(nchw(x), 2))),
    (
        "avg pool padded",
        L.AvgPool2d(3, stride=2, padding=1),
        (7, 7, 3),
        lambda x, p: nhwc(F.avg_pool2d(nchw(x), 3, 2, 1, count_include_pad=False)),
    ),
    ("global avg pool", L.GlobalAvgPool2d(), (4, 5, 3), lambda x, p: x.mean(dim=(1, 2))),
    ("conv1d", L.Conv1d(3, 4, 5, stride=2, padding=2), (20, 3), conv1d(3, 4, 5, 2, 2)),
    ("max pool 1d", L.MaxPool1d(3), (12, 2), lambda x, p: F.max_pool1d(x.permute(0, 2, 1), 3).permute(0, 2, 1)),
    ("avg pool 1d", L.AvgPool1d(2), (12, 2), lambda x, p: F.avg_pool1d(x.permute(0, 2, 1), 2).permute(0, 2, 1)),
    ("global avg pool 1d", L.GlobalAvgPool1d(), (9, 4), lambda x, p: x.mean(dim=1)),
    ("relu6", L.Relu6(), (10,), lambda x, p: F.relu6(x)),
]


@pytest.mark.parametrize("name,layer,shape,ref", CASES, ids=[c[0] for c in CASES])
def test_layer_matches_float64_pytorch(name: str, layer: Module, shape: Tuple[int, ...], ref: Callable) -> None:
    rng = np.random.default_rng(0)
    net = Sequential(layer, input_shape=shape).rand_params(seed=3)
    nb = 3
    x = (rng.normal(size=(nb, *shape)) * (4.0 if name == "relu6" else 1.0)).astype(np.float32)
    y, trace = net.traced_forward(x)
    g = rng.normal(size=y.shape).astype(np.float32)
    gin, grads = net.backprop(trace, g)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    pt = torch.tensor(net.params, dtype=torch.float64, requires_grad=True)
    yt = ref(xt, pt).reshape(nb, -1)
    yt.backward(torch.tensor(g, dtype=torch.float64))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gin, xt.grad.numpy().reshape(nb, -1), rtol=1e-5, atol=1e-5)
    if net.param_count():
        np.testing.assert_allclose(grads.values, pt.grad.numpy(), rtol=1e-5, atol=2e-5)
