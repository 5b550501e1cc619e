"""Framing of the device protocol (docs/protocol.md): encode requests, decode replies. Every frame carries the
protocol's format version in its byte 1; a reply of another version is a VersionError in one line."""

from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass
from typing import Callable

from .. import corefacts
from ..errors import McuTrainError

# the commands, reply statuses and the protocol's version are the firmware's (mct_lists.h through corefacts)
Cmd = corefacts.Cmd
Status = corefacts.ReplyStatus
PROTOCOL_VERSION = corefacts.PROTOCOL_VERSION
BLOB_VERSION = corefacts.BLOB_VERSION

STATUS_TEXT = {
    Status.BAD_CRC: "the device saw a bad CRC (a corrupted frame)",
    Status.BAD_LENGTH: "the device rejected the frame length (payload of the wrong size for this model)",
    Status.UNKNOWN: "the device does not know this command",
    Status.BAD_ARG: "the device rejected an argument (region, offset or count out of range)",
    Status.NONFINITE: "the loss was not finite; the device left its parameters unchanged",
    Status.STORE: "the device's storage failed",
    Status.NO_SAVE: "the device has no saved state",
    Status.UNSUPPORTED: "this build of the firmware cannot do that (no storage, not with this optimizer, or a frozen "
    "full-integer model, which trains nothing)",
    Status.VERSION: "the device reads another format version",
    Status.NO_WINDOW: "the device's sensor has no window ready",
}

SYNC_REQUEST = 0xA5
SYNC_REPLY = 0x5A


def crc16(data: bytes) -> int:
    """CRC-16/CCITT-FALSE, as the firmware computes it."""
    return binascii.crc_hqx(data, 0xFFFF)


MAX_FRAME_PAYLOAD = 0xFFFF  # a frame's payload length is a u16


def encode(cmd: int, payload: bytes = b"", version: int = PROTOCOL_VERSION) -> bytes:
    """A request frame (of this mcutrain's protocol version unless told otherwise); ProtocolError for a payload
    longer than a frame carries."""
    if len(payload) > MAX_FRAME_PAYLOAD:
        raise ProtocolError(
            f"a {len(payload):,} B payload does not fit a protocol frame (at most {MAX_FRAME_PAYLOAD:,} B)"
        )
    body = struct.pack("<BBH", version, cmd, len(payload)) + payload
    return bytes([SYNC_REQUEST]) + body + struct.pack("<H", crc16(body))


class ProtocolError(McuTrainError, RuntimeError):
    """The device's answer cannot be read (garbled, truncated, or nothing at all)."""


class VersionError(ProtocolError):
    """The device speaks another version of the protocol (or reads another blob version) than this mcutrain."""


def version_mismatch(what: str, device: int, host: int) -> VersionError:
    """The one-line error for a device whose `what` (protocol, blob) version differs from this mcutrain's."""
    older = "an older" if device < host else "a newer"
    return VersionError(
        f"the device's firmware uses {what} format {device}, this mcutrain uses {host}: the firmware was built by "
        f"{older} mcutrain; export and flash it again with this one (or use the mcutrain that built it)"
    )


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
    (version,) = _exact(read, 1)
    if version != PROTOCOL_VERSION:
        # byte 1 of a version 1 reply was the command with bit 7 set; later versions are below 0x80
        raise version_mismatch("protocol", 1 if version & 0x80 else version, PROTOCOL_VERSION)
    head = bytes([version]) + _exact(read, 3)
    cmd, n = head[1], struct.unpack_from("<H", head, 2)[0]
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
