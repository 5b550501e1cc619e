"""PNG plots for the command line: training curves from a JSON-lines log, and weight heat maps of a
model file. matplotlib runs with the Agg backend (no display needed)."""

from __future__ import annotations

import io
import math
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from .extras import require
from .module import Module


def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (MissingExtraError naming the `plot` extra without matplotlib)."""
    require("matplotlib", "plot").use("Agg")
    return require("matplotlib.pyplot", "plot")


def _png(fig: Any) -> bytes:
    """The figure as PNG bytes (the caller writes them atomically)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return buf.getvalue()


def _series(records: Sequence[Dict[str, Any]], key: str) -> Tuple[np.ndarray, np.ndarray]:
    """(steps, values) of the step records that have `key`."""
    pts = [(r["step"], r[key]) for r in records if r.get("event") == "step" and r.get(key) is not None]
    if not pts:
        return np.zeros(0), np.zeros(0)
    a = np.array(pts, dtype=np.float64)
    return a[:, 0], a[:, 1]


def _smooth(y: np.ndarray, n: int) -> np.ndarray:
    """Moving average over n points (same length; the first points average what there is)."""
    if n <= 1 or y.size < 2:
        return y
    c = np.cumsum(np.insert(y, 0, 0.0))
    idx = np.arange(1, y.size + 1)
    lo = np.maximum(idx - n, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def log_metrics(records: Sequence[Dict[str, Any]]) -> List[str]:
    """The validation metrics a log has (val_loss, val_accuracy, ...)."""
    keys = {k for r in records if r.get("event") == "step" for k in r if k.startswith("val_")}
    return sorted(keys)


def plot_log(records: Sequence[Dict[str, Any]], title: str = "") -> bytes:
    """Loss (raw and smoothed, log scale), validation metrics and the learning rate, as a PNG."""
    steps, loss = _series(records, "loss")
    if steps.size == 0:
        raise ValueError("the log has no training steps to plot")
    metrics = log_metrics(records)
    scores = [m for m in metrics if not m.endswith("loss")]
    plt = _pyplot()
    rows = 2 + (1 if scores else 0)
    fig, axes = plt.subplots(rows, 1, figsize=(8, 2.6 * rows), sharex=True)
    ax = axes[0]
    positive = bool(np.all(loss > 0))
    ax.plot(steps, loss, color="tab:blue", alpha=0.3, lw=0.8, label="training loss")
    ax.plot(steps, _smooth(loss, max(1, steps.size // 50)), color="tab:blue", lw=1.6, label="smoothed")
    for m in metrics:
        if m.endswith("loss"):
            s, v = _series(records, m)
            ax.plot(s, v, "o-", color="tab:orange", ms=3, lw=1.2, label=m.replace("_", " "))
            positive = positive and bool(np.all(v > 0))
    lo, hi = float(np.min(loss)), float(np.max(loss))
    if positive and hi / lo > 20:
        ax.set_yscale("log")
    ax.set_ylabel("loss")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    row = 1
    if scores:
        ax = axes[row]
        for m in scores:
            s, v = _series(records, m)
            ax.plot(s, v, "o-", ms=3, lw=1.2, label=m.replace("_", " "))
        ax.set_ylabel("validation")
        ax.legend(loc="best", fontsize=8)
        ax.grid(alpha=0.3)
        row += 1
    s, lr = _series(records, "lr")
    axes[row].plot(s, lr, color="tab:green", lw=1.4)
    axes[row].set_ylabel("learning rate")
    fleet = any(r.get("event") == "start" and r.get("fleet") for r in records)  # a fleet log: one step per round
    axes[row].set_xlabel("round" if fleet else "step")
    axes[row].grid(alpha=0.3)
    return _png(fig)


def weight_panels(net: Module) -> List[Tuple[str, np.ndarray, bool]]:
    """(title, 2-D array, has a bias row) for every leaf layer with parameters: a Dense/Linear weight
    matrix as inputs x outputs (a Linear's bias as an extra last row), other parameters as one row."""
    from .compose import flatten_names
    from .layers import GLU, Dense, Linear

    panels = []
    for name, layer in flatten_names(net).items():
        p = np.asarray(layer.params, np.float32)
        title = f"{name}: {layer.describe()}"
        if p.size == 0:
            continue
        if isinstance(layer, Linear):
            panels.append((title + " (last row: bias)", np.vstack([layer.weight, layer.bias[None, :]]), True))
        elif isinstance(layer, Dense):
            panels.append((title, layer.weight, False))
        elif isinstance(layer, GLU):
            i, o = layer.n_in, layer.n_out
            io_ = i * o
            gate_value = np.hstack([p[:io_].reshape(i, o), p[io_ : 2 * io_].reshape(i, o)])
            biases = p[2 * io_ : 2 * io_ + 2 * o][None, :]
            panels.append((title + " (gate | value; last row: biases)", np.vstack([gate_value, biases]), True))
            if p.size > 2 * io_ + 2 * o:
                panels.append((f"{name}: {layer.describe()} gate beta", p[2 * io_ + 2 * o :][None, :], False))
        else:
            panels.append((title, p[None, :], False))
    return panels


def plot_weights(net: Module, title: str = "") -> bytes:
    """One heat map per layer with parameters (shared symmetric colour scale per panel), as a PNG."""
    panels = weight_panels(net)
    if not panels:
        raise ValueError("the network has no parameters to plot")
    plt = _pyplot()
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    MaxNLocator = require("matplotlib.ticker", "plot").MaxNLocator

    for ax, (name, w, bias_row) in zip(axes.flat, panels):
        lim = float(np.abs(w).max()) or 1.0
        im = ax.imshow(w, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        if bias_row:
            ax.axhline(w.shape[0] - 1.5, color="black", lw=0.8)
        ax.set_title(name, fontsize=8)
        ax.set_xlabel("output" if w.shape[0] > 1 else "parameter", fontsize=8)
        if w.shape[0] > 1:
            ax.set_ylabel("input", fontsize=8)
        else:
            ax.set_yticks([])
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _png(fig)


def features_png(values: np.ndarray, title: str, row_label: str, col_label: str) -> bytes:
    """A heat map of one window's features (rows x values per row), e.g. MFCC frames over time."""
    plt = _pyplot()
    v = np.asarray(values, np.float64)
    fig, ax = plt.subplots(figsize=(max(4.0, min(12.0, v.shape[0] / 5 + 2)), 3.6))
    im = ax.imshow(v.T, aspect="auto", origin="lower", cmap="viridis", interpolation="nearest")
    ax.set_xlabel(row_label)
    ax.set_ylabel(col_label)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax)
    return _png(fig)
