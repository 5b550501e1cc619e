"""Training loops: train_step (one sample), train_batch (mean gradient over a batch) and its
parallel variant (the batch split over threads that run without the GIL)."""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import numpy as np

from .checks import as_batch, whole
from .corefacts import Status
from .errors import ShapeError, TrainingError
from .losses import Loss
from .module import Module, as_optimizer
from .optim import Optimizer, TrainParams

MAX_THREADS = 256  # threads=N: the batch is split into at most this many parts


def train_batch(
    optimizer: Union[Optimizer, TrainParams], net: Module, loss: Loss, x: Any, y: Any, threads: int = 1
) -> float:
    """One update from the mean gradient of a batch (x: (nb, n_in), y: (nb, n_out)); returns the mean loss.

    threads > 1 runs contiguous parts of the batch on that many threads; for a given thread count the
    result is deterministic (the parts are summed in order), but it may differ in the last bits from
    the single-threaded sum.
    """
    threads = whole("threads", threads, 1, MAX_THREADS)
    opt = as_optimizer(optimizer, net)
    if not isinstance(loss, Loss):
        raise TypeError(f"loss must be one of mcutrain.losses (mse, huber(b), logit_bce, ...), got {loss!r}")
    xb, _ = as_batch(x, net._in_width(), "input")
    tb, _ = as_batch(y, net._out_width(), "target")
    if xb.shape[0] != tb.shape[0]:
        raise ShapeError(f"{xb.shape[0]} inputs but {tb.shape[0]} targets")
    status, value = net._corenet().train_batch(
        opt._cfg, opt._ts, net._ensure_buf(), opt._state_buf, loss.kind, loss.param, xb, tb, threads
    )
    if status != Status.OK:
        step = opt.step + 1
        if status == Status.E_NONFINITE_INPUT:
            bad = np.argwhere(~(np.isfinite(xb).all(axis=1) & np.isfinite(tb).all(axis=1)))[0][0]
            what = f"sample {bad} of the batch at step {step} has NaN or inf in its input or target"
        elif status == Status.E_NONFINITE:
            what = f"the loss became {value} at step {step}"
        else:
            what = f"a gradient became NaN or inf at step {step}"
        raise TrainingError(
            f"{what}; training stopped and the parameters are those after step {opt.step}. "
            f"Check the data, lower the learning rate, or add gradient clipping"
        )
    return value


def train_step(optimizer: Union[Optimizer, TrainParams], net: Module, loss: Loss, x: Any, y: Any) -> float:
    """One update from a single sample (x: (n_in,), y: (n_out,)); returns its loss."""
    xb, _ = as_batch(x, net._in_width(), "input")
    tb, _ = as_batch(y, net._out_width(), "target")
    if xb.shape[0] != 1 or tb.shape[0] != 1:
        raise ShapeError(
            f"train_step takes one sample; got a batch of {max(xb.shape[0], tb.shape[0])} (use train_batch)"
        )
    return train_batch(optimizer, net, loss, xb, tb)


def train_batch_parallel(
    optimizer: Union[Optimizer, TrainParams], net: Module, loss: Loss, x: Any, y: Any, threads: Optional[int] = None
) -> float:
    """train_batch on several threads (default: every CPU core)."""
    return train_batch(optimizer, net, loss, x, y, threads=os.cpu_count() or 1 if threads is None else threads)
