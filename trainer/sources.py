"""Where training samples come from: a data file (CSV, NPZ, IDX) or a built-in problem.

Every batch is a pure function of (seed, batch index): a problem draws batch i from a generator
seeded with (seed, i); a file is shuffled once per epoch by fit's own generator
(mcutrain.shuffle_order(n, seed, epoch)). So a resumed run only needs the source, the seed, the batch
size and how many batches were used to continue with exactly the batches an uninterrupted run would
have seen. `Source.chunk` hands a run of batches to Module.fit in one piece.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import datasets, problems
from .checks import settings_from_dict
from .datasets import Dataset
from .errors import DataError, ModelFileError
from .fitloop import shuffle_order

Batch = Tuple[np.ndarray, np.ndarray]

# seed streams, so that training batches, the validation set and evaluation samples never overlap
_TRAIN, _VALID, _EVAL = 1, 2, 3
PROBLEM_VAL_SAMPLES = 512


@dataclass
class DataSettings:
    """A data source as plain data (stored in the model file so that --resume and eval find it again)."""

    problem: Optional[str] = None
    path: Optional[str] = None
    inputs: Optional[str] = None
    targets: Optional[str] = None
    labels: Optional[str] = None
    x_key: str = "x"
    y_key: str = "y"
    classify: bool = False
    features: Optional[str] = None  # a feature pipeline (mcutrain.features spec text): the data are raw windows

    def to_dict(self) -> Dict[str, Any]:
        """Plain data for the model file's metadata."""
        return asdict(self)

    @staticmethod
    def from_dict(d: Any, where: str = "metadata train.data") -> DataSettings:
        """Inverse of to_dict (unknown keys are ignored); ModelFileError naming a field of the wrong type."""
        return settings_from_dict(DataSettings, d, where, ModelFileError)

    @property
    def given(self) -> bool:
        """Is there a source at all?"""
        return bool(self.problem or self.path)

    def describe(self) -> str:
        """'problem modadd10' or the file name."""
        return f"problem {self.problem}" if self.problem else f"{self.path}"

    def fingerprint(self) -> Optional[int]:
        """CRC-32 of the data file(s), to notice that the data changed under a resumed run."""
        if not self.path:
            return None
        crc = 0
        for p in (self.path, self.labels):
            if p and Path(p).is_file():
                crc = zlib.crc32(Path(p).read_bytes(), crc)
        return crc


def file_format(path: str) -> str:
    """'csv', 'npz' or 'idx' from the file name."""
    p = Path(path)
    suffixes = "".join(p.suffixes).lower()
    if suffixes.endswith(".csv"):
        return "csv"
    if suffixes.endswith(".npz"):
        return "npz"
    if "idx" in suffixes or "ubyte" in p.name:
        return "idx"
    raise DataError(f"don't know how to read {p}: use a .csv, .npz or IDX (MNIST-style) file")


def load_dataset(spec: DataSettings, classes: Optional[List[str]] = None) -> Dataset:
    """Read the file a DataSettings names, with the options that fit its format. classes: the class names text
    labels map to (a model's; default: the labels' own, sorted)."""
    assert spec.path is not None
    if spec.features:
        return load_feature_data(spec)[0]
    if Path(spec.path).is_dir():
        raise DataError(
            f"{spec.path} is a folder: a folder of WAV label folders is raw audio, give its --features "
            "(e.g. --features kws)"
        )
    fmt = file_format(spec.path)
    wrong = {
        "csv": [("--labels", spec.labels), ("--x-key", spec.x_key != "x"), ("--y-key", spec.y_key != "y")],
        "npz": [("--labels", spec.labels), ("--inputs", spec.inputs), ("--targets", spec.targets)],
        "idx": [
            ("--inputs", spec.inputs),
            ("--targets", spec.targets),
            ("--x-key", spec.x_key != "x"),
            ("--y-key", spec.y_key != "y"),
        ],
    }[fmt]
    for opt, used in wrong:
        if used:
            raise DataError(f"{opt} does not apply to {fmt.upper()} files like {spec.path}")
    if not Path(spec.path).exists():
        raise DataError(f"data file {spec.path} does not exist")
    if fmt == "csv":
        return datasets.load_csv(
            spec.path, inputs=spec.inputs, targets=spec.targets or "-1", classify=spec.classify, classes=classes
        )
    if fmt == "npz":
        return datasets.load_npz(spec.path, spec.x_key, spec.y_key, classify=spec.classify, classes=classes)
    if not spec.labels:
        raise DataError(f"{spec.path} holds IDX images: give the labels file with --labels")
    return datasets.load_idx(spec.path, spec.labels)


def load_feature_data(spec: DataSettings, frontend: Any = None) -> Tuple[Dataset, Any]:
    """(normalised features dataset, its mcutrain.featdata.FrontEnd) of raw windows and a --features spec; with a
    model's frontend, its normalisation instead of one fitted to these data."""
    from .featdata import load_feature_dataset
    from .features import FeatureSpec

    for opt, used in (("--inputs", spec.inputs), ("--targets", spec.targets), ("--labels", spec.labels)):
        if used:
            raise DataError(f"{opt} does not apply to raw windows with --features")
    assert spec.path is not None and spec.features is not None
    return load_feature_dataset(spec.path, FeatureSpec.parse(spec.features), frontend)


class Source:
    """Samples for training (batch i), validation and evaluation."""

    name: str
    n_in: int
    n_out: int
    classification: bool

    def batch(self, index: int, size: int) -> Batch:
        """Training batch number `index` (a pure function of the seed and the index)."""
        raise NotImplementedError

    def chunk(self, start: int, count: int, size: int) -> Tuple[np.ndarray, np.ndarray, Optional[int], int]:
        """Batches start .. start + count - 1 for Module.fit: (x, y, shuffle, first) such that
        fit(x, y, batch=size, shuffle=shuffle, start=first, steps=first + count, epochs=enough) trains on
        exactly the batches batch(start), ..., batch(start + count - 1). By default the batches themselves,
        one after another, unshuffled."""
        parts = [self.batch(i, size) for i in range(start, start + count)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), None, 0

    def validation(self) -> Optional[Batch]:
        """The held-out samples checked while training (None: none)."""
        raise NotImplementedError

    def evaluation(self, n: int) -> Batch:
        """Samples for `mcutrain eval` (n only matters for problems)."""
        raise NotImplementedError

    def batches_per_epoch(self, size: int) -> Optional[int]:
        """Batches in one pass over the data (None for endless problems)."""
        return None


class ProblemSource(Source):
    """A built-in problem: endless fresh samples."""

    def __init__(self, name: str, seed: int) -> None:
        try:
            self.problem = problems.by_name(name, seed)
        except ValueError as e:
            raise DataError(str(e)) from None
        self.seed = seed
        self.name = self.problem.name
        self.n_in, self.n_out = self.problem.n_in, self.problem.n_out
        self.classification = bool(self.problem.classification)

    def _draw(self, stream: Tuple[int, ...], n: int) -> Batch:
        self.problem.rng = np.random.default_rng([self.seed, *stream])
        return self.problem.sample_batch(n)

    def batch(self, index: int, size: int) -> Batch:
        return self._draw((_TRAIN, index), size)

    def validation(self) -> Optional[Batch]:
        return self._draw((_VALID,), PROBLEM_VAL_SAMPLES)

    def evaluation(self, n: int) -> Batch:
        return self._draw((_EVAL,), n)


class FileSource(Source):
    """A data file, split into training and validation parts, shuffled every epoch."""

    def __init__(
        self,
        data: Dataset,
        val: float,
        seed: int,
        classify: bool = False,
        spec: Optional[DataSettings] = None,
        frontend: Any = None,
    ) -> None:
        self.frontend = frontend  # mcutrain.featdata.FrontEnd of raw data with --features, else None
        self.full = data
        self.classify = classify  # the targets were class labels made one-hot
        self.classes = data.classes  # their names, for text labels
        self.spec = spec
        self.train, self.val = data.split(val, seed)
        self.train_rows, self.val_rows = datasets.split_indices(len(data), val, seed) if val else (None, None)
        self._x = np.ascontiguousarray(self.train.x, np.float32)  # what fit takes without a copy
        self._y = np.ascontiguousarray(self.train.y, np.float32)
        self.seed = seed
        self.name = data.name
        self.n_in, self.n_out = data.x.shape[1], data.y.shape[1]
        self.classification = data.classification
        self._epoch = -1
        self._order = np.zeros(0, np.uint32)

    def batches_per_epoch(self, size: int) -> int:
        return -(-len(self.train) // size)

    @property
    def fingerprint(self) -> Optional[int]:
        """CRC-32 of the data file(s) (DataSettings.fingerprint), None when the source was not opened from one."""
        return self.spec.fingerprint() if self.spec is not None else None

    def batch(self, index: int, size: int) -> Batch:
        epoch, j = divmod(index, self.batches_per_epoch(size))
        if epoch != self._epoch:
            self._order = shuffle_order(len(self.train), self.seed, epoch)
            self._epoch = epoch
        idx = self._order[j * size : (j + 1) * size]
        return self._x[idx], self._y[idx]

    def chunk(self, start: int, count: int, size: int) -> Tuple[np.ndarray, np.ndarray, Optional[int], int]:
        """The whole training part, shuffled by fit itself (epoch by epoch, as batch() does)."""
        return self._x, self._y, self.seed, start

    def validation(self) -> Optional[Batch]:
        return None if self.val is None else (self.val.x, self.val.y)

    def evaluation(self, n: int) -> Batch:
        return self.full.x, self.full.y


def open_source(
    spec: DataSettings, seed: int, val: float = 0.0, classes: Optional[List[str]] = None, frontend: Any = None
) -> Source:
    """The Source a DataSettings names (classes: the names text labels map to, a model's; frontend: a model's
    mcutrain.featdata.FrontEnd for raw windows)."""
    if spec.problem and spec.path:
        raise DataError("give either --data or --problem, not both")
    if spec.problem:
        return ProblemSource(spec.problem, seed)
    if spec.path and spec.features:
        data, frontend = load_feature_data(spec, frontend)
        return FileSource(data, val, seed, True, spec, frontend)
    if spec.path:
        return FileSource(load_dataset(spec, classes), val, seed, spec.classify, spec)
    raise DataError("say where the samples come from: --data FILE or --problem NAME (e.g. --problem modadd10)")


def stream_rows(
    n_rows: int, count: Optional[int], shuffle: bool, seed: int, rows: Optional[np.ndarray] = None
) -> np.ndarray:
    """The file rows `mcutrain device train` sends, in order: `rows` (default: all n_rows) in file order, or
    in a seeded random order (shuffle), pass after pass up to count samples (default: each row once)."""
    allowed = np.arange(n_rows) if rows is None else np.sort(np.asarray(rows, np.int64))
    if allowed.size == 0:
        raise DataError("there are no rows to send")
    count = count or allowed.size
    passes = -(-count // allowed.size)
    rng = np.random.default_rng(seed)
    order = np.concatenate([allowed[rng.permutation(allowed.size)] if shuffle else allowed for _ in range(passes)])
    return order[:count]


def device_rows(record: Dict[str, Any], n_rows: int) -> np.ndarray:
    """The distinct rows of a data file that a `device train` record (mcutrain.modelmeta.device_trained_on) says
    were sent to the device."""
    held = record.get("held_out")
    rows = datasets.split_indices(n_rows, float(held["val"]), int(held["seed"]))[0] if held else None
    sent = stream_rows(n_rows, int(record["count"]), bool(record.get("shuffle")), int(record.get("seed", 0)), rows)
    return np.unique(sent)


def check_widths(
    n_in: int, n_out: int, source: Source, what: str = "the network", advice: Optional[str] = None
) -> None:
    """DataError (one sentence) when the data's widths do not match a model's. advice replaces the
    default remedy (changing the network's first or last layer), e.g. for a model that is fixed."""
    from_file = isinstance(source, FileSource)
    if source.n_in != n_in:
        raise DataError(
            f"{what} takes {n_in} inputs but {source.name} has {source.n_in} per sample: "
            + (advice or f"make the first layer take {source.n_in} inputs")
            + (" or choose other input columns (--inputs)" if from_file else "")
        )
    if source.n_out != n_out:
        raise DataError(
            f"{what} outputs {n_out} values but {source.name} has {source.n_out} targets per sample: "
            + (advice or f"make the last layer output {source.n_out}")
            + (" (for class labels, add --classify)" if from_file and not getattr(source, "classify", False) else "")
        )


def metrics(outputs: np.ndarray, targets: np.ndarray, loss: Any, classification: bool) -> Dict[str, float]:
    """Mean loss, and accuracy (argmax) for classifiers."""
    out: Dict[str, float] = {"loss": float(loss(outputs, targets)[0])}
    if classification:
        out["accuracy"] = float(np.mean(outputs.argmax(axis=1) == targets.argmax(axis=1)))
    return out


def load_inputs(
    path: str, n_in: int, inputs: Optional[str] = None, x_key: str = "x", layout: Optional[DataSettings] = None
) -> np.ndarray:
    """Network inputs only (no targets), e.g. to predict or to calibrate: a CSV (all columns, or the
    --inputs columns), an NPZ array x_key, or IDX images. The width must be n_in.

    layout: the data spec of a model's training data, for files laid out like it (calibration inputs):
    a CSV that does not have exactly n_in columns gives the columns the training data took as inputs
    (its inputs, else all but its targets, by default the last column), and an NPZ its x_key."""
    fmt = file_format(path)
    if not Path(path).exists():
        raise DataError(f"data file {path} does not exist")
    if fmt == "npz":
        keys = ([layout.x_key] if layout is not None else []) + [x_key]
        last: Optional[DataError] = None
        for key in keys:
            try:
                x = datasets.npz_array(path, key)
                break
            except DataError as e:
                last = e
        else:
            assert last is not None
            raise last
        if x.ndim < 1:
            raise DataError(f"{path}: array {key!r} is a single number, not samples")
        x = x.reshape(x.shape[0], -1)
    elif fmt == "idx":
        x = datasets.idx_images(path)
    else:
        header, x = datasets.read_csv_table(path)
        if inputs is not None:
            x = x[:, datasets.columns(inputs, header, x.shape[1], "input")]
        elif layout is not None and x.shape[1] != n_in:
            x = x[:, datasets.csv_columns(header, x.shape[1], layout.inputs, layout.targets or "-1")[0]]
    if x.ndim != 2 or x.shape[1] != n_in:
        cols = x.shape[1] if x.ndim == 2 else 0
        hint = ""
        if fmt == "csv" and layout is None:
            hint = f" (pick the columns with --inputs, e.g. --inputs 0-{n_in - 1})"
        elif fmt == "csv":
            hint = f" (give {n_in} columns, or the columns of the training data: its inputs and its target column(s))"
        raise DataError(f"{path} has {cols} input values per sample, the model takes {n_in}{hint}")
    if not np.all(np.isfinite(x)):
        raise DataError(f"{path} has NaN or infinite inputs")
    return np.ascontiguousarray(x, np.float32)
