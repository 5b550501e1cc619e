"""The host's matrix kernels (firmware/core/gemm.c, MCT_HOST with wide register tiles) give the bits of the fixed
summation order every device uses: each output is the float32 sum over the summed index in ascending order,
starting from the first product, whatever the tiling (full tiles, padded strips of narrow layers, partial rows,
blocks of the summed index, A read transposed, C stored transposed).

The oracle is NumPy in float32 doing exactly that sum, one product and one add at a time (elementwise ufuncs
round each operation once, as the core built with -ffp-contract=off does), so a kernel that reorders a sum,
fuses a multiply-add or drops a padded column's mask fails bit for bit. The shapes cover the host paths: widths
below, at and above the 16-wide tile, batch sizes that are not multiples of the 4-row tile, summed indices longer
than the strip kernel's 64-row blocks, and batches both narrower and wider than the layer's input (the two ways
dL/dx is computed)."""

from __future__ import annotations

import numpy as np
import pytest

import mcutrain as mct
from mcutrain import layers as L

SHAPES = [  # (samples, inputs, outputs)
    (1, 5, 3),
    (3, 20, 10),
    (10, 35, 10),
    (32, 128, 10),
    (32, 64, 128),
    (70, 130, 17),
    (5, 200, 33),
    (100, 3, 50),
    (67, 16, 16),
    (9, 150, 7),
]


def ordered_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b in float32 with each output summed over k ascending from the k = 0 product."""
    acc = a[:, 0:1] * b[0:1, :]
    for k in range(1, a.shape[1]):
        acc = acc + a[:, k : k + 1] * b[k : k + 1, :]
    return acc


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


@pytest.mark.parametrize("nb,n_in,n_out", SHAPES)
def test_dense_forward_and_backward_sum_in_the_fixed_order(nb: int, n_in: int, n_out: int) -> None:
    rng = np.random.default_rng(nb * 1000 + n_in * 10 + n_out)
    net = mct.Sequential(L.Linear(n_in, n_out)).rand_params(seed=nb)
    W = net.params[: n_in * n_out].reshape(n_in, n_out)
    b = net.params[n_in * n_out :]
    x = rng.standard_normal((nb, n_in)).astype(np.float32)
    gy = rng.standard_normal((nb, n_out)).astype(np.float32)

    y, trace = net.traced_forward(x)
    assert np.array_equal(bits(y), bits(ordered_matmul(x, W) + b))

    gx, grads = net.backprop(trace, gy)
    assert np.array_equal(bits(gx), bits(ordered_matmul(gy, W.T)))  # sum over outputs, ascending
    dW = grads.values[: n_in * n_out].reshape(n_in, n_out)
    assert np.array_equal(bits(dW), bits(ordered_matmul(x.T, gy)))  # sum over samples, in sample order
    db = gy[0].copy()
    for s in range(1, nb):
        db = db + gy[s]
    assert np.array_equal(bits(grads.values[n_in * n_out :]), bits(db))


@pytest.mark.parametrize("nb", [1, 3, 32, 48])
def test_the_optimizer_divides_by_the_batch_size_exactly(nb: int) -> None:
    """The batch mean of the gradients: a power-of-two batch size is applied as a multiplication by its
    reciprocal, which must give the quotient's bits (and the same flush of a subnormal one)."""
    net = mct.Sequential(L.Linear(4, 3))
    net.params = np.zeros(15, np.float32)  # w = 0 - q: every bit of the applied quotient shows
    start = net.params.copy()
    opt = net.new_sgd(mct.TrainParams(lr=1.0))
    grads = np.float32(
        [3.0, -7.0, 1e-30, -1e-37, 5e-38, 1.7e-38, 123.456, -0.1, 2.5e-45, 0.0, 3e38, -1e-5, 7.0, 1.0, 9.0]
    )
    net.update(opt, mct.Gradients(grads, nb))
    q = grads / np.float32(nb)
    if nb > 1:  # a batch of one is not divided at all
        q = np.where(np.abs(q) < np.float32(1.17549435e-38), q * np.float32(0), q).astype(np.float32)
    assert np.array_equal(bits(net.params), bits(start - q))
