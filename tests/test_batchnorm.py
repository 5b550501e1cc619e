"""BatchNorm: training on batch statistics against PyTorch in float64 (every optimizer), the running statistics it
keeps, and folding into the layer before it (mcutrain.fold), which export and import rely on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import assert_first_step, first_step_by_hand, optimizer_of_kind
from mcutrain import Sequential, TrainParams, losses, train_batch
from mcutrain import layers as L
from mcutrain.fold import fold_batchnorm, has_batchnorm


def bn_net() -> Sequential:
    """conv -> BatchNorm -> relu -> depthwise -> BatchNorm -> pool -> dense -> BatchNorm -> softmax on 6x6x2 images."""
    return Sequential(
        L.Conv2d(2, 4, 3, padding="same", bias=False),
        L.BatchNorm(4),
        L.Relu(),
        L.DepthwiseConv2d(4, 3, padding=1),
        L.BatchNorm(4, eps=1e-3, momentum=0.2),
        L.GlobalAvgPool2d(),
        L.Dense(4, 3),
        L.BatchNorm(3),
        L.Softmax(),
        input_shape=(6, 6, 2),
    ).rand_params(seed=5)


def torch_forward(net: Sequential, p: torch.Tensor, x: torch.Tensor, training: bool, stats: list) -> torch.Tensor:
    """The same network in float64 PyTorch from mcutrain's documented layouts (channels last)."""
    f = torch.nn.functional
    o = 0
    h = x.permute(0, 3, 1, 2)
    for m in net.modules:
        n = m.param_count()
        q = p[o : o + n]
        o += n
        if isinstance(m, L.Conv2d):
            h = f.conv2d(h, q.reshape(3, 3, 2, 4).permute(3, 2, 0, 1), padding=1)
        elif isinstance(m, L.DepthwiseConv2d):
            h = f.conv2d(h, q[:36].reshape(3, 3, 4).permute(2, 0, 1).unsqueeze(1), q[36:], padding=1, groups=4)
        elif isinstance(m, L.BatchNorm):
            c = m.channels
            rm, rv = q[2 * c : 3 * c].detach().clone(), q[3 * c :].detach().clone()
            h = f.batch_norm(h, rm, rv, q[:c], q[c : 2 * c], training, m.momentum, m.eps)
            stats.append((rm, rv))
        elif isinstance(m, L.Relu):
            h = f.relu(h)
        elif isinstance(m, L.GlobalAvgPool2d):
            h = h.mean(dim=(2, 3))
        elif isinstance(m, L.Dense):
            h = h @ q.reshape(4, 3)
        elif isinstance(m, L.Softmax):
            return h
    raise AssertionError("no softmax")


@pytest.mark.parametrize("opt_name", ["sgd", "momentum", "rmsprop", "rmsprop_momentum", "adam"])
def test_training_step_on_batch_statistics_matches_pytorch(opt_name: str) -> None:
    """One train_batch on 5 samples: the mean loss, every parameter after the step and the running statistics
    agree with float64 PyTorch (batch_norm in training mode, cross-entropy on the logits, the optimizer by hand)."""
    net = bn_net()
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 6, 6, 2)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 5)]
    p0 = net.params.astype(np.float64)
    tp = TrainParams(lr=0.05)
    opt = optimizer_of_kind(net, opt_name, tp)
    loss = train_batch(opt, net, losses.cross_entropy, x, y)

    p = torch.tensor(p0, requires_grad=True)
    stats: list = []
    logits = torch_forward(net, p, torch.tensor(x, dtype=torch.float64), True, stats)
    ref_loss = -(torch.tensor(y, dtype=torch.float64) * torch.log_softmax(logits, 1)).sum(1).mean()
    ref_loss.backward()
    g = p.grad.numpy()
    want = first_step_by_hand(opt_name, p0, g, 0.05)
    # the running statistics move as PyTorch moves them (their gradients are 0)
    o = 0
    for m in net.modules:
        n = m.param_count()
        if isinstance(m, L.BatchNorm):
            c = m.channels
            rm, rv = stats.pop(0)
            want[o + 2 * c : o + 3 * c] = rm.numpy()
            want[o + 3 * c : o + n] = rv.numpy()
        o += n
    assert abs(loss - ref_loss.item()) < 1e-5
    # left out for RMSProp and Adam: the running statistics and the depthwise bias, not more
    assert_first_step(net.params, want, g, opt_name, left_out=0.2)


def test_forward_uses_the_running_statistics_and_fit_trains_single_threaded() -> None:
    """forward() normalises with the running statistics (the inference form), so a sample's output does not depend
    on the batch; fit trains a BatchNorm network and lowers the loss."""
    net = bn_net()
    rng = np.random.default_rng(2)
    x = rng.normal(size=(64, 6, 6, 2)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[(x[:, :, :, 0].mean(axis=(1, 2)) > 0).astype(int) + (x[:, 0, 0, 1] > 1)]
    assert np.array_equal(net.forward(x[:4])[1], net.forward(x[1]))
    opt = net.new_adam(TrainParams(lr=0.02))
    first = net.fit(opt, losses.cross_entropy, x, y, epochs=1, batch=16).losses[0]
    last = net.fit(opt, losses.cross_entropy, x, y, epochs=30, batch=16).losses[-1]
    assert last < first * 0.7


def test_folding_keeps_the_outputs_and_removes_the_batchnorms() -> None:
    """fold_batchnorm: no BatchNorm left after a conv, depthwise or dense layer; the folded network's outputs equal
    the original's (running statistics moved away from 0 and 1 first) within float32 rounding."""
    net = bn_net()
    rng = np.random.default_rng(3)
    x = rng.normal(size=(32, 6, 6, 2)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 32)]
    net.fit(net.new_adam(TrainParams(lr=0.01)), losses.cross_entropy, x, y, epochs=5, batch=8)
    folded = fold_batchnorm(net)
    assert has_batchnorm(net) and not has_batchnorm(folded)
    assert [type(m).__name__ for m in folded.modules] == [
        "Conv2d", "Relu", "DepthwiseConv2d", "GlobalAvgPool2d", "Linear", "Softmax"
    ]  # fmt: skip
    assert folded.modules[0].bias  # the bias-free conv gained one
    np.testing.assert_allclose(folded.forward(x), net.forward(x), rtol=1e-4, atol=1e-6)


def test_a_batchnorm_with_nothing_to_fold_into_stays() -> None:
    """A BatchNorm first in the network (nothing before it) stays and runs on its running statistics."""
    net = Sequential(L.BatchNorm(3, input_shape=(3,)), L.Linear(3, 2)).rand_params(seed=1)
    net.params = net.params + np.float32(0.25)
    folded = fold_batchnorm(net)
    assert [type(m).__name__ for m in folded.modules] == ["BatchNorm", "Linear"]
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    assert np.array_equal(folded.forward(x), net.forward(x))


def test_dropout_drops_at_its_rate_while_training_and_is_the_identity_elsewhere() -> None:
    """Dropout(0.25): forward is the identity; a training step zeroes about a quarter of the values (the gradient
    of a dropped value is 0, a kept one is scaled by 1 / 0.75), new masks every step; export leaves it out;
    threads=2 is refused with the reason."""
    from mcutrain import ConfigError

    net = Sequential(L.Dropout(0.25, 400, seed=9), L.Dense(400, 1)).rand_params(seed=1)
    net.params = np.concatenate([[0.0], np.ones(400)]).astype(np.float32)  # counter 0, W = 1
    x = np.ones((1, 400), np.float32)
    assert np.array_equal(net.forward(x), [[400.0]])
    tp = TrainParams(lr=1.0)
    train_batch(tp, net, losses.mse, x, np.zeros((1, 1), np.float32))  # dL/dW_j = 2 * y * kept_j / 0.75
    step1 = net.params[1:].copy()
    moved = step1 != 1.0
    assert 0.68 < moved.mean() < 0.82 and net.params[0] == 1.0  # about 3/4 kept; the counter advanced
    train_batch(tp, net, losses.mse, x, np.zeros((1, 1), np.float32))
    assert not np.array_equal((net.params[1:] != step1), moved)  # another mask
    assert fold_batchnorm(net).describe() == "Sequential(Dense(400, 1))"
    with pytest.raises(ConfigError, match="one thread"):
        train_batch(tp, net, losses.mse, np.ones((4, 400), np.float32), np.zeros((4, 1), np.float32), threads=2)
