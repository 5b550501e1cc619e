"""Raw sensor data turned into network inputs by a feature pipeline (mcutrain.features), and the front end a
model file keeps: the pipeline plus a per-input normalisation y = (x - mean) * scale from the training data.

Raw data layouts:
  a folder with one subfolder of 16-bit WAV files per label (Speech Commands, Edge Impulse): the label is the
      subfolder's name, labels in sorted order;
  an NPZ with `x` (n, n_samples) or (n, n_samples, axes) raw windows and `y` integer labels (n,);
  a CSV with one window per row: n_samples * axes values (sample-major: s0a0, s0a1, ..., s1a0, ...) and the
      integer label in the last column.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from .datasets import Dataset, load_csv, npz_array, one_hot
from .errors import DataError, ModelFileError
from .features import FeatureSpec
from .wav import load_window

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
    return x, y, [str(i) for i in range(int(y.max()) + 1)]


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


__all__ = ["FrontEnd", "wav_folder", "raw_windows", "load_feature_dataset", "MAX_FILES"]
