"""Forward values and gradients of every layer, composition and loss of the C core, checked against
an independent float64 NumPy oracle (tests/oracle.py) and its central finite differences.

Tolerances (relative to the largest magnitude in the expected array, see assert_close; float32 eps is
1.19e-7, and "ulp" below means that relative size):
- FWD_RTOL = 1e-5 (~84 ulp): C-core float32 forward vs the float64 oracle. Inputs and parameters are the
  same float32 numbers in both, so only float32 rounding differs: 0.5 ulp per op, <= 2.5 ulp for the
  core's exp/log/tanh/sin/cos, about n roundings for a dot product of length n. Observed: <= 1.5e-7.
- GRAD_RTOL = 2e-5 (~170 ulp): float32 analytic gradients of one layer or a small composition vs float64
  central differences (h = 1e-6: truncation h^2 f''' ~ 1e-12 and roundoff 1e-16 / h ~ 1e-10 are
  negligible). Observed over many seeds: <= 9e-7.
- GRAD_RTOL_NET = 1e-3 for the deep full network only: its input gradient is a small difference of O(1)
  backward signals (RMSNorm and softmax project components out; a small RMS input amplifies by 1/r), so
  ordinary float32 rounding reaches ~1e-4 of the result (observed: <= 9e-5 over 15 seeds). The
  per-layer checks carry the tight bound; a real bug (wrong factor, sign, index, sample) is off by O(1).
- LOSS_RTOL = 1e-5: loss values and gradients (one short float32 reduction per sample).
Inputs are redrawn until every ReLU / leaky-ReLU argument (layers and GLU gates) is at least KINK_MARGIN
away from 0, which the finite differences (perturbations ~ h * max|x| ~ 1e-5) cannot cross.
"""

from __future__ import annotations

from typing import Callable, List, Tuple

import layer_table
import numpy as np
import pytest

import oracle
from helpers import assert_same_bits
from mcutrain import LR, Residual, Sequential, losses
from mcutrain.layers import (
    GLU,
    Bias1d,
    Cosine,
    Dense,
    Diag,
    DyT,
    LeakyRelu,
    Linear,
    Relu,
    ReluGLU,
    RMSNorm,
    ScalarScale,
    Sigmoid,
    SiLU,
    Sine,
    SingleChannelConv1d,
    Softmax,
    Softplus,
    SwiGLU,
    Swish,
    Tanh,
    TanhGLU,
)
from mcutrain.module import Module

FWD_RTOL = 1e-5
GRAD_RTOL = 2e-5
GRAD_RTOL_NET = 1e-3
LOSS_RTOL = 1e-5
KINK_MARGIN = 1e-3
NB = 5  # samples per batch: > 1 so the summation over samples is checked, and > the host's 4-row gemm tile
F32, F64 = np.float32, np.float64


def full_network() -> Sequential:
    """A deep network of many layer types with nested Residual / LR (the table's every_layer_net is the one
    that holds every row; this one is checked with GRAD_RTOL_NET)."""
    return Sequential(
        Linear(5, 8),
        Tanh(),
        GLU(8, 8, "sigmoid"),
        RMSNorm(8),
        ReluGLU(8, 8),
        GLU(8, 8, "leaky_relu", alpha=0.3),
        TanhGLU(8, 8),
        SwiGLU(8, 8),
        Residual(Sequential(Dense(8, 8), LeakyRelu(), Bias1d(8))),
        LR(Sequential(Diag(8), Swish(), LR(ScalarScale(), 2.0)), 3.0),
        RMSNorm(8, eps=1e-3),
        DyT(8),
        SingleChannelConv1d(8, 6, 3),
        Sine(),
        Relu(),
        Cosine(),
        SiLU(),
        Softplus(),
        Sigmoid(),
        Residual(LR(Linear(6, 6), 5.0)),
        Softmax(2.5),
    )


# every row of the layer table, then variants that exercise tiling and settings, and compositions
CASES: List[Tuple[str, Callable[[], Module]]] = list(layer_table.ROWS) + [
    ("Dense-tiled", lambda: Dense(18, 20)),
    ("Linear-tiled", lambda: Linear(6, 17)),
    ("LeakyRelu-default", lambda: LeakyRelu(n=4)),
    ("Softmax-T1", lambda: Softmax(1.0, 5)),
    ("GLU-leaky_relu-default", lambda: GLU(4, 3, "leaky_relu")),
    ("RMSNorm-eps0.5", lambda: RMSNorm(4, eps=0.5)),
    ("Conv1d-F1", lambda: SingleChannelConv1d(3, 3, 1)),
    ("Conv1d-F=I", lambda: SingleChannelConv1d(4, 1, 4)),
    ("Residual(Tanh)", lambda: Residual(Tanh(4))),
    ("Residual(Sequential)", lambda: Residual(Sequential(Linear(4, 6), Tanh(), Dense(6, 4), Bias1d()))),
    ("LR(Sequential)", lambda: LR(Sequential(Linear(4, 5), Swish(), Dense(5, 3)), 4.0)),
    ("Residual(Residual)", lambda: Residual(Residual(Diag(4)), Relu())),
    ("LR(LR(Residual))", lambda: LR(LR(Residual(Sequential(Linear(4, 4), SiLU())), 2.0), 3.0)),
    # shortcuts: an identity block inside the main body, a residual block as the shortcut, an LR inside a shortcut
    (
        "Residual(shortcut, nested)",
        lambda: Residual(
            Linear(4, 3), Residual(Diag(3)), Tanh(), shortcut=Residual(Dense(4, 3), shortcut=[Linear(4, 3)])
        ),
    ),
    ("Residual(shortcut=LR)", lambda: Residual(Sigmoid(4), Linear(4, 2), shortcut=[LR(Dense(4, 2), 3.0), Bias1d(2)])),
    (
        "Sequential-in-both",
        lambda: Sequential(Residual(Sequential(Linear(3, 3), Sigmoid())), LR(Sequential(DyT(3), Linear(3, 2)), 2.0)),
    ),
    ("full-network", full_network),
]
IDS = [c[0] for c in CASES]


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float, what: str) -> None:
    """|actual - expected| <= rtol * (|expected| + max|expected|) elementwise: float32 rounding scales with
    the magnitude of the terms that were summed, not with a (possibly cancelled) result."""
    a, e = np.asarray(actual, F64), np.asarray(expected, F64)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    assert np.all(np.isfinite(a)), f"{what}: non-finite values {a}"
    scale = max(float(np.max(np.abs(e))) if e.size else 0.0, 1e-3)
    np.testing.assert_allclose(a, e, rtol=rtol, atol=rtol * scale, err_msg=what)


def build(factory: Callable[[], Module], seed: int = 1) -> Tuple[Module, np.ndarray, np.ndarray]:
    """(module with random, perturbed params; float32 inputs (NB, n_in) clear of kinks; float32 upstream
    gradients (NB, n_out))."""
    m = factory()
    m.rand_params(seed)
    rng = np.random.default_rng(seed + 100)
    # many layers default to constants (Diag/RMSNorm/DyT gains 1, ScalarScale 0.5, tiny biases): perturb all
    m.params = m.params + rng.normal(0.0, 0.3, m.param_count()).astype(F32)
    assert m.n_in is not None and m.n_out is not None
    p64 = m.params.astype(F64)
    for _ in range(100):
        x = rng.normal(0.0, 1.0, (NB, m.n_in)).astype(F32)
        kinks: List[np.ndarray] = []
        oracle.forward(m, p64, x.astype(F64), kinks)
        if not kinks or min(k.min() for k in kinks) > KINK_MARGIN:
            break
    else:
        raise AssertionError(f"could not draw inputs clear of the kinks of {m.describe()}")
    g = rng.normal(0.0, 1.0, (NB, m.n_out)).astype(F32)
    return m, x, g


def grad_rtol(factory: Callable[[], Module]) -> float:
    """Gradient tolerance of a case (see the module docstring)."""
    return GRAD_RTOL_NET if factory is full_network else GRAD_RTOL


def fd_grads(m: Module, x: np.ndarray, g: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Central differences of L = sum(g * oracle(x)) w.r.t. x and w.r.t. the flat parameters."""
    p64, x64, g64 = m.params.astype(F64), x.astype(F64), g.astype(F64)
    d_x = oracle.central_diff(lambda v: float(np.sum(g64 * oracle.forward(m, p64, v))), x64)
    d_p = oracle.central_diff(lambda v: float(np.sum(g64 * oracle.forward(m, v, x64))), p64)
    return d_x, d_p


# ---------------------------------------------------------------- layers


@pytest.mark.parametrize("factory", [c[1] for c in CASES], ids=IDS)
def test_forward_matches_oracle(factory: Callable[[], Module]) -> None:
    m, x, _ = build(factory)
    y = m.forward(x)
    assert y.dtype == F32 and y.shape == (NB, m.n_out)
    assert_close(y, oracle.forward(m, m.params.astype(F64), x.astype(F64)), FWD_RTOL, f"{m.describe()} forward")
    # one sample at a time gives the batch's rows, bit for bit (every sum has a fixed order, whatever the
    # batch size and the tiling)
    for s in range(NB):
        assert_same_bits(m.forward(x[s]), y[s], f"{m.describe()} forward of sample {s}")


@pytest.mark.parametrize("factory", [c[1] for c in CASES], ids=IDS)
def test_backprop_matches_finite_differences(factory: Callable[[], Module]) -> None:
    m, x, g = build(factory)
    before = m.params.copy()
    y, trace = m.traced_forward(x)
    np.testing.assert_array_equal(y, m.forward(x))
    gin, grads = m.backprop(trace, g)
    np.testing.assert_array_equal(m.params, before)  # backprop only computes, it does not update
    assert gin.shape == x.shape and gin.dtype == F32
    assert grads.values.shape == (m.param_count(),) and grads.samples == NB
    d_x, d_p = fd_grads(m, x, g)
    tol = grad_rtol(factory)
    assert_close(gin, d_x, tol, f"{m.describe()} input gradient")
    # d_p is the gradient of a sum over the samples: Gradients.values are summed, .mean() divides by NB
    assert_close(grads.values, d_p, tol, f"{m.describe()} parameter gradients (summed over samples)")
    assert_close(grads.mean(), d_p / NB, tol, f"{m.describe()} mean parameter gradients")
    # input gradients are per sample: a batch of one gives the batch's row bit for bit; the batch's parameter
    # gradient sums the samples in another order than adding one-sample sums (float32 rounding differs), so
    # that sum is compared within FWD_RTOL
    total = np.zeros(m.param_count(), F64)
    for s in range(NB):
        _, t1 = m.traced_forward(x[s : s + 1])
        gi1, g1 = m.backprop(t1, g[s : s + 1])
        assert_same_bits(gi1[0], gin[s], f"{m.describe()} input gradient of sample {s}")
        total += g1.values
    assert_close(total, grads.values, FWD_RTOL, f"{m.describe()} sum of per-sample parameter gradients")


@pytest.mark.parametrize("factory", [c[1] for c in CASES], ids=IDS)
def test_single_sample_gives_1d_gradients(factory: Callable[[], Module]) -> None:
    m, x, g = build(factory, seed=7)
    y, trace = m.traced_forward(x[0])
    assert y.shape == (m.n_out,) and trace.single and trace.samples == 1
    gin, grads = m.backprop(trace, g[0])
    assert gin.shape == (m.n_in,) and gin.dtype == F32
    assert grads.values.shape == (m.param_count(),) and grads.samples == 1
    d_x, d_p = fd_grads(m, x[:1], g[:1])
    assert_close(gin, d_x[0], grad_rtol(factory), f"{m.describe()} single-sample input gradient")
    assert_close(grads.values, d_p, grad_rtol(factory), f"{m.describe()} single-sample parameter gradients")
    np.testing.assert_array_equal(grads.mean(), grads.values)


def test_lr_wrapper_does_not_change_gradients() -> None:
    """LR only divides the learning rate: forward and backprop equal those of the bare module."""
    inner, _, _ = build(lambda: Sequential(Linear(4, 5), Swish(), Dense(5, 3)))
    wrapped = LR(Sequential(Linear(4, 5), Swish(), Dense(5, 3)), 7.0)
    wrapped.params = inner.params
    x = np.random.default_rng(3).normal(size=(NB, 4)).astype(F32)
    g = np.random.default_rng(4).normal(size=(NB, 3)).astype(F32)
    ya, ta = inner.traced_forward(x)
    yb, tb = wrapped.traced_forward(x)
    np.testing.assert_array_equal(ya, yb)
    (gia, ga), (gib, gb) = inner.backprop(ta, g), wrapped.backprop(tb, g)
    np.testing.assert_array_equal(gia, gib)
    np.testing.assert_array_equal(ga.values, gb.values)


# ---------------------------------------------------------------- losses


def loss_data(name: str, rng: np.random.Generator, beta: float) -> Tuple[np.ndarray, np.ndarray]:
    """(y, t) float32 (NB, 6) in the domain of the loss, clear of its kinks."""
    shape = (NB, 6)
    if name == "huber":
        t = rng.normal(0.0, 1.0, shape)
        mag = np.where(
            rng.random(shape) < 0.5, rng.uniform(0.05, beta - 0.05, shape), rng.uniform(beta + 0.05, 3 * beta, shape)
        )
        mag[:, 0], mag[:, 1] = 0.5 * beta, 2.0 * beta  # both regimes in every sample
        y = t + rng.choice([-1.0, 1.0], shape) * mag
    elif name == "logit_bce":
        y, t = rng.uniform(0.05, 0.95, shape), rng.uniform(0.0, 1.0, shape)
        t[:, 0], t[:, 1] = 0.0, 1.0
    elif name == "cross_entropy":
        z = rng.normal(0.0, 1.0, shape)
        y = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        t = rng.random(shape)
        t /= t.sum(axis=1, keepdims=True)
    else:
        y, t = rng.normal(0.0, 1.0, shape), rng.normal(0.0, 1.0, shape)
    y32, t32 = y.astype(F32), t.astype(F32)
    if name == "huber":  # the float32 rounding must not move a difference onto the kink |d| = beta
        assert np.min(np.abs(np.abs(y32.astype(F64) - t32) - beta)) > 0.04
    return y32, t32


LOSSES = [
    ("mse", losses.mse, 1.0),
    ("huber-0.7", losses.huber(0.7), 0.7),
    ("huber-2", losses.huber(2.0), 2.0),
    ("logit_bce", losses.logit_bce, 1.0),
    ("cross_entropy", losses.cross_entropy, 1.0),
    ("cosine", losses.cosine, 1.0),
]


@pytest.mark.parametrize("loss,beta", [(lo, b) for _, lo, b in LOSSES], ids=[n for n, _, _ in LOSSES])
def test_loss_value_and_gradient(loss: losses.Loss, beta: float) -> None:
    rng = np.random.default_rng(11)
    y, t = loss_data(loss.name, rng, beta)
    value, grad = loss(y, t)
    y64, t64 = y.astype(F64), t.astype(F64)
    per = oracle.loss_per_sample(loss.name, y64, t64, beta)
    assert isinstance(value, float)
    assert_close(value, per.mean(), LOSS_RTOL, f"{loss} mean loss")
    # per sample, the gradient is d loss_s / d y_s: the FD of the sum of the per-sample losses
    d_y = oracle.central_diff(lambda v: float(oracle.loss_per_sample(loss.name, v, t64, beta).sum()), y64)
    assert grad.shape == y.shape and grad.dtype == F32
    assert_close(grad, d_y, LOSS_RTOL, f"{loss} gradient")
    for s in range(NB):  # one sample (1-D) gives that sample's loss and a 1-D gradient
        v1, g1 = loss(y[s], t[s])
        assert g1.shape == (y.shape[1],)
        assert_close(v1, per[s], LOSS_RTOL, f"{loss} loss of sample {s}")
        assert_close(g1, grad[s], LOSS_RTOL, f"{loss} gradient of sample {s}")


def test_losses_clamp_probabilities() -> None:
    """logit_bce clamps y to [1e-7, 1 - 1e-7] and cross_entropy at 1e-30: finite at y = 0 or 1."""
    y = np.array([[0.0, 1.0, 0.5, 1e-9]], F32)
    t = np.array([[1.0, 0.0, 1.0, 1.0]], F32)
    for name, loss in (("logit_bce", losses.logit_bce), ("cross_entropy", losses.cross_entropy)):
        value, grad = loss(y, t)
        expect = oracle.loss_per_sample(name, y.astype(F64), t.astype(F64))[0]
        assert np.isfinite(value) and np.all(np.isfinite(grad)), name
        assert_close(value, expect, LOSS_RTOL, f"clamped {name}")  # dominated by -log(clamp)


def test_cosine_zero_norm() -> None:
    for y, t in (([0.0, 0.0, 0.0], [1.0, 2.0, 3.0]), ([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])):
        value, grad = losses.cosine(np.array(y, F32), np.array(t, F32))
        assert value == 1.0
        np.testing.assert_array_equal(grad, np.zeros(3, F32))


def test_huber_regimes_match_mse_and_l1() -> None:
    """Within beta Huber is half the MSE; far outside it is beta * (mean|d| - beta/2)."""
    rng = np.random.default_rng(5)
    y, t = rng.normal(size=(NB, 4)).astype(F32), rng.normal(size=(NB, 4)).astype(F32)
    v_small, g_small = losses.huber(100.0)(y, t)
    v_mse, g_mse = losses.mse(y, t)
    assert_close(v_small, v_mse / 2, LOSS_RTOL, "huber quadratic regime")
    assert_close(g_small, g_mse / 2, LOSS_RTOL, "huber quadratic gradient")
    d = (y - t).astype(F64)
    v_big, g_big = losses.huber(1e-3)(y, t)
    assert_close(v_big, np.mean(1e-3 * (np.abs(d) - 5e-4)), LOSS_RTOL, "huber linear regime")
    assert_close(g_big, 1e-3 * np.sign(d) / 4, LOSS_RTOL, "huber linear gradient")
