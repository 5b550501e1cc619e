"""Data from files: CSV, NPZ and IDX (the MNIST format), as float32 (inputs, targets) pairs."""
from __future__ import annotations

import csv
import gzip
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

from .errors import DataError


@dataclass
class Dataset:
    """Inputs x (n, n_in) and targets y (n, n_out), float32."""
    x: np.ndarray
    y: np.ndarray
    name: str = "data"

    def __post_init__(self) -> None:
        if self.x.ndim != 2 or self.y.ndim != 2 or self.x.shape[0] != self.y.shape[0]:
            raise DataError(f"{self.name}: inputs {self.x.shape} and targets {self.y.shape} do not pair up")
        if self.x.shape[0] == 0:
            raise DataError(f"{self.name} has no samples")
        for what, a in (("inputs", self.x), ("targets", self.y)):
            if not np.isfinite(a).all():
                bad = int(np.argwhere(~np.isfinite(a))[0][0])
                raise DataError(f"{self.name}: {what} of sample {bad} contain NaN or inf")

    def __len__(self) -> int:
        return self.x.shape[0]

    def split(self, val_fraction: float, seed: int = 0) -> Tuple["Dataset", Optional["Dataset"]]:
        """(train, validation) after a seeded shuffle; validation is None for a fraction of 0."""
        if not 0 <= val_fraction < 1:
            raise DataError(f"the validation fraction must be in [0, 1), got {val_fraction}")
        n_val = int(round(len(self) * val_fraction))
        if n_val == 0:
            return self, None
        if n_val >= len(self):
            raise DataError(f"{self.name}: {len(self)} samples are too few for a {val_fraction:.0%} validation split")
        order = np.random.default_rng(seed).permutation(len(self))
        v, t = order[:n_val], order[n_val:]
        return (Dataset(self.x[t], self.y[t], self.name + " (train)"),
                Dataset(self.x[v], self.y[v], self.name + " (validation)"))

    @property
    def classification(self) -> bool:
        """True when every target row is one-hot."""
        return bool(np.all((self.y == 0) | (self.y == 1)) and np.all(self.y.sum(axis=1) == 1))


def one_hot(labels: np.ndarray, classes: Optional[int] = None, name: str = "labels") -> np.ndarray:
    """Integer labels (n,) -> one-hot float32 (n, classes)."""
    lab = np.asarray(labels)
    if lab.size and (np.any(lab < 0) or np.any(lab != np.round(lab))):
        raise DataError(f"{name}: class labels must be whole numbers >= 0")
    lab = lab.astype(np.int64)
    k = int(lab.max()) + 1 if classes is None else classes
    if lab.size and lab.max() >= k:
        raise DataError(f"{name}: label {int(lab.max())} does not fit {k} classes")
    out = np.zeros((lab.shape[0], k), np.float32)
    out[np.arange(lab.shape[0]), lab] = 1.0
    return out


def _columns(spec: Union[None, str, Sequence[int]], header: List[str], n_cols: int, what: str) -> List[int]:
    """Column indices from '0-19', '1,3,5', names, or a list of ints."""
    if spec is None:
        raise DataError(f"say which CSV columns are the {what}")
    if isinstance(spec, str):
        out: List[int] = []
        for part in spec.split(","):
            part = part.strip()
            if part in header:
                out.append(header.index(part))
            elif "-" in part and all(s.strip().isdigit() for s in part.split("-", 1)):
                a, b = (int(s) for s in part.split("-", 1))
                out.extend(range(a, b + 1))
            elif part.lstrip("-").isdigit():
                c = int(part)                      # negative numbers count from the end: -1 is the last
                if c < -n_cols:
                    raise DataError(f"{what} column {c} does not exist: the file has {n_cols} columns "
                                    f"(-{n_cols} to {n_cols - 1})")
                out.append(c + n_cols if c < 0 else c)
            else:
                raise DataError(f"{what} column {part!r} is neither a number, a range like 0-19, nor a header name")
        spec = out
    cols = list(spec)
    for c in cols:
        if not 0 <= c < n_cols:
            raise DataError(f"{what} column {c} does not exist: the file has {n_cols} columns (0-{n_cols - 1})")
    return cols


def csv_columns(header: List[str], n_cols: int, inputs: Union[None, str, Sequence[int]],
                targets: Union[None, str, Sequence[int]]) -> Tuple[List[int], List[int]]:
    """(input columns, target columns) of a CSV table: the inputs default to every column that is not
    a target."""
    t_cols = _columns(targets, header, n_cols, "target")
    i_cols = (_columns(inputs, header, n_cols, "input") if inputs is not None
              else [c for c in range(n_cols) if c not in t_cols])
    return i_cols, t_cols


def read_csv_table(path: Union[str, Path]) -> Tuple[List[str], np.ndarray]:
    """(header, numbers (n, columns) float64) of a CSV file: blank lines are skipped and a first row
    that is not all numbers is the header. DataError says what is wrong with a malformed file."""
    p = Path(path)
    try:
        with open(p, newline="") as f:
            reader = csv.reader(f)
            rows = [(reader.line_num, r) for r in reader if r and any(c.strip() for c in r)]
    except OSError as e:
        raise DataError(f"cannot read {p}: {e.strerror or e}") from None
    except (csv.Error, UnicodeDecodeError) as e:
        raise DataError(f"{p} is not a readable CSV file ({e})") from None
    if not rows:
        raise DataError(f"{p} is empty")
    header: List[str] = []
    try:
        [float(c) for c in rows[0][1]]
    except ValueError:
        header = [c.strip() for c in rows[0][1]]
        rows = rows[1:]
        if not rows:
            raise DataError(f"{p} has a header row but no samples")
    n_cols = len(rows[0][1])
    for line, r in rows:
        if len(r) != n_cols:
            raise DataError(f"{p}: line {line} has {len(r)} columns, line {rows[0][0]} has {n_cols}: "
                            f"every sample needs the same columns")
    try:
        data = np.array([[float(c) for c in r] for _, r in rows], np.float64).reshape(len(rows), n_cols)
    except ValueError:
        line, j, cell = next((line, j, c) for line, r in rows for j, c in enumerate(r) if not _is_number(c))
        raise DataError(f"{p}: line {line}, column {j}: {cell.strip()!r} is not a number") from None
    return header, data


def _is_number(text: str) -> bool:
    """Does float() read this CSV cell?"""
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_csv(path: Union[str, Path], inputs: Union[None, str, Sequence[int]] = None,
             targets: Union[None, str, Sequence[int]] = "-1", one_hot_classes: Optional[int] = None,
             classify: bool = False) -> Dataset:
    """Numbers from a CSV file (a header row is detected). By default the last column is the target;
    inputs default to all other columns. classify=True turns an integer target column into one-hot."""
    p = Path(path)
    header, data = read_csv_table(p)
    n_cols = data.shape[1]
    i_cols, t_cols = csv_columns(header, n_cols, inputs, targets)
    x = data[:, i_cols].astype(np.float32)
    y = data[:, t_cols]
    if classify or one_hot_classes:
        if len(t_cols) != 1:
            raise DataError("one-hot targets need exactly one label column")
        y = one_hot(y[:, 0], one_hot_classes, f"{p} labels")
    return Dataset(x, y.astype(np.float32), p.name)


def load_npz(path: Union[str, Path], x_key: str = "x", y_key: str = "y", classify: bool = False) -> Dataset:
    """Arrays x_key (n, n_in) and y_key (n, n_out), or integer labels (n,) with classify=True."""
    p = Path(path)
    try:
        with np.load(p, allow_pickle=False) as z:
            missing = [k for k in (x_key, y_key) if k not in z.files]
            if missing:
                raise DataError(f"{p} has no array {missing[0]!r}; it has {', '.join(z.files) or 'none'}")
            x, y = z[x_key], z[y_key]
    except (OSError, ValueError) as e:
        if isinstance(e, DataError):
            raise
        raise DataError(f"cannot read {p} as NPZ: {e}") from None
    x = x.reshape(x.shape[0], -1) if x.ndim > 2 else x
    if y.ndim == 1:
        y = one_hot(y, name=f"{p} {y_key}") if classify else y[:, None]
    if x.dtype.kind not in "fiub" or y.dtype.kind not in "fiub":
        raise DataError(f"{p}: arrays must hold numbers, not {x.dtype}/{y.dtype}")
    return Dataset(x.astype(np.float32), y.astype(np.float32), p.name)


_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Union[str, Path]) -> np.ndarray:
    """An IDX array (MNIST's format; .gz is unpacked)."""
    p = Path(path)
    try:
        raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
    except OSError as e:
        raise DataError(f"cannot read {p}: {e.strerror or e}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise DataError(f"{p} is not an IDX file (bad magic number)")
    nd = raw[3]
    if len(raw) < 4 + 4 * nd:
        raise DataError(f"{p} is truncated (header)")
    dims = struct.unpack_from(f">{nd}I", raw, 4)
    dt = np.dtype(_IDX_TYPES[raw[2]])
    need = int(np.prod(dims)) * dt.itemsize
    if len(raw) - 4 - 4 * nd < need:
        raise DataError(f"{p} is truncated: {len(raw) - 4 - 4 * nd} data bytes for shape {dims} need {need}")
    return np.frombuffer(raw, dt, int(np.prod(dims)), 4 + 4 * nd).reshape(dims)


def idx_images(path: Union[str, Path]) -> np.ndarray:
    """IDX images (n, ...) as float32 rows (n, features); byte data is scaled to [0, 1]."""
    x = read_idx(path)
    xf = x.reshape(x.shape[0], -1).astype(np.float32)
    if x.dtype == np.dtype(">u1"):
        xf /= 255.0
    return xf


def load_idx(images: Union[str, Path], labels: Union[str, Path], classes: Optional[int] = None) -> Dataset:
    """Images (n, ...) scaled to [0, 1] for byte data, labels one-hot."""
    x = idx_images(images)
    y = read_idx(labels)
    if x.shape[0] != y.shape[0]:
        raise DataError(f"{images} has {x.shape[0]} images but {labels} has {y.shape[0]} labels")
    return Dataset(x, one_hot(y.reshape(-1), classes, str(labels)), Path(images).name)
