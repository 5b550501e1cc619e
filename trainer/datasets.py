"""Data from files: CSV, NPZ and IDX (the MNIST format), as float32 (inputs, targets) pairs.

Every failure is a DataError naming the file (and, for CSV, the line and column). Sizes are bounded before
anything is allocated: a file (and what a .gz or .npz unpacks to) has at most MAX_DATA_BYTES, a CSV at
most MAX_CSV_BYTES (parsing takes many times its size), a one-hot target at most MAX_CLASSES classes and a
sample at most MAX_WIDTH values (the core's layer widths are 16-bit)."""

from __future__ import annotations

import csv
import gzip
import io
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from .errors import DataError
from .files import read_bounded, read_limited

MAX_DATA_BYTES = 2 << 30
MAX_CSV_BYTES = 256 << 20
MAX_CLASSES = 65535
MAX_WIDTH = 65535
MAX_IDX_DIMS = 8


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
        for what, a in (("input", self.x), ("target", self.y)):
            if not 1 <= a.shape[1] <= MAX_WIDTH:
                raise DataError(
                    f"{self.name} has {a.shape[1]} {what} values per sample; a network takes 1 to "
                    f"{MAX_WIDTH} (choose the columns with --inputs / --targets)"
                )
        for what, a in (("inputs", self.x), ("targets", self.y)):
            if not np.isfinite(a).all():
                bad = int(np.argwhere(~np.isfinite(a))[0][0])
                raise DataError(f"{self.name}: {what} of sample {bad} contain NaN or inf")

    def __len__(self) -> int:
        return self.x.shape[0]

    def split(self, val_fraction: float, seed: int = 0) -> Tuple[Dataset, Optional[Dataset]]:
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
        return (
            Dataset(self.x[t], self.y[t], self.name + " (train)"),
            Dataset(self.x[v], self.y[v], self.name + " (validation)"),
        )

    @property
    def classification(self) -> bool:
        """True when every target row is one-hot."""
        return bool(np.all((self.y == 0) | (self.y == 1)) and np.all(self.y.sum(axis=1) == 1))


def one_hot(labels: np.ndarray, classes: Optional[int] = None, name: str = "labels") -> np.ndarray:
    """Integer labels (n,) -> one-hot float32 (n, classes); at most MAX_CLASSES classes."""
    lab = np.asarray(labels)
    if lab.dtype.kind not in "fiub":
        raise DataError(
            f"{name}: class labels must be numbers, not {lab.dtype} (e.g. text labels: map them to 0, 1, 2, ... first)"
        )
    if lab.size == 0:
        raise DataError(f"{name}: there are no labels")
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(lab) | (lab < 0) | (lab != np.round(lab)) | (lab >= MAX_CLASSES)
    if np.any(bad):
        i = int(np.argwhere(bad)[0][0])
        raise DataError(
            f"{name}: class labels must be whole numbers from 0 to {MAX_CLASSES - 1}; label {i} is {lab[i].item()!r}"
        )
    lab = lab.astype(np.int64)
    k = int(lab.max()) + 1 if classes is None else classes
    if lab.size and lab.max() >= k:
        raise DataError(f"{name}: label {int(lab.max())} does not fit {k} classes")
    out = np.zeros((lab.shape[0], k), np.float32)
    out[np.arange(lab.shape[0]), lab] = 1.0
    return out


def columns(spec: Union[None, str, Sequence[int]], header: List[str], n_cols: int, what: str) -> List[int]:
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
                c = int(part)  # negative numbers count from the end: -1 is the last
                if c < -n_cols:
                    raise DataError(
                        f"{what} column {c} does not exist: the file has {n_cols} columns (-{n_cols} to {n_cols - 1})"
                    )
                out.append(c + n_cols if c < 0 else c)
            else:
                raise DataError(f"{what} column {part!r} is neither a number, a range like 0-19, nor a header name")
        spec = out
    cols = list(spec)
    for c in cols:
        if not 0 <= c < n_cols:
            raise DataError(f"{what} column {c} does not exist: the file has {n_cols} columns (0-{n_cols - 1})")
    return cols


def csv_columns(
    header: List[str], n_cols: int, inputs: Union[None, str, Sequence[int]], targets: Union[None, str, Sequence[int]]
) -> Tuple[List[int], List[int]]:
    """(input columns, target columns) of a CSV table: the inputs default to every column that is not
    a target."""
    t_cols = columns(targets, header, n_cols, "target")
    i_cols = (
        columns(inputs, header, n_cols, "input")
        if inputs is not None
        else [c for c in range(n_cols) if c not in t_cols]
    )
    return i_cols, t_cols


def _decode_text(raw: bytes, p: Path) -> str:
    """UTF-8 text (a byte-order mark is dropped); DataError naming the line and column of a byte that is
    not UTF-8."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataError(
            f"{p}: line {line}, column {col}: byte 0x{raw[e.start]:02x} is not UTF-8 text; save the file as UTF-8"
        ) from None


def read_csv_table(path: Union[str, Path]) -> Tuple[List[str], np.ndarray]:
    """(header, numbers (n, columns) float64) of a CSV file: blank lines are skipped and a first row
    that is not all numbers is the header. DataError says what is wrong with a malformed file, with its
    line and column."""
    p = Path(path)
    text = _decode_text(read_bounded(p, MAX_CSV_BYTES, "CSV file", DataError), p)
    rows: List[Tuple[int, List[str]]] = []
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for r in reader:
            if r and any(c.strip() for c in r):
                rows.append((reader.line_num, r))
    except csv.Error as e:
        what = (
            f"a cell longer than {csv.field_size_limit():,} characters; is this a CSV file?"
            if "field limit" in str(e)
            else f"not readable as CSV ({e})"
        )
        raise DataError(f"{p}: line {reader.line_num}: {what}") from None
    if not rows:
        raise DataError(f"{p} is empty")
    header: List[str] = []
    try:
        [float(c) for c in rows[0][1]]
    except ValueError:
        header = [c.strip() for c in rows[0][1]]
        rows = rows[1:]
        if not rows:
            raise DataError(f"{p} has a header row but no samples") from None
    n_cols = len(rows[0][1])
    for line, r in rows:
        if len(r) != n_cols:
            raise DataError(
                f"{p}: line {line} has {len(r)} columns, line {rows[0][0]} has {n_cols}: "
                f"every sample needs the same columns"
            )
    try:
        data = np.array([[float(c) for c in r] for _, r in rows], np.float64).reshape(len(rows), n_cols)
    except ValueError:
        line, j, cell = next((line, j, c) for line, r in rows for j, c in enumerate(r) if not _is_number(c))
        raise DataError(f"{p}: line {line}, column {j}: {cell.strip()[:40]!r} is not a number") from None
    return header, data


def _is_number(text: str) -> bool:
    """Does float() read this CSV cell?"""
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_csv(
    path: Union[str, Path],
    inputs: Union[None, str, Sequence[int]] = None,
    targets: Union[None, str, Sequence[int]] = "-1",
    one_hot_classes: Optional[int] = None,
    classify: bool = False,
) -> Dataset:
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


def npz_array(path: Union[str, Path], key: str, z: Any = None) -> np.ndarray:
    """Array `key` of an NPZ file (z: the open file, if it is), with numbers in it. DataError for a file that
    is not a readable NPZ, a missing array, an array over MAX_DATA_BYTES unpacked, or one that does not
    hold numbers."""
    p = Path(path)
    if z is None:
        read_bounded(p, MAX_DATA_BYTES, "NPZ file", DataError)  # the checks only: np.load reads it
        with _open_npz(p) as zz:
            return npz_array(p, key, zz)
    if key not in z.files:
        raise DataError(f"{p} has no array {key!r}; it has {', '.join(z.files) or 'none'}")
    try:
        size = z.zip.getinfo(key + ".npy").file_size
    except KeyError:
        size = 0
    if size > MAX_DATA_BYTES:
        raise DataError(f"{p}: array {key!r} unpacks to {size:,} bytes; at most {MAX_DATA_BYTES:,}")
    try:
        a = _npy_member(p, key, z)
    except DataError:
        raise
    except (OSError, ValueError, EOFError, NotImplementedError, RuntimeError, zipfile.BadZipFile, zlib.error) as e:
        raise DataError(f"{p}: array {key!r} cannot be read ({e}); the file is damaged or not made by numpy") from None
    if a.dtype.kind not in "fiub":
        raise DataError(f"{p}: array {key!r} holds {a.dtype}, not numbers")
    return a


def _npy_member(p: Path, key: str, z: Any) -> np.ndarray:
    """Array `key` of an open NPZ file, read from the bytes actually in the archive: numpy would allocate what
    the .npy header declares before reading (a tiny archive can declare 37 GiB), so the header's shape is
    checked against the bytes the member unpacked to first."""
    name = key + ".npy" if key + ".npy" in z.zip.namelist() else key
    with z.zip.open(name) as f:
        raw = read_limited(f, MAX_DATA_BYTES)
    if len(raw) > MAX_DATA_BYTES:
        raise DataError(f"{p}: array {key!r} unpacks to more than {MAX_DATA_BYTES:,} bytes")
    buf = io.BytesIO(raw)
    version = np.lib.format.read_magic(buf)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(buf)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(buf)
    else:
        raise DataError(f"{p}: array {key!r} is in .npy format {version[0]}.{version[1]}; use np.savez")
    need = dtype.itemsize
    for d in shape:
        need *= d  # Python integers: no overflow
    have = len(raw) - buf.tell()
    if need > have:
        raise DataError(f"{p}: array {key!r} declares shape {shape} ({need:,} bytes) but holds {have:,} bytes")
    return np.lib.format.read_array(io.BytesIO(raw), allow_pickle=False)


def _open_npz(p: Path) -> Any:
    """np.load of an NPZ file without pickles; DataError when it is not one."""
    try:
        z = np.load(p, allow_pickle=False)
    except (OSError, ValueError, EOFError, NotImplementedError, RuntimeError, zipfile.BadZipFile, zlib.error) as e:
        raise DataError(f"cannot read {p} as NPZ ({e}): it is damaged or not an .npz file") from None
    if not hasattr(z, "files"):
        raise DataError(f"{p} is a single .npy array, not an .npz archive of named arrays (np.savez)")
    return z


def load_npz(path: Union[str, Path], x_key: str = "x", y_key: str = "y", classify: bool = False) -> Dataset:
    """Arrays x_key (n, n_in) and y_key (n, n_out), or integer labels (n,) with classify=True."""
    p = Path(path)
    read_bounded(p, MAX_DATA_BYTES, "NPZ file", DataError)
    with _open_npz(p) as z:
        x, y = npz_array(p, x_key, z), npz_array(p, y_key, z)
    if x.ndim < 1 or y.ndim < 1:
        raise DataError(f"{p}: {x_key!r} and {y_key!r} must be arrays of samples, not single numbers")
    if x.size == 0 or y.size == 0:
        raise DataError(f"{p}: {x_key!r} (shape {x.shape}) or {y_key!r} (shape {y.shape}) holds no values")
    x = x.reshape(x.shape[0], -1) if x.ndim != 2 else x
    if y.ndim == 1:
        y = one_hot(y, name=f"{p} {y_key}") if classify else y[:, None]
    elif y.ndim > 2:
        raise DataError(f"{p}: {y_key!r} has shape {y.shape}; targets are (n,) labels or (n, n_out) rows")
    return Dataset(x.astype(np.float32), y.astype(np.float32), p.name)


_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Union[str, Path]) -> np.ndarray:
    """An IDX array (MNIST's format; .gz is unpacked), 1 to MAX_IDX_DIMS dimensions."""
    p = Path(path)
    raw = read_bounded(p, MAX_DATA_BYTES, "IDX file", DataError)
    if p.suffix == ".gz":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as g:
                raw = read_limited(g, MAX_DATA_BYTES)  # no 2 GiB reserved for a small file
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{p} is not a complete gzip file ({e})") from None
        if len(raw) > MAX_DATA_BYTES:
            raise DataError(f"{p} unpacks to more than {MAX_DATA_BYTES:,} bytes")
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise DataError(f"{p} is not an IDX file (bad magic number)")
    nd = raw[3]
    if not 1 <= nd <= MAX_IDX_DIMS:
        raise DataError(f"{p} declares {nd} dimensions; IDX data here has 1 (labels) to {MAX_IDX_DIMS}")
    if len(raw) < 4 + 4 * nd:
        raise DataError(f"{p} is truncated (header)")
    dims = struct.unpack_from(f">{nd}I", raw, 4)
    dt = np.dtype(_IDX_TYPES[raw[2]])
    count = 1
    for d in dims:
        count *= d  # Python integers: no overflow before the comparison below
    need = count * dt.itemsize
    if len(raw) - 4 - 4 * nd < need:
        raise DataError(f"{p} is truncated: {len(raw) - 4 - 4 * nd} data bytes for shape {dims} need {need}")
    if count == 0:
        raise DataError(f"{p} holds no values (shape {dims})")
    return np.frombuffer(raw, dt, count, 4 + 4 * nd).reshape(dims)


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
