"""mcutrain exporter: quantization, C serialization, memory plans, PlatformIO projects, simulators, device client,
and models of other frameworks in and out:

    from mcutrain.exporter import from_onnx, from_keras, from_sklearn, to_onnx

These names load on first use (PEP 562): their optional packages (onnx, keras, scikit-learn) are imported only
when called. They live here and not on `mcutrain` itself because the layers of the package only point down
(mcutrain <- mcutrain.exporter <- mcutrain.cli, see tests/test_architecture.py).
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, List

# public name -> the submodule that defines it
_EXPORTS: Dict[str, str] = {
    "from_onnx": "onnx_import",
    "from_keras": "keras_import",
    "from_keras_model": "keras_import",
    "from_sklearn": "sklearn_import",
    "load_sklearn_file": "sklearn_import",
    "import_model": "model_import",
    "import_checkpoint": "model_import",
    "checkpoint_from_sklearn": "sklearn_import",
    "to_onnx": "onnx_export",
    "onnx_model": "onnx_export",
}


def __getattr__(name: str) -> Any:
    """Load a public name's submodule on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_EXPORTS))
