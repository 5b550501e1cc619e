"""Optimizer state that overflows (issue 25, class 2): at a huge learning rate RMSProp's and Adam's moments
reach inf while the parameters still look finite, and the parameters can overflow too. Every training path
(train_batch, fit, update, the `train` command) must stop with TrainingError at the step whose update would
have left a parameter or a value of the optimizer state not finite, with the parameters, the optimizer state
and its step count as they were before that step, and the model file untouched.

The property-based test draws the optimizer, its learning rate, the data's scale and the path; the property:
every step that returns leaves everything finite, and every step that raises changes nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import OPTIMIZER_KINDS, optimizer_of_kind
from mcutrain import Sequential, TrainingError, losses, train_batch
from mcutrain import layers as L
from mcutrain.modelfile import load_model, save_model
from mcutrain.optim import TrainParams

KINDS = OPTIMIZER_KINDS


def new_opt(net: Sequential, kind: str, lr: float) -> Any:
    """An optimizer of the given kind at learning rate lr."""
    return optimizer_of_kind(net, kind, TrainParams(lr=lr))


def snapshot(net: Sequential, opt: Any) -> tuple:
    return net.params.copy(), opt.state.copy(), opt.step


@settings(max_examples=120, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    lr_exp=st.integers(-2, 6),
    scale_exp=st.integers(0, 12),
    path=st.sampled_from(["train_batch", "fit", "update", "threads"]),
    seed=st.integers(0, 2**16),
)
def test_a_step_either_leaves_everything_finite_or_changes_nothing(
    kind: str, lr_exp: int, scale_exp: int, path: str, seed: int
) -> None:
    """Up to 12 steps at lr 10^lr_exp on data of scale 10^scale_exp through one training path: after every
    step that returns, the parameters and the optimizer state are finite; a step that raises TrainingError
    leaves them and the step count bit for bit as they were."""
    rng = np.random.default_rng(seed)
    net = Sequential(L.Linear(3, 8), L.Relu(), L.Linear(8, 2)).rand_params(seed=seed)
    opt = new_opt(net, kind, float(10.0**lr_exp))
    x = (rng.standard_normal((16, 3)) * 10.0**scale_exp).astype(np.float32)
    y = (rng.standard_normal((16, 2)) * 10.0**scale_exp).astype(np.float32)
    for _ in range(12):
        before = snapshot(net, opt)
        try:
            if path == "train_batch":
                train_batch(opt, net, losses.mse, x, y)
            elif path == "threads":
                train_batch(opt, net, losses.mse, x, y, threads=3)
            elif path == "fit":
                net.fit(opt, losses.mse, x, y, epochs=1, batch=16, shuffle=None)
            else:
                trace = net.traced_forward(x)[1]
                loss, _, grads = net.backprop_loss(trace, losses.mse, y)
                net.update(opt, grads, loss)
        except TrainingError as e:
            p, s, step = before
            assert net.params.tobytes() == p.tobytes() and opt.state.tobytes() == s.tobytes(), str(e)
            assert opt.step == step, (opt.step, step)
            return
        assert np.isfinite(net.params).all(), "a step returned with a parameter that is not finite"
        assert np.isfinite(opt.state).all(), f"a step returned with {kind}'s state not finite"


@pytest.mark.parametrize("kind", ["rmsprop", "adam", "rmsprop_momentum"])
def test_moments_that_overflow_stop_training_with_a_training_error(kind: str) -> None:
    """The case of the report: parameters still finite, the second moment already inf (gradient squares past
    3.4e38). The step is refused, names the overflow and says what to do."""
    net = Sequential(L.Linear(3, 4), L.Linear(4, 2)).rand_params(seed=1)
    opt = new_opt(net, kind, 1e6)
    x, y = np.full((4, 3), 10.0, np.float32), np.zeros((4, 2), np.float32)
    with pytest.raises(TrainingError, match="overflowed.*lower the learning rate"):
        for _ in range(50):
            train_batch(opt, net, losses.mse, x, y)
    assert np.isfinite(opt.state).all() and np.isfinite(net.params).all()


def test_the_train_command_leaves_the_model_file_as_it_was(tmp_path: Path) -> None:
    """`mcutrain train --resume` at a learning rate that overflows Adam: exit code 1, one line naming the
    overflow, and the model file byte for byte as before."""
    net = Sequential(L.Linear(3, 8), L.Linear(8, 1)).rand_params(seed=3)
    opt = new_opt(net, "adam", 1e6)
    model = tmp_path / "m.mct"
    r = subprocess.run(
        ["mcutrain", "train", "--net", "linear:3x8,linear:8x1", "--problem", "axplusb", "--opt", "adam",
         "--lr", "1000000", "--steps", "400", "-o", str(model)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 1 and "overflowed" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not model.exists()  # a first run that failed wrote nothing
    save_model(model, net, opt, {"loss": "mse", "train": {"data": {"problem": "axplusb"}, "steps": 1, "batch": 32}})
    before = model.read_bytes()
    r = subprocess.run(
        ["mcutrain", "train", "--resume", str(model), "--steps", "400"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 1 and "overflowed" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert model.read_bytes() == before
    assert load_model(model).optimizer is not None
