"""net.fit: whole epochs in C (issue 11, item 1). Every step must be bit for bit the train_batch call on the
batch the seeded shuffle gives, including where training stops on NaN or inf; the callback comes every
callback_every steps and can stop the run; start/steps continue a run exactly."""

from __future__ import annotations

from typing import List, Tuple

import numpy as np
import pytest

import mcutrain as mct
from mcutrain import layers as L
from mcutrain import losses
from mcutrain.errors import ConfigError, TrainingError


def make_net(kind: str = "A") -> Tuple[mct.Module, mct.Optimizer]:
    if kind == "A":
        net = mct.Sequential(L.Linear(20, 35), L.Sigmoid(), L.Linear(35, 10), L.Softmax()).rand_params(seed=1)
        return net, net.new_rmsprop_with_momentum(mct.TrainParams(lr=0.02), 0.85, 0.8)
    net = mct.Sequential(L.Linear(20, 24), L.Relu(), L.Linear(24, 3)).rand_params(seed=2)
    return net, net.new_adam(mct.TrainParams(lr=0.01).and_l2(1e-3))


def data(n: int, n_in: int = 20, n_out: int = 10, seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random((n, n_in), dtype=np.float32), np.eye(n_out, dtype=np.float32)[rng.integers(0, n_out, n)]


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def by_train_batch(net, opt, loss, x, y, epochs, batch, shuffle, threads=1) -> List[float]:
    """The reference: the same run as a Python loop of train_batch calls."""
    out = []
    n = x.shape[0]
    for e in range(epochs):
        order = mct.shuffle_order(n, shuffle, e) if shuffle is not None else np.arange(n)
        for j in range(0, n, batch):
            sel = order[j : j + batch]
            out.append(mct.train_batch(opt, net, loss, x[sel], y[sel], threads=threads))
    return out


@pytest.mark.parametrize(
    "n,batch,shuffle,threads,every",
    [(105, 10, 7, 1, 4), (105, 10, 7, 2, 1000), (64, 32, None, 1, 3), (33, 8, 0, 2, 1), (5, 9, 3, 1, 2)],
)
def test_fit_equals_the_train_batch_calls_bit_for_bit(n, batch, shuffle, threads, every) -> None:
    x, y = data(n)
    net, opt = make_net()
    res = net.fit(
        opt, losses.logit_bce, x, y, epochs=3, batch=batch, shuffle=shuffle, threads=threads, callback_every=every
    )
    ref, ref_opt = make_net()
    want = by_train_batch(ref, ref_opt, losses.logit_bce, x, y, 3, batch, shuffle, threads)
    assert res.step == len(want) == opt.step == ref_opt.step
    assert np.array_equal(bits(res.losses), bits(np.float32(want)))
    assert np.array_equal(bits(net.params), bits(ref.params))
    assert np.array_equal(bits(opt.state), bits(ref_opt.state))


def test_fit_with_another_network_loss_and_optimizer() -> None:
    x, y = data(50, 20, 3, seed=4)
    y = y * 2 - 0.5
    net, opt = make_net("B")
    mct.fit(opt, net, losses.huber(0.5), x, y, epochs=2, batch=7, shuffle=11)
    ref, ref_opt = make_net("B")
    by_train_batch(ref, ref_opt, losses.huber(0.5), x, y, 2, 7, 11)
    assert np.array_equal(bits(net.params), bits(ref.params))


def test_a_run_in_pieces_equals_one_run() -> None:
    """start/steps: stopping anywhere and continuing gives the bits of one uninterrupted run."""
    x, y = data(70)
    net, opt = make_net()
    net.fit(opt, losses.logit_bce, x, y, epochs=4, batch=16, shuffle=5)
    parts, popt = make_net()
    done = 0
    for stop in (3, 4, 11, 20):
        r = parts.fit(popt, losses.logit_bce, x, y, epochs=4, batch=16, shuffle=5, start=done, steps=stop)
        assert r.step == stop == popt.step and len(r.losses) == stop - done
        done = stop
    assert np.array_equal(bits(net.params), bits(parts.params))


def test_callback_every_and_stop() -> None:
    x, y = data(40)
    net, opt = make_net()
    seen: List[Tuple[int, int, int]] = []

    def cb(p: mct.FitProgress) -> bool:
        assert opt.step == p.step  # the steps are done when the callback runs
        seen.append((p.step, p.epoch, len(p.losses)))
        return p.step < 12

    res = net.fit(opt, losses.logit_bce, x, y, epochs=5, batch=16, shuffle=1, callback_every=5, callback=cb)
    # 3 batches per epoch; callbacks at steps 5, 10, 15 (stopped there)
    assert seen == [(5, 1, 5), (10, 3, 5), (15, 4, 5)]
    assert res.stopped and res.step == 15 == opt.step and len(res.losses) == 15
    seen.clear()
    net, opt = make_net()
    net.fit(opt, losses.logit_bce, x, y, epochs=1, batch=16, callback_every=2, callback=cb)
    assert seen == [(2, 0, 2), (3, 0, 1)]  # and after the last step


@pytest.mark.parametrize("where", ["input", "target"])
def test_a_non_finite_sample_stops_fit_where_train_batch_stops(where: str) -> None:
    x, y = data(60)
    (x if where == "input" else y)[37, 2] = np.nan
    net, opt = make_net()
    with pytest.raises(TrainingError) as got:
        net.fit(opt, losses.logit_bce, x, y, epochs=3, batch=8, shuffle=2, callback_every=3)
    ref, ref_opt = make_net()
    with pytest.raises(TrainingError) as want:
        by_train_batch(ref, ref_opt, losses.logit_bce, x, y, 3, 8, 2)
    assert str(got.value) == str(want.value)
    assert "NaN or inf in its input or target" in str(got.value)
    assert opt.step == ref_opt.step < 8
    assert np.array_equal(bits(net.params), bits(ref.params))


def test_a_diverging_run_stops_fit_where_train_batch_stops() -> None:
    x, y = data(64, 20, 3, seed=9)
    y = y * 1e6
    net, _ = make_net("B")
    opt = net.new_momentum(mct.TrainParams(lr=10.0))
    ref, _ = make_net("B")
    ref_opt = ref.new_momentum(mct.TrainParams(lr=10.0))
    with pytest.raises(TrainingError) as got:
        net.fit(opt, losses.mse, x, y, epochs=50, batch=4, shuffle=3)
    with pytest.raises(TrainingError) as want:
        by_train_batch(ref, ref_opt, losses.mse, x, y, 50, 4, 3)
    assert str(got.value) == str(want.value)
    assert 0 < opt.step == ref_opt.step
    assert np.array_equal(bits(net.params), bits(ref.params))


def test_shuffle_order_is_a_seeded_permutation() -> None:
    a = mct.shuffle_order(1000, 3, 0)
    assert a.dtype == np.uint32 and np.array_equal(np.sort(a), np.arange(1000))
    assert np.array_equal(a, mct.shuffle_order(1000, 3, 0))
    assert not np.array_equal(a, mct.shuffle_order(1000, 3, 1))
    assert not np.array_equal(a, mct.shuffle_order(1000, 4, 0))
    # unbiased: where element 0 lands over 4000 epochs of 8 samples is close to uniform
    pos = np.array([int(np.argmax(mct.shuffle_order(8, 1, e) == 0)) for e in range(4000)])
    counts = np.bincount(pos, minlength=8)
    chi2 = float(((counts - 500) ** 2 / 500).sum())
    assert chi2 < 24.3, counts  # p = 0.001 for 7 degrees of freedom
    assert mct.shuffle_order(0, 1, 0).shape == (0,) and list(mct.shuffle_order(1, 1, 5)) == [0]


@pytest.mark.parametrize(
    "kw",
    [
        {"epochs": -1},
        {"batch": 0},
        {"threads": 0},
        {"shuffle": -1},
        {"callback_every": 0},
        {"batch": 1.5},
        {"start": 99},
        {"steps": 10**6},
    ],
)
def test_bad_arguments_are_refused(kw) -> None:
    x, y = data(10)
    net, opt = make_net()
    before = net.params.copy()
    with pytest.raises(ConfigError):
        net.fit(opt, losses.logit_bce, x, y, **kw)
    assert np.array_equal(before, net.params) and opt.step == 0
