"""Boards: one TOML file each in boards/ (adding a board is adding a file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..errors import McuTrainError
from ..plaindata import read_toml
from .paths import boards_dir

MAX_BOARD_FILE_BYTES = 1 << 20


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


# what a simulator kind needs in [sim] (strings); the kinds exporter/sim.py knows
SIM_KEYS: Dict[str, tuple] = {
    "qemu-arm": ("machine", "cpu_flags"),
    "qemu-riscv32": ("machine",),
    "simavr": ("mcu",),
    "native": (),
}


def _check_values(d: Dict[str, Any], path: Path) -> None:
    """BoardError naming the file, the key and the value for a value of the wrong type or range (missing keys
    are named where they are read)."""

    def bad(key: str, what: str, value: Any) -> None:
        raise BoardError(f"board file {path}: {key} must be {what}, got {value!r}")

    def whole(key: str, value: Any, lo: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value < 2**32:
            bad(key, f"a whole number of bytes from {lo} to 2^32 - 1", value)

    for key in ("name", "title", "core"):
        if key in d and not (isinstance(d[key], str) and d[key]):
            bad(key, "a non-empty string", d[key])
    if "fpu" in d and not isinstance(d["fpu"], bool):
        bad("fpu", "true or false", d["fpu"])
    for key, lo in (("ram", 1), ("flash", 1), ("storage", 0), ("code_estimate", 0), ("stack_margin", 0)):
        if key in d:
            whole(key, d[key], lo)
    pio = d.get("platformio", {})
    if not isinstance(pio, dict):
        bad("platformio", "a table ([platformio])", pio)
    for key, value in pio.items():
        if not isinstance(value, str):
            bad(f"platformio.{key}", "a string", value)
    sim = d.get("sim")
    if sim is None:
        return
    if not isinstance(sim, dict):
        bad("sim", "a table ([sim])", sim)
    if sim.get("kind") not in SIM_KEYS:
        bad("sim.kind", f"one of {', '.join(SIM_KEYS)}", sim.get("kind"))
    for key in SIM_KEYS[sim["kind"]]:
        if not (isinstance(sim.get(key), str) and sim[key]):
            bad(f"sim.{key}", f"a non-empty string (a {sim['kind']} simulator needs it)", sim.get(key))
    for key in ("ram", "freq"):
        if key in sim:
            whole(f"sim.{key}", sim[key], 1)


def load_board_file(path: Path) -> Board:
    """Read and check one board file: BoardError naming the file and what is wrong (unreadable TOML, a
    missing key, a value of the wrong type or range, a name that is not the file's)."""
    d = read_toml(path, MAX_BOARD_FILE_BYTES, "board file", BoardError)
    _check_values(d, path)
    if "name" in d and d["name"] != path.stem:
        raise BoardError(
            f"board file {path} says name = {d['name']!r} but is named {path.name}: a board's name is its file's "
            f"name, so rename the file or set name = {path.stem!r}"
        )
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
    return [load_board_file(p) for p in sorted(boards_dir().glob("*.toml"))]


def get_board(name: str) -> Board:
    """The board called name; BoardError naming the known boards otherwise."""
    p = boards_dir() / f"{name}.toml"
    if not name or "/" in name or not p.is_file():
        known = ", ".join(b.name for b in all_boards())
        raise BoardError(f"unknown board {name!r}; known boards: {known} (see `mcutrain boards`)")
    return load_board_file(p)
