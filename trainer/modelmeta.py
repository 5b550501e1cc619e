"""What a model file's metadata remembers besides its run ("train") and loss: the names of its classes, the
steps its inputs go through before the network (standardisation), and, for a model pulled from a device, the
export it came from and what the device trained on.

METADATA_FIELDS is the one list of these fields with their types (a model-file schema takes them from here);
the readers below check what they read and raise ModelFileError naming the field.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

from .errors import ModelFileError

# field (dotted path in the metadata) -> (JSON type, what it holds). Added by issue 26.
METADATA_FIELDS: Dict[str, tuple] = {
    "classes": ("list[str]", "class names in the order of the network's outputs (string labels of the data)"),
    "input_steps": ("list[object]", "steps that turn raw inputs into the network's inputs, in order"),
    "input_steps[].kind": ("str", "'standardize': x' = (x - mean) * scale, in float32"),
    "input_steps[].mean": ("list[float]", "one value per input"),
    "input_steps[].scale": ("list[float]", "one value per input (1 / the standard deviation)"),
    "input_steps[].source": ("str", "where the statistics came from: 'training data' or the imported scaler"),
    "device.quant": ("str", "the --quant of the export a pulled model came from"),
    "device.trainable": ("str", "the --trainable of that export"),
    "device.optimizer": ("str", "the optimizer kind the device trained with"),
    "device.save": ("str", "what a device save keeps: params or all"),
    "device.loss": ("str", "the loss the device trained with"),
    "device.trained_on": ("list[object]", "the data `device train --project` sent (see device_rows)"),
}

MAX_CLASSES = 65535
MAX_CLASS_NAME = 200


def _fail(field: str, what: str, value: Any) -> ModelFileError:
    text = repr(value)
    return ModelFileError(f"metadata {field} {what}, got {text if len(text) <= 60 else text[:57] + '...'}")


def class_names(metadata: Dict[str, Any]) -> Optional[List[str]]:
    """The model's class names (None when its classes are numbered); ModelFileError for a malformed list."""
    names = metadata.get("classes")
    if names is None:
        return None
    if (
        not isinstance(names, list)
        or not 1 <= len(names) <= MAX_CLASSES
        or not all(isinstance(n, str) and 0 < len(n) <= MAX_CLASS_NAME for n in names)
        or len(set(names)) != len(names)
    ):
        raise _fail("classes", f"must be a list of distinct names (1 to {MAX_CLASS_NAME} characters)", names)
    return list(names)


def _floats(step: Dict[str, Any], key: str, n: int, where: str) -> List[float]:
    v = step.get(key)
    if (
        not isinstance(v, list)
        or len(v) != n
        or not all(isinstance(f, (int, float)) and not isinstance(f, bool) and math.isfinite(f) for f in v)
    ):
        raise _fail(f"{where}.{key}", f"must be a list of {n} finite numbers", v)
    return [float(f) for f in v]


def input_steps(metadata: Dict[str, Any], n_in: int) -> List[Dict[str, Any]]:
    """The model's input steps, checked against its n_in inputs ([] when there are none)."""
    steps = metadata.get("input_steps")
    if steps is None:
        return []
    if not isinstance(steps, list) or len(steps) > 16:
        raise _fail("input_steps", "must be a list of at most 16 steps", steps)
    out = []
    for i, s in enumerate(steps):
        where = f"input_steps[{i}]"
        if not isinstance(s, dict) or s.get("kind") != "standardize":
            raise _fail(where, "must be a step of kind 'standardize'", s)
        scale = _floats(s, "scale", n_in, where)
        out.append({**s, "mean": _floats(s, "mean", n_in, where), "scale": scale})
    return out


DEVICE_EXPORT_KEYS = ("quant", "trainable", "optimizer", "save", "loss", "board")


def device_export(metadata: Dict[str, Any]) -> Dict[str, str]:
    """The export a model pulled from a device came from: quant, trainable, optimizer, save, loss, board (only
    those it records; {} for a model that was not pulled)."""
    dev = metadata.get("device")
    if dev is None:
        return {}
    if not isinstance(dev, dict):
        raise _fail("device", "must be an object", dev)
    out = {}
    for key in DEVICE_EXPORT_KEYS:
        v = dev.get(key)
        if v is None:
            continue
        if not isinstance(v, str) or not v or len(v) > 64:
            raise _fail(f"device.{key}", "must be a short string", v)
        out[key] = v
    return out


def device_trained_on(metadata: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The records of what the device trained on (see device_rows); [] when none were kept."""
    dev = metadata.get("device")
    recs = dev.get("trained_on") if isinstance(dev, dict) else None
    if recs is None:
        return []
    if not isinstance(recs, list) or len(recs) > 10000 or not all(isinstance(r, dict) for r in recs):
        raise _fail("device.trained_on", "must be a list of objects", recs)
    return recs
