"""The user's own PlatformIO project that uses a library export (`mcutrain export --library -o
PROJECT/lib/NAME`, docs/embedding.md): found, built offline and run in the simulator by `mcutrain build` and
`mcutrain sim`. An env for an AVR board of the Arduino core (the Uno) builds on Debian's genuine Arduino AVR
core (exporter/arduino_avr.py), as `pio run` would once PlatformIO has downloaded the atmelavr platform, and
runs in simavr through mcutrain's harness with its Serial on the terminal; other envs go to `pio run`."""

from __future__ import annotations

import configparser
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from ..errors import McuTrainError
from . import arduino_avr, pio
from .boards import Board, get_board

SOURCE_SUFFIXES = (".c", ".cpp", ".ino")
STORE = "mcutrain_store_sketch.bin"  # the EEPROM image of the simulated board, in the project


class UserProjectError(McuTrainError, ValueError):
    """A folder that is neither an exported project nor a PlatformIO project using a library export, or one
    that cannot be built offline; the message says what to do."""


@dataclass
class UserProject:
    """A PlatformIO project of the user's with one env chosen and the mcutrain libraries in its lib/."""

    path: Path
    env: str
    pio_board: str  # the env's `board =` (a PlatformIO / Arduino board id)
    platform: str
    libraries: List[Path]

    @property
    def board(self) -> Board:
        """The mcutrain board the (first) library was exported for."""
        meta = json.loads((self.libraries[0] / "mcutrain.json").read_text(encoding="utf-8"))
        return get_board(meta["board"])

    @property
    def build_dir(self) -> Path:
        """Where the offline build goes (beside PlatformIO's own)."""
        return self.path / ".pio" / "build" / f"{self.env}-arduino-core"

    @property
    def on_arduino_avr(self) -> bool:
        """Does this env build on the genuine Arduino AVR core (offline)?"""
        return self.platform == "atmelavr" and self.board.core == "avr"


def mcutrain_libraries(project: Path) -> List[Path]:
    """The library exports in the project's lib/ folder."""
    out = []
    for meta in sorted(Path(project).glob("lib/*/mcutrain.json")):
        try:
            if json.loads(meta.read_text(encoding="utf-8")).get("kind") == "library":
                out.append(meta.parent)
        except (OSError, ValueError):
            continue
    return out


def find_user_project(project: Path, env: Optional[str] = None) -> Optional[UserProject]:
    """The user's PlatformIO project at `project` (None when there is no platformio.ini), with env (default: the
    [platformio] default_envs, else the first env). UserProjectError when it uses no library export or has no
    such env."""
    project = Path(project)
    ini_path = project / "platformio.ini"
    if not ini_path.is_file():
        return None
    ini = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        ini.read(ini_path, encoding="utf-8")
    except configparser.Error as e:
        raise UserProjectError(f"{ini_path} cannot be read: {e}") from None
    envs = [s[4:] for s in ini.sections() if s.startswith("env:")]
    libs = mcutrain_libraries(project)
    if not libs:
        raise UserProjectError(
            f"{project} is not an exported project (no mcutrain.json) and uses no library export in lib/: run "
            f"`mcutrain export MODEL --board BOARD -o {project}`, or `mcutrain export MODEL --board BOARD --library "
            f"-o {project}/lib/my_model` for your own firmware"
        )
    if not envs:
        raise UserProjectError(f"{ini_path} has no [env:NAME] section: add one for your board (docs/embedding.md)")
    default = ini.get("platformio", "default_envs", fallback="").replace(",", " ").split()
    name = env or (default[0] if default else envs[0])
    if name not in envs:
        raise UserProjectError(f"{ini_path} has no env {name!r}; it has {', '.join(envs)}")
    sec = ini[f"env:{name}"]
    return UserProject(project, name, sec.get("board", "").strip(), sec.get("platform", "").strip(), libs)


def sources(up: UserProject) -> List[Path]:
    """The project's own sources (src/, .c .cpp .ino), then the libraries' (their src/)."""
    own = sorted(p for p in (up.path / "src").rglob("*") if p.suffix in SOURCE_SUFFIXES)
    if not own:
        raise UserProjectError(f"{up.path}/src has no .c, .cpp or .ino file to build")
    libs = [p for lib in up.libraries for p in sorted((lib / "src").rglob("*")) if p.suffix in (".c", ".cpp")]
    return own + libs


def build_user_project(up: UserProject) -> Tuple[Path, str]:
    """Build the env: on the genuine Arduino AVR core for an AVR env (offline; the ELF file), else with `pio
    run` (PlatformIO's firmware.elf). Returns (firmware, how it was built)."""
    if up.on_arduino_avr:
        includes = [up.path / "include", up.path / "src", *(lib / "src" for lib in up.libraries)]
        elf = arduino_avr.build(sources(up), up.build_dir, up.pio_board or "uno", ["-ffp-contract=off"], includes)
        return elf, f"on the Arduino AVR core in {arduino_avr.core_dir()}"
    pio.build(up.path, up.env)
    return up.path / ".pio" / "build" / up.env / "firmware.elf", "with PlatformIO"


def run_user_project(up: UserProject, seconds: float, timeout: float = 600.0) -> Tuple[str, Board]:
    """Run the built firmware of an AVR env in simavr for `seconds` of simulated time, its Serial on the host's
    output and its EEPROM kept in the project (STORE); returns (what it printed, the simulated board)."""
    from .sim_avr import SimavrSimulator, build_harness, read_report

    board = up.board
    if not up.on_arduino_avr or board.sim_kind != "simavr":
        raise UserProjectError(
            f"env:{up.env} of {up.path} is not an AVR env of the Arduino core: `mcutrain sim` runs your own firmware "
            f"on the Uno's stand-in (simavr) only; run the exported library's plain C example in QEMU instead"
        )
    elf = up.build_dir / "firmware.elf"
    if not elf.is_file():
        raise UserProjectError(f"{elf} was not built: run `mcutrain build {up.path}` first")
    freq = int((board.sim or {}).get("freq", 16_000_000))
    report = up.build_dir / "simavr_report.json"
    cmd = SimavrSimulator().command(
        str(build_harness()), str(elf), board, "stdio", str(report), str(up.path / STORE), max(1, int(seconds * freq))
    )
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    out = r.stdout.decode(errors="replace").replace("\r", "")
    if r.returncode not in (0, 124):  # 124: the time was up, the sketch runs for ever
        rep = read_report(report) or {}
        raise UserProjectError(
            f"your firmware stopped in simavr ({rep.get('reason', 'status ' + str(r.returncode))}): "
            f"{r.stderr.decode(errors='replace').strip()[-800:]}"
        )
    return out, board
