"""Cross-entropy after a final Softmax(T) (issue 9, class 7): the core takes the gradient w.r.t. the
Softmax's input in one fused step, (p - t) / T, and the loss from log-softmax, on every training path
(train_batch, the device's fused update, Module.backprop_loss). Through the clamped softmax outputs the
gradient of a confidently wrong answer vanished; float64 PyTorch is the reference here.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import pytest
import torch

from helpers import assert_same_bits
from mcutrain import Checkpoint, Sequential, TrainParams, losses, train_batch
from mcutrain import layers as L
from mcutrain.exporter.device import build_device_model
from mcutrain.exporter.twin import DeviceTwin

F32, F64 = np.float32, np.float64


def torch_xent(logits: np.ndarray, t: np.ndarray, temperature: float) -> Tuple[float, np.ndarray]:
    """(summed loss, dL/dlogits) of PyTorch's cross_entropy(logits / T, t) in float64 (soft targets)."""
    z = torch.tensor(np.asarray(logits, F64), requires_grad=True)
    loss = torch.nn.functional.cross_entropy(z / temperature, torch.tensor(np.asarray(t, F64)), reduction="sum")
    loss.backward()
    assert z.grad is not None
    return loss.item(), z.grad.numpy()


def confident_logits(gap: float, n: int = 4) -> Tuple[np.ndarray, np.ndarray]:
    """One sample whose wrong class 0 leads the true class 1 by `gap`; one-hot target on class 1."""
    x = np.zeros((1, n), F32)
    x[0, 0] = gap
    x[0, 2:] = np.linspace(-0.5, 0.5, n - 2)
    t = np.zeros((1, n), F32)
    t[0, 1] = 1.0
    return x, t


# gap 7 at T = 0.1 (the case), and gaps beyond 69 T, where the softmax output underflows 1e-30
CONFIDENT = [(0.1, 7.0), (0.1, 10.0), (1.0, 80.0), (0.5, 40.0)]


@pytest.mark.parametrize("temperature,gap", CONFIDENT, ids=[f"T{t}-gap{g}" for t, g in CONFIDENT])
def test_a_confident_wrong_answer_keeps_its_gradient(temperature: float, gap: float) -> None:
    net = Sequential(L.Softmax(temperature, 4))
    x, t = confident_logits(gap)
    y, trace = net.traced_forward(x)
    mean, gin, _ = net.backprop_loss(trace, losses.cross_entropy, t)
    want_loss, want_grad = torch_xent(x, t, temperature)
    # (p - t) / T: about +1/T on the wrong class, -1/T on the true one
    np.testing.assert_allclose(gin, want_grad, rtol=1e-5, atol=1e-6 / temperature)
    assert gin[0, 1] == pytest.approx(-1.0 / temperature, rel=1e-5)
    assert mean == pytest.approx(want_loss, rel=1e-5)
    # what dL/dy through the softmax outputs gives instead: the gradient vanishes (or is far too small)
    _, gy = losses.cross_entropy(y, t)
    chained, _ = net.backprop(trace, gy)
    assert abs(chained[0, 1]) < 0.5 / temperature


def linear_softmax(temperature: float, n_in: int = 3, n_out: int = 4, seed: int = 5) -> Sequential:
    return Sequential(L.Linear(n_in, n_out), L.Softmax(temperature)).rand_params(seed=seed)


def expected_sgd_step(
    net: Sequential, x: np.ndarray, t: np.ndarray, temperature: float, lr: float
) -> Tuple[float, np.ndarray]:
    """(mean loss, parameters after one SGD step) of Linear + Softmax(T) on the batch, from float64 PyTorch."""
    n_in, n_out = x.shape[1], t.shape[1]
    p = np.asarray(net.params, F64)
    w = torch.tensor(p[: n_in * n_out].reshape(n_in, n_out), requires_grad=True)
    b = torch.tensor(p[n_in * n_out :], requires_grad=True)
    logits = torch.tensor(np.asarray(x, F64)) @ w + b
    loss = torch.nn.functional.cross_entropy(logits / temperature, torch.tensor(np.asarray(t, F64)))
    loss.backward()
    assert w.grad is not None and b.grad is not None
    new = np.concatenate([(w - lr * w.grad).detach().numpy().ravel(), (b - lr * b.grad).detach().numpy()])
    return loss.item(), new


@pytest.mark.parametrize("threads", [1, 2])
def test_training_on_a_confident_wrong_answer_moves_like_pytorch(threads: int) -> None:
    """train_batch (the host's buffered path) on a batch that the network gets confidently wrong: the step is
    PyTorch's, so learning goes on where the clamped outputs had stopped it."""
    temperature, lr = 0.1, 0.01
    net = linear_softmax(temperature)
    x = np.array([[1.0, 0.5, -0.5], [0.2, -1.0, 0.7]], F32)
    t = np.zeros((2, 4), F32)
    t[0, 1] = t[1, 3] = 1.0
    # make class 0 win by far: logit gap > 69 T for both samples
    p = net.params.copy()
    p[12 + 0] = 12.0  # bias of output 0
    net.params = p
    y = net.forward(x)
    assert np.all(y[:, 0] > 0.999999) and np.all(y[:, 1] < 1e-30)
    want_loss, want_params = expected_sgd_step(net, x, t, temperature, lr)
    loss = train_batch(TrainParams(lr=lr), net, losses.cross_entropy, x, t, threads=threads)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    np.testing.assert_allclose(net.params, want_params, rtol=1e-5, atol=1e-5)
    assert net.params[12] < 12.0 - 0.5 * lr / temperature  # the wrong class's bias fell by about lr / T


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("targets", ["onehot", "soft"])
def test_loss_and_gradients_match_pytorch(temperature: float, targets: str) -> None:
    rng = np.random.default_rng(int(temperature * 10))
    net = linear_softmax(temperature, n_in=5, n_out=6, seed=3)
    x = rng.normal(0.0, 2.0, (8, 5)).astype(F32)
    if targets == "onehot":
        t = np.eye(6, dtype=F32)[rng.integers(0, 6, 8)]
    else:
        t = rng.random((8, 6)).astype(F32)
        t /= t.sum(axis=1, keepdims=True)
    y, trace = net.traced_forward(x)
    mean, gin, grads = net.backprop_loss(trace, losses.cross_entropy, t)
    # PyTorch on the same parameters, float64
    p = np.asarray(net.params, F64)
    w = torch.tensor(p[:30].reshape(5, 6), requires_grad=True)
    b = torch.tensor(p[30:], requires_grad=True)
    xt = torch.tensor(np.asarray(x, F64), requires_grad=True)
    loss = torch.nn.functional.cross_entropy(
        (xt @ w + b) / temperature, torch.tensor(np.asarray(t, F64)), reduction="sum"
    )
    loss.backward()
    assert xt.grad is not None and w.grad is not None and b.grad is not None
    assert mean == pytest.approx(loss.item() / 8, rel=2e-6)
    np.testing.assert_allclose(gin, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        grads.values, np.concatenate([w.grad.numpy().ravel(), b.grad.numpy()]), rtol=1e-4, atol=1e-5
    )


def test_soft_targets_that_do_not_sum_to_one_follow_pytorch() -> None:
    """The fused gradient is p * sum(t) - t (over T), which is PyTorch's for any target weights."""
    x = np.array([[0.3, -1.2, 2.0, 0.1]], F32)
    t = np.array([[0.5, 0.0, 0.25, 0.5]], F32)
    net = Sequential(L.Softmax(0.7, 4))
    _, trace = net.traced_forward(x)
    mean, gin, _ = net.backprop_loss(trace, losses.cross_entropy, t)
    want_loss, want_grad = torch_xent(x, t, 0.7)
    assert mean == pytest.approx(want_loss, rel=1e-6)
    np.testing.assert_allclose(gin, want_grad, rtol=1e-5, atol=1e-7)


def test_the_device_update_is_fused_too_and_equals_the_buffered_one() -> None:
    """The device's update (DeviceTwin: mct_train_step without a grads buffer, the firmware's code) on a
    confident wrong answer: the same bits as train_batch, and PyTorch's step."""
    temperature, lr = 0.1, 0.01
    net = linear_softmax(temperature)
    p = net.params.copy()
    p[12] = 12.0
    net.params = p
    x = np.array([[1.0, 0.5, -0.5]], F32)
    t = np.array([[0.0, 1.0, 0.0, 0.0]], F32)
    opt = net.new_sgd(TrainParams(lr=lr))
    twin = DeviceTwin(build_device_model(Checkpoint(net, opt), loss=losses.cross_entropy, optimizer=opt))
    _, want_params = expected_sgd_step(net, x, t, temperature, lr)
    loss_dev = twin.train(x[0], t[0])
    loss_host = train_batch(opt, net, losses.cross_entropy, x, t)
    assert_same_bits(twin.params, net.params, "device twin vs train_batch parameters")
    assert_same_bits(np.float32(loss_dev), np.float32(loss_host), "loss")
    np.testing.assert_allclose(net.params, want_params, rtol=1e-5, atol=1e-5)


def test_other_losses_after_softmax_are_not_fused() -> None:
    """Only cross-entropy is fused: MSE after Softmax still differentiates through the outputs (checked
    against PyTorch's chain through softmax)."""
    temperature = 0.5
    net = Sequential(L.Softmax(temperature, 3))
    x = np.array([[0.2, -0.4, 1.0]], F32)
    t = np.array([[0.0, 1.0, 0.0]], F32)
    _, trace = net.traced_forward(x)
    mean, gin, _ = net.backprop_loss(trace, losses.mse, t)
    z = torch.tensor(np.asarray(x, F64), requires_grad=True)
    loss = torch.mean((torch.softmax(z / temperature, dim=1) - torch.tensor(np.asarray(t, F64))) ** 2)
    loss.backward()
    assert z.grad is not None
    assert mean == pytest.approx(loss.item(), rel=1e-5)
    np.testing.assert_allclose(gin, z.grad.numpy(), rtol=1e-4, atol=1e-7)
