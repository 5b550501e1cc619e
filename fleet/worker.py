"""One device's side of a round, without Flower: what a fleet node (mcutrain.fleet.node) does with the
device it holds when the ClientApp hands it a train or evaluate request.

fit(): WRITE the global parameters (the trainable blocks), train the device for the round's local steps
with TRAIN frames fed from its own data shard, READ the parameters back and return them with the shard's
sample count, the mean TRAIN loss and the accuracy of the local model on the device's evaluation data
(PREDICT). evaluate(): WRITE the global parameters and PREDICT the evaluation data.

The coordinator describes the model in every request (a Task: the model's hash, where the trainable
blocks sit, the loss): a node needs no model file. A device that fails (disconnects, times out, answers a
bad CRC, refuses a step, returns parameters that are not finite) raises DeviceFault: the round goes on
without it. The connection is dropped and opened again at the next request (DeviceHandle). Any other
exception is a bug in mcutrain and is raised as it is.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from mcutrain.errors import FleetError, McuTrainError
from mcutrain.exporter.device_model import DeviceModel
from mcutrain.sources import DataSettings, load_dataset, metrics

from .baselines import local_order
from .config import DeviceSpec
from .link import DeviceHandle, ParamLayout

# what a failing device raises: mcutrain's own errors (DeviceError, ProtocolError, SimError), a line that
# went away (OSError, pyserial's SerialException), a simulator that does not end (SubprocessError) and
# parameters that cannot be used (ValueError)
DEVICE_FAULTS = (McuTrainError, OSError, ValueError, subprocess.SubprocessError)
StepHook = Callable[[str, int, int], None]


class DeviceFault(McuTrainError, RuntimeError):
    """A device failed its part of a round; the message names the device and says why."""


def is_fault(e: BaseException) -> bool:
    """Is e a device's fault (rather than a bug)?"""
    return isinstance(e, DEVICE_FAULTS) or type(e).__name__ == "SerialException"


@dataclass
class Task:
    """What the coordinator tells a device with every request: the round, the model (its hash, trainable
    blocks and loss) and how to train."""

    round: int
    model_hash: str
    blocks: List[Tuple[int, int]]
    n_in: int
    n_out: int
    loss_kind: int
    loss_param: float
    local_steps: int
    seed: int
    eval_samples: int
    timeout: float

    def to_config(self) -> Dict[str, Any]:
        """The task as flat config values (Flower ConfigRecord)."""
        return {
            "server-round": self.round,
            "model-hash": self.model_hash,
            "block-offsets": [o for o, _ in self.blocks],
            "block-sizes": [n for _, n in self.blocks],
            "n-in": self.n_in,
            "n-out": self.n_out,
            "loss-kind": self.loss_kind,
            "loss-param": self.loss_param,
            "local-steps": self.local_steps,
            "seed": self.seed,
            "eval-samples": self.eval_samples,
            "timeout": self.timeout,
        }

    @classmethod
    def from_config(cls, c: Dict[str, Any]) -> Task:
        """The task of a request's config (FleetError when a value is missing)."""
        try:
            return cls(
                round=int(c["server-round"]),
                model_hash=str(c["model-hash"]),
                blocks=list(zip(map(int, c["block-offsets"]), map(int, c["block-sizes"]))),
                n_in=int(c["n-in"]),
                n_out=int(c["n-out"]),
                loss_kind=int(c["loss-kind"]),
                loss_param=float(c["loss-param"]),
                local_steps=int(c["local-steps"]),
                seed=int(c["seed"]),
                eval_samples=int(c["eval-samples"]),
                timeout=float(c["timeout"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise FleetError(f"a request from the coordinator lacks {e}: are both sides the same mcutrain?") from None


class DeviceWorker:
    """One fleet device and its data, as a node holds it (see the module docstring). One request at a time."""

    def __init__(
        self,
        spec: DeviceSpec,
        index: int,
        settings: DataSettings,
        project: Optional[Path] = None,
        store: Optional[Path] = None,
        on_step: Optional[StepHook] = None,
        twin: Optional[DeviceModel] = None,
    ) -> None:
        self.spec = spec
        self.index = index
        self.project = project
        self.store = store
        self.twin = twin  # the device model of a host-twin device (board = "twin")
        self.on_step = on_step
        self.train = self._load(spec.data, settings)
        self.evaluation = self._load(spec.eval, settings) if spec.eval else self.train
        self.handle: Optional[DeviceHandle] = None

    @property
    def name(self) -> str:
        return self.spec.name

    @staticmethod
    def _load(path: Path, settings: DataSettings) -> Tuple[np.ndarray, np.ndarray]:
        import dataclasses

        ds = load_dataset(dataclasses.replace(settings, path=str(path)))
        return ds.x, ds.y

    def _device(self, task: Task) -> Tuple[Any, ParamLayout]:
        x, y = self.train
        if x.shape[1] != task.n_in or y.shape[1] != task.n_out:
            raise FleetError(
                f"{self.name}: its data has {x.shape[1]} inputs and {y.shape[1]} targets per sample; the model "
                f"takes {task.n_in} and outputs {task.n_out} (for integer class labels pass --classify)"
            )
        h = self.handle
        if h is None or h.expected_hash != task.model_hash:
            if h is not None:
                h.close()
            h = DeviceHandle(self.spec, task.model_hash, task.timeout, self.project, self.store, self.twin)
            self.handle = h
        return h.connect(), ParamLayout.from_blocks(task.blocks)

    def _metrics(self, dev: Any, task: Task) -> Dict[str, float]:
        from mcutrain.exporter.quantize import loss_of_model

        ex, ey = self.evaluation
        ex, ey = ex[: task.eval_samples], ey[: task.eval_samples]
        if not ex.shape[0]:
            return {}
        out = np.asarray(dev.predict(ex), np.float32)
        return metrics(out, ey, loss_of_model(task.loss_kind, task.loss_param), ey.shape[1] > 1)

    def _fault(self, e: Exception) -> DeviceFault:
        if not is_fault(e):
            raise e
        if self.handle is not None:
            self.handle.drop()
        return DeviceFault(f"{self.name}: {type(e).__name__}: {e}".strip())

    def _bytes(self) -> int:
        return self.handle.bytes_on_line() if self.handle is not None else 0

    def fit(self, arrays: List[np.ndarray], task: Task) -> Tuple[List[np.ndarray], int, Dict[str, float]]:
        """One round of local training on the device: (parameters, samples, metrics); DeviceFault if it failed."""
        t0 = time.monotonic()
        bytes0 = self._bytes()
        x, y = self.train
        try:
            dev, layout = self._device(task)
            layout.write(dev, arrays)
            losses: List[float] = []
            for k, i in enumerate(local_order(task.seed, self.index, task.round, x.shape[0], task.local_steps)):
                loss, _ = dev.train(x[i], y[i])
                losses.append(loss)
                if self.on_step is not None:
                    self.on_step(self.name, task.round, k + 1)
            out = layout.read(dev)
            layout.check(out)  # a device that diverged or garbled its answer must not reach the model
            local = self._metrics(dev, task)
        except Exception as e:
            raise self._fault(e) from None
        m = {"train-loss": float(np.mean(losses)), "seconds": time.monotonic() - t0, "bytes": self._bytes() - bytes0}
        m.update({f"local-{k}": float(v) for k, v in local.items()})
        return out, int(x.shape[0]), m

    def evaluate(self, arrays: List[np.ndarray], task: Task) -> Tuple[int, Dict[str, float]]:
        """The global model on the device: (samples, metrics with loss and accuracy); DeviceFault if it failed."""
        bytes0 = self._bytes()
        try:
            dev, layout = self._device(task)
            layout.write(dev, arrays)
            res = self._metrics(dev, task)
            if not res:
                raise ValueError("the device has no evaluation data")
        except Exception as e:
            raise self._fault(e) from None
        n = min(task.eval_samples, self.evaluation[0].shape[0])
        return n, {**{k: float(v) for k, v in res.items()}, "bytes": self._bytes() - bytes0}

    def close(self) -> None:
        """Close the device (QUIT a simulated board)."""
        if self.handle is not None:
            self.handle.close()


def serve_request(
    worker: DeviceWorker, kind: str, arrays: List[Any], config: Dict[str, Any], say: Callable[[str], None]
) -> Dict[str, Any]:
    """One request of the coordinator for worker's device: {'ok': True, ...results}, {'ok': False, 'fault': why}
    (the device failed: dropped for the round) or {'ok': False, 'error': bug}. say(text) reports progress."""
    try:
        task = Task.from_config(config)
        say(f"{worker.name}: round {task.round}: {kind}")
        if kind == "train":
            out, n, m = worker.fit(arrays, task)
            return {"ok": True, "arrays": out, "num-examples": n, "metrics": m}
        if kind == "evaluate":
            n, m = worker.evaluate(arrays, task)
            return {"ok": True, "num-examples": n, "metrics": m}
        return {"ok": False, "error": f"unknown request {kind!r}"}
    except DeviceFault as e:
        say(f"{worker.name}: dropped for the round: {e}")
        return {"ok": False, "fault": str(e)}
    except Exception as e:  # a bug: the ClientApp raises it, Flower reports it to the coordinator
        say(f"{worker.name}: error: {type(e).__name__}: {e}")
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


__all__ = ["DeviceWorker", "DeviceFault", "Task", "is_fault", "serve_request"]
