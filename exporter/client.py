"""The device client: speaks the protocol to a real board (a serial port), to the native firmware
over a pty, or to a simulator's serial line."""

from __future__ import annotations

import os
import re
import select
import struct
import subprocess
import time
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from .. import processes
from ..errors import McuTrainError
from .protocol import (
    BLOB_VERSION,
    PROTOCOL_VERSION,
    STATUS_TEXT,
    Cmd,
    ProtocolError,
    Status,
    encode,
    read_reply,
    version_mismatch,
)

# the regions of READ and WRITE (docs/protocol.md)
REGION_PARAMS, REGION_OPT_SLOTS, REGION_TRAIN_STATE = 0, 1, 2


FRAME_OVERHEAD = 7  # bytes of a frame besides its payload: sync, version, command, length (2), CRC (2)


def _sent_version(cmd: int, payload: bytes) -> int:
    """The format version a request declared: the blob's for BLOB (its first byte), else the protocol's."""
    return payload[0] if cmd == Cmd.BLOB and payload else PROTOCOL_VERSION


PTY_LINE = re.compile(rb"PTY (/dev/\S+)")
RESYNC_DRAIN = 5.0  # seconds resync() drops replies for, at most


def read_pty_line(fd: int, timeout: float) -> Optional[str]:
    """The device of the first "PTY /dev/..." line read from a pipe within timeout seconds (None: none
    came, or the writer closed the pipe). Reads the raw descriptor, so no line waits in a buffer."""
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], 0.1)[0]:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        buf += chunk
        m = PTY_LINE.search(buf)
        if m:
            return m.group(1).decode()
    return None


class DeviceError(McuTrainError, RuntimeError):
    """The device answered with an error status, or its model is not the one expected."""

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class DeviceInfo:
    """What INFO reports."""

    version: int
    hash: str
    n_in: int
    n_out: int
    n_params: int
    n_trainable: int
    opt_kind: int
    slots: int
    loss_kind: int
    step: int
    max_payload: int
    can_save: bool
    loaded_save: bool


class Device:
    """A connection to mcutrain firmware. Use Device.open(port) for a serial port."""

    def __init__(self, link: Any, process: Optional[subprocess.Popen] = None) -> None:
        self.link = link  # anything with read(n), write(bytes), and a timeout
        self.process = process
        self._info: Optional[DeviceInfo] = None

    # ---- connections ----
    @classmethod
    def open(cls, port: str, baud: int = 115200, timeout: float = 5.0) -> Device:
        """Open a serial port (a board, a pty, a simulator's serial line). A read waits at most `timeout`
        seconds for its bytes, a write at most `timeout` seconds for the line to take them."""
        import serial  # pyserial

        try:
            link = serial.Serial(port, baud, timeout=timeout, write_timeout=timeout)
        except (serial.SerialException, OSError) as e:
            raise DeviceError(f"cannot open {port}: {e}") from None
        return cls(link)

    @classmethod
    def spawn(
        cls, argv: Sequence[str], timeout: float = 10.0, env: Optional[dict] = None, cwd: Optional[str] = None
    ) -> Device:
        """Start a program that prints 'PTY /dev/pts/N' (the native firmware with --pty) and connect to it."""
        proc = processes.spawn(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd)
        assert proc.stdout is not None
        port = read_pty_line(proc.stdout.fileno(), timeout)
        if port:
            dev = cls.open(port, timeout=timeout)
            dev.process = proc
            return dev
        processes.stop(proc, 0)
        err = proc.stderr.read() if proc.stderr is not None else b""
        raise DeviceError(f"{argv[0]} did not offer a pty within {timeout:g} s: {err.decode(errors='replace').strip()}")

    def close(self) -> None:
        """Close the line (and end a program this client started)."""
        try:
            self.link.close()
        finally:
            if self.process is not None:
                processes.stop(self.process)

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- frames ----
    def request(self, cmd: int, payload: bytes = b"", ok: Tuple[int, ...] = (Status.OK,)) -> bytes:
        """Send a frame, return the reply data; DeviceError for an error status."""
        self.link.write(encode(cmd, payload))
        r = read_reply(self.link.read)
        if r.cmd != cmd:
            raise ProtocolError(f"the device answered command {r.cmd} to command {cmd}")
        if r.status == Status.VERSION and r.status not in ok and len(r.data) == 1:
            raise version_mismatch("blob" if cmd == Cmd.BLOB else "protocol", r.data[0], _sent_version(cmd, payload))
        if r.status not in ok:
            text = (
                STATUS_TEXT.get(Status(r.status), f"status {r.status}")
                if r.status in Status._value2member_map_
                else f"status {r.status}"
            )
            raise DeviceError(f"{Cmd(cmd).name if cmd in Cmd._value2member_map_ else cmd}: {text}", r.status)
        return r.data

    # ---- commands ----
    def info(self) -> DeviceInfo:
        """Model hash, sizes, optimizer, step."""
        d = self.request(Cmd.INFO)
        if len(d) < 31:
            raise ProtocolError("INFO reply too short: is this mcutrain firmware?")
        (ver,) = struct.unpack_from("<B", d, 0)
        n_in, n_out, n_params, n_tr = struct.unpack_from("<HHII", d, 9)
        opt, slots, loss = d[21], d[22], d[23]
        step, max_payload = struct.unpack_from("<IH", d, 24)
        self._info = DeviceInfo(
            ver,
            d[1:9].hex(),
            n_in,
            n_out,
            n_params,
            n_tr,
            opt,
            slots,
            loss,
            step,
            max_payload,
            bool(d[30] & 1),
            bool(d[30] & 2),
        )
        return self._info

    @property
    def cached_info(self) -> DeviceInfo:
        """INFO, asked once."""
        return self._info or self.info()

    def check_hash(self, expected: str) -> None:
        """DeviceError unless the device runs the model with this hash."""
        got = self.info().hash
        if got != expected:
            raise DeviceError(f"the device runs model {got}, not {expected}: flash the exported project first")

    def _pack_floats(self, x: Any, n: int, what: str) -> bytes:
        """x as n little-endian f32; DeviceError naming `what` when it has another length."""
        a = np.asarray(x, dtype=np.float32).ravel()
        if a.shape[0] != n:
            raise DeviceError(f"{what} has {a.shape[0]} values, the device's model takes {n}")
        return a.astype("<f4").tobytes()

    def predict(self, x: Any) -> np.ndarray:
        """Outputs for one sample (n_in,) or a batch (n, n_in)."""
        info = self.cached_info
        xa = np.asarray(x, dtype=np.float32)
        rows = xa.reshape(-1, info.n_in) if xa.ndim > 1 else [xa]
        out = [
            np.frombuffer(self.request(Cmd.PREDICT, self._pack_floats(r, info.n_in, "input")), "<f4").copy()
            for r in rows
        ]
        return np.stack(out) if xa.ndim > 1 else out[0]

    def train(self, x: Any, t: Any) -> Tuple[float, int]:
        """One on-device training step on a labelled sample: (loss, step)."""
        info = self.cached_info
        payload = self._pack_floats(x, info.n_in, "input") + self._pack_floats(t, info.n_out, "target")
        d = self.request(Cmd.TRAIN, payload)
        loss, step = struct.unpack("<fI", d[:8])
        return loss, step

    @staticmethod
    def _raw_bytes(raw: Any) -> bytes:
        """A raw window as the firmware takes it: int16 samples (audio) or float32 values (motion)."""
        a = np.asarray(raw)
        return a.astype("<i2").tobytes() if a.dtype == np.int16 else a.astype("<f4").tobytes()

    def predict_raw(self, raw: Any) -> np.ndarray:
        """Outputs for one raw window (a model trained with --features computes its features on the device)."""
        return np.frombuffer(self.request(Cmd.PREDICT_RAW, self._raw_bytes(raw)), "<f4").copy()

    def features(self, raw: Any) -> np.ndarray:
        """The network input (normalised features) the device computes from one raw window."""
        return np.frombuffer(self.request(Cmd.FEATURES, self._raw_bytes(raw)), "<f4").copy()

    def train_raw(self, raw: Any, t: Any) -> Tuple[float, int]:
        """One on-device training step on a raw window and its target: (loss, step)."""
        payload = self._raw_bytes(raw) + self._pack_floats(t, self.cached_info.n_out, "target")
        loss, step = struct.unpack("<fI", self.request(Cmd.TRAIN_RAW, payload)[:8])
        return loss, step

    def capture(self, spec: Any) -> Optional[np.ndarray]:
        """The next raw window of the device's sensor (CAPTURE), shaped and typed as the feature pipeline `spec`
        (mcutrain.features.FeatureSpec) takes it; None when the sensor has no window ready (status NO_WINDOW).
        DeviceError when the firmware cannot capture or sends a window of another size."""
        try:
            d = self.request(Cmd.CAPTURE, ok=(Status.OK, Status.NO_WINDOW))
        except DeviceError as e:
            if e.status != Status.UNKNOWN:
                raise
            raise DeviceError(
                "CAPTURE: this firmware cannot capture sensor windows: its model takes no raw windows (train it "
                "with --features), or it was exported by an mcutrain before CAPTURE; export and flash it again",
                e.status,
            ) from None
        if not d:
            return None
        dt = np.dtype(spec.raw_dtype).newbyteorder("<")
        want = int(np.prod(spec.window_shape)) * dt.itemsize
        if len(d) != want:
            raise DeviceError(
                f"CAPTURE: the device sent a window of {len(d)} bytes, the pipeline {spec.text()} takes {want}: "
                "the device runs another model than the one given"
            )
        return np.frombuffer(d, dt).reshape(spec.window_shape).astype(spec.raw_dtype)

    def _floats_per_frame(self) -> int:
        """How many floats one READ or WRITE frame carries."""
        return max(1, (self.cached_info.max_payload - 5) // 4)

    def read_region(self, region: int, n: Optional[int] = None, offset: int = 0) -> np.ndarray:
        """The floats of a region (0 params, 1 optimizer slots, 2 train state): n of them from `offset` (in
        floats), by default all."""
        info = self.cached_info
        total = n if n is not None else {0: info.n_params, 1: info.n_params * info.slots, 2: 3}[region] - offset
        out: List[np.ndarray] = []
        for off in range(0, total, self._floats_per_frame()):
            cnt = min(self._floats_per_frame(), total - off)
            d = self.request(Cmd.READ, struct.pack("<BIH", region, offset + off, cnt))
            out.append(np.frombuffer(d, "<f4").copy())
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    def write_region(self, region: int, values: Any, offset: int = 0) -> None:
        """Write floats into a region, from `offset` (in floats) on."""
        v = np.ascontiguousarray(values, "<f4").ravel()
        for off in range(0, v.shape[0], self._floats_per_frame()):
            part = v[off : off + self._floats_per_frame()]
            self.request(Cmd.WRITE, struct.pack("<BI", region, offset + off) + part.tobytes())

    def announce_blob(self, with_slots: bool, version: int = BLOB_VERSION) -> None:
        """BLOB: tell the device the blob (RAM parameters, optimizer slots if with_slots, train state) a pull or
        push moves next, in blob format `version`; a device of another blob version refuses it (VersionError)
        before anything is read or written, so it keeps its state."""
        info = self.cached_info
        self.request(Cmd.BLOB, struct.pack("<BIB", version, info.n_params, info.slots if with_slots else 0))

    def pull(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(params, optimizer slots, train state as 12 raw bytes viewed as uint8)."""
        self.announce_blob(True)
        p = self.read_region(REGION_PARAMS)
        s = self.read_region(REGION_OPT_SLOTS)
        ts = self.read_region(REGION_TRAIN_STATE).view(np.uint8)
        return p, s, ts

    def push(
        self,
        params: Any,
        state: Optional[Any] = None,
        train_state: Optional[Any] = None,
        blob_version: int = BLOB_VERSION,
    ) -> None:
        """Write params (and optionally optimizer slots and the 12-byte train state) as a blob of format
        blob_version (this mcutrain's): a device that reads another one refuses it first and keeps its state."""
        self.announce_blob(state is not None and self.cached_info.slots > 0, blob_version)
        self.write_region(REGION_PARAMS, params)
        if state is not None and self.cached_info.slots:
            self.write_region(REGION_OPT_SLOTS, state)
        if train_state is not None:
            self.write_region(REGION_TRAIN_STATE, np.frombuffer(np.asarray(train_state, np.uint8).tobytes(), "<f4"))

    def save(self) -> int:
        """Persist params and optimizer state; returns the save's sequence number."""
        return struct.unpack("<I", self.request(Cmd.SAVE))[0]

    def load(self) -> int:
        """Restore the newest save; returns its sequence number."""
        return struct.unpack("<I", self.request(Cmd.LOAD))[0]

    def stats(self) -> Tuple[int, int, int]:
        """(peak stack bytes, stack bytes available, saves since boot)."""
        return struct.unpack("<III", self.request(Cmd.STATS))

    def reset(self) -> None:
        """Back to the exported parameters, zero optimizer state, step 0."""
        self.request(Cmd.RESET)

    def quit(self) -> None:
        """End a native or simulated firmware (boards answer 'unknown command')."""
        try:
            self.request(Cmd.QUIT)
        except Exception as e:
            # the program may end before its reply is read: that is the point of QUIT. (pyserial's
            # SerialException is an OSError only in newer versions, hence the test by name.)
            if not isinstance(e, (ProtocolError, OSError)) and type(e).__name__ != "SerialException":
                raise
            if self.process is None:
                raise DeviceError(f"QUIT: {e}") from None
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                raise DeviceError(f"QUIT: {e}; the program did not end") from None

    def resync(self) -> None:
        """Recover after a lost byte: complete any partial frame with zeros and drop the replies (for at
        most RESYNC_DRAIN seconds: a line that never goes quiet is left to the next request to refuse)."""
        i = self._info
        longest = max(i.max_payload, 4 * (i.n_in + i.n_out)) if i else 65535
        self.link.write(bytes(longest + FRAME_OVERHEAD))
        old = getattr(self.link, "timeout", None)
        deadline = time.monotonic() + RESYNC_DRAIN
        try:
            if old is not None:
                self.link.timeout = 0.3
            while self.link.read(256) and time.monotonic() < deadline:
                pass
        finally:
            if old is not None:
                self.link.timeout = old
