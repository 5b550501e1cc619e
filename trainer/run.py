"""The training run behind `mcutrain train`: the loop, validation, logging, checkpoints and Ctrl-C.

A run is fully described by its settings (stored in the model file's metadata under "train") plus
the model file's parameters and optimizer state. Batches come from a Source as a pure function of
the seed and the batch index, so continuing from a checkpoint gives the very bits an uninterrupted
run would have produced.

The steps run through Module.fit, in chunks that end where something must happen (validation, a
checkpoint, the test hook's stop) and otherwise last about CHUNK_SECONDS, so Python (progress bar, log,
Ctrl-C) runs only between chunks. Ctrl-C does not break a step in half: the first one asks the loop to
stop after the current chunk, which then saves a checkpoint; a second Ctrl-C stops at once.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from .checks import settings_from_dict
from .errors import ModelFileError, TrainingError
from .losses import Loss
from .modelfile import save_model
from .module import Module
from .optim import Optimizer
from .recorder import Recorder
from .sources import DataSettings, Source, metrics
from .train import MAX_THREADS, FitResult

CHUNK_SECONDS = 0.05  # about how long a chunk of steps in C runs before Python gets control back
MAX_CHUNK = 1 << 16
MAX_CHUNK_SAMPLES = 1 << 20  # a problem's chunk is drawn into memory at once: at most this many samples


@dataclass
class RunSettings:
    """How a run trains (everything but the network and the optimizer, which the model file holds)."""

    data: DataSettings = field(default_factory=DataSettings)
    loss: str = "mse"
    batch: int = 32
    threads: int = 1
    seed: int = 0
    val: float = 0.0
    steps: int = 0  # total steps of the run, counting steps before a resume
    epochs: Optional[int] = None  # what --epochs was, for the record
    init_scale: float = 1.0
    eval_every: int = 0  # 0: about 20 times per run
    log_every: int = 10

    def to_dict(self) -> Dict[str, Any]:
        """Plain data for the model file."""
        d = asdict(self)
        d["data"] = self.data.to_dict()
        return d

    @staticmethod
    def from_dict(d: Any, where: str = "metadata train") -> RunSettings:
        """Inverse of to_dict (unknown keys are ignored); ModelFileError naming a field of the wrong type."""
        s = settings_from_dict(RunSettings, d, where, ModelFileError, data=DataSettings.from_dict)
        for name, lo, hi in (
            ("batch", 1, 2**31 - 1),
            ("threads", 1, MAX_THREADS),
            ("seed", 0, 2**63 - 1),
            ("steps", 0, 2**63 - 1),
            ("eval_every", 0, 2**63 - 1),
            ("log_every", 0, 2**63 - 1),
        ):
            if not lo <= getattr(s, name) <= hi:
                raise ModelFileError(f"{where}.{name} must be from {lo} to {hi}, got {getattr(s, name)!r}")
        if not 0.0 <= s.val < 1.0:
            raise ModelFileError(f"{where}.val must be in [0, 1), got {s.val!r}")
        return s

    def evaluation_interval(self) -> int:
        """Steps between validation checks."""
        return self.eval_every if self.eval_every > 0 else max(1, self.steps // 20)


def run_metadata(
    settings: RunSettings, batches: int, fingerprint: Optional[int], base: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """What the model file records about the run (the loss also tells the exporter what to train with), on top
    of base: what else the model remembers (class names, input steps, the device it came from)."""
    run = {"loss": settings.loss, "train": {**settings.to_dict(), "batches": batches, "data_crc": fingerprint}}
    return {**(base or {}), **run}


class StopRequest:
    """Turns the first SIGINT into a request to stop after the current step (main thread only)."""

    def __init__(self) -> None:
        self.requested = False
        self._old: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


@dataclass
class RunResult:
    """How a run ended."""

    batches: int
    loss: float
    val: Dict[str, float]
    interrupted: bool


class TrainingRun:
    """One invocation of the training loop, from batch `start` up to settings.steps."""

    def __init__(
        self,
        net: Module,
        opt: Optimizer,
        loss: Loss,
        source: Source,
        settings: RunSettings,
        out: Path,
        start: int = 0,
        recorder: Optional[Recorder] = None,
        on_progress: Optional[Callable[[int, str], None]] = None,
        checkpoint_every: int = 0,
        stop_after: int = 0,
        metadata: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.net, self.opt, self.loss, self.source, self.s = net, opt, loss, source, settings
        self.out, self.batches, self.recorder = out, start, recorder
        self.on_progress = on_progress or (lambda n, text: None)
        self.checkpoint_every, self.stop_after = checkpoint_every, stop_after
        self.metadata = metadata or {}  # kept in the model file besides the run (mcutrain.modelmeta)
        self.fingerprint = settings.data.fingerprint()
        self.val_set = source.validation()
        self.val: Dict[str, float] = {}
        self.avg: Optional[float] = None

    def save(self) -> None:
        """Write the model file (atomically) with the run's state."""
        meta = run_metadata(self.s, self.batches, self.fingerprint, self.metadata)
        frontend = getattr(self.source, "frontend", None)
        if frontend is not None:  # raw data through a feature pipeline: the model keeps the pipeline
            meta["frontend"] = frontend.to_dict()
        save_model(self.out, self.net, self.opt, meta)

    def validate(self) -> Dict[str, float]:
        """Loss (and accuracy) on the held-out samples; {} without them."""
        if self.val_set is None:
            return {}
        x, y = self.val_set
        self.val = metrics(self.net.forward(x), y, self.loss, self.source.classification)
        return self.val

    def status(self) -> str:
        """The text next to the progress bar."""
        parts = [f"loss {self.avg:.4g}" if self.avg is not None else ""]
        if "accuracy" in self.val:
            parts.append(f"val acc {self.val['accuracy']:.1%}")
        elif "loss" in self.val:
            parts.append(f"val loss {self.val['loss']:.4g}")
        return "  ".join(p for p in parts if p)

    def _chunk_length(self, done_here: int) -> int:
        """Steps of the next chunk: up to the next validation, checkpoint, test-hook stop or the end, and at
        most what runs in about CHUNK_SECONDS."""
        b, ends = self.batches, [self.s.steps, _next_multiple(self.batches, self.s.evaluation_interval())]
        if self.checkpoint_every:
            ends.append(_next_multiple(b, self.checkpoint_every))
        if self.stop_after:
            ends.append(b + max(1, self.stop_after - done_here))
        return max(1, min(min(ends) - b, self._chunk, MAX_CHUNK_SAMPLES // self.s.batch))

    def _train(self, count: int) -> FitResult:
        """Batches self.batches .. + count - 1 through Module.fit."""
        x, y, shuffle, first = self.source.chunk(self.batches, count, self.s.batch)
        n = x.shape[0]
        epochs = math.ceil((first + count) / math.ceil(n / self.s.batch))
        return self.net.fit(
            self.opt,
            self.loss,
            x,
            y,
            epochs=epochs,
            batch=self.s.batch,
            shuffle=shuffle,
            threads=self.s.threads,
            callback_every=count,
            start=first,
            steps=first + count,
        )

    def _record(self, values: Any) -> None:
        """Bookkeeping of the steps just done (their losses, in order): the smoothed loss and the log; at the
        chunk's end validation and a checkpoint when their step has come."""
        for i, value in enumerate(values):
            value = float(value)
            step = self.batches - len(values) + i + 1
            self.avg = value if self.avg is None else 0.95 * self.avg + 0.05 * value
            last_here = i == len(values) - 1
            last = step == self.s.steps
            extra: Dict[str, float] = {}
            if last_here and (step % self.s.evaluation_interval() == 0 or last):
                extra = {f"val_{k}": v for k, v in self.validate().items()}
            if self.recorder is not None and (extra or last or step % self.recorder.every == 0):
                lr = self.opt.params.lr_at(step - 1)  # the rate of this step
                self.recorder.step(step, value, lr, force=True, **extra)
            if last_here and self.checkpoint_every and step % self.checkpoint_every == 0 and not last:
                self.save()

    def run(self) -> RunResult:
        """Train until settings.steps or a stop request; always leaves a model file behind."""
        loss = float("nan")  # no step taken
        done_here = 0
        self._chunk = 1
        with StopRequest() as stop:
            while self.batches < self.s.steps:
                count = self._chunk_length(done_here)
                t0 = time.perf_counter()
                try:
                    res = self._train(count)
                except TrainingError as e:
                    partial = getattr(e, "fit_result", None)
                    if partial is not None and len(partial.losses):
                        self.batches += len(partial.losses)
                        self._record(partial.losses)
                    raise
                took = time.perf_counter() - t0
                self.batches += count
                done_here += count
                self._record(res.losses)
                loss = float(res.losses[-1])
                if took < CHUNK_SECONDS / 2 and count == self._chunk:
                    self._chunk = min(MAX_CHUNK, self._chunk * 2)
                elif took > CHUNK_SECONDS * 2:
                    self._chunk = max(1, self._chunk // 2)
                self.on_progress(count, self.status())
                if self.stop_after and done_here >= self.stop_after:
                    stop.requested = True  # the test hook: behave as if Ctrl-C came now
                if stop.requested:
                    break
        interrupted = self.batches < self.s.steps
        if not interrupted and not self.val:
            self.validate()
        self.save()
        return RunResult(self.batches, self.avg if self.avg is not None else loss, self.val, interrupted)


def _next_multiple(b: int, k: int) -> int:
    """The first multiple of k above b."""
    return (b // k + 1) * k
