"""Where mcutrain's firmware sources and board files are: the package data mcutrain.firmware and
mcutrain.boards, found through importlib.resources (never by folder names in site-packages)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

HOST_MODEL = "model.mct"  # the exported model, kept in the project for `sim` and `device pull`


def _data_dir(package: str) -> Path:
    """The folder of a data package of mcutrain (installed, or the repository's folder in an editable
    install)."""
    path = Path(str(resources.files(package)))
    if not path.is_dir():  # pragma: no cover - a zipped install, which setup.py does not produce
        raise FileNotFoundError(f"mcutrain's {package} is not a folder on disk ({path}); reinstall mcutrain")
    return path


def firmware_dir() -> Path:
    """The firmware sources: core/, app/, platforms/, host_tools/."""
    return _data_dir("mcutrain.firmware")


def boards_dir() -> Path:
    """The board files: one TOML file per board."""
    return _data_dir("mcutrain.boards")
