"""Import a model file of another framework by its suffix: .onnx, .keras, .tflite, or a scikit-learn MLP in a pickle
or joblib file.

Reading a scikit-learn model from a file means unpickling it, and unpickling runs whatever code the file asks
for: `import_model` reads pickle/joblib files only when the caller says the file is trusted (allow_pickle).
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

from mcutrain.errors import ImportModelError
from mcutrain.modelfile import Checkpoint
from mcutrain.module import Module

from .interop import PICKLE_SUFFIXES, SUFFIXES


def import_checkpoint(path: Union[str, Path], allow_pickle: bool = False) -> Checkpoint:
    """What a model file of another framework becomes: its network (import_model) and, for a scikit-learn Pipeline
    of scalers and an MLP, the scalers as the model's input steps (metadata "input_steps")."""
    p = Path(path)
    if p.suffix.lower() == ".tflite":
        from .tflite_import import from_tflite

        return from_tflite(p)
    if p.suffix.lower() in PICKLE_SUFFIXES and allow_pickle:
        from .sklearn_import import load_sklearn_checkpoint

        return load_sklearn_checkpoint(p)
    return Checkpoint(import_model(p, allow_pickle))


def import_model(path: Union[str, Path], allow_pickle: bool = False) -> Module:
    """The network of a model file, by its suffix: .onnx (from_onnx), .keras (from_keras), .tflite (from_tflite;
    import_checkpoint keeps its quantization too), or a scikit-learn
    MLP saved with pickle or joblib (.pkl, .pickle, .joblib; only with allow_pickle=True, because unpickling
    runs code from the file: use it only for files you made or trust)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".onnx":
        from .onnx_import import from_onnx

        return from_onnx(p)
    if suffix == ".tflite":
        from .tflite_import import from_tflite

        return from_tflite(p).net
    if suffix == ".keras":
        from .keras_import import from_keras

        return from_keras(p)
    if suffix in PICKLE_SUFFIXES:
        if not allow_pickle:
            raise ImportModelError(
                f"{p}: loading a pickle or joblib file runs code stored in it; if you made this file or trust "
                "where it came from, allow it explicitly (--trust-pickle on the command line, "
                "allow_pickle=True in Python)"
            )
        from .sklearn_import import load_sklearn_file

        return load_sklearn_file(p)
    raise ImportModelError(
        f"{p}: unknown kind of model file {suffix or '(no suffix)'!r}; mcutrain imports {', '.join(SUFFIXES)} "
        "(ONNX, Keras 3, full-integer int8 TensorFlow Lite, scikit-learn MLPs saved with pickle or joblib)"
    )
