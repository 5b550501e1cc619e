"""Input steps: what turns a sample as the user has it (raw sensor values, CSV columns) into the network's
inputs, stored in the model file (metadata "input_steps", see mcutrain.modelmeta) and applied the same way
everywhere: by the host before the network, and on the device by the firmware (mcutrain.exporter.device
folds a step into a frozen first Dense/Linear layer, or runs it as frozen layers in front of the network).

One kind exists: 'standardize', x' = (x - mean) * scale per input, in float32 (one subtraction, then one
multiplication, each rounded to float32: the device's Bias1d and Diag ops compute exactly this). A later
feature front end adds its kinds here.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import numpy as np

from .errors import DataError

STEP_KINDS = ("standardize",)


def standardize_step(x: np.ndarray, source: str = "training data") -> Dict[str, Any]:
    """The 'standardize' step of inputs x (n, n_in): their mean and 1 / their standard deviation per column (a
    column that does not vary keeps scale 1), as float32 values."""
    x64 = np.asarray(x, np.float64)
    if x64.ndim != 2 or x64.shape[0] < 2:
        raise DataError("--normalize needs at least 2 training samples to measure the inputs' spread")
    mean = x64.mean(axis=0).astype(np.float32)
    std = x64.std(axis=0)
    scale = np.where(std > 0, 1.0 / np.where(std > 0, std, 1.0), 1.0).astype(np.float32)
    return {"kind": "standardize", "mean": mean.tolist(), "scale": scale.tolist(), "source": source}


def step_arrays(step: Dict[str, Any]) -> tuple:
    """(mean, scale) of a standardize step as float32 arrays."""
    return np.asarray(step["mean"], np.float32), np.asarray(step["scale"], np.float32)


def apply_steps(steps: Sequence[Dict[str, Any]], x: Any) -> np.ndarray:
    """x (n, n_in) or (n_in,) through the steps, as float32 (x itself, converted, when there are none)."""
    out = np.asarray(x, np.float32)
    for s in steps:
        mean, scale = step_arrays(s)
        out = (out - mean) * scale  # float32 throughout: each operation rounded once, as on the device
    return np.ascontiguousarray(out, np.float32)


def host_forward(ck: Any, x: Any) -> np.ndarray:
    """The host network's outputs for raw inputs x: the model file's input steps, then its network."""
    from .modelmeta import input_steps

    steps = input_steps(ck.metadata, ck.net.n_in)
    return ck.net.forward(apply_steps(steps, x) if steps else x)


def spread_note(x: np.ndarray, names: List[str]) -> str:
    """A sentence when the input columns' scales differ by more than 100 times (so training, int8 weights and
    on-device training suffer): which columns, and that --normalize helps; '' otherwise."""
    x64 = np.asarray(x, np.float64)
    if x64.ndim != 2 or x64.shape[0] < 2 or x64.shape[1] < 2:
        return ""
    size = np.maximum(np.abs(x64).max(axis=0), 0.0)
    live = size > 0
    if live.sum() < 2:
        return ""
    big, small = int(np.argmax(np.where(live, size, -np.inf))), int(np.argmin(np.where(live, size, np.inf)))
    ratio = size[big] / size[small]
    if ratio <= 100:
        return ""

    def name(j: int) -> str:
        return names[j] if j < len(names) and names[j] else f"input {j + 1}"

    return (
        f"note: the inputs' scales differ {ratio:,.0f} times ({name(big)} reaches {size[big]:.4g}, {name(small)} "
        f"{size[small]:.4g}): --normalize standardises them (stored in the model and applied on the device too)"
    )
