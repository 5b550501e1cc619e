"""Framing of the device protocol (docs/protocol.md): encode requests, decode replies."""

from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Callable

from ..errors import McuTrainError


class Cmd(IntEnum):
    """Commands."""

    INFO = 1
    PREDICT = 2
    TRAIN = 3
    READ = 4
    WRITE = 5
    SAVE = 6
    LOAD = 7
    STATS = 8
    RESET = 9
    PREDICT_RAW = 10
    TRAIN_RAW = 11
    FEATURES = 12
    QUIT = 0x7F


class Status(IntEnum):
    """Reply status codes."""

    OK = 0
    BAD_CRC = 1
    BAD_LENGTH = 2
    UNKNOWN = 3
    BAD_ARG = 4
    NONFINITE = 5
    STORE = 6
    NO_SAVE = 7
    UNSUPPORTED = 8


STATUS_TEXT = {
    Status.BAD_CRC: "the device saw a bad CRC (a corrupted frame)",
    Status.BAD_LENGTH: "the device rejected the frame length (payload of the wrong size for this model)",
    Status.UNKNOWN: "the device does not know this command",
    Status.BAD_ARG: "the device rejected an argument (region, offset or count out of range)",
    Status.NONFINITE: "the loss was not finite; the device left its parameters unchanged",
    Status.STORE: "the device's storage failed",
    Status.NO_SAVE: "the device has no saved state",
    Status.UNSUPPORTED: "this build of the firmware cannot do that (no storage, or not with this optimizer)",
}

SYNC_REQUEST = 0xA5
SYNC_REPLY = 0x5A


def crc16(data: bytes) -> int:
    """CRC-16/CCITT-FALSE, as the firmware computes it."""
    return binascii.crc_hqx(data, 0xFFFF)


def encode(cmd: int, payload: bytes = b"") -> bytes:
    """A request frame."""
    body = struct.pack("<BH", cmd, len(payload)) + payload
    return bytes([SYNC_REQUEST]) + body + struct.pack("<H", crc16(body))


class ProtocolError(McuTrainError, RuntimeError):
    """The device's answer cannot be read (garbled, truncated, or nothing at all)."""


@dataclass
class Reply:
    """A decoded reply frame."""

    cmd: int
    status: int
    data: bytes


def read_reply(read: Callable[[int], bytes], max_skip: int = 1 << 16) -> Reply:
    """Read one reply frame through read(n) (which returns b'' on timeout), skipping noise before the sync byte."""
    skipped = 0
    while True:
        b = read(1)
        if not b:
            raise ProtocolError("no answer from the device (timeout): is it running this firmware, on this port?")
        if b[0] == SYNC_REPLY:
            break
        skipped += 1
        if skipped > max_skip:
            raise ProtocolError("the device sends data that is not this protocol")
    head = _exact(read, 3)
    cmd, n = head[0], struct.unpack_from("<H", head, 1)[0]
    payload = _exact(read, n)
    (crc,) = struct.unpack("<H", _exact(read, 2))
    if crc16(head + payload) != crc:
        raise ProtocolError("a reply from the device failed its CRC check (noise on the line?)")
    if n < 1 or not cmd & 0x80:
        raise ProtocolError("malformed reply from the device")
    return Reply(cmd & 0x7F, payload[0], payload[1:])


def _exact(read: Callable[[int], bytes], n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = read(n - len(out))
        if not chunk:
            raise ProtocolError("the device stopped in the middle of a reply (timeout)")
        out += chunk
    return out
