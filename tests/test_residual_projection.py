"""Residual blocks whose shortcut is a projection, y = M(x) + S(x) (ResNet-8's second and third stacks): against
float64 PyTorch for a block alone (forward, dL/dx, parameter gradients) and for a whole BatchNorm CNN's training
step with every optimizer; BatchNorm folding in both branches; the shape checks; model files; ResNet-8's size."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List

import numpy as np
import pytest
import torch

from helpers import assert_first_step, first_step_by_hand, optimizer_of_kind
from mcutrain import Residual, Sequential, ShapeError, TrainParams, load_model, losses, save_model, train_batch
from mcutrain import layers as L
from mcutrain.architecture import from_architecture
from mcutrain.fold import fold_batchnorm
from mcutrain.module import Module

F = torch.nn.functional
OPTIMIZERS = ["sgd", "momentum", "rmsprop", "rmsprop_momentum", "adam"]


def torch_forward(m: Module, p: torch.Tensor, h: torch.Tensor, training: bool, stats: List[Any]) -> torch.Tensor:
    """m in float64 PyTorch from mcutrain's documented layouts (channels last: h is (n, H, W, C) or (n, features));
    a final Softmax is left out (the logits). stats collects each BatchNorm's running statistics, as PyTorch moves
    them, in the order of the network's parameters."""
    if isinstance(m, Sequential):
        o = 0
        for c in m.modules:
            n = c.param_count()
            h = torch_forward(c, p[o : o + n], h, training, stats)
            o += n
        return h
    if isinstance(m, Residual):
        n = m.inner.param_count()
        main = torch_forward(m.inner, p[:n], h, training, stats)
        return main + (h if m.shortcut is None else torch_forward(m.shortcut, p[n:], h, training, stats))
    if isinstance(m, L.Conv2d):
        g = m._geom
        kh, kw, ci, co = int(g["kh"]), int(g["kw"]), int(g["c_in"]), int(g["c_out"])
        pt, pl, sh, sw = int(g["pt"]), int(g["pl"]), int(g["sh"]), int(g["sw"])
        pb = (int(g["h_out"]) - 1) * sh + kh - int(g["h_in"]) - pt  # the rows below that the windows reach
        pr = (int(g["w_out"]) - 1) * sw + kw - int(g["w_in"]) - pl
        nw = kh * kw * ci * co
        w = p[:nw].reshape(kh, kw, ci, co).permute(3, 2, 0, 1)
        x = F.pad(h.permute(0, 3, 1, 2), (pl, max(pr, 0), pt, max(pb, 0)))
        y = F.conv2d(x, w, p[nw:] if m.bias else None, stride=(sh, sw))
        return y[:, :, : int(g["h_out"]), : int(g["w_out"])].permute(0, 2, 3, 1)
    if isinstance(m, L.BatchNorm):
        c = m.channels
        rm, rv = p[2 * c : 3 * c].detach().clone(), p[3 * c :].detach().clone()
        x = h.permute(0, 3, 1, 2) if h.dim() == 4 else h
        y = F.batch_norm(x, rm, rv, p[:c], p[c : 2 * c], training, m.momentum, m.eps)
        stats.append((rm, rv))
        return y.permute(0, 2, 3, 1) if h.dim() == 4 else y
    if isinstance(m, L.Relu):
        return F.relu(h)
    if isinstance(m, L.Tanh):
        return torch.tanh(h)
    if isinstance(m, L.GlobalAvgPool2d):
        return h.mean(dim=(1, 2))
    if isinstance(m, L.Flatten):
        return h.reshape(h.shape[0], -1)
    if isinstance(m, L.Dense):
        return h @ p.reshape(m.n_in, m.n_out)
    if isinstance(m, L.Linear):
        io = m.n_in * m.n_out
        return h @ p[:io].reshape(m.n_in, m.n_out) + p[io:]
    if isinstance(m, L.Softmax):
        return h
    raise AssertionError(f"no PyTorch form for {m.describe()} in this test")


BLOCKS = [
    # ResNet-8's block: 3x3 stride 2 'same' (7 rows: one padding row above and below), 3x3, 1x1 stride 2 shortcut
    (
        "resnet block, odd size",
        lambda: Residual(
            L.Conv2d(3, 4, 3, stride=2, padding="same"),
            L.Relu(),
            L.Conv2d(4, 4, 3, padding="same"),
            shortcut=[L.Conv2d(3, 4, 1, stride=2)],
        ),
        (7, 7, 3),
    ),
    # 8 rows: 'same' with stride 2 puts its one padding row below; the shortcut has no bias and a Tanh
    (
        "resnet block, even size",
        lambda: Residual(
            L.Conv2d(2, 5, 3, stride=2, padding="same", bias=False),
            L.Relu(),
            L.Conv2d(5, 5, 3, padding="same"),
            shortcut=[L.Conv2d(2, 5, 1, stride=2, bias=False), L.Tanh()],
        ),
        (8, 6, 2),
    ),
    # flat: an identity block inside the main body, a block with a projection as the shortcut
    (
        "dense, nested",
        lambda: Residual(
            L.Linear(6, 4),
            Residual(L.Dense(4, 4), L.Tanh()),
            shortcut=Residual(L.Dense(6, 4), shortcut=[L.Linear(6, 4)]),
        ),
        (6,),
    ),
]


@pytest.mark.parametrize("name,make,shape", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_projection_block_matches_float64_pytorch(name: str, make: Any, shape: tuple) -> None:
    """Forward, dL/dx (through both branches) and every parameter's gradient of a block alone, on 3 samples."""
    rng = np.random.default_rng(0)
    net = Sequential(make(), input_shape=shape).rand_params(seed=3)
    nb = 3
    x = rng.normal(size=(nb, *shape)).astype(np.float32)
    y, trace = net.traced_forward(x)
    g = rng.normal(size=y.shape).astype(np.float32)
    gin, grads = net.backprop(trace, g)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    pt = torch.tensor(net.params, dtype=torch.float64, requires_grad=True)
    yt = torch_forward(net, pt, xt, False, []).reshape(nb, -1)
    yt.backward(torch.tensor(g, dtype=torch.float64))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gin, xt.grad.numpy().reshape(nb, -1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads.values, pt.grad.numpy(), rtol=1e-5, atol=2e-5)
    # the shortcut's own parameters got a gradient that is not the main body's
    n_main = net[0].inner.param_count()
    assert np.abs(grads.values[n_main:]).max() > 1e-3


def resnet_like() -> Sequential:
    """A small ResNet on 6x6x2 images: stem conv-BatchNorm-relu, a block with a projection whose shortcut has a
    BatchNorm too, an identity block, pooling and a dense layer."""
    return Sequential(
        L.Conv2d(2, 4, 3, padding="same", bias=False),
        L.BatchNorm(4),
        L.Relu(),
        Residual(
            L.Conv2d(4, 6, 3, stride=2, padding="same", bias=False),
            L.BatchNorm(6),
            L.Relu(),
            L.Conv2d(6, 6, 3, padding="same", bias=False),
            L.BatchNorm(6, eps=1e-3, momentum=0.2),
            shortcut=[L.Conv2d(4, 6, 1, stride=2, bias=False), L.BatchNorm(6)],
        ),
        L.Relu(),
        Residual(L.Conv2d(6, 6, 3, padding="same"), L.Relu()),
        L.GlobalAvgPool2d(),
        L.Dense(6, 3),
        L.Softmax(),
        input_shape=(6, 6, 2),
    ).rand_params(seed=5)


@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_a_training_step_of_a_resnet_matches_pytorch(opt_name: str) -> None:
    """One train_batch on 5 samples (BatchNorm on batch statistics, in both branches): the mean loss, every
    parameter after the step and the running statistics agree with float64 PyTorch (the optimizers' first step by
    hand, as tests/test_batchnorm.py writes them)."""
    net = resnet_like()
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 6, 6, 2)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 5)]
    p0 = net.params.astype(np.float64)
    tp = TrainParams(lr=0.05)
    opt = optimizer_of_kind(net, opt_name, tp)
    loss = train_batch(opt, net, losses.cross_entropy, x, y)

    p = torch.tensor(p0, requires_grad=True)
    stats: List[Any] = []
    logits = torch_forward(net, p, torch.tensor(x, dtype=torch.float64), True, stats)
    ref_loss = -(torch.tensor(y, dtype=torch.float64) * torch.log_softmax(logits, 1)).sum(1).mean()
    ref_loss.backward()
    g = p.grad.numpy()
    want = first_step_by_hand(opt_name, p0, g, 0.05)
    # the running statistics move as PyTorch moves them; the BatchNorms in parameter order are the ones PyTorch met
    bns = [m for m in net.layers() if isinstance(m, L.BatchNorm)]
    assert len(bns) == len(stats) == 4
    offsets = {id(m): o for m, o in _leaf_offsets(net)}
    for m, (rm, rv) in zip(bns, stats):
        o, c = offsets[id(m)], m.channels
        want[o + 2 * c : o + 3 * c] = rm.numpy()
        want[o + 3 * c : o + 4 * c] = rv.numpy()
    assert abs(loss - ref_loss.item()) < 1e-5
    assert_first_step(net.params, want, g, opt_name)


def _leaf_offsets(m: Module, off: int = 0) -> List[Any]:
    """(leaf layer, offset of its first parameter in the network's vector), in parameter order."""
    kids = m.children()
    if not kids:
        return [(m, off)]
    out = []
    for c in kids:
        out += _leaf_offsets(c, off)
        off += c.param_count()
    return out


def test_folding_reaches_both_branches() -> None:
    """fold_batchnorm folds the BatchNorms of the main body and of the shortcut into the convolutions before them;
    the folded network computes what the original computes on its running statistics."""
    net = resnet_like()
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, 6, 6, 2)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 40)]
    opt = net.new_adam(TrainParams(lr=0.02))
    net.fit(opt, losses.cross_entropy, x, y, epochs=3, batch=8)  # running statistics away from 0 and 1
    folded = fold_batchnorm(net)
    assert not any(isinstance(m, L.BatchNorm) for m in folded.layers())
    block = folded[2]
    assert isinstance(block, Residual) and len(block.inner) == 3  # conv, relu, conv
    (conv,) = list(block.shortcut.layers())  # type: ignore[union-attr]
    assert isinstance(conv, L.Conv2d) and conv.bias  # the shortcut's BatchNorm became its convolution's bias
    np.testing.assert_allclose(folded.forward(x), net.forward(x), rtol=1e-4, atol=2e-6)


def test_shapes_are_checked_naming_both_branches() -> None:
    """A shortcut that gives another shape than the main body, or reads another input, fails at construction."""
    with pytest.raises(ShapeError) as e:
        Sequential(
            Residual(L.Conv2d(4, 8, 3, stride=2, padding="same"), shortcut=[L.Conv2d(4, 8, 1)]), input_shape=(8, 8, 4)
        )
    msg = str(e.value)
    assert "main body Conv2d(4->8, 3x3, stride 2, same)" in msg and "shortcut Conv2d(4->8, 1x1)" in msg
    assert "4x4x8" in msg and "8x8x8" in msg
    with pytest.raises(ShapeError, match=r"main body Linear\(4, 3\) takes 4 values but the shortcut Dense\(5, 3\)"):
        Residual(L.Linear(4, 3), shortcut=L.Dense(5, 3))
    with pytest.raises(ShapeError, match="maps 4 values to 3 values but the shortcut Dense\\(4, 2\\) maps it to 2"):
        Residual(L.Linear(4, 3), shortcut=[L.Dense(4, 2)])
    with pytest.raises(ShapeError, match="the shortcut is empty"):
        Residual(L.Linear(4, 4), shortcut=[])
    with pytest.raises(ShapeError, match="needs the same shape in and out .*shortcut="):
        Residual(L.Linear(4, 3))


def test_a_resnet_survives_a_model_file(tmp_path: Path) -> None:
    """Architecture (with the shortcut), parameters and optimizer state come back from a model file bit for bit."""
    net = resnet_like()
    opt = net.new_adam(TrainParams(lr=0.01))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 6, 6, 2)).astype(np.float32)
    train_batch(opt, net, losses.cross_entropy, x, np.eye(3, dtype=np.float32)[[0, 1, 2, 0]])
    save_model(tmp_path / "r.mct", net, opt)
    ck = load_model(tmp_path / "r.mct")
    assert (
        ck.net.describe() == net.describe()
        and "shortcut=Sequential(Conv2d(4->6, 1x1, stride 2, no bias), BatchNorm(6))" in net.describe()
    )
    assert np.array_equal(ck.net.params, net.params)
    assert np.array_equal(ck.net.forward(x), net.forward(x))
    assert ck.optimizer is not None and np.array_equal(ck.optimizer.state, opt.state)
    assert from_architecture(net.architecture()).describe() == net.describe()


def test_resnet8_has_the_reference_size() -> None:
    """MLPerf Tiny's ResNet-8: 78,666 parameters (Keras counts the BatchNorm statistics), 12,501,632 MACs; the
    program's two projection blocks and its one identity block, and the memory of every layer the core reports."""
    from mcutrain.corefacts import Op
    from mcutrain.tiny_models import resnet8

    net = resnet8()
    assert net.param_count() == 78_666
    assert sum(r["macs"] for r in net.summary()) == 12_501_632
    ops = [d.op for d in net.program.layers]
    assert ops.count(Op.RES_BEGIN) == 3 and ops.count(Op.RES_SHORTCUT) == 2 and ops.count(Op.RES_END) == 3
    folded = fold_batchnorm(net)
    assert folded.param_count() == 78_666 - 960  # the BatchNorms gone (their convolutions have biases already)
    assert folded.out_shape == (10,)
