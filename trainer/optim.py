"""Optimizers: TrainParams (learning-rate schedule, warm-up, L1, L2, clipping) and the optimizer
objects made by a module's new_* methods. The update math lives in the C core (firmware/core/optim.c
and mct_opt_elem); these objects hold the configuration, the per-parameter slots and the step.
"""

from __future__ import annotations

import weakref
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Dict, Optional

import numpy as np

from . import _core
from .checks import number, whole
from .corefacts import OPT_DTYPE, TRAIN_STATE_DTYPE, OptKind, Schedule, by_name, names, opt_slots, train_state_init
from .errors import ConfigError
from .locking import OwnLock

# The names the API uses for the core's schedules and optimizers ('constant', 'sgd', ...) -> enum values,
# and the optimizer slots per parameter, all asked from the core (corefacts).
SCHEDULES: Dict[str, int] = {n: int(by_name(Schedule, n)) for n in names(Schedule)}
KINDS: Dict[str, int] = {n: int(by_name(OptKind, n)) for n in names(OptKind)}
SLOTS: Dict[str, int] = {n: opt_slots(v) for n, v in KINDS.items()}


def _check(name: str, value: float, lo: float, hi: float, hi_open: bool = False) -> float:
    return number(name, value, lo, hi, hi_open=hi_open)


@dataclass
class TrainParams:
    """Learning rate and its schedule, warm-up, L1/L2 on connection weights, and gradient clipping.

    schedule: 'constant', 'linear' or 'cosine' decay from lr to lr_final over decay_steps.
    warmup_steps: soft start: lr * (step + 1) / warmup_steps while step < warmup_steps.
    clip: each element of the raw mean gradient is clamped to [-clip, clip] (0 = off), before L1 and L2
        are added: per element, not by the gradient's norm (PyTorch's clip_grad_value_, not _norm_).
    l1, l2: the penalty l1 |w| + l2 w^2 of each connection weight (Dense, GLU and Conv1d weights; never
        biases or activation parameters) added to the loss: its gradient l1 sign(w) + 2 l2 w is added to
        the gradient before the optimizer sees it. So PyTorch's weight_decay equals 2 * l2, and with Adam or
        RMSProp the penalty is scaled like any gradient (coupled, as torch.optim.Adam; not decoupled as
        AdamW).
    scale_by_loss: multiply the learning rate of every step by the current (mean) loss, minidx's
        option (off by default). minidx multiplies each gradient by the loss before it enters the
        optimizer, so with momentum, RMSProp or Adam the two differ: here the velocity and the moments see
        the unscaled gradient and the loss scales the step that leaves them.
    """

    lr: float = 1e-2
    schedule: str = "constant"
    lr_final: float = 0.0
    decay_steps: int = 0
    warmup_steps: int = 0
    l1: float = 0.0
    l2: float = 0.0
    clip: float = 0.0
    scale_by_loss: bool = False

    def __post_init__(self) -> None:
        _check("lr", self.lr, 0.0, 1e6)
        _check("lr_final", self.lr_final, 0.0, 1e6)
        _check("l1", self.l1, 0.0, 1e6)
        _check("l2", self.l2, 0.0, 1e6)
        _check("clip", self.clip, 0.0, 3e38)
        if not isinstance(self.schedule, str) or self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        for name in ("decay_steps", "warmup_steps"):
            whole(name, getattr(self, name))
        if not isinstance(self.scale_by_loss, (bool, np.bool_)):
            raise ConfigError(f"scale_by_loss must be True or False, got {self.scale_by_loss!r}")
        if not isinstance(self.schedule, str):
            raise ConfigError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.schedule != "constant" and self.decay_steps == 0:
            raise ConfigError(f"a {self.schedule} schedule needs decay_steps > 0")
        # the plain-SGD optimizer this TrainParams stands for, per module it trains (module.as_optimizer)
        self._sgd: weakref.WeakKeyDictionary[Any, Optimizer] = weakref.WeakKeyDictionary()

    # minidx-style builders (each returns a new TrainParams)
    def with_lr(self, lr: float) -> TrainParams:
        """Same settings with another learning rate."""
        return replace(self, lr=lr)

    def and_l1(self, l1: float) -> TrainParams:
        """Add an L1 penalty l1 * |w| on connection weights."""
        return replace(self, l1=l1)

    def and_l2(self, l2: float) -> TrainParams:
        """Add an L2 penalty l2 * w^2 on connection weights."""
        return replace(self, l2=l2)

    def and_lr_decay(self, final: float, steps: int) -> TrainParams:
        """Linear decay to `final` over `steps`."""
        return replace(self, schedule="linear", lr_final=final, decay_steps=steps)

    def and_lr_cosine_decay(self, final: float, steps: int) -> TrainParams:
        """Cosine decay to `final` over `steps`."""
        return replace(self, schedule="cosine", lr_final=final, decay_steps=steps)

    def and_soft_start(self, steps: int) -> TrainParams:
        """Linear warm-up over `steps`."""
        return replace(self, warmup_steps=steps)

    def and_gradient_clip(self, clip: float) -> TrainParams:
        """Clamp each gradient element to [-clip, clip]."""
        return replace(self, clip=clip)

    def and_scale_by_loss(self, on: bool = True) -> TrainParams:
        """Scale each step by the loss value (minidx's behaviour)."""
        return replace(self, scale_by_loss=on)

    def to_dict(self) -> Dict[str, Any]:
        """Plain data, for model files and logs."""
        return asdict(self)

    def lr_at(self, step: int) -> float:
        """The learning rate the core uses at `step`."""
        return float(_core.lr_at(_pack(self, "sgd", {}).view(np.uint8), step))


def _pack(tp: TrainParams, kind: str, coeffs: Dict[str, float]) -> np.ndarray:
    c = np.zeros(1, OPT_DTYPE)
    c["kind"] = KINDS[kind]
    c["schedule"] = SCHEDULES[tp.schedule]
    c["scale_by_loss"] = int(bool(tp.scale_by_loss))
    c["decay_steps"] = tp.decay_steps
    c["warmup_steps"] = tp.warmup_steps
    for f in ("lr", "lr_final", "l1", "l2", "clip"):
        c[f] = getattr(tp, f)
    for f in ("momentum", "beta", "beta1", "eps", "sim_penalty"):
        c[f] = coeffs.get(f, 0.0)
    return c


class Optimizer(OwnLock):
    """An optimizer bound to a parameter count: its settings, per-parameter slots and step."""

    def __init__(
        self,
        kind: str,
        params: TrainParams,
        n_params: int,
        momentum: float = 0.9,
        beta: float = 0.9,
        beta1: float = 0.9,
        eps: Optional[float] = None,
        sim_penalty: float = 0.0,
    ) -> None:
        if kind not in KINDS:
            raise ConfigError(f"unknown optimizer {kind!r}; choose one of {', '.join(KINDS)}")
        if not isinstance(params, TrainParams):
            raise ConfigError(f"the first argument must be a TrainParams, got {type(params).__name__}")
        self.kind = kind
        self.n_params = int(n_params)
        self.coeffs = {
            "momentum": _check("momentum", momentum, 0.0, 1.0, hi_open=True),
            "beta": _check("beta", beta, 0.0, 1.0, hi_open=True),
            "beta1": _check("beta1", beta1, 0.0, 1.0, hi_open=True),
            "eps": _check("eps", (1e-8 if kind == "adam" else 1e-20) if eps is None else eps, 0.0, 1.0),
            "sim_penalty": _check("similarity_penalty", sim_penalty, 0.0, 1e6),
        }
        if kind != "adam":
            self.coeffs["beta1"] = 0.0
        self._params = params
        self._cfg = _pack(params, kind, self.coeffs).view(np.uint8)
        self._state_buf = np.zeros(SLOTS[kind] * self.n_params, np.float32)
        self._ts = train_state_init().view(np.uint8)
        OwnLock.__init__(self)  # the lock is held (inside the network's lock) by every call that updates the state

    @property
    def params(self) -> TrainParams:
        """The TrainParams in use; assign a new one to change them mid-training."""
        return self._params

    @params.setter
    def params(self, tp: TrainParams) -> None:
        self._params = tp
        self._cfg = _pack(tp, self.kind, self.coeffs).view(np.uint8)

    @property
    def state(self) -> np.ndarray:
        """Per-parameter slots, shape (slots, n_params): velocity, mean square, Adam moments."""
        return self._state_buf[: SLOTS[self.kind] * self.n_params].reshape(SLOTS[self.kind], self.n_params)

    @property
    def train_state(self) -> np.ndarray:
        """(step, beta1^step, beta2^step) as the core keeps them."""
        return self._ts.view(TRAIN_STATE_DTYPE)

    @property
    def step(self) -> int:
        """Updates applied so far."""
        return int(self.train_state["step"][0])

    def current_lr(self) -> float:
        """Learning rate of the next update."""
        return self._params.lr_at(self.step)

    def config(self) -> Dict[str, Any]:
        """Settings as plain data (kind, TrainParams, coefficients)."""
        return {"kind": self.kind, "train_params": self._params.to_dict(), **self.coeffs}

    @staticmethod
    def from_config(cfg: Any, n_params: int) -> Optimizer:
        """Rebuild an optimizer (with zero state) from config(); ConfigError naming the field that is
        missing or wrong."""
        if not isinstance(cfg, dict):
            raise ConfigError(f"the optimizer settings must be a mapping, got {type(cfg).__name__}")
        missing = [
            k for k in ("kind", "train_params", "momentum", "beta", "beta1", "eps", "sim_penalty") if k not in cfg
        ]
        if missing:
            raise ConfigError(f"the optimizer settings lack {', '.join(missing)}")
        tps = cfg["train_params"]
        if not isinstance(tps, dict):
            raise ConfigError(f"train_params must be a mapping, got {type(tps).__name__}")
        unknown = sorted(set(tps) - {f.name for f in fields(TrainParams)})
        if unknown:
            raise ConfigError(f"train_params has unknown settings {', '.join(map(str, unknown))}")
        kind = cfg["kind"]
        if not isinstance(kind, str) or kind not in KINDS:
            raise ConfigError(f"unknown optimizer {kind!r}; choose one of {', '.join(KINDS)}")
        return Optimizer(
            kind,
            TrainParams(**tps),
            n_params,
            momentum=cfg["momentum"],
            beta=cfg["beta"],
            beta1=cfg["beta1"] if kind == "adam" else 0.9,
            eps=cfg["eps"],
            sim_penalty=cfg["sim_penalty"],
        )

    def __repr__(self) -> str:
        return f"Optimizer({self.kind}, lr={self._params.lr:g}, step={self.step})"
