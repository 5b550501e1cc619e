"""The module contract shared by every layer and every composition of layers.

Each module offers forward, traced_forward, backprop, update and the new_* optimizer
constructors (the contract of the Rust crate minidx). Parameters live in one flat float32 buffer
per network; a module's `params` is a view of its slice. All numeric work is done by the C core
through the module's compiled `Program`.

Thread safety: every network has one lock (`Module.lock`, a re-entrant lock shared by the network and all
its sub-modules). Each call that reads or writes parameters or optimizer state holds it for the whole call:
forward, traced_forward, backprop, update, rand_params, the params setter, train_step, train_batch, each
chunk of fit, and save_model. So several Python threads may train and query one network at once: their
calls run one after another (in some order), never interleaved, and every update is kept. The C core runs
without the GIL, so threads working on *different* networks run in parallel. A `params` view read or
written directly by the caller bypasses the lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from .checks import as_batch, number, whole
from .corefacts import Status
from .errors import ConfigError, ShapeError, TrainingError
from .fitloop import DEFAULT_CALLBACK_EVERY, FitProgress, FitResult, run_fit
from .locking import OwnLock
from .losses import Loss
from .optim import Optimizer, TrainParams
from .program import Op, Program, ProgramBuilder, core_net

__all__ = ["Module", "Trace", "Gradients", "as_optimizer", "core_net", "as_batch", "ShapeError"]


@dataclass
class Trace:
    """What a traced forward pass keeps for backprop: the C core's arena for the batch."""

    arena: np.ndarray
    samples: int
    single: bool


@dataclass
class Gradients:
    """Parameter gradients of a module, summed over `samples` samples (update() uses the mean)."""

    values: np.ndarray
    samples: int = 1

    def mean(self) -> np.ndarray:
        """The mean gradient per sample, for looking at it (the tests do). update() does not use it: it
        hands the sum and the count to the core, which divides with its own mct_div."""
        return self.values / np.float32(self.samples)


class Module(OwnLock):
    """Base class of layers and compositions: sizes, parameters and the five operations.

    Thread-safe: the calls that read or write a network's parameters or optimizer state hold the
    network's lock (`lock`) for their whole duration, so concurrent calls from several threads on one
    network are serialised and none is lost (see the module docstring)."""

    n_in: Optional[int] = None
    n_out: Optional[int] = None
    _shape: Optional[Tuple[int, ...]] = None  # the input's shape when it is not flat (spatial layers, set by them)

    def __init__(self) -> None:
        self._buf: Optional[np.ndarray] = None
        self._program: Optional[Program] = None
        self._train_program: Optional[Program] = None
        self._core: Any = None
        self._train_core: Any = None
        OwnLock.__init__(self)

    # ---- shapes ----
    @property
    def in_shape(self) -> Optional[Tuple[int, ...]]:
        """The shape of one input sample: (H, W, C) for images, (T, C) for series, (n_in,) when flat; None while
        the size is not known."""
        if self._shape is not None:
            return self._shape
        return None if self.n_in is None else (self.n_in,)

    @property
    def out_shape(self) -> Optional[Tuple[int, ...]]:
        """The shape of one output sample (see in_shape)."""
        return None if self.n_out is None else (self.n_out,)

    def _resolve_shape(self, shape: Tuple[int, ...]) -> None:
        """Adopt an input of this shape (spatial and size-agnostic layers); fixed layers check its size."""
        self._resolve(int(np.prod(shape)))

    # ---- description (overridden by layers) ----
    def param_count(self) -> int:
        """Number of parameters (sizes must be known)."""
        return 0

    def children(self) -> Tuple[Module, ...]:
        """Sub-modules, for compositions."""
        return ()

    def _emit(self, b: ProgramBuilder) -> None:
        """Append this module's layers to a program."""
        raise NotImplementedError

    def _default_params(self) -> np.ndarray:
        """Parameter values before rand_params (float32, param_count())."""
        return np.zeros(self.param_count(), np.float32)

    def _init_params(self, rng: np.random.Generator, scale: float) -> np.ndarray:
        """Seeded random parameter values (float32, param_count())."""
        return self._default_params()

    def _resolve(self, n: int) -> None:
        """Adopt input size n (size-agnostic layers); layers with a fixed size check it instead."""

    def architecture(self) -> Dict[str, Any]:
        """The architecture as plain data (see mcutrain.architecture)."""
        raise NotImplementedError

    def __setstate__(self, state: Dict[str, Any]) -> None:
        super().__setstate__(state)
        for c in self.children():  # the children were restored first: they take this module's lock
            c._share_lock(self._lock)

    def describe(self) -> str:
        """Short human name, e.g. 'Linear(20, 35)'."""
        return type(self).__name__

    def __repr__(self) -> str:
        return self.describe()

    @property
    def lock(self) -> threading.RLock:
        """The network's re-entrant lock, held by every call that reads or writes its parameters or
        optimizer state; shared by a composition and all its sub-modules. Hold it yourself to make a
        sequence of calls (or direct access to `params`) atomic."""
        return self._lock

    # ---- parameters ----
    @property
    def n_params(self) -> int:
        """Number of parameters."""
        return self.param_count()

    def _require_sizes(self) -> None:
        if self.n_in is None:
            if self.children():
                raise ShapeError(
                    f"{self.describe()} does not know its input's size yet: give its first layer "
                    f"input_shape=(...), e.g. (8, 8, 1) for 8x8 images with one channel"
                )
            raise ShapeError(
                f"{self.describe()} does not know its size yet: give it one, "
                f"e.g. {type(self).__name__}(20), or put it after a sized layer"
            )

    def _ensure_buf(self) -> np.ndarray:
        if self._buf is None:
            with self._lock:
                if self._buf is None:
                    self._require_sizes()
                    self._bind(np.zeros(self.param_count(), np.float32))  # _bind writes the defaults
        assert self._buf is not None
        return self._buf

    def _bind(self, buf: np.ndarray) -> None:
        """Make this module's parameters live in buf (values are kept); children follow."""
        n = self.param_count()
        if self._buf is not None and self._buf is not buf:
            buf[:n] = self._buf[:n]
        elif self._buf is None:
            buf[:n] = self._default_params()
        self._buf = buf
        off = 0
        for c in self.children():
            cn = c.param_count()
            c._share_lock(self._lock)
            c._bind(buf[off : off + cn])
            off += cn

    def _share_lock(self, lock: threading.RLock) -> None:
        """Use the enclosing network's lock (this module and its children)."""
        self._lock = lock
        for c in self.children():
            c._share_lock(lock)

    @property
    def params(self) -> np.ndarray:
        """This module's parameters: a float32 view, writes go straight to the network."""
        return self._ensure_buf()[: self.param_count()]

    @params.setter
    def params(self, values: Any) -> None:
        v = np.asarray(values, dtype=np.float32).ravel()
        if v.shape[0] != self.param_count():
            raise ShapeError(f"{self.describe()} has {self.param_count()} parameters, got {v.shape[0]} values")
        with self._lock:
            self._ensure_buf()[: self.param_count()] = v

    def rand_params(self, seed: int = 0, scale: float = 1.0) -> Module:
        """Seeded, reproducible init: Glorot-style normal weights scaled by `scale` (a finite number; 0
        gives zero weights)."""
        rng = np.random.default_rng(whole("seed", seed, 0, 2**63 - 1, error=ShapeError))
        self.params = self._init_params(rng, number("scale", scale, -1e6, 1e6, error=ShapeError))
        return self

    def layers(self) -> Iterator[Module]:
        """The leaf layers in execution order."""
        if self.children():
            for c in self.children():
                yield from c.layers()
        else:
            yield self

    # ---- compiled form ----
    @property
    def program(self) -> Program:
        """The C core's layer table for this module alone (for inference: BatchNorm uses its running statistics)."""
        if self._program is None:
            self._program = self._build_program(training=False)
        return self._program

    @property
    def train_program(self) -> Program:
        """The layer table training runs: BatchNorm normalises with the batch's statistics and moves its running
        ones; the same table as `program` when the module has no BatchNorm."""
        if self._train_program is None:
            t = self._build_program(training=True)
            self._train_program = self.program if t.table().tobytes() == self.program.table().tobytes() else t
        return self._train_program

    def _build_program(self, training: bool) -> Program:
        self._require_sizes()
        assert self.n_in is not None
        b = ProgramBuilder(self.n_in, training=training)
        self._emit(b)
        return b.build()

    def _check_threads(self, threads: int) -> None:
        """BatchNorm's batch statistics and Dropout's step counter need the whole batch on one thread."""
        if threads > 1:
            for d in self.train_program.layers:
                if d.op in (Op.BATCHNORM, Op.DROPOUT):
                    raise ConfigError(
                        f"{d.name} needs the whole batch on one thread (its statistics or its masks): train with "
                        f"threads=1 (--threads 1)"
                    )

    def _corenet(self, training: bool = False) -> Any:
        """The C core running `program` (training: `train_program`)."""
        if training and self.train_program is not self.program:
            if self._train_core is None:
                self._train_core = core_net(self.train_program)
            return self._train_core
        if self._core is None:
            p = self.program
            self._core = core_net(p)
        return self._core

    # ---- the five operations ----
    def forward(self, x: Any) -> np.ndarray:
        """Output for one sample (n_in,) -> (n_out,) or a batch (nb, n_in) -> (nb, n_out)."""
        xb, single = as_batch(x, self._in_width(), shape=self.in_shape)
        with self._lock:
            y = self._corenet().forward(self._ensure_buf(), xb)
        return y[0] if single else y

    __call__ = forward

    def traced_forward(self, x: Any) -> Tuple[np.ndarray, Trace]:
        """(output, trace): the trace is what backprop needs."""
        xb, single = as_batch(x, self._in_width(), shape=self.in_shape)
        with self._lock:
            y, arena = self._corenet().traced_forward(self._ensure_buf(), xb)
        return (y[0] if single else y), Trace(arena, xb.shape[0], single)

    def backprop(self, trace: Trace, grads_wrt_output: Any) -> Tuple[np.ndarray, Gradients]:
        """(grads w.r.t. the input, this module's parameter gradients summed over the trace's samples)."""
        g, _ = as_batch(grads_wrt_output, self._out_width(), "grads_wrt_output")
        if g.shape[0] != trace.samples:
            raise ShapeError(f"grads_wrt_output has {g.shape[0]} samples, the trace has {trace.samples}")
        with self._lock:
            gin, grads = self._corenet().backward(self._ensure_buf(), trace.arena, g)
        return (gin[0] if trace.single else gin), Gradients(grads, trace.samples)

    def backprop_loss(self, trace: Trace, loss: Any, targets: Any) -> Tuple[float, np.ndarray, Gradients]:
        """(mean loss, grads w.r.t. the input, parameter gradients summed over the trace's samples) of a loss
        (mcutrain.losses) on the traced outputs, computed as training computes them: cross-entropy after a final
        Softmax(T) takes its gradient w.r.t. the Softmax's input in one step, (p - t) / T, and its value from
        log-softmax, so a confidently wrong answer keeps its full gradient (backprop with the loss's dL/dy goes
        through the softmax outputs, clamped at 1e-30)."""
        t, _ = as_batch(targets, self._out_width(), "targets")
        if t.shape[0] != trace.samples:
            raise ShapeError(f"targets have {t.shape[0]} samples, the trace has {trace.samples}")
        total, gin, grads = self._corenet().loss_backward(
            self._ensure_buf(), trace.arena, int(loss.kind), float(loss.param), t
        )
        mean = float(np.float32(total) / np.float32(trace.samples))
        return mean, (gin[0] if trace.single else gin), Gradients(grads, trace.samples)

    def update(self, optimizer: Union[Optimizer, TrainParams], self_grads: Gradients, loss: float = 1.0) -> None:
        """Apply one optimizer step with the mean of self_grads (loss is used by scale_by_loss)."""
        opt = as_optimizer(optimizer, self)
        if self_grads.values.shape != (self.param_count(),):
            raise ShapeError(
                f"gradients have {self_grads.values.shape[0]} values, "
                f"{self.describe()} has {self.param_count()} parameters"
            )
        g = np.ascontiguousarray(self_grads.values, np.float32)
        with self._lock, opt._lock:
            rc = self._corenet().apply(
                opt._cfg, opt._ts, self._ensure_buf(), g, opt._state_buf, float(self_grads.samples), float(loss)
            )
        if rc != Status.OK:
            what = {
                Status.E_NONFINITE: "the loss is NaN or inf",
                Status.E_NONFINITE_STATE: "the update overflowed (a parameter or the optimizer state is NaN or inf)",
            }.get(rc, "a gradient is NaN or inf")
            raise TrainingError(f"{what}: update {opt.step + 1} was not applied; lower the learning rate")

    def fit(
        self,
        optimizer: Union[Optimizer, TrainParams],
        loss: Loss,
        x: Any,
        y: Any,
        epochs: int = 1,
        batch: int = 32,
        shuffle: Optional[int] = 0,
        threads: int = 1,
        callback_every: int = DEFAULT_CALLBACK_EVERY,
        callback: Optional[Callable[[FitProgress], Optional[bool]]] = None,
        start: int = 0,
        steps: Optional[int] = None,
    ) -> FitResult:
        """Train for `epochs` passes over the samples x (n, n_in), y (n, n_out), `batch` samples per step, in C
        without the GIL; Python runs only every `callback_every` steps (the callback, Ctrl-C, other threads).

        Each epoch visits the samples in the order mcutrain.shuffle_order(n, shuffle, epoch) (shuffle=None:
        in the given order) and cuts it into ceil(n / batch) batches, the last one holding what remains.
        Every step is exactly train_batch(optimizer, self, loss, xb, yb, threads) on its batch: the same
        parameters bit for bit, and the same TrainingError (parameters left as after the step before) when a
        sample, the loss or a gradient is not finite.

        callback(progress: FitProgress) is called after every callback_every-th step (counted from the run's
        step 0) and after the last one; returning False stops the run there. `start` skips the run's first
        steps (to continue a run: a batch is a pure function of its step number); `steps` ends the run before
        epochs * batches per epoch. The lock (see `lock`) is held during each chunk of steps, not during the
        callback. Returns a FitResult: steps done (counting start), each step's mean loss, stopped or not."""
        opt = as_optimizer(optimizer, self)
        xb, tb = samples(self, x, y)
        if isinstance(threads, int):
            self._check_threads(threads)
        return run_fit(
            self._corenet(training=True),
            self._lock,
            self._ensure_buf(),
            opt,
            loss,
            xb,
            tb,
            epochs,
            batch,
            shuffle,
            threads,
            callback_every,
            callback,
            start,
            steps,
        )

    def new_sgd(self, params: TrainParams) -> Optimizer:
        """Plain gradient descent with TrainParams (a TrainParams object also works directly)."""
        return Optimizer("sgd", params, self.param_count())

    def new_momentum(self, params: TrainParams, coeff: float = 0.9, similarity_penalty: float = 0.0) -> Optimizer:
        """Momentum optimizer with state shaped like this module's gradients."""
        return Optimizer("momentum", params, self.param_count(), momentum=coeff, sim_penalty=similarity_penalty)

    def new_rmsprop(self, params: TrainParams, beta: float = 0.9) -> Optimizer:
        """RMSProp with state shaped like this module's gradients: a = beta a + (1 - beta) g^2,
        w -= lr g / sqrt(a + eps), with eps under the root (1e-20 by default, only there to keep 0/0 away),
        where PyTorch computes g / (sqrt(a) + eps) with eps 1e-8; beta is PyTorch's alpha (0.9 here, 0.99
        there)."""
        return Optimizer("rmsprop", params, self.param_count(), beta=beta)

    def new_rmsprop_with_momentum(
        self, params: TrainParams, coeff: float = 0.9, beta: float = 0.9, similarity_penalty: float = 0.0
    ) -> Optimizer:
        """RMSProp with momentum (minidx argument order: momentum coefficient, then beta): the velocity
        v = coeff v + g / sqrt(a + eps) and w -= lr v (see new_rmsprop for a and eps)."""
        return Optimizer(
            "rmsprop_momentum", params, self.param_count(), momentum=coeff, beta=beta, sim_penalty=similarity_penalty
        )

    def new_adam(self, params: TrainParams, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> Optimizer:
        """Adam with state shaped like this module's gradients, as torch.optim.Adam: bias-corrected moments,
        w -= lr m_hat / (sqrt(v_hat) + eps). L2 (TrainParams.l2) is coupled, added to the gradient."""
        return Optimizer("adam", params, self.param_count(), beta1=beta1, beta=beta2, eps=eps)

    # ---- helpers ----
    def _in_width(self) -> int:
        self._require_sizes()
        assert self.n_in is not None
        return self.n_in

    def _out_width(self) -> int:
        self._require_sizes()
        assert self.n_out is not None
        return self.n_out

    def summary(self) -> List[Dict[str, Any]]:
        """One row per C-core layer: name, op, input and output sizes (shapes 'HxWxC' for spatial ops),
        parameters and multiply-accumulates per sample (pooling counts none)."""
        rows = []
        for d in self.program.layers:
            g = d.geometry
            macs = 0
            if d.n_w and d.op.name in ("DENSE", "GLU"):
                macs = d.n_w
            elif d.op.name == "CONV1D":
                macs = d.n_out * d.k
            elif d.op.name == "CONV2D":
                macs = d.n_out * int(g["kh"] * g["kw"] * g["c_in"])
            elif d.op.name == "DWCONV2D":
                macs = d.n_out * int(g["kh"] * g["kw"])
            spatial = "h_in" in g
            shape_in = f"{int(g['h_in'])}x{int(g['w_in'])}x{int(g['c_in'])}" if spatial else d.n_in
            shape_out = f"{int(g['h_out'])}x{int(g['w_out'])}x{int(g['c_out'])}" if spatial else d.n_out
            rows.append(
                {
                    "layer": d.name,
                    "op": d.op.name.lower(),
                    "in": shape_in,
                    "out": shape_out,
                    "params": d.n_p,
                    "macs": macs,
                }
            )
        return rows


def samples(net: Module, x: Any, y: Any) -> Tuple[np.ndarray, np.ndarray]:
    """Inputs and targets as checked float32 batches of equal length."""
    xb, _ = as_batch(x, net._in_width(), "input", shape=net.in_shape)
    tb, _ = as_batch(y, net._out_width(), "target")
    if xb.shape[0] != tb.shape[0]:
        raise ShapeError(f"{xb.shape[0]} inputs but {tb.shape[0]} targets")
    return xb, tb


def as_optimizer(opt: Union[Optimizer, TrainParams], module: Module) -> Optimizer:
    """The optimizer to use with module: a TrainParams acts as plain SGD with its own step counter per
    module; an optimizer must have been made for a module with the same parameter count."""
    if isinstance(opt, TrainParams):
        sgd = opt._sgd.get(module)
        if sgd is None or sgd.n_params != module.param_count():
            sgd = opt._sgd[module] = Optimizer("sgd", opt, module.param_count())
        return sgd
    if not isinstance(opt, Optimizer):
        raise ConfigError(
            f"expected an optimizer (from net.new_momentum(...) etc.) or TrainParams, got {type(opt).__name__}"
        )
    if opt.n_params != module.param_count():
        raise ConfigError(
            f"this optimizer was made for a module with {opt.n_params} parameters; "
            f"{module.describe()} has {module.param_count()}"
        )
    return opt
