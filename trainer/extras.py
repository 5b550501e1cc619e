"""The optional dependencies (the extras of `pip install mcutrain[...]`): the one place that imports them, so
a feature used without its extra stops with one line saying which extra to install."""

from __future__ import annotations

import importlib
from typing import Any

from .errors import MissingExtraError

__all__ = ["require"]


def require(module: str, extra: str) -> Any:
    """Import an optional dependency, or raise MissingExtraError saying which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(
            f"this needs the Python package {module.split('.')[0]!r}, which is not installed ({e}): "
            f"pip install 'mcutrain[{extra}]'"
        ) from None
