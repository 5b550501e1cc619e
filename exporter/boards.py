"""Boards: one TOML file each in boards/ (adding a board is adding a file)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..errors import McuTrainError
from .paths import boards_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class BoardError(McuTrainError, ValueError):
    """An unknown board or a board file that cannot be read."""


@dataclass
class Board:
    """A target: its memory, FPU, PlatformIO env and the simulator that stands in for it."""

    name: str
    title: str
    core: str
    fpu: bool
    ram: int
    flash: int
    storage: int
    code_estimate: int
    stack_margin: int
    platformio: Dict[str, Any]
    sim: Optional[Dict[str, Any]] = None
    path: Optional[Path] = field(default=None, repr=False)

    @property
    def sim_kind(self) -> Optional[str]:
        """'qemu-arm', 'qemu-riscv32', 'simavr', 'native' or None."""
        return self.sim.get("kind") if self.sim else None

    @property
    def sim_ram(self) -> int:
        """RAM of the simulated stand-in (may be less than the board's)."""
        return int(self.sim.get("ram", self.ram)) if self.sim else self.ram


def _load(path: Path) -> Board:
    try:
        d = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BoardError(f"board file {path} cannot be read: {e}") from None
    try:
        return Board(
            name=d["name"],
            title=d["title"],
            core=d["core"],
            fpu=bool(d["fpu"]),
            ram=int(d["ram"]),
            flash=int(d["flash"]),
            storage=int(d.get("storage", 0)),
            code_estimate=int(d.get("code_estimate", 0)),
            stack_margin=int(d.get("stack_margin", 0)),
            platformio=dict(d.get("platformio", {})),
            sim=d.get("sim"),
            path=path,
        )
    except KeyError as e:
        raise BoardError(f"board file {path} lacks the key {e}") from None


def all_boards() -> List[Board]:
    """Every known board, by name."""
    return [_load(p) for p in sorted(boards_dir().glob("*.toml"))]


def get_board(name: str) -> Board:
    """The board called name; BoardError naming the known boards otherwise."""
    p = boards_dir() / f"{name}.toml"
    if not name or "/" in name or not p.is_file():
        known = ", ".join(b.name for b in all_boards())
        raise BoardError(f"unknown board {name!r}; known boards: {known} (see `mcutrain boards`)")
    return _load(p)
