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
    framework_code: int = 0  # flash the real board's Arduino framework adds (its stand-in runs a bare-metal port)
    op_code_scale: float = 1.0  # the heavier ops' code as a multiple of their AVR size
    opt_code_scale: float = 1.0  # the optimizers' code as a multiple of their AVR size
    path: Optional[Path] = field(default=None, repr=False)

    @property
    def sim_kind(self) -> Optional[str]:
        """'qemu-arm', 'qemu-riscv32', 'simavr', 'native' or None."""
        return self.sim.get("kind") if self.sim else None

    @property
    def sim_ram(self) -> int:
        """RAM of the simulated stand-in (may be less than the board's)."""
        return int(self.sim.get("ram", self.ram)) if self.sim else self.ram

    def stand_in_differences(self) -> List[str]:
        """Where the simulated stand-in's limits differ from the real board's (its storage is always the
        board's: the stand-in's firmware is built with the board's storage size)."""
        if self.sim_kind in (None, "native"):
            return []
        out = []
        if self.sim_ram != self.ram:
            out.append(
                f"the simulated {self.name} has {self.sim_ram:,} B of RAM, the real board {self.ram:,} B: a model "
                f"that fits the board may not run in the simulator"
            )
        return out


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
    for key, lo in (
        ("ram", 1),
        ("flash", 1),
        ("storage", 0),
        ("code_estimate", 0),
        ("framework_code", 0),
        ("stack_margin", 0),
    ):
        if key in d:
            whole(key, d[key], lo)
    for key in ("op_code_scale", "opt_code_scale"):
        scale = d.get(key, 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 <= scale <= 10:
            bad(key, "a number from 0 to 10", scale)
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
    missing key, a value of the wrong type or range)."""
    try:
        d = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BoardError(f"board file {path} cannot be read: {e}") from None
    _check_values(d, path)
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
            framework_code=int(d.get("framework_code", 0)),
            op_code_scale=float(d.get("op_code_scale", 1.0)),
            opt_code_scale=float(d.get("opt_code_scale", d.get("op_code_scale", 1.0))),
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


def board_names() -> List[str]:
    """The names of the known boards (their files' names), sorted."""
    return sorted(p.stem for p in boards_dir().glob("*.toml"))


def get_board(name: str) -> Board:
    """The board called name, in any case ('Uno', 'NUCLEO_F401RE'); BoardError naming the closest known
    names (and all of them) otherwise."""
    names = board_names()
    by_lower = {n.lower(): n for n in names}
    key = (name or "").strip().lower()
    if key not in by_lower:
        import difflib

        close = difflib.get_close_matches(key, list(by_lower), n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(by_lower[c] for c in close)}? " if close else ""
        raise BoardError(f"unknown board {name!r}; {hint}known boards: {', '.join(names)} (see `mcutrain boards`)")
    return load_board_file(boards_dir() / f"{by_lower[key]}.toml")
