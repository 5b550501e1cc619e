"""bench/train_throughput.py: it runs (no timing is checked), and the plain NumPy step it measures mcutrain
against is the same training step as mcutrain's train_batch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import List

import numpy as np
import pytest

from helpers import load_bench
from mcutrain import Sequential, TrainParams, losses, train_batch
from mcutrain import layers as L
from mcutrain.module import Module

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "train_throughput.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """bench/train_throughput.py imported by its path (bench/ is not a package)."""
    return load_bench("train_throughput")


def test_the_benchmark_runs_and_reports_both_networks(tmp_path: Path) -> None:
    """A short run exits 0 and reports samples/s for both networks (NumPy and mcutrain rows) and for the two CNNs
    (mcutrain and PyTorch rows), also as JSON."""
    out = tmp_path / "bench.json"
    r = subprocess.run(
        [sys.executable, str(BENCH), "--seconds", "0.05", "--rounds", "1", "--json", str(out)],
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "network A: 20-35-10 (sigmoid, softmax), batch 10" in r.stdout, r.stdout
    assert "network B: 64-128-128-10 (relu, relu, softmax), batch 32" in r.stdout, r.stdout
    for section in r.stdout.split("\nnetwork ")[1:]:
        assert "numpy" in section and "mcutrain 1 thread" in section, section
    figures = json.loads(out.read_text())
    assert set(figures) == {"A", "B", "digits_cnn", "ds_cnn"}
    for name in ("A", "B"):
        row = figures[name]
        assert row["numpy"] > 0 and row["mcutrain 1 thread"] > 0
        assert row["numpy epochs"] > 0 and row["mcutrain fit 1 thread"] > 0  # whole epochs through fit
    for name in ("digits_cnn", "ds_cnn"):  # the CNNs beside PyTorch on one thread, with their targets
        row = figures[name]
        assert row["mcutrain fit 1 thread"] > 0 and row["pytorch 1 thread"] > 0
        assert f"\n{name}: Adam, cross-entropy, batch 32" in r.stdout
    assert "mcutrain fit 1 thread" in r.stdout and ">= 25x" in r.stdout  # the row with its target beside it
    assert ">= 5x" in r.stdout and ">= 1x" in r.stdout


def bench_net(bench: ModuleType, sizes: List[int], acts: List[str]) -> Module:
    """The network bench.mcutrain_step trains: Linear layers with the activations, Softmax last, seed 1."""
    mods: List[Module] = []
    for i in range(len(sizes) - 1):
        mods.append(L.Linear(sizes[i], sizes[i + 1]))
        mods.append({"sigmoid": L.Sigmoid, "relu": L.Relu}[acts[i]]() if i < len(acts) else L.Softmax())
    return Sequential(*mods).rand_params(seed=1)


def test_numpy_step_is_mcutrains_step(bench: ModuleType) -> None:
    """From the same parameters (mcutrain's Linear weights and biases copied into NumpyNet's W and b), three
    steps of NumpyNet.step and of train_batch (logit BCE, RMSProp with momentum, as the benchmark runs them)
    on the same batches of network A (the README network) give the same parameters within float32
    rounding.

    Tolerance: both compute the same float32 formulas, but NumPy's BLAS sums the matrix products in another
    order than the core's fixed ascending order, NumPy's exp is not the core's mct_expf (both within 1.5
    ulp), and the optimizer groups (1 - beta) * g * g differently; so each gradient differs in its last bits.
    RMSProp divides each gradient by the root of its own running square, so a relative difference of g stays
    that size in the step (the gradients here are far from 0), and the three steps (which move parameters
    by up to about 0.25, of magnitude up to about 1.5) end a few float32 ulps apart: observed <= 3.5e-7
    over 20 batch seeds. ATOL = 2e-6 (about 16 ulps at 1.0) is over 20,000 times smaller than the first
    step alone (lr * sqrt(5) = 0.045 for every parameter), so a wrong factor, sign, learning rate, momentum
    or bias update fails it. Network B is not compared: after one step its softmax outputs fall below the
    loss's 1e-7 clamp, and there NumpyNet's softmax backward uses the clamped outputs while mcutrain's uses
    the softmax's own outputs, so the two steps really differ."""
    ATOL = 2e-6
    sizes, acts, batch = bench.NETS["A"]
    net = bench_net(bench, sizes, acts)
    opt = net.new_rmsprop_with_momentum(TrainParams(lr=bench.LR), bench.MOMENTUM, bench.BETA)
    bench_step = bench.mcutrain_step(sizes, acts, 1)  # the benchmark's own mcutrain step, for comparison
    numpy_net = bench.NumpyNet(sizes, acts)
    off = 0
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        numpy_net.W[i][...] = net.params[off : off + n_in * n_out].reshape(n_in, n_out)
        off += n_in * n_out
        numpy_net.b[i][...] = net.params[off : off + n_out]
        off += n_out
    assert off == net.param_count()
    start = net.params.copy()
    for x, y in bench.make_data(sizes, batch, n_batches=3, seed=11):
        loss = train_batch(opt, net, losses.logit_bce, x, y)
        assert np.float32(bench_step(x, y)).tobytes() == np.float32(loss).tobytes(), (
            "the benchmark's mcutrain step is not the one built here"
        )
        assert numpy_net.step(x, y) == pytest.approx(loss, rel=1e-6)
    numpy_params = np.concatenate([a.ravel() for pair in zip(numpy_net.W, numpy_net.b) for a in pair])
    assert numpy_params.dtype == np.float32
    np.testing.assert_allclose(numpy_params, net.params, rtol=0, atol=ATOL)
    assert np.median(np.abs(net.params - start)) > 0.01, "three steps hardly moved the parameters"


def test_tiny_models_split_and_what_is_not_supported() -> None:
    """bench/tiny_models.py: its DS-CNN prefixes start with the DS-CNN's own convolutions (same ops, sizes and
    geometry), each longer one by one layer and its ReLU; the int8-full path converts DS-CNN, the autoencoder and
    the digits CNN whole, and ResNet-8 too (its residual blocks as int8 blocks), its outputs near the f32 network's."""
    from mcutrain.tiny_models import ds_cnn

    tiny = load_bench("tiny_models")
    full = ds_cnn(batchnorm=False).program.layers
    for n, k in ((1, 2), (2, 4), (3, 6)):
        pre = tiny.ds_cnn_prefix(n).program.layers
        assert [(d.op, d.n_in, d.n_out, d.geometry) for d in pre[:k]] == [
            (d.op, d.n_in, d.n_out, d.geometry) for d in full[:k]
        ]
        assert [d.op.name for d in pre[k:]] == ["AVGPOOL2D", "DENSE", "SOFTMAX"]
    for net in ("ds_cnn", "fc_autoencoder", "digits_cnn", "resnet8"):
        assert tiny.int8_gap(net, "nucleo_f401re") is None, net
    # the int8 tensors at their peak: DS-CNN's two 25x5x64 activations, the digits CNN's 8x8x8 and 4x4x8 (as CMSIS-NN)
    assert tiny.activations("ds_cnn", "nucleo_f401re").startswith(f"{2 * 25 * 5 * 64:,} int8 at peak")
    assert tiny.activations("digits_cnn", "nucleo_f401re").startswith(f"{8 * 8 * 8 + 4 * 4 * 8:,} int8 at peak")
    t = tiny.int8_tracking("resnet8", "nucleo_f401re")  # the int8 ResNet-8 follows the f32 one
    assert t["max_diff"] < 0.01 and t["argmax_agree"] >= 0.8, t
