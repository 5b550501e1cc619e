"""Training loops end to end: the README example learns, the toy problems are solved, train_step and
train_batch agree, threads are deterministic, bad data stops training with the parameters intact and
bad shapes give clear errors.

Run with -s to see the ModularAddition10 loss curve of the README example.
"""

from __future__ import annotations

import itertools
from typing import Callable, List, Tuple

import numpy as np
import pytest

import helpers
from mcutrain import (
    Sequential,
    ShapeError,
    TrainingError,
    TrainParams,
    losses,
    train_batch,
    train_batch_parallel,
    train_step,
)
from mcutrain import layers as L
from mcutrain.module import Module, as_optimizer
from mcutrain.optim import Optimizer
from mcutrain.problems import AxPlusB, ModularAddition10, Parity

# (step, mean logit_bce loss over the 250 steps ending there) of the README example
MODADD10_LOSS_CURVE: List[Tuple[int, float]] = []
CURVE_EVERY = 250


def readme_net() -> Sequential:
    """The README network (Linear(20,35), Sigmoid, Linear(35,10), Softmax) with the README's seeded init."""
    return helpers.readme_net(seed=456645, scale=1.0)


def accuracy(net: Module, x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of samples whose arg-max output is the one-hot target's class."""
    return float(np.mean(net.forward(x).argmax(axis=1) == y.argmax(axis=1)))


def snapshot(net: Module, opt: Optimizer) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Copies of (parameters, optimizer slots, raw train state) for exact before/after comparisons."""
    return net.params.copy(), opt.state.copy(), opt.train_state.copy()


def assert_same_snapshot(
    a: Tuple[np.ndarray, np.ndarray, np.ndarray], b: Tuple[np.ndarray, np.ndarray, np.ndarray]
) -> None:
    """Parameters, slots and train state are bit-for-bit equal."""
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert a[2].tobytes() == b[2].tobytes()


# ----------------------------------------------------------------------------- learning


def test_readme_modular_addition_learns() -> None:
    """(a) The README example learns addition mod 10 within 5000 steps of batch 10."""
    net = readme_net()
    opt = net.new_rmsprop_with_momentum(TrainParams(lr=2e-2), 0.85, 0.8)
    problem = ModularAddition10(seed=1)
    MODADD10_LOSS_CURVE.clear()
    window: List[float] = []
    for step in range(1, 5001):
        x, y = problem.sample_batch(10)
        loss = train_batch(opt, net, losses.logit_bce, x, y)
        assert np.isfinite(loss)
        window.append(loss)
        if step % CURVE_EVERY == 0:
            MODADD10_LOSS_CURVE.append((step, float(np.mean(window))))
            window = []
    assert opt.step == 5000
    print("\nModularAddition10 README example, mean logit_bce per 250 steps:")
    for step, loss in MODADD10_LOSS_CURVE:
        print(f"  step {step:5d}  loss {loss:.3e}")
    # a constant 0.1 prediction scores -(0.1 ln 0.1 + 0.9 ln 0.9) = 0.325: "low" is far below that
    first, last = MODADD10_LOSS_CURVE[0][1], MODADD10_LOSS_CURVE[-1][1]
    assert last < 0.01 and last < first / 10
    x, y = ModularAddition10(seed=777).sample_batch(2000)  # fresh samples
    assert accuracy(net, x, y) >= 0.95


def test_parity8_learns() -> None:
    """(b) Parity of 8 bits: a ReLU MLP with Adam classifies all 256 patterns."""
    net = Sequential(L.Linear(8, 64), L.Relu(), L.Linear(64, 2), L.Softmax()).rand_params(seed=0)
    opt = net.new_adam(TrainParams(lr=3e-3))
    problem = Parity(8, seed=0)
    for _ in range(5000):
        train_batch(opt, net, losses.cross_entropy, *problem.sample_batch(32))
    bits = np.array(list(itertools.product([0, 1], repeat=8)), np.float32)
    p = bits.sum(axis=1) % 2
    y = np.stack([p, 1 - p], axis=1).astype(np.float32)
    assert accuracy(net, bits, y) >= 0.98


def test_axplusb_learns() -> None:
    """(c) AxPlusB: MSE on fresh samples ends far below the target variance (1/9 + 1/3)."""
    net = Sequential(L.Linear(3, 16), L.Tanh(), L.Linear(16, 1)).rand_params(seed=0)
    opt = net.new_adam(TrainParams(lr=1e-2))
    problem = AxPlusB(seed=0)
    x_test, y_test = AxPlusB(seed=99).sample_batch(2000)
    before = float(np.mean((net.forward(x_test) - y_test) ** 2))
    for _ in range(2000):
        train_batch(opt, net, losses.mse, *problem.sample_batch(16))
    after = float(np.mean((net.forward(x_test) - y_test) ** 2))
    assert after < 0.005 and after < before / 20


# ----------------------------------------------------------------------------- train_step vs train_batch

OPTS: List[Tuple[str, Callable[[Module], object]]] = [
    ("sgd_linear_decay", lambda n: TrainParams(lr=0.1).and_lr_decay(0.01, 4)),
    ("momentum_sim", lambda n: n.new_momentum(TrainParams(lr=0.05, l2=0.01), 0.9, 0.5)),
    ("rmsprop_momentum", lambda n: n.new_rmsprop_with_momentum(TrainParams(lr=2e-2, clip=0.5), 0.85, 0.8)),
    ("adam", lambda n: n.new_adam(TrainParams(lr=1e-2, scale_by_loss=True))),
]


@pytest.mark.parametrize("name,make", OPTS, ids=[o[0] for o in OPTS])
def test_train_step_equals_batch_of_one(name: str, make: Callable[[Module], object]) -> None:
    """(d) train_step(x, y) on one sample is exactly train_batch on a batch of one."""
    a, b = readme_net(), readme_net()
    oa, ob = make(a), make(b)
    x, y = ModularAddition10(seed=4).sample_batch(8)
    for i in range(8):
        la = train_step(oa, a, losses.logit_bce, x[i], y[i])
        lb = train_batch(ob, b, losses.logit_bce, x[i : i + 1], y[i : i + 1])
        assert la == lb
    assert_same_snapshot(snapshot(a, as_optimizer(oa, a)), snapshot(b, as_optimizer(ob, b)))
    assert as_optimizer(oa, a).step == 8
    assert not np.array_equal(a.params, readme_net().params)


def test_train_step_takes_one_sample() -> None:
    """train_step refuses a batch and says to use train_batch."""
    net = readme_net()
    x, y = ModularAddition10(seed=4).sample_batch(2)
    with pytest.raises(ShapeError, match="train_batch"):
        train_step(TrainParams(), net, losses.logit_bce, x, y)


# ----------------------------------------------------------------------------- threads


def run_threads(threads: int, steps: int = 30, nb: int = 63) -> Tuple[List[float], Module, Optimizer]:
    """The README setup for `steps` batches of nb (odd, so the parts are uneven) on `threads` threads."""
    net = readme_net()
    opt = net.new_rmsprop_with_momentum(TrainParams(lr=2e-2), 0.85, 0.8)
    problem = ModularAddition10(seed=3)
    out = [train_batch(opt, net, losses.logit_bce, *problem.sample_batch(nb), threads=threads) for _ in range(steps)]
    return out, net, opt


def test_threads_close_to_one_thread_and_deterministic() -> None:
    """(e) threads=2: the mean loss is close to threads=1 and repeated runs agree bit for bit."""
    l1, n1, _ = run_threads(1)
    l2, n2, o2 = run_threads(2)
    l2b, n2b, o2b = run_threads(2)
    np.testing.assert_allclose(l2, l1, rtol=1e-5)
    np.testing.assert_allclose(n2.params, n1.params, rtol=1e-4, atol=1e-5)
    assert l2 == l2b
    assert_same_snapshot(snapshot(n2, o2), snapshot(n2b, o2b))


@pytest.mark.parametrize("threads", [3, 64, 100])
def test_more_threads_deterministic(threads: int) -> None:
    """Uneven splits and more threads than samples work and repeat exactly."""
    la, na, oa = run_threads(threads, steps=5, nb=10)
    lb, nb_, ob = run_threads(threads, steps=5, nb=10)
    l1, n1, _ = run_threads(1, steps=5, nb=10)
    assert la == lb
    assert_same_snapshot(snapshot(na, oa), snapshot(nb_, ob))
    np.testing.assert_allclose(la, l1, rtol=1e-5)


def test_train_batch_parallel_default_threads() -> None:
    """train_batch_parallel (all cores) trains like train_batch, deterministically."""

    def run() -> Module:
        net = readme_net()
        opt = net.new_adam(TrainParams(lr=1e-2))
        problem = ModularAddition10(seed=9)
        for _ in range(5):
            train_batch_parallel(opt, net, losses.logit_bce, *problem.sample_batch(40))
        return net

    a, b = run(), run()
    np.testing.assert_array_equal(a.params, b.params)
    ref = readme_net()
    opt = ref.new_adam(TrainParams(lr=1e-2))
    problem = ModularAddition10(seed=9)
    for _ in range(5):
        train_batch(opt, ref, losses.logit_bce, *problem.sample_batch(40))
    np.testing.assert_allclose(a.params, ref.params, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- bad data stops training


def trained_three_steps() -> Tuple[Module, Optimizer, np.ndarray, np.ndarray]:
    """The README setup after three good steps, plus a fresh good batch."""
    net = readme_net()
    opt = net.new_adam(TrainParams(lr=1e-2))
    problem = ModularAddition10(seed=5)
    for _ in range(3):
        train_batch(opt, net, losses.logit_bce, *problem.sample_batch(10))
    x, y = problem.sample_batch(10)
    return net, opt, x, y


# where the bad value goes: (input or target, sample, column, value)
BAD_DATA = {"input_nan": ("x", 3, 7, np.nan), "input_inf": ("x", 3, 7, np.inf), "target_nan": ("y", 6, 2, np.nan)}


@pytest.mark.parametrize("where", list(BAD_DATA))
@pytest.mark.parametrize("threads", [1, 2])
def test_nonfinite_data_raises_and_keeps_params(where: str, threads: int) -> None:
    """(f) NaN/inf data: TrainingError naming the bad sample and the step (the 4th here); parameters, slots,
    step unchanged."""
    net, opt, x, y = trained_three_steps()
    which, sample, col, value = BAD_DATA[where]
    (x if which == "x" else y)[sample, col] = value
    before = snapshot(net, opt)
    with pytest.raises(TrainingError) as e:
        train_batch(opt, net, losses.logit_bce, x, y, threads=threads)
    msg = str(e.value)
    assert f"sample {sample} of the batch at step 4 has NaN or inf in its input or target" in msg, msg
    assert "the parameters are those after step 3" in msg, msg
    assert_same_snapshot(before, snapshot(net, opt))
    assert opt.step == 3
    # training goes on normally once the data is good again
    x2, y2 = ModularAddition10(seed=6).sample_batch(10)
    train_batch(opt, net, losses.logit_bce, x2, y2)
    assert opt.step == 4 and np.isfinite(net.params).all()


# (network, optimizer, one bad input): a leading ReLU maps NaN to 0, so the loss stays finite; an infinite
# input into a saturating net gives a finite loss but NaN gradients (inf * 0)
HIDDEN_BAD_INPUT = {
    "nan_behind_relu": (
        lambda: Sequential(L.Relu(4), L.Linear(4, 2)).rand_params(seed=1),
        lambda n: n.new_momentum(TrainParams(lr=0.1), 0.9),
        np.nan,
    ),
    "inf_into_sigmoid": (
        lambda: Sequential(L.Linear(4, 2), L.Sigmoid()).rand_params(seed=1),
        lambda n: n.new_adam(TrainParams(lr=0.1)),
        np.inf,
    ),
}


@pytest.mark.parametrize("case", list(HIDDEN_BAD_INPUT))
def test_bad_input_stops_training_even_when_the_loss_is_finite(case: str) -> None:
    """NaN or inf in the input stops training even where the loss would stay finite (a leading ReLU hides
    NaN; inf into a saturating net gives NaN gradients): the data is bad and must not be trained on
    silently, and no NaN may reach the parameters; TrainingError names the sample and step 1."""
    make_net, make_opt, bad = HIDDEN_BAD_INPUT[case]
    net = make_net()
    opt = make_opt(net)
    x = np.array([[bad, 1.0, 2.0, 3.0]], np.float32)
    t = np.zeros((1, 2), np.float32)
    before = snapshot(net, opt)
    with pytest.raises(TrainingError, match="sample 0 of the batch at step 1"):
        train_batch(opt, net, losses.mse, x, t)
    assert_same_snapshot(before, snapshot(net, opt))
    assert np.isfinite(net.params).all()


# ----------------------------------------------------------------------------- shapes and dtypes


def good_batch(nb: int = 4) -> Tuple[np.ndarray, np.ndarray]:
    """A valid ModularAddition10 batch."""
    return ModularAddition10(seed=8).sample_batch(nb)


@pytest.mark.parametrize("case", ["input_width", "target_width", "input_3d", "batch_mismatch", "empty"])
def test_shape_errors(case: str) -> None:
    """(g) Wrong widths, ranks, batch sizes: ShapeError saying what is wrong; nothing changes."""
    net = readme_net()
    opt = net.new_adam(TrainParams())
    x, y = good_batch()
    expect: List[str]
    if case == "input_width":
        x, expect = np.zeros((4, 19), np.float32), ["input", "19", "20"]
    elif case == "target_width":
        y, expect = np.zeros((4, 9), np.float32), ["target", "9", "10"]
    elif case == "input_3d":
        x, expect = np.zeros((4, 20, 1), np.float32), ["input", "(4, 20, 1)"]
    elif case == "batch_mismatch":
        y, expect = y[:3], ["4 inputs", "3 targets"]
    else:
        x, y, expect = x[:0], y[:0], ["empty"]
    before = snapshot(net, opt)
    with pytest.raises(ShapeError) as e:
        train_batch(opt, net, losses.logit_bce, x, y)
    for word in expect:
        assert word in str(e.value), (word, str(e.value))
    assert_same_snapshot(before, snapshot(net, opt))


@pytest.mark.parametrize("case", ["int_strings", "str_list", "object", "complex", "ragged"])
@pytest.mark.parametrize("which", ["input", "target"])
def test_dtype_errors(case: str, which: str) -> None:
    """(g) Non-numeric data (strings of digits, objects, complex, ragged lists): ShapeError naming
    the argument and the problem."""
    net = readme_net()
    x, y = good_batch()
    src = x if which == "input" else y
    bad: object
    if case == "int_strings":
        bad = src.astype(int).astype(str)
    elif case == "str_list":
        bad = [[str(int(v)) for v in row] for row in src]
    elif case == "object":
        bad = src.astype(object)
    elif case == "complex":
        bad = src.astype(np.complex64)
    else:
        bad = [list(src[0]), list(src[1][:-1])]
    args = (bad, y) if which == "input" else (x, bad)
    before = net.params.copy()
    with pytest.raises(ShapeError) as e:
        train_batch(TrainParams(), net, losses.logit_bce, *args)
    msg = str(e.value)
    assert msg.startswith(which)
    if case != "ragged":
        assert "dtype" in msg and "float32" in msg
    np.testing.assert_array_equal(net.params, before)


def test_forward_checks_input() -> None:
    """forward raises ShapeError on a wrong width and accepts integer data like float data."""
    net = readme_net()
    with pytest.raises(ShapeError, match="19 values per sample, the network takes 20"):
        net.forward(np.zeros(19, np.float32))
    x, _ = good_batch()
    np.testing.assert_array_equal(net.forward(x.astype(np.int64)), net.forward(x))
    np.testing.assert_array_equal(net.forward(x[0].tolist()), net.forward(x)[0])


def test_sequential_size_mismatch_message() -> None:
    """(h) Sequential(Linear(20,35), Linear(36,10)) names both layers and both sizes."""
    with pytest.raises(ShapeError) as e:
        Sequential(L.Linear(20, 35), L.Linear(36, 10))
    msg = str(e.value)
    for part in ("Linear(20, 35)", "Linear(36, 10)", "35", "36"):
        assert part in msg, (part, msg)
    assert msg.index("Linear(20, 35)") < msg.index("Linear(36, 10)")
