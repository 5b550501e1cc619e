"""Training loops: train_step (one sample), train_batch (mean gradient over a batch), its parallel variant
(the batch split over threads that run without the GIL) and fit (whole epochs in C, without the GIL).

Every one of them holds the network's lock (Module.lock) and the optimizer's while it reads or writes
parameters or optimizer state (fit: during each chunk of callback_every steps), so concurrent calls on one
network from several Python threads are serialised, each taking effect whole."""

from __future__ import annotations

import os
from typing import Any, Optional, Union

from .checks import as_batch, whole
from .corefacts import Status
from .errors import ShapeError
from .fitloop import MAX_THREADS, FitProgress, FitResult, check_loss, shuffle_order, step_error
from .losses import Loss
from .module import Module, as_optimizer, samples
from .optim import Optimizer, TrainParams

__all__ = [
    "train_batch",
    "train_step",
    "train_batch_parallel",
    "fit",
    "shuffle_order",
    "FitProgress",
    "FitResult",
    "MAX_THREADS",
]


def train_batch(
    optimizer: Union[Optimizer, TrainParams], net: Module, loss: Loss, x: Any, y: Any, threads: int = 1
) -> float:
    """One update from the mean gradient of a batch (x: (nb, n_in), y: (nb, n_out)); returns the mean loss.

    threads > 1 runs contiguous parts of the batch on that many threads; for a given thread count the
    result is deterministic (the parts are summed in order), but it may differ in the last bits from
    the single-threaded sum.
    """
    if type(threads) is not int or not 1 <= threads <= MAX_THREADS:
        threads = whole("threads", threads, 1, MAX_THREADS)
    opt = as_optimizer(optimizer, net)
    check_loss(loss)
    xb, tb = samples(net, x, y)
    net._check_threads(threads)
    with net._lock, opt._lock:
        status, value = net._corenet(training=True).train_batch(
            opt._cfg, opt._ts, net._ensure_buf(), opt._state_buf, loss.kind, loss.param, xb, tb, threads
        )
        if status != Status.OK:
            raise step_error(status, value, opt.step, xb, tb)
    return value


def train_step(optimizer: Union[Optimizer, TrainParams], net: Module, loss: Loss, x: Any, y: Any) -> float:
    """One update from a single sample (x: (n_in,), y: (n_out,)); returns its loss."""
    xb, _ = as_batch(x, net._in_width(), "input", shape=net.in_shape)
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


def fit(optimizer: Union[Optimizer, TrainParams], net: Module, loss: Loss, x: Any, y: Any, **kw: Any) -> FitResult:
    """net.fit(optimizer, loss, x, y, **kw): whole epochs in C without the GIL (see Module.fit)."""
    return net.fit(optimizer, loss, x, y, **kw)
