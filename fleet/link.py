"""One device of the fleet as the host reaches it: a serial port, or a simulated board (the native firmware
or a QEMU/simavr stand-in, started from the fleet's export), with the bytes on its line counted, and the
parameters the fleet exchanges with it (only those of trainable layers; frozen layers stay as exported).

A DeviceHandle connects on first use and again after a fault: a port is opened again (after a resync), a
simulated board whose process ended is started again. drop() closes a connection that failed, so the next
round starts from a clean line.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any, List, Optional, Tuple

import numpy as np

from mcutrain.errors import FleetError
from mcutrain.exporter.client import REGION_PARAMS, Device, DeviceInfo
from mcutrain.exporter.device_model import DeviceModel
from mcutrain.exporter.protocol import ProtocolError

from .config import DeviceSpec


class CountingLink:
    """A device line that counts the bytes written to it and read from it (everything else, e.g. a
    simulator link's process, passes through)."""

    def __init__(self, link: Any) -> None:
        self._link = link
        self.sent = 0
        self.received = 0

    def write(self, data: bytes) -> int:
        n = self._link.write(data)
        self.sent += len(data)
        return n

    def read(self, n: int) -> bytes:
        b = self._link.read(n)
        self.received += len(b)
        return b

    @property
    def timeout(self) -> Any:
        return self._link.timeout

    @timeout.setter
    def timeout(self, value: Any) -> None:
        self._link.timeout = value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._link, name)


class ParamLayout:
    """Where the trainable parameters sit in the device's RAM parameters: one block per trainable layer
    with parameters (adjacent blocks merged), exchanged with Flower as one float32 array per block."""

    def __init__(self, model: DeviceModel) -> None:
        blocks: List[Tuple[int, int]] = []
        for d in model.program.layers:
            if d.trainable and d.n_p:
                if blocks and blocks[-1][0] + blocks[-1][1] == d.p_off:
                    blocks[-1] = (blocks[-1][0], blocks[-1][1] + d.n_p)
                else:
                    blocks.append((d.p_off, d.n_p))
        self.blocks = blocks
        self.base = np.array(model.params, np.float32, copy=True)

    @classmethod
    def from_blocks(cls, blocks: List[Tuple[int, int]]) -> ParamLayout:
        """A layout known only by its (offset, count) blocks, as a device's node receives it from the
        coordinator: it can write, read and check the blocks, not join them (it has no exported values)."""
        layout = cls.__new__(cls)
        layout.blocks = [(int(o), int(n)) for o, n in blocks]
        layout.base = np.zeros(0, np.float32)
        return layout

    @property
    def n_values(self) -> int:
        """Trainable parameters in all."""
        return sum(n for _, n in self.blocks)

    def split(self, ram: np.ndarray) -> List[np.ndarray]:
        """The trainable blocks of a full RAM parameter vector."""
        return [np.array(ram[o : o + n], np.float32) for o, n in self.blocks]

    def join(self, arrays: List[np.ndarray]) -> np.ndarray:
        """The full RAM parameter vector: the exported values with the trainable blocks written in."""
        self.check(arrays)
        out = self.base.copy()
        for (o, n), a in zip(self.blocks, arrays):
            out[o : o + n] = a
        return out

    def check(self, arrays: List[np.ndarray]) -> None:
        """ValueError unless arrays are finite blocks of the right sizes."""
        if len(arrays) != len(self.blocks):
            raise ValueError(f"{len(arrays)} parameter arrays, the model has {len(self.blocks)} trainable blocks")
        for (_, n), a in zip(self.blocks, arrays):
            if np.asarray(a).size != n:
                raise ValueError(f"a parameter block has {np.asarray(a).size} values, the model's has {n}")
            if not np.all(np.isfinite(a)):
                raise ValueError("parameters that are not finite")

    def write(self, dev: Device, arrays: List[np.ndarray]) -> None:
        """WRITE the trainable blocks to the device."""
        self.check(arrays)
        for (o, _), a in zip(self.blocks, arrays):
            dev.write_region(REGION_PARAMS, np.asarray(a, np.float32), offset=o)

    def read(self, dev: Device) -> List[np.ndarray]:
        """READ the trainable blocks from the device."""
        return [dev.read_region(REGION_PARAMS, n, offset=o) for o, n in self.blocks]


class DeviceHandle:
    """A fleet device's connection, opened on demand and again after a fault (see the module docstring).
    One thread uses a handle at a time (its Flower client's); close() may come from another thread."""

    def __init__(
        self,
        spec: DeviceSpec,
        expected_hash: str,
        timeout: float,
        project: Optional[Path] = None,
        store: Optional[Path] = None,
        twin: Optional[DeviceModel] = None,
    ) -> None:
        self.spec = spec
        self.twin = twin  # the device model of a host-twin device
        self.expected_hash = expected_hash
        self.timeout = timeout
        self.project = project
        self.store = store
        self.device: Optional[Device] = None
        self.session: Any = None
        self.connects = 0
        self._info: Optional[DeviceInfo] = None  # the device's INFO at the last good connection
        self.sent = 0  # bytes on the line over all connections
        self.received = 0
        self._lock = threading.Lock()

    @property
    def process(self) -> Any:
        """The simulated board's process (None for a port, or when not running)."""
        return self.device.process if self.device is not None else None

    def connect(self) -> Device:
        """The connected device: opens (or starts) it when needed and checks that it runs the fleet's model
        (DeviceError otherwise; SimError when a simulated board cannot start)."""
        with self._lock:
            if self.device is not None:
                proc = self.device.process
                if proc is None or proc.poll() is None:
                    return self.device
                self._close_locked()  # the simulated board ended: start it again
            if self.spec.twin:
                from .twin_device import TwinDevice

                if self.twin is None or self.store is None:
                    raise FleetError(f"{self.spec.name}: a twin device needs its device model and state file")
                dev = TwinDevice(self.twin, self.store)
            elif self.spec.simulated:
                from mcutrain.exporter import sim
                from mcutrain.exporter.boards import get_board

                board = get_board(self.spec.board or "")
                assert self.project is not None and self.store is not None, "a simulated device needs its export"
                simulator = sim.simulator_for(board)
                session = simulator.launch(self._own_firmware(simulator, board), board, self.project, False, self.store)
                dev = session.device
                dev.link.timeout = self.timeout
                self.session = session
            else:
                dev = Device.open(self.spec.port or "", self.spec.baud, timeout=self.timeout)
            dev.link = CountingLink(dev.link)
            self.device = dev
            self.connects += 1
        try:
            try:
                dev.check_hash(self.expected_hash)
            except ProtocolError:
                if self.spec.simulated or self._info is None:
                    raise
                # a board opened again may still send a late reply of the failed round, or wait for the rest
                # of a frame: resynchronise (with the frame sizes it had) and ask again
                dev._info = self._info
                dev.resync()
                dev.check_hash(self.expected_hash)
            self._info = dev.cached_info
        except Exception:
            self.drop()
            raise
        return dev

    def _own_firmware(self, simulator: Any, board: Any) -> Path:
        """A copy of the built firmware in the device's own folder (next to its store): a simulator keeps
        its log (where it announces its pty) next to the firmware, so every device needs its own."""
        assert self.project is not None and self.store is not None
        src = simulator.firmware_path(self.project, board)
        folder = self.store.parent / self.store.stem
        folder.mkdir(parents=True, exist_ok=True)
        dst = folder / src.name
        if not dst.is_file() or dst.stat().st_mtime_ns != src.stat().st_mtime_ns:
            tmp = folder / f".{src.name}.tmp"
            shutil.copy2(src, tmp)
            os.replace(tmp, dst)
        return dst

    def _count(self) -> None:
        link = self.device.link if self.device is not None else None
        if isinstance(link, CountingLink):
            self.sent += link.sent
            self.received += link.received
            link.sent = link.received = 0

    def bytes_on_line(self) -> int:
        """Bytes sent and received on the device's line so far (all connections)."""
        with self._lock:
            self._count()
            return self.sent + self.received

    def _close_locked(self) -> None:
        self._count()
        dev, self.device = self.device, None
        session, self.session = self.session, None
        if dev is None:
            return
        try:
            if session is not None:
                session.close(quiet=True)
            else:
                dev.close()
        except Exception:
            dev.close()

    def drop(self) -> None:
        """Close the connection after a fault (a simulated board that still runs is stopped); the next
        connect() opens it again."""
        with self._lock:
            self._close_locked()

    def close(self) -> None:
        """End the connection (QUIT a simulated board)."""
        self.drop()
