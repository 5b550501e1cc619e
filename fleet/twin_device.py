"""A fleet device that is the host twin (mcutrain.exporter.twin.DeviceTwin): the exported model run by the
same C core on the host, bit for bit what a board running that export computes. Fleets of such devices
run on Flower's Simulation Engine (mcutrain.fleet.simulation), a thousand on one machine.

A board keeps its RAM between rounds (the parameters the fleet does not exchange, the optimizer's slots,
the step counter); a Simulation Engine runs a device's requests wherever it has a free worker. So a
TwinDevice keeps what the board would keep in a state file of its own, read when it is opened and written
(atomically) when it is closed: the same device then continues exactly where its board would.

A TwinDevice answers the requests a fleet worker (mcutrain.fleet.worker) makes of a Device: check_hash,
write_region and read_region of the parameters, train and predict. It has no serial line: no bytes are
counted for it.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional, Tuple

import numpy as np

from mcutrain.errors import FleetError
from mcutrain.exporter.client import REGION_PARAMS, DeviceError
from mcutrain.exporter.device_model import DeviceModel
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.files import atomic_write

MODELS_KEPT = 4  # device models a process keeps built (one per fleet model it serves)
_models: OrderedDict[Tuple[str, str, str, int], DeviceModel] = OrderedDict()
_models_lock = threading.Lock()


def twin_model(model_file: Path, trainable: str, quant: str) -> DeviceModel:
    """The device model a fleet's twins run (built once per process and model file; safe from any thread)."""
    from mcutrain.exporter.device import build_device_model
    from mcutrain.modelfile import load_model

    key = (str(model_file), trainable, quant, model_file.stat().st_mtime_ns)
    with _models_lock:
        m = _models.get(key)
        if m is None:
            m = build_device_model(load_model(model_file), trainable, quant)
            _models[key] = m
            while len(_models) > MODELS_KEPT:
                _models.popitem(last=False)
        _models.move_to_end(key)
        return m


class NoLine:
    """A twin's stand-in for a serial line: nothing to read or write, nothing counted."""

    timeout: Optional[float] = None

    def close(self) -> None:
        """Nothing to close."""


class TwinDevice:
    """One host-twin device whose state lives in `state_file` between openings (see the module docstring).
    One thread uses a TwinDevice at a time."""

    process = None  # no simulator process: a fleet never starts one for a twin

    def __init__(self, model: DeviceModel, state_file: Path) -> None:
        self.model = model
        self.hash = model.hash().hex()
        self.state_file = state_file
        self.twin = DeviceTwin(model)
        self.link: Any = NoLine()
        self.cached_info = None
        self._load()

    def _load(self) -> None:
        if not self.state_file.is_file():
            return  # a device booted for the first time: the export's values
        try:
            with np.load(self.state_file, allow_pickle=False) as f:
                if str(f["hash"]) != self.hash:
                    return  # a state of another model: the device was flashed with this one since
                self.twin.load(f["params"], f["state"], f["train_state"])
        except (OSError, KeyError, ValueError) as e:
            raise FleetError(
                f"{self.state_file}: the twin's saved state cannot be read ({e}); delete it to start the device "
                "from the export"
            ) from None

    def save(self) -> None:
        """Write what the board would keep (atomically)."""
        buf = io.BytesIO()
        t = self.twin
        np.savez(buf, hash=np.array(self.hash), params=t.params, state=t.state, train_state=t.train_state)
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.state_file, buf.getvalue())

    def check_hash(self, expected: str) -> None:
        """DeviceError unless the twin runs the model with this hash (as Device.check_hash)."""
        if self.hash != expected:
            raise DeviceError(f"the twin runs model {self.hash}, not {expected}")

    def write_region(self, region: int, values: Any, offset: int = 0) -> None:
        """Write parameters at offset (only the parameter region is exchanged in a fleet)."""
        v = np.asarray(values, np.float32).ravel()
        if region != REGION_PARAMS or offset < 0 or offset + v.size > self.twin.n_params:
            raise DeviceError(f"a write of {v.size} values at {offset} of region {region} is out of the twin's")
        self.twin.params[offset : offset + v.size] = v

    def read_region(self, region: int, n: Optional[int] = None, offset: int = 0) -> np.ndarray:
        """Read n parameters from offset."""
        count = self.twin.n_params - offset if n is None else n
        if region != REGION_PARAMS or offset < 0 or count < 0 or offset + count > self.twin.n_params:
            raise DeviceError(f"a read of {count} values at {offset} of region {region} is out of the twin's")
        return np.array(self.twin.params[offset : offset + count], np.float32)

    def train(self, x: Any, t: Any) -> Tuple[float, int]:
        """One TRAIN step: (loss, steps done), as Device.train."""
        loss = self.twin.train(x, t)
        return loss, self.twin.step

    def predict(self, x: Any) -> np.ndarray:
        """PREDICT one sample or a batch."""
        return self.twin.predict(x)

    def close(self) -> None:
        """Keep the state for the device's next opening."""
        self.save()


__all__ = ["TwinDevice", "twin_model"]
