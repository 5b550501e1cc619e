"""Where the firmware sources and board files are: next to the packages in a checkout, or installed
as the data packages mcutrain_firmware and mcutrain_boards."""
from __future__ import annotations

from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent


def _find(name: str, installed: str) -> Path:
    local = _ROOT / name
    if local.is_dir():
        return local
    try:
        mod = __import__(installed)
        return Path(list(mod.__path__)[0])
    except ImportError:  # pragma: no cover - broken install
        raise FileNotFoundError(f"cannot find mcutrain's {name}/ folder; reinstall mcutrain") from None


def firmware_dir() -> Path:
    """firmware/: core/, template/, platforms/, sim/."""
    return _find("firmware", "mcutrain_firmware")


def boards_dir() -> Path:
    """boards/: one TOML file per board."""
    return _find("boards", "mcutrain_boards")
