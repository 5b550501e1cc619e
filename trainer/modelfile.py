"""The model file (.mct): one versioned file holding the architecture, the parameters, the optimizer
and its state (so training resumes exactly), training metadata and a CRC-32 over everything.

Layout: b"MCTRAIN\\0", u32 format version, u32 header length, header (JSON, UTF-8), the arrays
(little-endian, 4-byte aligned, where the header says), u32 CRC-32 of all the bytes before it.
Files are written to a temporary file in the same folder and renamed, so a crash never leaves a
half-written model behind.
"""
from __future__ import annotations

import json
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Union

import numpy as np

from .architecture import from_architecture
from .errors import ArchitectureError, ModelFileError
from .files import atomic_write
from .module import Module, as_optimizer
from .optim import TRAIN_STATE_DTYPE, Optimizer, TrainParams
from .version import __version__

__all__ = ["Checkpoint", "ModelFileError", "atomic_write", "encode_model", "decode_model", "save_model",
           "load_model", "MAGIC", "FORMAT_VERSION"]

MAGIC = b"MCTRAIN\0"
FORMAT_VERSION = 1


@dataclass
class Checkpoint:
    """What a model file holds."""
    net: Module
    optimizer: Optional[Optimizer] = None
    metadata: Dict[str, Any] = field(default_factory=dict)


def _pad4(n: int) -> int:
    return (n + 3) & ~3


def encode_model(net: Module, optimizer: Optional[Optimizer] = None,
                 metadata: Optional[Dict[str, Any]] = None) -> bytes:
    """The bytes of a model file."""
    arrays: Dict[str, np.ndarray] = {"params": net.params.astype("<f4")}
    opt_cfg = None
    if isinstance(optimizer, TrainParams):
        optimizer = as_optimizer(optimizer, net)
    if optimizer is not None:
        if optimizer.n_params != net.param_count():
            raise ModelFileError(f"the optimizer has state for {optimizer.n_params} parameters, "
                                 f"the network has {net.param_count()}")
        opt_cfg = optimizer.config()
        arrays["opt_state"] = optimizer.state.astype("<f4")
        arrays["train_state"] = optimizer.train_state.copy()
    header: Dict[str, Any] = {
        "format": FORMAT_VERSION, "mcutrain": __version__, "saved": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "architecture": net.architecture(), "n_params": net.param_count(), "optimizer": opt_cfg,
        "metadata": metadata or {}, "arrays": {},
    }
    # offsets are relative to the start of the payload (after the header)
    off = 0
    blobs = []
    for name, a in arrays.items():
        b = a.tobytes()
        header["arrays"][name] = {"offset": off, "bytes": len(b), "shape": list(a.shape), "dtype": a.dtype.str
                                  if name != "train_state" else "train_state"}
        blobs.append(b + b"\0" * (_pad4(len(b)) - len(b)))
        off += _pad4(len(b))
    hjson = json.dumps(header, sort_keys=True).encode("utf-8")
    hjson += b" " * (_pad4(len(hjson)) - len(hjson))
    body = MAGIC + struct.pack("<II", FORMAT_VERSION, len(hjson)) + hjson + b"".join(blobs)
    return body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


def save_model(path: Union[str, Path], net: Module, optimizer: Optional[Optimizer] = None,
               metadata: Optional[Dict[str, Any]] = None) -> None:
    """Write a model file atomically."""
    atomic_write(path, encode_model(net, optimizer, metadata))


def decode_model(data: bytes, name: str = "model file") -> Checkpoint:
    """Parse the bytes of a model file, checking everything; raises ModelFileError."""
    if data[:8] != MAGIC[:len(data)] or not data:
        raise ModelFileError(f"{name} is not an mcutrain model file (it does not start with the MCTRAIN marker)")
    if len(data) < 16:
        raise ModelFileError(f"{name} is truncated ({len(data)} bytes): it was not fully written or copied")
    version, hlen = struct.unpack_from("<II", data, 8)
    if version > FORMAT_VERSION:
        raise ModelFileError(f"{name} uses model format {version}; this mcutrain reads up to {FORMAT_VERSION}: "
                             f"upgrade mcutrain")
    if len(data) < 16 + hlen + 4:
        raise ModelFileError(f"{name} is truncated ({len(data)} bytes): it was not fully written or copied")
    (crc,) = struct.unpack_from("<I", data, len(data) - 4)
    if zlib.crc32(data[:-4]) & 0xFFFFFFFF != crc:
        raise ModelFileError(f"{name} is corrupt or truncated (checksum mismatch)")
    try:
        header = json.loads(data[16:16 + hlen].decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise ModelFileError(f"{name} has an unreadable header") from None
    try:
        return _from_header(header, data[16 + hlen:-4], name)
    except (KeyError, TypeError, IndexError, AttributeError) as e:
        raise ModelFileError(f"{name} has a malformed header ({type(e).__name__}: {e})") from None


def _from_header(header: Dict[str, Any], payload: bytes, name: str) -> Checkpoint:
    """Build the checkpoint from a parsed header and the array bytes."""
    def array(key: str) -> Optional[np.ndarray]:
        info = header["arrays"].get(key)
        if info is None:
            return None
        o, n = info["offset"], info["bytes"]
        if o < 0 or o + n > len(payload):
            raise ModelFileError(f"{name}: array {key} lies outside the file")
        dtype = TRAIN_STATE_DTYPE if info["dtype"] == "train_state" else np.dtype(info["dtype"])
        return np.frombuffer(payload, dtype, n // dtype.itemsize, o).reshape(info["shape"]).copy()

    try:
        net = from_architecture(header["architecture"], f"{name} architecture")
    except ArchitectureError as e:
        raise ModelFileError(str(e)) from None
    params = array("params")
    if params is None or params.shape != (net.param_count(),) or net.param_count() != header["n_params"]:
        raise ModelFileError(f"{name}: the parameters do not match the architecture "
                             f"({None if params is None else params.shape[0]} values for "
                             f"{net.param_count()} parameters)")
    net.params = params
    opt = None
    if header.get("optimizer"):
        opt = Optimizer.from_config(header["optimizer"], net.param_count())
        state, ts = array("opt_state"), array("train_state")
        if state is None or ts is None or state.shape != opt.state.shape:
            raise ModelFileError(f"{name}: the optimizer state does not match the network")
        opt.state[...] = state
        opt.train_state[...] = ts
    return Checkpoint(net, opt, header.get("metadata") or {})


def load_model(path: Union[str, Path]) -> Checkpoint:
    """Read and check a model file."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ModelFileError(f"model file {p} does not exist") from None
    except OSError as e:
        raise ModelFileError(f"cannot read model file {p}: {e.strerror}") from None
    return decode_model(data, str(p))
