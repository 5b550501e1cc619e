"""The training loop in C over whole epochs (fit's engine) and what both it and train_batch report: the error of
a step the core refused, and the seeded sample order of an epoch.

fit runs chunks of steps in the extension without the GIL (CoreNet.fit), each step the very code of
train_batch, and comes back to Python between chunks for the callback, Ctrl-C and other threads."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from . import _core
from .checks import whole
from .corefacts import Status
from .errors import ShapeError, TrainingError
from .losses import Loss
from .optim import Optimizer

MAX_THREADS = 256  # threads=N: the batch is split into at most this many parts


def check_loss(loss: Any) -> None:
    if not isinstance(loss, Loss):
        raise TypeError(f"loss must be one of mcutrain.losses (mse, huber(b), logit_bce, ...), got {loss!r}")


def step_error(status: int, value: float, done: int, xb: np.ndarray, tb: np.ndarray) -> TrainingError:
    """The error of a step that the core refused (status), after `done` steps; xb, tb: its batch."""
    step = done + 1
    if status == Status.E_NONFINITE_INPUT:
        bad = np.argwhere(~(np.isfinite(xb).all(axis=1) & np.isfinite(tb).all(axis=1)))[0][0]
        what = f"sample {bad} of the batch at step {step} has NaN or inf in its input or target"
    elif status == Status.E_NONFINITE:
        what = f"the loss became {value} at step {step}"
    elif status == Status.E_NONFINITE_STATE:
        what = f"the update of step {step} overflowed: a parameter or the optimizer's state became NaN or inf"
    else:
        what = f"a gradient became NaN or inf at step {step}"
    return TrainingError(
        f"{what}; training stopped and the parameters are those after step {done}. "
        f"Check the data, lower the learning rate, or add gradient clipping"
    )


DEFAULT_CALLBACK_EVERY = 100


def shuffle_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The order (a permutation of 0 .. n-1, uint32) in which fit(shuffle=seed) visits n samples in epoch
    `epoch` (0-based): a pure function of the three numbers, computed by the same C code fit runs."""
    return _core.shuffle_order(
        whole("n", n, 0, 2**32 - 1), whole("seed", seed, 0, 2**64 - 1), whole("epoch", epoch, 0, 2**64 - 1)
    )


def batches_per_epoch(n: int, batch: int) -> int:
    """Steps of one epoch of fit over n samples: ceil(n / batch) (the last batch holds what remains)."""
    return -(-n // batch)


@dataclass
class FitProgress:
    """What fit tells its callback (every callback_every steps, and after the last step)."""

    step: int  # steps done in the run (counting `start`)
    steps: int  # steps the run ends at
    epoch: int  # epoch of the last step (0-based)
    losses: np.ndarray  # mean loss of each step since the previous callback (float32)


@dataclass
class FitResult:
    """How fit ended: the steps done (counting start), each step's mean loss, and whether a callback stopped it."""

    step: int
    losses: np.ndarray
    stopped: bool


def run_fit(
    core: Any,
    lock: threading.RLock,
    params: np.ndarray,
    opt: Optimizer,
    loss: Loss,
    xb: np.ndarray,
    tb: np.ndarray,
    epochs: int,
    batch: int,
    shuffle: Optional[int],
    threads: int,
    callback_every: int,
    callback: Optional[Callable[[FitProgress], Optional[bool]]],
    start: int,
    steps: Optional[int],
) -> FitResult:
    """Module.fit after its checks of the network's side: core (the network's CoreNet), lock (its lock), params
    (its parameter buffer), checked batches xb, tb of equal length."""
    check_loss(loss)
    n = xb.shape[0]
    epochs = whole("epochs", epochs, 0, 2**40)
    batch = whole("batch", batch, 1, 2**31 - 1)
    threads = whole("threads", threads, 1, MAX_THREADS)
    every = whole("callback_every", callback_every, 1, 2**40)
    if n > 2**32 - 1:
        raise ShapeError(f"fit takes at most 2**32 - 1 samples, got {n}")
    seed = 0 if shuffle is None else whole("shuffle", shuffle, 0, 2**64 - 1)
    per_epoch = batches_per_epoch(n, batch)
    end = epochs * per_epoch if steps is None else whole("steps", steps, 0, epochs * per_epoch)
    g = at = whole("start", start, 0, end)
    losses = np.empty(end - g, np.float32)
    while g < end:
        stop = min(end, (g // every + 1) * every)
        with lock, opt._lock:
            status, done, value = core.fit(
                opt._cfg,
                opt._ts,
                params,
                opt._state_buf,
                loss.kind,
                loss.param,
                xb,
                tb,
                batch,
                shuffle is not None,
                seed,
                g,
                stop,
                threads,
                losses[g - at :],
            )
            if status != Status.OK:
                epoch, j = divmod(g + done, per_epoch)
                order = shuffle_order(n, seed, epoch) if shuffle is not None else np.arange(n)
                sel = order[j * batch : (j + 1) * batch]
                err = step_error(status, value, opt.step, xb[sel], tb[sel])
                err.fit_result = FitResult(g + done, losses[: g + done - at], True)  # the steps that were done
                raise err
        prev, g = g, stop
        if callback is not None:
            if callback(FitProgress(g, end, (g - 1) // per_epoch, losses[prev - at : g - at])) is False:
                return FitResult(g, losses[: g - at], True)
    return FitResult(g, losses, False)
