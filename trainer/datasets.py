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
    classes: Optional[List[str]] = None  # class names of one-hot targets made from text labels
    input_names: Optional[List[str]] = None  # the inputs' column names (a CSV header)

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
        if int(round(len(self) * val_fraction)) >= len(self):
            raise DataError(f"{self.name}: {len(self)} samples are too few for a {val_fraction:.0%} validation split")
        t, v = split_indices(len(self), val_fraction, seed)
        if v.size == 0:
            return self, None
        return (
            Dataset(self.x[t], self.y[t], self.name + " (train)", self.classes),
            Dataset(self.x[v], self.y[v], self.name + " (validation)", self.classes),
        )

    @property
    def classification(self) -> bool:
        """True when every target row is one-hot."""
        return bool(np.all((self.y == 0) | (self.y == 1)) and np.all(self.y.sum(axis=1) == 1))


def split_indices(n: int, val_fraction: float, seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """(training rows, held-out rows) of n samples, as Dataset.split takes them: a seeded permutation, the
    first round(n * val_fraction) rows held out."""
    n_val = min(int(round(n * val_fraction)), n)
    if n_val == 0:
        return np.arange(n), np.zeros(0, np.int64)
    order = np.random.default_rng(seed).permutation(n)
    return order[n_val:], order[:n_val]


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


CSV_DELIMITERS = (",", ";", "\t", "|")


def _sniff_delimiter(text: str) -> str:
    """The delimiter of a CSV text: of , ; tab and |, the one that splits the first lines into the same number
    of columns, more than one (the most columns wins; a comma when none does)."""
    lines = [ln for ln in text.splitlines()[:50] if ln.strip()][:20]
    best, best_cols = ",", 1
    for d in CSV_DELIMITERS:
        try:
            counts = {len(r) for r in csv.reader(lines, delimiter=d)}
        except csv.Error:
            continue
        if len(counts) == 1 and (n := counts.pop()) > best_cols:
            best, best_cols = d, n
    return best


def _cell_number(cell: str, decimal_comma: bool) -> Optional[float]:
    """The number in a CSV cell (a decimal comma allowed where the delimiter is not a comma), or None."""
    try:
        return float(cell)
    except ValueError:
        pass
    if decimal_comma and cell.count(",") == 1 and "." not in cell:
        try:
            return float(cell.replace(",", "."))
        except ValueError:
            return None
    return None


@dataclass
class CsvTable:
    """A CSV file's cells: the header (names, or [] without one), the rows as text with their line numbers."""

    path: Path
    header: List[str]
    rows: List[Tuple[int, List[str]]]
    delimiter: str

    @property
    def n_cols(self) -> int:
        return len(self.rows[0][1])

    def column_name(self, j: int) -> str:
        """'column 3 (alcohol)': column j (from 0) counted from 1 as editors do, with its header name."""
        name = f" ({self.header[j]})" if j < len(self.header) and self.header[j] else ""
        return f"column {j + 1}{name}"

    def numbers(self, cols: Sequence[int]) -> np.ndarray:
        """The columns as float64 (n, len(cols)); DataError naming the line and column of a cell that is not a
        number."""
        comma = self.delimiter != ","
        out = np.empty((len(self.rows), len(cols)), np.float64)
        for i, (line, r) in enumerate(self.rows):
            for k, j in enumerate(cols):
                v = _cell_number(r[j], comma)
                if v is None:
                    raise DataError(
                        f"{self.path}: line {line}, {self.column_name(j)}: {r[j].strip()[:40]!r} is not a number"
                        + self._delimiter_hint()
                    )
                out[i, k] = v
        return out

    def texts(self, j: int) -> List[str]:
        """Column j as stripped text."""
        return [r[j].strip() for _, r in self.rows]

    def is_numeric(self, j: int) -> bool:
        """Is every cell of column j a number?"""
        comma = self.delimiter != ","
        return all(_cell_number(r[j], comma) is not None for _, r in self.rows)

    def _delimiter_hint(self) -> str:
        if self.n_cols == 1:
            return " (the file has one column: are its values separated by something other than , ; tab or |?)"
        return ""


def read_csv_cells(path: Union[str, Path]) -> CsvTable:
    """The cells of a CSV file: the delimiter (, ; tab or |) is detected, blank lines are skipped, and a first row
    with text where the next row has numbers (or with nothing but text) is the header. DataError says what is
    wrong with a malformed file, with its line. (A file of one row is all header when it holds only text.)"""
    p = Path(path)
    text = _decode_text(read_bounded(p, MAX_CSV_BYTES, "CSV file", DataError), p)
    delimiter = _sniff_delimiter(text)
    rows: List[Tuple[int, List[str]]] = []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
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
    comma = delimiter != ","
    first = [_cell_number(c, comma) is None for c in rows[0][1]]
    if any(first):
        second = [_cell_number(c, comma) is None for c in rows[1][1]] if len(rows) > 1 else None
        if all(first) or (second is not None and any(a and not b for a, b in zip(first, second))):
            header = [c.strip() for c in rows[0][1]]
            rows = rows[1:]
            if not rows:
                raise DataError(f"{p} has a header row but no samples")
    n_cols = len(rows[0][1])
    for line, r in rows:
        if len(r) != n_cols:
            raise DataError(
                f"{p}: line {line} has {len(r)} columns, line {rows[0][0]} has {n_cols}: "
                f"every sample needs the same columns"
            )
    return CsvTable(p, header, rows, delimiter)


def read_csv_table(path: Union[str, Path]) -> Tuple[List[str], np.ndarray]:
    """(header, numbers (n, columns) float64) of a CSV file (see read_csv_cells); DataError naming the line and
    the column (counted from 1, with its header name) of a cell that is not a number."""
    t = read_csv_cells(path)
    return t.header, t.numbers(range(t.n_cols))


def _is_number(text: str) -> bool:
    """Does float() read this CSV cell?"""
    try:
        float(text)
    except ValueError:
        return False
    return True


def class_labels(labels: Sequence[str], classes: Optional[List[str]], name: str) -> Tuple[np.ndarray, List[str]]:
    """(integer labels, class names) of text labels: the names sorted (numbers by value), or the given classes
    (a model's), in which case a label that is not one of them is a DataError."""
    if classes is None:
        distinct = set(labels)
        try:
            classes = sorted(distinct, key=float)
        except ValueError:
            classes = sorted(distinct)
        if len(classes) > MAX_CLASSES:
            raise DataError(f"{name}: {len(classes):,} different labels; at most {MAX_CLASSES} classes")
    index = {c: i for i, c in enumerate(classes)}
    out = np.empty(len(labels), np.int64)
    for i, lab in enumerate(labels):
        k = index.get(lab)
        if k is None:
            shown = ", ".join(classes[:10]) + (", ..." if len(classes) > 10 else "")
            raise DataError(f"{name}: label {lab!r} (sample {i + 1}) is not one of the model's classes: {shown}")
        out[i] = k
    return out, list(classes)


def load_csv(
    path: Union[str, Path],
    inputs: Union[None, str, Sequence[int]] = None,
    targets: Union[None, str, Sequence[int]] = "-1",
    one_hot_classes: Optional[int] = None,
    classify: bool = False,
    classes: Optional[List[str]] = None,
) -> Dataset:
    """Numbers from a CSV file (the delimiter and a header row are detected). By default the last column is the
    target; inputs default to all other columns. classify=True turns a label column into one-hot targets: integer
    labels are class numbers, text labels ('barolo') class names (sorted, or the given classes: a model's)."""
    p = Path(path)
    t = read_csv_cells(p)
    header, n_cols = t.header, t.n_cols
    i_cols, t_cols = csv_columns(header, n_cols, inputs, targets)
    names: Optional[List[str]] = None
    if classify or one_hot_classes:
        if len(t_cols) != 1:
            raise DataError("one-hot targets need exactly one label column")
        j = t_cols[0]
        if classes is not None or not t.is_numeric(j):
            labels, names = class_labels(t.texts(j), classes, f"{p} {t.column_name(j)}")
            y = one_hot(labels, len(names), f"{p} labels")
        else:
            y = one_hot(t.numbers([j])[:, 0], one_hot_classes, f"{p} labels")
    else:
        for j in t_cols:
            cells = t.texts(j)
            if not any(_is_number(c) for c in cells):
                raise DataError(
                    f"{p}: the target {t.column_name(j)} holds text such as {cells[0][:40]!r}: if these are "
                    "class labels, add --classify"
                )
        y = t.numbers(t_cols)
    x = t.numbers(i_cols).astype(np.float32)
    input_names = [header[j] if j < len(header) else "" for j in i_cols] if header else None  # header may be short
    return Dataset(x, y.astype(np.float32), p.name, names, input_names)


def npz_array(path: Union[str, Path], key: str, z: Any = None, text_ok: bool = False) -> np.ndarray:
    """Array `key` of an NPZ file (z: the open file, if it is), with numbers in it. DataError for a file that
    is not a readable NPZ, a missing array, an array over MAX_DATA_BYTES unpacked, or one that does not
    hold numbers."""
    p = Path(path)
    if z is None:
        read_bounded(p, MAX_DATA_BYTES, "NPZ file", DataError)  # the checks only: np.load reads it
        with _open_npz(p) as zz:
            return npz_array(p, key, zz, text_ok)
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
    if a.dtype.kind not in "fiub" and not (text_ok and a.dtype.kind in "US"):
        hint = ": if these are class labels, add --classify" if a.dtype.kind in "US" else ""
        raise DataError(f"{p}: array {key!r} holds {a.dtype}, not numbers{hint}")
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


def load_npz(
    path: Union[str, Path],
    x_key: str = "x",
    y_key: str = "y",
    classify: bool = False,
    classes: Optional[List[str]] = None,
) -> Dataset:
    """Arrays x_key (n, n_in) and y_key (n, n_out), or labels (n,) with classify=True: integer class numbers,
    or text (class names, sorted, or the given classes: a model's)."""
    p = Path(path)
    read_bounded(p, MAX_DATA_BYTES, "NPZ file", DataError)
    with _open_npz(p) as z:
        x = npz_array(p, x_key, z)
        y = npz_array(p, y_key, z, text_ok=classify)
    names: Optional[List[str]] = None
    if classify and (y.dtype.kind in "US" or classes is not None):
        if y.ndim != 1:
            raise DataError(f"{p}: class labels {y_key!r} must be one per sample, shape (n,), not {y.shape}")
        texts = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in y.tolist()]
        labels, names = class_labels([t.strip() for t in texts], classes, f"{p} {y_key}")
        y = labels
    if x.ndim < 1 or y.ndim < 1:
        raise DataError(f"{p}: {x_key!r} and {y_key!r} must be arrays of samples, not single numbers")
    if x.size == 0 or y.size == 0:
        raise DataError(f"{p}: {x_key!r} (shape {x.shape}) or {y_key!r} (shape {y.shape}) holds no values")
    x = x.reshape(x.shape[0], -1) if x.ndim != 2 else x
    if y.ndim == 1:
        y = one_hot(y, len(names) if names else None, name=f"{p} {y_key}") if classify else y[:, None]
    elif y.ndim > 2:
        raise DataError(f"{p}: {y_key!r} has shape {y.shape}; targets are (n,) labels or (n, n_out) rows")
    return Dataset(x.astype(np.float32), y.astype(np.float32), p.name, names)


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
