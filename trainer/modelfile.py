"""The model file (.mct): one versioned file holding the architecture, the parameters, the optimizer
and its state (so training resumes exactly), training metadata and a CRC-32 over everything.

Layout: b"MCTRAIN\\0", u32 format version, u32 header length, header (JSON, UTF-8), the arrays
(little-endian, 4-byte aligned, where the header says), u32 CRC-32 of all the bytes before it.
Files are written to a temporary file in the same folder and renamed, so a crash never leaves a
half-written model behind.
"""

from __future__ import annotations

import json
import math
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np

from .architecture import MAX_NESTING, from_architecture
from .corefacts import MODEL_VERSION
from .errors import ArchitectureError, ConfigError, ModelFileError
from .files import atomic_write, read_bounded
from .modelschema import check_header
from .module import Module, as_optimizer
from .optim import TRAIN_STATE_DTYPE, Optimizer, TrainParams
from .plaindata import nesting
from .version import __version__

__all__ = [
    "Checkpoint",
    "ModelFileError",
    "atomic_write",
    "encode_model",
    "decode_model",
    "save_model",
    "load_model",
    "MAGIC",
    "FORMAT_VERSION",
]

MAGIC = b"MCTRAIN\0"
FORMAT_VERSION = MODEL_VERSION  # MCT_FORMAT_LIST in firmware/core/mct_lists.h, with the device's formats


@dataclass
class Checkpoint:
    """What a model file holds."""

    net: Module
    optimizer: Optional[Optimizer] = None
    metadata: Dict[str, Any] = field(default_factory=dict)


def _pad4(n: int) -> int:
    return (n + 3) & ~3


def encode_model(
    net: Module, optimizer: Optional[Optimizer] = None, metadata: Optional[Dict[str, Any]] = None
) -> bytes:
    """The bytes of a model file."""
    arrays: Dict[str, np.ndarray] = {"params": net.params.astype("<f4")}
    opt_cfg = None
    if isinstance(optimizer, TrainParams):
        optimizer = as_optimizer(optimizer, net)
    if optimizer is not None:
        if optimizer.n_params != net.param_count():
            raise ModelFileError(
                f"the optimizer has state for {optimizer.n_params} parameters, the network has {net.param_count()}"
            )
        opt_cfg = optimizer.config()
        arrays["opt_state"] = optimizer.state.astype("<f4")
        arrays["train_state"] = optimizer.train_state.copy()
    header: Dict[str, Any] = {
        "format": FORMAT_VERSION,
        "mcutrain": __version__,
        "saved": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "architecture": net.architecture(),
        "n_params": net.param_count(),
        "optimizer": opt_cfg,
        "metadata": metadata or {},
        "arrays": {},
    }
    # offsets are relative to the start of the payload (after the header)
    off = 0
    blobs = []
    for name, a in arrays.items():
        b = a.tobytes()
        header["arrays"][name] = {
            "offset": off,
            "bytes": len(b),
            "shape": list(a.shape),
            "dtype": a.dtype.str if name != "train_state" else "train_state",
        }
        blobs.append(b + b"\0" * (_pad4(len(b)) - len(b)))
        off += _pad4(len(b))
    hjson = json.dumps(header, sort_keys=True).encode("utf-8")
    hjson += b" " * (_pad4(len(hjson)) - len(hjson))
    body = MAGIC + struct.pack("<II", FORMAT_VERSION, len(hjson)) + hjson + b"".join(blobs)
    return body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


def save_model(
    path: Union[str, Path],
    net: Module,
    optimizer: Optional[Optimizer] = None,
    metadata: Optional[Dict[str, Any]] = None,
) -> None:
    """Write a model file atomically. The parameters and optimizer state are read under the network's lock,
    so a save while other threads train holds the state between two whole updates."""
    opt_lock = getattr(optimizer, "_lock", None)  # an Optimizer's; a bare TrainParams keeps no state
    with net.lock:
        if opt_lock is None:
            data = encode_model(net, optimizer, metadata)
        else:
            with opt_lock:
                data = encode_model(net, optimizer, metadata)
    atomic_write(path, data)


# Limits that hold before anything is allocated: a model file (the largest network a 2-core host trains
# sensibly is far smaller) and its JSON header (architecture.MAX_NESTING bounds the nesting).
MAX_MODEL_BYTES = 256 << 20
MAX_HEADER_BYTES = 16 << 20
# the arrays a model file may hold: name -> dtype string in the header (only little-endian float32 and the
# core's train state: a byte-swapped or other dtype is refused)
ARRAY_DTYPES = {"params": "<f4", "opt_state": "<f4", "train_state": "train_state"}


def _field(cond: bool, name: str, where: str, what: str) -> None:
    """ModelFileError naming the header field unless cond holds."""
    if not cond:
        raise ModelFileError(f"{name}: header field {where} {what}")


def _check_header(header: Any, payload: int, name: str) -> Dict[str, Tuple[int, int]]:
    """Validate the header against the schema (mcutrain.modelschema: every field's type and range) and its
    fields against each other and the payload's size; returns (offset, bytes) of each array. Every violation
    is a ModelFileError that names the field."""
    _field(
        nesting(header, MAX_NESTING + 4) <= MAX_NESTING + 4,
        name,
        "(the header)",
        f"nests deeper than {MAX_NESTING + 4} levels",
    )
    check_header(header, name)
    _field(
        nesting(header["architecture"], MAX_NESTING) <= MAX_NESTING,
        name,
        "architecture",
        f"nests deeper than {MAX_NESTING} levels",
    )
    n = header["n_params"]
    _field(
        n <= payload // 4,
        name,
        "n_params",
        f"must be a whole number of parameters the file can hold (at most {payload // 4}), got {n!r}",
    )
    opt = header.get("optimizer")
    out: Dict[str, Tuple[int, int]] = {}
    for key, info in header["arrays"].items():
        where = f"arrays.{key}"
        o, nb, shape, dt = info["offset"], info["bytes"], info["shape"], info["dtype"]
        _field(
            o <= payload and o % 4 == 0,
            name,
            f"{where}.offset",
            f"must be a multiple of 4 within the file's {payload} bytes of arrays, got {o!r}",
        )
        _field(
            nb <= payload - o, name, f"{where}.bytes", f"must fit the {payload - o} bytes after its offset, got {nb!r}"
        )
        _field(dt == ARRAY_DTYPES[key], name, f"{where}.dtype", f"must be {ARRAY_DTYPES[key]!r}, got {dt!r}")
        itemsize = TRAIN_STATE_DTYPE.itemsize if key == "train_state" else 4
        _field(
            math.prod(shape) * itemsize == nb,  # Python integers: no int64 overflow
            name,
            f"{where}.shape",
            f"{shape} does not hold {nb} bytes",
        )
        out[key] = (o, nb)
    _field(out["params"][1] == 4 * n, name, "arrays.params.bytes", f"must be 4 * n_params = {4 * n}")
    if "train_state" in out:
        _field(
            header["arrays"]["train_state"]["shape"] == [1],
            name,
            "arrays.train_state.shape",
            f"must be [1] (one record), got {header['arrays']['train_state']['shape']}",
        )
    if opt is not None:
        for key in ("opt_state", "train_state"):
            _field(key in out, name, f"arrays.{key}", "is missing (the file names an optimizer)")
    return out


def decode_model(data: bytes, name: str = "model file") -> Checkpoint:
    """Parse the bytes of a model file, checking everything before anything large is allocated; raises
    ModelFileError naming what is wrong (and, for a bad header, which field)."""
    if not data or data[:8] != MAGIC[: len(data)]:
        raise ModelFileError(f"{name} is not an mcutrain model file (it does not start with the MCTRAIN marker)")
    if len(data) < 20:
        raise ModelFileError(f"{name} is truncated ({len(data)} bytes): it was not fully written or copied")
    version, hlen = struct.unpack_from("<II", data, 8)
    if version > FORMAT_VERSION or version < 1:
        raise ModelFileError(
            f"{name} uses model format {version}; this mcutrain reads 1 to {FORMAT_VERSION}"
            + (": upgrade mcutrain" if version > FORMAT_VERSION else "")
        )
    if hlen > MAX_HEADER_BYTES or len(data) < 16 + hlen + 4:
        raise ModelFileError(
            f"{name} is truncated ({len(data)} bytes for a {hlen}-byte header): it was not fully written or copied"
        )
    (crc,) = struct.unpack_from("<I", data, len(data) - 4)
    if zlib.crc32(data[:-4]) & 0xFFFFFFFF != crc:
        raise ModelFileError(f"{name} is corrupt or truncated (checksum mismatch)")
    try:
        header = json.loads(data[16 : 16 + hlen].decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ModelFileError(f"{name} has an unreadable header (not UTF-8 JSON, or nested too deeply)") from None
    payload = data[16 + hlen : -4]
    spans = _check_header(header, len(payload), name)
    return _from_header(header, payload, spans, name)


def _from_header(header: Dict[str, Any], payload: bytes, spans: Dict[str, Tuple[int, int]], name: str) -> Checkpoint:
    """Build the checkpoint from a checked header and the array bytes."""

    def array(key: str, dtype: np.dtype) -> np.ndarray:
        o, nb = spans[key]
        return np.frombuffer(payload, dtype, nb // dtype.itemsize, o).copy()

    try:
        net = from_architecture(header["architecture"], f"{name} architecture")
    except ArchitectureError as e:
        raise ModelFileError(str(e)) from None
    if net.param_count() != header["n_params"]:  # counted from the sizes: nothing allocated yet
        raise ModelFileError(
            f"{name}: the architecture has {net.param_count()} parameters, the file holds {header['n_params']}"
        )
    net.params = array("params", np.dtype("<f4"))
    opt = None
    if header.get("optimizer") is not None:
        try:
            opt = Optimizer.from_config(header["optimizer"], net.param_count())
        except (ConfigError, TypeError) as e:
            raise ModelFileError(f"{name}: header field optimizer: {e}") from None
        state = array("opt_state", np.dtype("<f4"))
        if state.size != opt.state.size:
            raise ModelFileError(
                f"{name}: the optimizer state holds {state.size} values, a {opt.kind} optimizer "
                f"of {net.param_count()} parameters has {opt.state.size}"
            )
        opt.state[...] = state.reshape(opt.state.shape)
        opt.train_state[...] = array("train_state", TRAIN_STATE_DTYPE)
    return Checkpoint(net, opt, header.get("metadata") or {})


def load_model(path: Union[str, Path]) -> Checkpoint:
    """Read and check a model file: ModelFileError for a missing file, anything but a regular file or
    one over MAX_MODEL_BYTES (checked before reading), and everything decode_model finds."""
    return decode_model(read_bounded(path, MAX_MODEL_BYTES, "model file", ModelFileError), str(Path(path)))
