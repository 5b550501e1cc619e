"""Raw sensor data turned into network inputs by a feature pipeline (mcutrain.features), and the front end a
model file keeps: the pipeline plus a per-input normalisation y = (x - mean) * scale from the training data.

Raw data layouts:
  a folder with one subfolder of 16-bit WAV files per label (Speech Commands, Edge Impulse): the label is the
      subfolder's name, labels in sorted order;
  an NPZ with `x` (n, n_samples) or (n, n_samples, axes) raw windows and `y` integer labels (n,);
  a CSV with one window per row: n_samples * axes values (sample-major: s0a0, s0a1, ..., s1a0, ...) and the
      integer label in the last column.
An NPZ may also hold `labels`, the label names in index order (what `mcutrain collect` writes for motion windows).

A simulated board's sensor (`mcutrain serve --sensor`) plays back recorded windows: sensor_windows reads them
from a WAV, a folder of WAVs, an NPZ or a CSV; `mcutrain collect` stores captured windows with write_captured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from .datasets import Dataset, load_csv, npz_array, one_hot
from .errors import DataError, ModelFileError
from .features import FeatureSpec
from .wav import load_window, write_wav

MAX_FILES = 200_000  # WAV files in a data folder


@dataclass
class FrontEnd:
    """What turns a raw window into the network's input: a feature pipeline (None: the inputs are used as they
    are, e.g. tabular data) and a normalisation y = (x - mean) * scale per input (None: none)."""

    spec: Optional[FeatureSpec] = None
    mean: Optional[np.ndarray] = None
    scale: Optional[np.ndarray] = None
    labels: Optional[List[str]] = None  # class names, in output order

    @staticmethod
    def fit(spec: Optional[FeatureSpec], x: np.ndarray, labels: Optional[List[str]] = None) -> FrontEnd:
        """The normalisation of inputs x (n, width) from their statistics: mean 0, standard deviation 1 (an
        input that never changes gets scale 1)."""
        x64 = np.asarray(x, np.float64)
        std = x64.std(axis=0)
        scale = np.where(std > 1e-6, 1.0 / np.maximum(std, 1e-30), 1.0)
        return FrontEnd(spec, x64.mean(axis=0).astype(np.float32), scale.astype(np.float32), labels)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """(x - mean) * scale in float32, as the device computes it."""
        x = np.asarray(x, np.float32)
        if self.mean is None or self.scale is None:
            return x
        return ((x - self.mean) * self.scale).astype(np.float32)

    def inputs(self, raw: np.ndarray) -> np.ndarray:
        """Network inputs (n, width) of raw windows (a batch, or one window)."""
        if self.spec is None:
            return self.normalize(np.atleast_2d(raw))
        f = self.spec.compute(raw)
        f = f.reshape(-1, f.shape[-2] * f.shape[-1])
        return self.normalize(f)

    def to_dict(self) -> Dict[str, Any]:
        """Plain data for a model file's metadata."""
        return {
            "features": self.spec.to_dict() if self.spec else None,
            "mean": None if self.mean is None else [float(v) for v in self.mean],
            "scale": None if self.scale is None else [float(v) for v in self.scale],
            "labels": self.labels,
        }

    @staticmethod
    def from_dict(d: Any, width: Optional[int] = None) -> FrontEnd:
        """Inverse of to_dict; ModelFileError for a malformed entry (width: the network's input width)."""
        if not isinstance(d, dict):
            raise ModelFileError("metadata frontend is not a table")
        try:
            spec = FeatureSpec.from_dict(d["features"]) if d.get("features") else None
            mean = None if d.get("mean") is None else np.asarray(d["mean"], np.float32)
            scale = None if d.get("scale") is None else np.asarray(d["scale"], np.float32)
        except (TypeError, ValueError) as e:
            raise ModelFileError(f"metadata frontend is malformed: {e}") from None
        n = spec.sizes().n_out if spec else width
        for what, a in (("mean", mean), ("scale", scale)):
            if a is not None and (a.ndim != 1 or (n is not None and a.size != n)):
                raise ModelFileError(f"metadata frontend {what} has {a.size} values, the inputs are {n}")
        labels = d.get("labels")
        return FrontEnd(spec, mean, scale, list(labels) if labels else None)


def imported_frontend(
    metadata: Dict[str, Any], n_in: int, n_out: int, spec: FeatureSpec, labels: Optional[List[str]] = None
) -> Dict[str, Any]:
    """The metadata of an imported network whose inputs are the features of `spec`: its front end (the pipeline,
    the normalisation, the class names) in "frontend". A standardisation the import brought as an input step (a
    scikit-learn scaler) becomes the front end's normalisation, so the model has one. DataError when the pipeline
    makes another number of values than the network takes, or the labels do not name every output."""
    from .inputsteps import step_arrays
    from .modelmeta import input_steps

    made = spec.sizes().n_out
    if made != n_in:
        rows, per = spec.shape
        raise DataError(
            f"the feature pipeline {spec.text()} makes {made} values ({rows} x {per}), the network takes {n_in} "
            "inputs: give the pipeline the network was trained on"
        )
    if labels is not None and len(labels) != n_out:
        raise DataError(f"{len(labels)} labels for a network with {n_out} outputs: name each output once")
    out = dict(metadata)
    steps = input_steps(out, n_in)
    mean = scale = None
    if len(steps) > 1:
        raise DataError(
            f"the imported model scales its inputs in {len(steps)} steps; a feature pipeline takes one "
            "normalisation: fold the scalers into one"
        )
    if steps:
        mean, scale = step_arrays(steps[0])
        out.pop("input_steps")
    out["frontend"] = FrontEnd(spec, mean, scale, list(labels) if labels else None).to_dict()
    return out


def wav_folder(path: Union[str, Path], spec: FeatureSpec) -> Tuple[np.ndarray, np.ndarray, List[str]]:
    """(int16 windows (n, n_samples), integer labels (n,), label names) of a folder of label subfolders."""
    root = Path(path)
    subs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not subs:
        raise DataError(f"{root} has no subfolders: put the WAV files of each label in a subfolder named after it")
    windows, labels, names = [], [], []
    for sub in subs:
        files = sorted(sub.glob("*.wav")) + sorted(sub.glob("*.WAV"))
        if not files:
            raise DataError(f"{sub} has no .wav files: every label folder needs recordings")
        names.append(sub.name)
        for f in files:
            if len(windows) >= MAX_FILES:
                raise DataError(f"{root} has more than {MAX_FILES} WAV files")
            windows.append(load_window(f, spec))
            labels.append(len(names) - 1)
    if len(names) < 2:
        raise DataError(f"{root} has one label folder ({names[0]}); a classifier needs at least two")
    return np.stack(windows), np.asarray(labels), names


def raw_windows(path: Union[str, Path], spec: FeatureSpec) -> Tuple[np.ndarray, np.ndarray, List[str]]:
    """(raw windows, integer labels, label names) from a WAV folder, an NPZ or a CSV (layouts: the module doc)."""
    p = Path(path)
    if p.is_dir():
        return wav_folder(p, spec)
    if not p.exists():
        raise DataError(f"data {p} does not exist")
    shape = spec.window_shape
    if p.suffix.lower() == ".npz":
        x, y = npz_array(p, "x"), npz_array(p, "y")
        if x.ndim == 2 and len(shape) == 2 and shape[1] == 1:
            x = x[..., None]
        if x.shape[1:] != shape:
            raise DataError(f"{p}: windows of shape {x.shape[1:]}, the feature pipeline takes {shape}")
    elif p.suffix.lower() == ".csv":
        d = load_csv(p, inputs=None, targets="-1")
        x, y = d.x, d.y[:, 0]
        if x.shape[1] != int(np.prod(shape)):
            raise DataError(
                f"{p}: {x.shape[1]} values per row before the label, a window of the feature pipeline has "
                f"{int(np.prod(shape))} ({' x '.join(map(str, shape))})"
            )
        x = x.reshape(-1, *shape)
    else:
        raise DataError(f"{p}: raw windows come as a folder of WAV label folders, an .npz or a .csv")
    if y.ndim != 1 or y.shape[0] != x.shape[0] or not np.all(np.equal(np.mod(y, 1), 0)) or np.any(y < 0):
        raise DataError(f"{p}: labels must be one non-negative integer per window")
    y = y.astype(np.int64)
    names = [str(i) for i in range(int(y.max()) + 1)]
    if p.suffix.lower() == ".npz" and _npz_has(p, "labels"):
        named = [str(v) for v in npz_array(p, "labels", text_ok=True).ravel()]
        if len(named) <= int(y.max()):
            raise DataError(f"{p}: {len(named)} label names in `labels`, but a label index goes up to {int(y.max())}")
        names = named
    return x, y, names


def _npz_has(path: Path, key: str) -> bool:
    """Does the NPZ file hold an array `key`?"""
    with np.load(path, allow_pickle=False) as z:
        return key in z.files


SENSOR_MAX_WINDOWS = 100_000  # windows a simulated sensor plays back


def sensor_windows(path: Union[str, Path], spec: FeatureSpec) -> np.ndarray:
    """The raw windows a simulated sensor plays back, in order, as the device holds them (spec.raw_dtype): from a
    WAV file (one window), a folder of WAVs (every .wav below it, in path order), an NPZ (`x`) or a CSV (one window
    per row, the label last, as `train --features` reads it)."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"sensor recording {p} does not exist")
    if p.is_dir() or p.suffix.lower() == ".wav":
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.suffix.lower() == ".wav" and f.is_file())
        if not files:
            raise DataError(f"{p} has no .wav files for the sensor to play back")
        if len(files) > SENSOR_MAX_WINDOWS:
            raise DataError(f"{p} has more than {SENSOR_MAX_WINDOWS} WAV files")
        x = np.stack([load_window(f, spec) for f in files])
    else:
        x, _, _ = raw_windows(p, spec)
        if len(x) > SENSOR_MAX_WINDOWS:
            raise DataError(f"{p} has {len(x)} windows, more than the {SENSOR_MAX_WINDOWS} a sensor plays back")
    if spec.raw_dtype == np.int16 and x.dtype != np.int16:
        raise DataError(f"{p}: an audio pipeline's sensor plays back 16-bit samples; give WAV files")
    return np.ascontiguousarray(x, spec.raw_dtype.newbyteorder("<"))


def check_label(label: str) -> None:
    """DataError for a label that cannot name a label folder (empty, a path, hidden)."""
    if not label or label in (".", "..") or "/" in label or "\\" in label or label.startswith("."):
        raise DataError(f"label {label!r} cannot name a folder: use letters, digits, '-' or '_'")


def write_captured(folder: Union[str, Path], label: str, windows: np.ndarray, spec: FeatureSpec) -> List[Path]:
    """Add captured raw windows of one label to a dataset folder in the layout `train --features` reads: audio as
    folder/label/NNNN.wav (numbered after the files there), motion windows into folder/windows.npz (x, y, and the
    label names in `labels`; a new label gets the next index). Returns the files written."""
    root = Path(folder)
    check_label(label)
    w = np.asarray(windows)
    if w.shape[1:] != spec.window_shape:
        raise DataError(f"captured windows of shape {w.shape[1:]}, the feature pipeline takes {spec.window_shape}")
    if spec.kind != "motion":
        sub = root / label
        sub.mkdir(parents=True, exist_ok=True)
        taken = [int(f.stem) for f in sub.glob("*.wav") if f.stem.isdigit()]
        first = max(taken) + 1 if taken else 0
        out = []
        for k, one in enumerate(w):
            f = sub / f"{first + k:04d}.wav"
            write_wav(f, int(round(spec.sample_rate)), np.asarray(one, np.int16))
            out.append(f)
        return out
    root.mkdir(parents=True, exist_ok=True)
    f = root / "windows.npz"
    if f.exists():
        x, y, names = raw_windows(f, spec)
    else:
        x, y, names = np.zeros((0, *spec.window_shape), np.float32), np.zeros(0, np.int64), []
    if label not in names:
        names.append(label)
    y_new = np.full(len(w), names.index(label), np.int64)
    tmp = root / "windows.tmp.npz"
    np.savez(tmp, x=np.concatenate([x.astype(np.float32), w.astype(np.float32)]), y=np.concatenate([y, y_new]),
             labels=np.asarray(names))  # fmt: skip
    tmp.replace(f)
    return [f]


def load_feature_dataset(
    path: Union[str, Path], spec: FeatureSpec, frontend: Optional[FrontEnd] = None
) -> Tuple[Dataset, FrontEnd]:
    """The dataset of a raw-data source: normalised features (n, n_out) and one-hot labels, and its front end
    (fitted to these data, or the given one: a model's, for evaluation)."""
    x, y, names = raw_windows(path, spec)
    f = spec.compute(x)
    f = f.reshape(f.shape[0], -1)
    fe = FrontEnd.fit(spec, f, names) if frontend is None else frontend
    if frontend is not None and frontend.labels and len(frontend.labels) != len(names):
        raise DataError(f"{path} has {len(names)} labels, the model was trained on {len(frontend.labels)}")
    return Dataset(fe.normalize(f), one_hot(y, len(names)), name=str(path)), fe


__all__ = [
    "FrontEnd",
    "wav_folder",
    "raw_windows",
    "load_feature_dataset",
    "imported_frontend",
    "sensor_windows",
    "write_captured",
    "check_label",
    "MAX_FILES",
    "SENSOR_MAX_WINDOWS",
]
