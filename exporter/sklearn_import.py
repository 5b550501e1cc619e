"""Import a fitted scikit-learn MLPClassifier or MLPRegressor as an mcutrain network (as emlearn does).

Hidden activations relu, tanh, logistic (Sigmoid) and identity; the output is what the estimator computes
before its decision: softmax probabilities for a multi-class classifier (predict_proba), one logistic output
for a binary classifier (the probability of classes_[1], the second column of predict_proba), one logistic
per label for a multi-label classifier, and the identity for a regressor (predict).

Estimators saved to a file are pickles (pickle or joblib), and unpickling runs code stored in the file:
load_sklearn_file reads only files the caller trusts (the command line asks for --trust-pickle).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import numpy as np

from mcutrain import layers as L
from mcutrain.errors import ImportModelError
from mcutrain.extras import require
from mcutrain.files import read_bounded
from mcutrain.module import Module

from .interop import MAX_IMPORT_BYTES, MAX_LAYERS, check_width, dense, sequential

SUPPORTED = (
    "fitted sklearn.neural_network.MLPClassifier and MLPRegressor with activation relu, tanh, logistic or "
    "identity (outputs softmax, logistic or identity)"
)
_ACTIVATIONS: Dict[str, Any] = {"relu": L.Relu, "tanh": L.Tanh, "logistic": L.Sigmoid, "identity": None}
_OUTPUTS: Dict[str, Any] = {"softmax": lambda n: L.Softmax(1.0, n), "logistic": L.Sigmoid, "identity": None}


def from_sklearn(estimator: Any) -> Module:
    """The mcutrain network of a fitted MLPClassifier or MLPRegressor (see the module docstring). Raises
    ImportModelError for other estimators, unfitted ones and unsupported activations."""
    nn = require("sklearn.neural_network", "sklearn")
    what = type(estimator).__name__
    if not isinstance(estimator, (nn.MLPClassifier, nn.MLPRegressor)):
        raise ImportModelError(f"a {what}: mcutrain imports {SUPPORTED}")
    coefs, intercepts = getattr(estimator, "coefs_", None), getattr(estimator, "intercepts_", None)
    if coefs is None or intercepts is None:
        raise ImportModelError(f"the {what} is not fitted: call fit() before importing it")
    if not isinstance(coefs, (list, tuple)) or len(coefs) != len(intercepts) or not 1 <= len(coefs) <= MAX_LAYERS:
        raise ImportModelError(f"the {what} has inconsistent layers (coefs_ and intercepts_ do not match)")
    hidden = estimator.activation
    out_act = getattr(estimator, "out_activation_", None)
    if hidden not in _ACTIVATIONS:
        raise ImportModelError(f"the {what}'s activation {hidden!r} is not supported: mcutrain imports {SUPPORTED}")
    if out_act not in ("softmax", "logistic", "identity"):
        raise ImportModelError(
            f"the {what}'s output activation {out_act!r} is not supported: mcutrain imports {SUPPORTED}"
        )
    out: List[Module] = []
    for i, (w, b) in enumerate(zip(coefs, intercepts)):
        where = f"{what} layer {i + 1}"
        w, b = np.asarray(w), np.asarray(b)
        if w.ndim != 2 or b.ndim != 1:
            raise ImportModelError(f"{where}: weights of shape {w.shape} and bias of shape {b.shape}")
        check_width(w.shape[0], where)
        check_width(w.shape[1], where)
        if i and w.shape[0] != out[-1].n_out:
            raise ImportModelError(f"{where}: takes {w.shape[0]} values after a layer giving {out[-1].n_out}")
        out.append(dense(w, b, where))
        last = i == len(coefs) - 1
        act: Optional[Any] = _OUTPUTS[out_act] if last else _ACTIVATIONS[hidden]
        if act is not None:
            out.append(act(int(w.shape[1])))
    return sequential(out, what)


def load_sklearn_file(path: Union[str, Path]) -> Module:
    """The network of an MLP estimator saved with pickle or joblib. Unpickling runs code stored in the file:
    call this only for files you made or trust. The file's size is bounded before it is read."""
    p = Path(path)
    data = read_bounded(p, MAX_IMPORT_BYTES, "scikit-learn model file", ImportModelError)
    require("sklearn", "sklearn")
    joblib = require("joblib", "sklearn")  # reads joblib files and plain pickles alike
    try:
        estimator = joblib.load(io.BytesIO(data))
    except ImportModelError:
        raise
    except Exception as e:  # noqa: BLE001 - unpickling raises anything the file's contents raise
        raise ImportModelError(f"{p}: cannot load a scikit-learn estimator from it ({type(e).__name__}: {e})") from None
    return from_sklearn(estimator)
