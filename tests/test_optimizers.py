"""Optimizers and TrainParams against an independent float32 NumPy re-derivation of the update rules.

Each test runs a few train_batch steps on a small network and, in parallel, a NumPy model of the
optimizer that follows the documented float32 operation order. The gradients the NumPy model uses
come from traced_forward + backprop on a clone of the network holding the model's own parameters,
so only the optimizer (schedule, clipping, L1/L2, LR divisors, slots, step) is under test.

Every elementary float32 operation the optimizer uses (+, -, *, /, sqrt) is correctly rounded both in
C and in NumPy, so parameters, slots and step are compared for exact equality. The only exceptions
are the two transcendental functions: the cosine schedule (cos) and the similarity penalty (log).
The core has its own portable cos/log (firmware/core/mct_math.h) which differ from NumPy's in the
last bit for some arguments; exact tests use the core's primitives through mcutrain._core.math_eval
(the formula around them is still ours), and separate tests use NumPy's cos/log with a tight tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import pytest

from mcutrain import LR, ConfigError, Optimizer, Sequential, TrainParams, _core, losses, train_batch
from mcutrain import layers as L
from mcutrain.module import Module, as_optimizer

F = np.float32
STEPS = 4
NB = 5

Fn = Callable[[np.float32], np.float32]


def np_cos(x: np.float32) -> np.float32:
    """NumPy's float32 cosine."""
    return F(np.cos(F(x)))


def np_log(x: np.float32) -> np.float32:
    """NumPy's float32 natural log."""
    return F(np.log(F(x)))


def core_cos(x: np.float32) -> np.float32:
    """The core's portable cosine (mct_cosf), so the schedule formula can be checked bit for bit."""
    return F(_core.math_eval("cos", np.array([x], np.float32))[0])


def core_log(x: np.float32) -> np.float32:
    """The core's portable log (mct_logf)."""
    return F(_core.math_eval("log", np.array([x], np.float32))[0])


def seqsum(a: np.ndarray) -> np.float32:
    """Float32 sum in index order (as a C loop `s = s + a[i]` does; np.sum would sum pairwise)."""
    a = np.asarray(a, np.float32).ravel()
    return F(np.cumsum(a, dtype=np.float32)[-1]) if a.size else F(0)


# ----------------------------------------------------------------------------- networks


def net_all_kinds(seed: int = 11) -> Sequential:
    """A small network with every kind of parameter: connection weights (Conv1d, Linear, SwiGLU, Dense)
    and non-weights (biases, Diag, DyT, ScalarScale, Swish beta, RMSNorm gain, SwiGLU beta)."""
    net = Sequential(
        L.SingleChannelConv1d(8, 6, 3),
        L.Linear(6, 5),
        L.Tanh(),
        L.SwiGLU(5, 4),
        L.Diag(),
        L.DyT(),
        L.Dense(4, 4),
        L.Bias1d(),
        L.ScalarScale(),
        L.Swish(),
        L.RMSNorm(),
        L.Linear(4, 3),
    )
    net.rand_params(seed=seed, scale=1.0)
    # move the init-constant parameters off their defaults so nothing is special (e.g. exactly 1)
    rng = np.random.default_rng(seed + 1)
    p = net.params.copy()
    p += rng.normal(0, 0.05, p.shape).astype(np.float32)
    net.params = p
    return net


def net_with_lr(seed: int = 12) -> Sequential:
    """A network with LR wrappers, one of them nested (divisors 4, 3 and 3*2)."""
    net = Sequential(
        LR(L.Linear(6, 5), 4.0), L.Tanh(), LR(Sequential(LR(L.Dense(5, 4), 2.0), L.Bias1d()), 3.0), L.Linear(4, 3)
    )
    return net.rand_params(seed=seed, scale=1.0)


NETS: Dict[str, Callable[[], Sequential]] = {"all_kinds": net_all_kinds, "lr": net_with_lr}


def weight_mask(net: Module) -> np.ndarray:
    """True for connection weights (Dense/Linear W, GLU Wg/Wv, Conv1d w), from the documented layouts."""
    parts: List[np.ndarray] = []
    for m in net.layers():
        n = m.param_count()
        if isinstance(m, L.Dense):
            nw = n
        elif isinstance(m, L.Linear):
            nw = m.n_in * m.n_out
        elif isinstance(m, L.GLU):
            nw = 2 * m.n_in * m.n_out
        elif isinstance(m, L.SingleChannelConv1d):
            nw = m.filter_size
        else:
            nw = 0
        mask = np.zeros(n, bool)
        mask[:nw] = True
        parts.append(mask)
    return np.concatenate(parts) if parts else np.zeros(0, bool)


def lr_divisors(m: Module, d: float = 1.0) -> np.ndarray:
    """Per-parameter learning-rate divisor: LR wrappers multiply (the product is kept as float32)."""
    if isinstance(m, LR):
        d = float(F(d * m.divisor))
    kids = m.children()
    if not kids:
        return np.full(m.param_count(), d, np.float32)
    return np.concatenate([lr_divisors(c, d) for c in kids])


def batch_data(n_in: int, n_out: int, nb: int = NB, seed: int = 5) -> List[Tuple[np.ndarray, np.ndarray]]:
    """STEPS seeded (x, target) batches."""
    rng = np.random.default_rng(seed)
    return [
        (rng.normal(0, 1, (nb, n_in)).astype(np.float32), rng.normal(0, 0.5, (nb, n_out)).astype(np.float32))
        for _ in range(STEPS + 1)
    ]


def mse_ref(y: np.ndarray, t: np.ndarray) -> Tuple[np.float32, np.ndarray]:
    """(mean MSE over the batch, dL/dy) in float32 in the documented order."""
    d = (y - t).astype(np.float32)
    nb, n = d.shape
    per = np.array([seqsum(d[s] * d[s]) / F(n) for s in range(nb)], np.float32)
    return F(seqsum(per) / F(nb)), ((d + d) / F(n)).astype(np.float32)


# ----------------------------------------------------------------------------- the NumPy optimizer


def ref_lr_at(tp: TrainParams, step: int, cos: Fn = core_cos) -> np.float32:
    """lr_at(step): schedule, then warm-up, in float32."""
    lr, lrf, n = F(tp.lr), F(tp.lr_final), tp.decay_steps
    if n and tp.schedule == "linear":
        t = min(step, n)
        lr = F(lr + (lrf - lr) * (F(t) / F(n)))
    elif n and tp.schedule == "cosine":
        if step >= n:
            lr = lrf
        else:
            c = cos(F(F(np.pi) * (F(step) / F(n))))
            lr = F(lrf + (lr - lrf) * (F(0.5) * (F(1) + c)))
    if tp.warmup_steps and step < tp.warmup_steps:
        lr = F(lr * (F(step + 1) / F(tp.warmup_steps)))
    return F(lr)


@dataclass
class RefOptimizer:
    """The documented optimizer update, vectorized in float32 NumPy."""

    kind: str
    tp: TrainParams
    mask: np.ndarray
    div: np.ndarray
    momentum: float = 0.9
    beta: float = 0.9
    beta1: float = 0.9
    eps: Optional[float] = None
    sim_penalty: float = 0.0
    cos: Fn = core_cos
    log: Fn = core_log
    state: np.ndarray = field(init=False)
    step: int = 0
    b1t: np.float32 = F(1)
    b2t: np.float32 = F(1)

    def __post_init__(self) -> None:
        slots = {"sgd": 0, "momentum": 1, "rmsprop": 1, "rmsprop_momentum": 2, "adam": 2}[self.kind]
        self.state = np.zeros((slots, self.mask.size), np.float32)
        if self.eps is None:
            self.eps = 1e-8 if self.kind == "adam" else 1e-20
        if self.kind != "adam":
            self.beta1 = 0.0

    def similarity(self, v: np.ndarray, gsum: np.ndarray) -> np.float32:
        """log2(2 (c + 1) + tau) + 0.25 with c = cos(velocity, summed gradient); 1 when off or a norm is 0."""
        if not self.sim_penalty > 0 or self.kind not in ("momentum", "rmsprop_momentum"):
            return F(1)
        dot, vv, gg = seqsum(v * gsum), seqsum(v * v), seqsum(gsum * gsum)
        if vv == 0 or gg == 0:
            return F(1)
        c = F(dot / F(np.sqrt(vv) * np.sqrt(gg)))
        return F(self.log(F(F(2) * (c + F(1)) + F(self.sim_penalty))) * F(1.44269502) + F(0.25))

    def update(self, w: np.ndarray, gsum: np.ndarray, nb: int, loss: np.float32) -> np.ndarray:
        """New parameters after one step with gradient sums gsum over nb samples; updates slots and step."""
        tp = self.tp
        mu, beta, beta1, eps = F(self.momentum), F(self.beta), F(self.beta1), F(self.eps)
        v_old = (
            self.state[0] if self.kind == "momentum" else (self.state[1] if self.kind == "rmsprop_momentum" else None)
        )
        sim = self.similarity(v_old, gsum) if v_old is not None else F(1)
        lr = ref_lr_at(tp, self.step, self.cos)
        if tp.scale_by_loss:
            lr = F(lr * F(loss))
        lr_l = np.where(self.div == 1, lr, lr / self.div).astype(np.float32)
        g = gsum if nb == 1 else (gsum / F(nb)).astype(np.float32)
        if tp.clip > 0:
            c = F(tp.clip)
            g = np.where(g > c, c, np.where(g < -c, -c, g)).astype(np.float32)
        if tp.l1 != 0:
            g = np.where(self.mask, g + F(tp.l1) * np.sign(w), g).astype(np.float32)
        if tp.l2 != 0:
            g = np.where(self.mask, g + F(2) * F(tp.l2) * w, g).astype(np.float32)
        st = self.state
        if self.kind == "sgd":
            w = w - lr_l * g
        elif self.kind == "momentum":
            st[0] = mu * st[0] + sim * g
            w = w - lr_l * st[0]
        elif self.kind == "rmsprop":
            st[0] = beta * st[0] + (F(1) - beta) * (g * g)
            w = w - lr_l * (g / np.sqrt(st[0] + eps))
        elif self.kind == "rmsprop_momentum":
            st[0] = beta * st[0] + (F(1) - beta) * (g * g)
            st[1] = mu * st[1] + sim * (g / np.sqrt(st[0] + eps))
            w = w - lr_l * st[1]
        elif self.kind == "adam":
            c1 = F(F(1) - self.b1t * beta1)
            c2 = F(F(1) - self.b2t * beta)
            st[0] = beta1 * st[0] + (F(1) - beta1) * g
            st[1] = beta * st[1] + (F(1) - beta) * (g * g)
            w = w - lr_l * ((st[0] / c1) / (np.sqrt(st[1] / c2) + eps))
        self.step += 1
        self.b1t = F(self.b1t * beta1)
        self.b2t = F(self.b2t * beta)
        return w.astype(np.float32)


# ----------------------------------------------------------------------------- running both

KIND_ARGS: Dict[str, Dict[str, float]] = {
    "sgd": {},
    "momentum": {"momentum": 0.8},
    "momentum_sim": {"momentum": 0.8, "sim_penalty": 0.5},
    "rmsprop": {"beta": 0.85},
    "rmsprop_momentum": {"momentum": 0.85, "beta": 0.8},
    "rmsprop_momentum_sim": {"momentum": 0.85, "beta": 0.8, "sim_penalty": 0.25},
    "adam": {"beta1": 0.9, "beta": 0.99, "eps": 1e-7},
}


def make_optimizer(net: Module, case: str, tp: TrainParams) -> Union[Optimizer, TrainParams]:
    """The optimizer under test for a case name (a bare TrainParams for 'sgd')."""
    a = KIND_ARGS[case]
    if case == "sgd":
        return tp
    if case.startswith("momentum"):
        return net.new_momentum(tp, a["momentum"], a.get("sim_penalty", 0.0))
    if case == "rmsprop":
        return net.new_rmsprop(tp, a["beta"])
    if case.startswith("rmsprop_momentum"):
        return net.new_rmsprop_with_momentum(tp, a["momentum"], a["beta"], a.get("sim_penalty", 0.0))
    return net.new_adam(tp, a["beta1"], a["beta"], a["eps"])


def make_ref(net: Module, case: str, tp: TrainParams, cos: Fn = core_cos, log: Fn = core_log) -> RefOptimizer:
    """The NumPy model matching make_optimizer(net, case, tp)."""
    kind = case.replace("_sim", "")
    return RefOptimizer(kind, tp, weight_mask(net), lr_divisors(net), cos=cos, log=log, **KIND_ARGS[case])


def opt_of(opt: Union[Optimizer, TrainParams], net: Module) -> Optimizer:
    """The Optimizer object behind opt (a bare TrainParams keeps its own SGD optimizer)."""
    return as_optimizer(opt, net)


def run_and_compare(
    net_name: str, case: str, tp: TrainParams, exact: bool = True, cos: Fn = core_cos, log: Fn = core_log, nb: int = NB
) -> None:
    """STEPS train_batch steps vs the NumPy model; compares params, slots, step and Adam powers each step."""
    tp = replace(tp)  # a fresh copy: a bare TrainParams keeps its SGD step on the object
    net = NETS[net_name]()
    clone = NETS[net_name]()  # holds the model's parameters, for its gradients
    opt = make_optimizer(net, case, tp)
    ref = make_ref(net, case, tp, cos, log)
    w = net.params.copy()
    data = batch_data(net.n_in, net.n_out, nb)
    for step in range(STEPS):
        x, t = data[step]
        clone.params = w
        y, trace = clone.traced_forward(x)
        loss, gy = mse_ref(y, t)
        _, grads = clone.backprop(trace, gy)
        assert grads.samples == nb
        w = ref.update(w, grads.values, nb, loss)

        got_loss = train_batch(opt, net, losses.mse, x, t)
        o = opt_of(opt, net)
        assert o.step == ref.step == step + 1
        assert o.state.shape == ref.state.shape
        if exact:
            assert got_loss == float(loss), f"step {step + 1}: loss"
            np.testing.assert_array_equal(net.params, w, err_msg=f"{case} step {step + 1}: parameters")
            np.testing.assert_array_equal(o.state, ref.state, err_msg=f"{case} step {step + 1}: state")
        else:
            # a 1-ulp difference in cos/log changes the step by ~1e-7 relative; velocities can cancel, so
            # the state is compared with an absolute tolerance scaled to its magnitude
            np.testing.assert_allclose(got_loss, float(loss), rtol=1e-5)
            np.testing.assert_allclose(net.params, w, rtol=1e-6, atol=1e-7, err_msg=f"{case} step {step + 1}")
            scale = float(np.abs(ref.state).max()) if ref.state.size else 0.0
            np.testing.assert_allclose(
                o.state, ref.state, rtol=1e-5, atol=1e-5 * scale, err_msg=f"{case} step {step + 1}"
            )
        ts = o.train_state
        if ref.kind == "adam":
            assert F(ts["b1t"][0]) == ref.b1t and F(ts["b2t"][0]) == ref.b2t
    # the run really moved every parameter that gets a gradient (no vacuous comparison)
    assert not np.array_equal(net.params, NETS[net_name]().params)


# ----------------------------------------------------------------------------- optimizer kinds


@pytest.mark.parametrize("case", list(KIND_ARGS))
def test_optimizer_kinds_match_numpy(case: str) -> None:
    """Each optimizer with a constant rate: params, slots and step equal the NumPy model bit for bit."""
    run_and_compare("all_kinds", case, TrainParams(lr=0.05))


@pytest.mark.parametrize("case", ["momentum_sim", "rmsprop_momentum_sim"])
def test_similarity_penalty_with_numpy_log(case: str) -> None:
    """The similarity penalty with NumPy's log (which may differ from mct_logf in the last bit)."""
    run_and_compare("all_kinds", case, TrainParams(lr=0.05), exact=False, log=np_log)


@pytest.mark.parametrize("case", ["momentum", "rmsprop_momentum"])
def test_similarity_penalty_changes_the_step(case: str) -> None:
    """With a penalty set, the second step differs from the run without it (the penalty is not ignored)."""
    results = []
    for tau in (0.0, 0.5):
        net = net_all_kinds()
        opt = (
            net.new_momentum(TrainParams(lr=0.05), 0.8, tau)
            if case == "momentum"
            else net.new_rmsprop_with_momentum(TrainParams(lr=0.05), 0.85, 0.8, tau)
        )
        data = batch_data(net.n_in, net.n_out)
        train_batch(opt, net, losses.mse, *data[0])
        first = net.params.copy()
        train_batch(opt, net, losses.mse, *data[1])
        results.append((first, net.params.copy()))
    np.testing.assert_array_equal(results[0][0], results[1][0])  # step 1: no velocity yet, sim = 1
    assert not np.array_equal(results[0][1], results[1][1])


def test_batch_of_one_has_no_division() -> None:
    """nb = 1 (gradient sum = mean) through the same comparison."""
    run_and_compare("all_kinds", "adam", TrainParams(lr=0.01), nb=1)


# ----------------------------------------------------------------------------- TrainParams options

OPTIONS: Dict[str, TrainParams] = {
    "linear_decay": TrainParams(lr=0.08).and_lr_decay(0.01, 3),  # reaches and passes the end
    "cosine_decay": TrainParams(lr=0.08).and_lr_cosine_decay(0.005, 3),
    "warmup": TrainParams(lr=0.08).and_soft_start(3),
    "warmup_linear": TrainParams(lr=0.08, schedule="linear", lr_final=0.02, decay_steps=5, warmup_steps=2),
    "l1": TrainParams(lr=0.05).and_l1(0.03),
    "l2": TrainParams(lr=0.05).and_l2(0.2),
    "l1_l2": TrainParams(lr=0.05, l1=0.01, l2=0.05),
    "clip": TrainParams(lr=0.05).and_gradient_clip(0.02),
    "scale_by_loss": TrainParams(lr=0.2).and_scale_by_loss(),
    "everything": TrainParams(
        lr=0.08,
        schedule="cosine",
        lr_final=0.01,
        decay_steps=6,
        warmup_steps=2,
        l1=0.01,
        l2=0.02,
        clip=0.05,
        scale_by_loss=True,
    ),
}


@pytest.mark.parametrize("case", ["sgd", "momentum", "rmsprop", "rmsprop_momentum", "adam"])
@pytest.mark.parametrize("option", list(OPTIONS))
def test_train_params_options_match_numpy(option: str, case: str) -> None:
    """Every TrainParams option with every optimizer kind, bit for bit."""
    run_and_compare("all_kinds", case, OPTIONS[option])


@pytest.mark.parametrize("case", ["sgd", "momentum_sim", "adam"])
def test_cosine_decay_with_numpy_cos(case: str) -> None:
    """The cosine schedule with NumPy's cos (tolerance: mct_cosf and NumPy may round differently)."""
    run_and_compare("all_kinds", case, OPTIONS["cosine_decay"], exact=False, cos=np_cos, log=np_log)


@pytest.mark.parametrize("case", ["sgd", "momentum", "rmsprop_momentum", "adam"])
@pytest.mark.parametrize("option", ["constant", "l1_l2", "everything"])
def test_lr_wrapper_divides_the_rate(option: str, case: str) -> None:
    """LR(M, d): M's parameters learn at lr / d, nested wrappers multiply, the rest at lr."""
    tp = TrainParams(lr=0.05) if option == "constant" else OPTIONS[option]
    run_and_compare("lr", case, tp)


def test_lr_divisors_of_the_test_network() -> None:
    """The nested-LR network has the divisors the test model assumes (4, 6, 3 and 1)."""
    net = net_with_lr()
    d = lr_divisors(net)
    expect = np.concatenate([np.full(35, 4.0), np.full(20, 6.0), np.full(4, 3.0), np.full(15, 1.0)])
    np.testing.assert_array_equal(d, expect.astype(np.float32))


def test_lr_wrapper_sgd_step_is_scaled() -> None:
    """Direct check without the model: one SGD step in LR(Dense, 4) moves each weight by lr*g/4."""
    inner = L.Dense(3, 2)
    net = Sequential(LR(inner, 4.0)).rand_params(seed=1)
    ref = Sequential(L.Dense(3, 2)).rand_params(seed=1)
    x = np.array([[0.5, -1.0, 2.0]], np.float32)
    t = np.array([[0.25, -0.5]], np.float32)
    w0 = net.params.copy()
    y, tr = ref.traced_forward(x)
    _, gy = mse_ref(y, t)
    _, g = ref.backprop(tr, gy)
    train_batch(TrainParams(lr=0.5), net, losses.mse, x, t)
    np.testing.assert_array_equal(net.params, w0 - (F(0.5) / F(4)) * g.values)


@pytest.mark.parametrize("case", ["sgd", "momentum", "adam"])
def test_l1_l2_touch_connection_weights_only(case: str) -> None:
    """With L1+L2 on, one step differs from the plain step exactly on the connection weights
    (Dense/Linear W, GLU Wg/Wv, Conv1d w) and nowhere else (biases, Diag, DyT, Swish, RMSNorm...)."""
    data = batch_data(8, 3)
    after, slots = {}, {}
    for name, tp in (("plain", TrainParams(lr=0.1)), ("reg", TrainParams(lr=0.1, l1=0.05, l2=0.05))):
        net = net_all_kinds()
        opt = make_optimizer(net, case, tp)
        train_batch(opt, net, losses.mse, *data[0])
        after[name] = net.params.copy()
        slots[name] = opt_of(opt, net).state.copy()
    mask = weight_mask(net_all_kinds())
    # Adam's first step is about lr * sign(g) whatever |g| is, so a regularized weight may land on the
    # same value: look at the slots (which hold the gradient) as well as at the parameters
    changed = (after["plain"] != after["reg"]) | (slots["plain"] != slots["reg"]).any(axis=0)
    assert mask.sum() == 3 + 30 + 40 + 16 + 12  # Conv1d 3, Linear 30, SwiGLU 40, Dense 16, Linear 12
    np.testing.assert_array_equal(changed, mask)


# ----------------------------------------------------------------------------- lr_at

LR_AT_CASES: Dict[str, TrainParams] = {
    "constant": TrainParams(lr=0.03),
    "linear": TrainParams(lr=0.1).and_lr_decay(0.001, 37),
    "linear_up": TrainParams(lr=0.001).and_lr_decay(0.1, 10),
    "cosine": TrainParams(lr=0.1).and_lr_cosine_decay(0.001, 37),
    "warmup": TrainParams(lr=0.1).and_soft_start(13),
    "linear_warmup": TrainParams(lr=0.1, schedule="linear", lr_final=0.01, decay_steps=20, warmup_steps=7),
    "cosine_warmup": TrainParams(lr=0.1, schedule="cosine", lr_final=0.0, decay_steps=20, warmup_steps=30),
}

LR_STEPS = list(range(0, 45)) + [100, 1000, 123456, 2**31, 2**32 - 1]


@pytest.mark.parametrize("name", list(LR_AT_CASES))
def test_lr_at_matches_numpy(name: str) -> None:
    """lr_at(step) for every schedule (exact; the cosine schedule uses the core's cos here)."""
    tp = LR_AT_CASES[name]
    got = np.array([tp.lr_at(s) for s in LR_STEPS], np.float64)
    want = np.array([ref_lr_at(tp, s, core_cos) for s in LR_STEPS], np.float64)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["cosine", "cosine_warmup"])
def test_lr_at_cosine_with_numpy_cos(name: str) -> None:
    """Cosine schedule with NumPy's cos: equal within a few float32 ulps (the cos may round differently)."""
    tp = LR_AT_CASES[name]
    got = np.array([tp.lr_at(s) for s in LR_STEPS])
    want = np.array([ref_lr_at(tp, s, np_cos) for s in LR_STEPS], np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


def test_lr_at_landmarks() -> None:
    """Schedule landmarks in plain numbers: start, middle, end and after the end."""
    lin = TrainParams(lr=0.1).and_lr_decay(0.02, 8)
    assert lin.lr_at(0) == float(F(0.1))
    assert lin.lr_at(4) == pytest.approx(0.06, rel=1e-6)
    # lr + (lr_final - lr) * 1 need not round to lr_final exactly
    assert lin.lr_at(8) == pytest.approx(0.02, rel=1e-6) and lin.lr_at(10**6) == lin.lr_at(8)
    cos = TrainParams(lr=0.1).and_lr_cosine_decay(0.02, 8)
    assert cos.lr_at(0) == pytest.approx(0.1, rel=1e-6)  # lr_final + (lr - lr_final) * 1, rounded
    assert cos.lr_at(4) == pytest.approx(0.06, rel=1e-6)
    assert cos.lr_at(2) == pytest.approx(0.02 + 0.08 * 0.5 * (1 + math.cos(math.pi / 4)), rel=1e-6)
    assert cos.lr_at(8) == float(F(0.02)) and cos.lr_at(9) == float(F(0.02))
    warm = TrainParams(lr=0.1).and_soft_start(4)
    assert [warm.lr_at(s) for s in range(6)] == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1, 0.1], rel=1e-6)


def test_current_lr_follows_the_step() -> None:
    """Optimizer.current_lr() is lr_at(step) of the next update."""
    net = net_all_kinds()
    tp = TrainParams(lr=0.05).and_lr_decay(0.01, 3)
    opt = net.new_momentum(tp, 0.5)
    data = batch_data(net.n_in, net.n_out)
    for s in range(STEPS):
        assert opt.current_lr() == float(ref_lr_at(tp, s))
        train_batch(opt, net, losses.mse, *data[s])


def test_builders_equal_fields() -> None:
    """The minidx-style builders set the same fields as the constructor."""
    a = (
        TrainParams(lr=0.1)
        .and_lr_decay(0.01, 5)
        .and_soft_start(2)
        .and_l1(0.1)
        .and_l2(0.2)
        .and_gradient_clip(1.5)
        .and_scale_by_loss()
    )
    b = TrainParams(
        lr=0.1,
        schedule="linear",
        lr_final=0.01,
        decay_steps=5,
        warmup_steps=2,
        l1=0.1,
        l2=0.2,
        clip=1.5,
        scale_by_loss=True,
    )
    assert a == b
    assert TrainParams(lr=0.1).and_lr_cosine_decay(0.0, 9) == TrainParams(lr=0.1, schedule="cosine", decay_steps=9)
    assert TrainParams(lr=0.1).with_lr(0.2) == TrainParams(lr=0.2)


# ----------------------------------------------------------------------------- other paths


def test_module_update_matches_numpy() -> None:
    """Module.update(opt, backprop grads, loss) is the same update (Adam, L2, scale_by_loss)."""
    tp = TrainParams(lr=0.05, l2=0.1, scale_by_loss=True)
    net, clone = net_all_kinds(), net_all_kinds()
    opt = net.new_adam(tp, 0.8, 0.95)
    ref = RefOptimizer("adam", tp, weight_mask(net), lr_divisors(net), beta1=0.8, beta=0.95)
    w = net.params.copy()
    for x, t in batch_data(net.n_in, net.n_out)[:STEPS]:
        clone.params = w
        y, tr = clone.traced_forward(x)
        loss, gy = mse_ref(y, t)
        _, g = clone.backprop(tr, gy)
        w = ref.update(w, g.values, NB, loss)
        y2, tr2 = net.traced_forward(x)
        _, g2 = net.backprop(tr2, mse_ref(y2, t)[1])
        net.update(opt, g2, float(loss))
        np.testing.assert_array_equal(net.params, w)
        np.testing.assert_array_equal(opt.state, ref.state)
    assert opt.step == STEPS


def test_bare_train_params_is_sgd_with_a_step() -> None:
    """A bare TrainParams keeps its own SGD step counter (its schedule advances) and has no slots."""
    net = net_all_kinds()
    tp = TrainParams(lr=0.05).and_lr_decay(0.0, 10)
    data = batch_data(net.n_in, net.n_out)
    for s in range(3):
        train_batch(tp, net, losses.mse, *data[s])
    o = as_optimizer(tp, net)
    assert o.kind == "sgd" and o.step == 3 and o.state.shape == (0, net.n_params)
    twin = net_all_kinds()
    opt = twin.new_sgd(tp)
    for s in range(3):
        train_batch(opt, twin, losses.mse, *data[s])
    np.testing.assert_array_equal(net.params, twin.params)


@pytest.mark.parametrize("case,shape", [("momentum", 1), ("rmsprop", 1), ("rmsprop_momentum", 2), ("adam", 2)])
def test_state_shapes(case: str, shape: int) -> None:
    """opt.state is (slots, n_params), zero before training; step starts at 0."""
    net = net_all_kinds()
    opt = make_optimizer(net, case, TrainParams())
    assert opt.state.shape == (shape, net.n_params) and not opt.state.any() and opt.step == 0


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "make,word",
    [
        (lambda n: n.new_rmsprop(TrainParams(), 1.0), "beta"),
        (lambda n: n.new_rmsprop(TrainParams(), -0.1), "beta"),
        (lambda n: n.new_rmsprop(TrainParams(), float("nan")), "beta"),
        (lambda n: n.new_rmsprop_with_momentum(TrainParams(), 0.9, 1.5), "beta"),
        (lambda n: n.new_adam(TrainParams(), 1.0, 0.999), "beta1"),
        (lambda n: n.new_adam(TrainParams(), 0.9, 1.0), "beta"),
        (lambda n: n.new_adam(TrainParams(), 0.9, 0.999, -1e-8), "eps"),
        (lambda n: n.new_momentum(TrainParams(), 1.0), "momentum"),
        (lambda n: n.new_momentum(TrainParams(), -0.5), "momentum"),
        (lambda n: n.new_momentum(TrainParams(), 0.9, -1.0), "similarity_penalty"),
    ],
)
def test_bad_coefficients(make: Callable[[Module], object], word: str) -> None:
    """Out-of-range coefficients raise ConfigError naming the setting and the allowed range."""
    net = net_all_kinds()
    with pytest.raises(ConfigError) as e:
        make(net)
    msg = str(e.value)
    assert msg.startswith(word + " ") and "must be a finite number in [" in msg


@pytest.mark.parametrize(
    "kwargs,word",
    [
        ({"lr": -0.1}, "lr"),
        ({"lr": float("inf")}, "lr"),
        ({"l1": -1.0}, "l1"),
        ({"l2": -1.0}, "l2"),
        ({"clip": -1.0}, "clip"),
        ({"schedule": "exp"}, "schedule"),
        ({"schedule": "linear"}, "decay_steps"),
        ({"schedule": "cosine", "decay_steps": 0}, "decay_steps"),
        ({"warmup_steps": 2.5}, "warmup_steps"),
        ({"decay_steps": -1}, "decay_steps"),
        ({"warmup_steps": True}, "warmup_steps"),
    ],
)
def test_bad_train_params(kwargs: Dict[str, object], word: str) -> None:
    """Bad TrainParams raise ConfigError naming the field."""
    with pytest.raises(ConfigError, match=word):
        TrainParams(**kwargs)  # type: ignore[arg-type]


def test_optimizer_for_another_network() -> None:
    """An optimizer made for one network, used with another, raises ConfigError with both counts;
    nothing changes."""
    small = Sequential(L.Linear(8, 3)).rand_params(seed=1)
    net = net_all_kinds()
    opt = small.new_adam(TrainParams())
    before = net.params.copy()
    x, t = batch_data(8, 3)[0]
    with pytest.raises(ConfigError) as e:
        train_batch(opt, net, losses.mse, x, t)
    msg = str(e.value)
    assert str(small.n_params) in msg and str(net.n_params) in msg and "SingleChannelConv1d(8, 6, 3)" in msg
    np.testing.assert_array_equal(net.params, before)
    assert opt.step == 0
    y, tr = net.traced_forward(x)
    _, g = net.backprop(tr, mse_ref(y, t)[1])
    with pytest.raises(ConfigError, match=f"{small.n_params} parameters"):
        net.update(opt, g)


def test_not_an_optimizer() -> None:
    """Anything but an Optimizer or TrainParams is refused with a message saying what to pass."""
    net = net_all_kinds()
    x, t = batch_data(8, 3)[0]
    with pytest.raises(ConfigError, match="expected an optimizer"):
        train_batch("adam", net, losses.mse, x, t)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="TrainParams"):
        net.new_momentum(0.01)  # type: ignore[arg-type]
