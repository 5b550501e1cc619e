"""A device as a Flower client. fit(): WRITE the global parameters (the trainable blocks), train the device
for the round's local steps with TRAIN frames fed from its own data shard, READ the parameters back and
return them with the shard's sample count, the mean TRAIN loss and the accuracy of the local model on the
device's evaluation data (PREDICT). evaluate(): WRITE the global parameters and PREDICT the evaluation data.

A device that fails (disconnects, times out, answers a bad CRC, refuses a step, returns parameters that
are not finite) answers the round with a failure status instead of parameters: Flower counts it among the
round's failures and the strategy aggregates the others. The connection is dropped and opened again when
the next request comes (DeviceHandle). Any other exception is a bug in mcutrain: it is kept in `crash`
(the fleet ends the run with it) and raised, which ends the client's thread.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
from flwr.client import Client
from flwr.common import (
    Code,
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    GetParametersIns,
    GetParametersRes,
    Parameters,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)

from mcutrain.errors import McuTrainError
from mcutrain.sources import metrics

from .baselines import local_order
from .link import DeviceHandle, ParamLayout

# what a failing device raises: mcutrain's own errors (DeviceError, ProtocolError, SimError), a line that
# went away (OSError, pyserial's SerialException), a simulator that does not end (SubprocessError) and
# parameters that cannot be used (ValueError)
DEVICE_FAULTS = (McuTrainError, OSError, ValueError, subprocess.SubprocessError)
StepHook = Callable[[str, int, int], None]


def _is_fault(e: BaseException) -> bool:
    return isinstance(e, DEVICE_FAULTS) or type(e).__name__ == "SerialException"


class DeviceClient(Client):
    """The Flower client of one fleet device (see the module docstring). Not thread-safe: Flower's client
    loop calls it from one thread."""

    def __init__(
        self,
        index: int,
        handle: DeviceHandle,
        layout: ParamLayout,
        train: Tuple[np.ndarray, np.ndarray],
        evaluation: Tuple[np.ndarray, np.ndarray],
        loss: Any,
        local_steps: int,
        seed: int,
        on_step: Optional[StepHook] = None,
    ) -> None:
        self.index = index
        self.handle = handle
        self.layout = layout
        self.x, self.y = train
        self.ex, self.ey = evaluation
        self.loss = loss
        self.local_steps = local_steps
        self.seed = seed
        self.on_step = on_step
        self.classification = self.y.shape[1] > 1
        self.last_error: Optional[str] = None
        self.crash: Optional[BaseException] = None  # an error that is not a device fault (see the module)

    @property
    def name(self) -> str:
        return self.handle.spec.name

    def _evaluate_on_device(self, dev: Any) -> Dict[str, float]:
        """Loss (and accuracy for classes) of the device's current parameters on its evaluation data."""
        out = dev.predict(self.ex)
        return metrics(np.asarray(out, np.float32), self.ey, self.loss, self.classification)

    def _fault(self, e: Exception) -> str:
        """The failure message of a device fault, whose connection is dropped. Any other exception is kept
        in self.crash and raised again."""
        if not _is_fault(e):
            self.crash = e
            raise e
        self.last_error = f"{type(e).__name__}: {e}".strip()
        self.handle.drop()
        return f"{self.name}: {self.last_error}"

    def get_parameters(self, ins: GetParametersIns) -> GetParametersRes:
        """The device's current trainable parameters."""
        try:
            arrays = self.layout.read(self.handle.connect())
            return GetParametersRes(status=Status(Code.OK, ""), parameters=ndarrays_to_parameters(arrays))
        except Exception as e:
            return GetParametersRes(
                status=Status(Code.GET_PARAMETERS_NOT_IMPLEMENTED, self._fault(e)), parameters=Parameters([], "")
            )

    def fit(self, ins: FitIns) -> FitRes:
        """One round of local training on the device (see the module docstring)."""
        server_round = int(ins.config.get("round", 0))
        t0 = time.monotonic()
        bytes0 = self.handle.bytes_on_line()
        try:
            dev = self.handle.connect()
            self.layout.write(dev, parameters_to_ndarrays(ins.parameters))
            losses: List[float] = []
            for k, i in enumerate(local_order(self.seed, self.index, server_round, self.x.shape[0], self.local_steps)):
                loss, _ = dev.train(self.x[i], self.y[i])
                losses.append(loss)
                if self.on_step is not None:
                    self.on_step(self.name, server_round, k + 1)
            arrays = self.layout.read(dev)
            self.layout.check(arrays)  # a device that diverged or garbled its answer must not reach the model
            local = self._evaluate_on_device(dev) if self.ex.shape[0] else {}
        except Exception as e:
            return FitRes(
                status=Status(Code.FIT_NOT_IMPLEMENTED, self._fault(e)),
                parameters=Parameters([], ""),
                num_examples=0,
                metrics={"device": self.name},
            )
        self.last_error = None
        m: Dict[str, Any] = {
            "device": self.name,
            "train_loss": float(np.mean(losses)),
            "seconds": time.monotonic() - t0,
            "bytes": self.handle.bytes_on_line() - bytes0,
        }
        m.update({f"local_{k}": v for k, v in local.items()})
        return FitRes(
            status=Status(Code.OK, ""),
            parameters=ndarrays_to_parameters(arrays),
            num_examples=int(self.x.shape[0]),
            metrics=m,
        )

    def evaluate(self, ins: EvaluateIns) -> EvaluateRes:
        """The global model on the device: WRITE it, PREDICT the device's evaluation data."""
        bytes0 = self.handle.bytes_on_line()
        try:
            if not self.ex.shape[0]:
                raise ValueError("the device has no evaluation data")
            dev = self.handle.connect()
            self.layout.write(dev, parameters_to_ndarrays(ins.parameters))
            res = self._evaluate_on_device(dev)
        except Exception as e:
            return EvaluateRes(
                status=Status(Code.EVALUATE_NOT_IMPLEMENTED, self._fault(e)),
                loss=0.0,
                num_examples=0,
                metrics={"device": self.name},
            )
        m: Dict[str, Any] = {"device": self.name, "bytes": self.handle.bytes_on_line() - bytes0}
        if "accuracy" in res:
            m["accuracy"] = res["accuracy"]
        return EvaluateRes(
            status=Status(Code.OK, ""), loss=float(res["loss"]), num_examples=int(self.ex.shape[0]), metrics=m
        )
