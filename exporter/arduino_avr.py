"""Builds on the genuine Arduino AVR core that Debian packages (`apt-get install arduino-core-avr`:
ArduinoCore-avr under /usr/share/arduino/hardware/arduino/avr), offline, with avr-gcc: the Uno firmware's
real-board target (env:uno of an exported project: ports/port_arduino.cpp on the core's HardwareSerial and
EEPROM library) and sketches of a library export. This is the "make rule" of the Arduino IDE's build done
in a few functions, with the compiler flags of the core's own platform.txt: the core's sources are compiled
once per core and board into a cached core.a (archived with avr-gcc-ar for LTO), then the program's own
sources are compiled and linked against it. A sketch (.ino) is compiled as C++ with Arduino.h included
first, as arduino-builder does (without generating prototypes: define functions before their use).

The ELF files run in simavr through mcutrain's harness (exporter/sim_avr.py), as on a real board.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..errors import McuTrainError
from .sim import cache_dir, require_tools, run_checked

ARDUINO_AVR_DIR = Path("/usr/share/arduino/hardware/arduino/avr")
APT_PACKAGE = "arduino-core-avr"
# platform.txt's flags (ArduinoCore-avr 1.8), plus the fix the Debian core needs with Debian's avr-gcc 5.4:
# its <float.h> defines DECIMAL_DIG for C but not for C++11, which WString.cpp uses
C_FLAGS = ["-g", "-Os", "-std=gnu11", "-ffunction-sections", "-fdata-sections", "-flto", "-fno-fat-lto-objects"]
CXX_FLAGS = [
    "-g",
    "-Os",
    "-std=gnu++11",
    "-fpermissive",
    "-fno-exceptions",
    "-ffunction-sections",
    "-fdata-sections",
    "-fno-threadsafe-statics",
    "-Wno-error=narrowing",
    "-flto",
    "-DDECIMAL_DIG=__DECIMAL_DIG__",
]
S_FLAGS = ["-g", "-x", "assembler-with-cpp", "-flto"]
LINK_FLAGS = ["-w", "-Os", "-g", "-flto", "-fuse-linker-plugin", "-Wl,--gc-sections"]
# mcutrain's own C files: C99, warnings as errors, the float semantics of host/device parity
OWN_C_FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", "-fno-math-errno"]
OWN_CXX_FLAGS = ["-Wall", "-ffp-contract=off", "-fno-math-errno"]
ARDUINO_VERSION = "10807"  # what the Arduino IDE 1.8.7 passes as ARDUINO


class ArduinoCoreError(McuTrainError, RuntimeError):
    """The genuine Arduino core is missing or a build on it failed; the message says what to do."""


class ArduinoCoreMissing(ArduinoCoreError):
    """The Arduino AVR core is not installed; the message says which package to install."""


@dataclass(frozen=True)
class ArduinoBoard:
    """A board of the core's boards.txt: its MCU, clock, board define, core and variant folders."""

    name: str
    mcu: str
    f_cpu: str
    board: str
    core: Path
    variant: Path

    def defines(self) -> List[str]:
        """The -D/-m flags every file of this board is compiled with (as the IDE passes them)."""
        return [
            f"-mmcu={self.mcu}",
            f"-DF_CPU={self.f_cpu}",
            f"-DARDUINO={ARDUINO_VERSION}",
            f"-DARDUINO_{self.board}",
            "-DARDUINO_ARCH_AVR",
        ]

    def includes(self) -> List[str]:
        """The core's, the variant's and the EEPROM library's include folders."""
        lib = self.core.parent.parent / "libraries" / "EEPROM" / "src"
        return [f"-I{self.core}", f"-I{self.variant}", f"-I{lib}"]


def core_dir() -> Path:
    """The Arduino AVR core: $MCUTRAIN_ARDUINO_AVR, else Debian's; ArduinoCoreError saying what to install."""
    d = Path(os.environ.get("MCUTRAIN_ARDUINO_AVR") or ARDUINO_AVR_DIR)
    if not (d / "boards.txt").is_file() or not (d / "cores" / "arduino" / "Arduino.h").is_file():
        raise ArduinoCoreMissing(
            f"the Arduino AVR core is not in {d}: install it (Debian/Ubuntu: sudo apt-get install {APT_PACKAGE}) "
            "or point MCUTRAIN_ARDUINO_AVR at a copy of ArduinoCore-avr"
        )
    return d


def arduino_board(name: str) -> ArduinoBoard:
    """The board `name` (e.g. uno) of the core's boards.txt."""
    d = core_dir()
    props: Dict[str, str] = {}
    for line in (d / "boards.txt").read_text(errors="replace").splitlines():
        key, eq, value = line.partition("=")
        if eq and key.startswith(f"{name}.build."):
            props[key[len(name) + 7 :]] = value.strip()
    need = ("mcu", "f_cpu", "board", "core", "variant")
    if any(k not in props for k in need):
        raise ArduinoCoreError(f"{d / 'boards.txt'} has no complete board {name!r} (build.mcu, f_cpu, ...)")
    return ArduinoBoard(
        name,
        props["mcu"],
        props["f_cpu"],
        props["board"],
        d / "cores" / props["core"],
        d / "variants" / props["variant"],
    )


def _compile(src: Path, obj: Path, board: ArduinoBoard, extra: Sequence[str], own: bool) -> None:
    """One source file to an object file with the core's flags (and mcutrain's, for its own files)."""
    suffix = src.suffix
    if suffix == ".c":
        cmd = ["avr-gcc", "-c", *C_FLAGS, *(OWN_C_FLAGS if own else ["-w"])]
    elif suffix == ".S":
        cmd = ["avr-gcc", "-c", *S_FLAGS]
    else:  # .cpp, .ino
        cmd = ["avr-g++", "-c", *CXX_FLAGS, *(OWN_CXX_FLAGS if own else ["-w"])]
        if suffix == ".ino":
            cmd += ["-x", "c++", "-include", "Arduino.h"]
    obj.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_checked([*cmd, *board.defines(), *board.includes(), *extra, str(src), "-o", str(obj)])
    except McuTrainError as e:
        raise ArduinoCoreError(f"{src.name} does not compile on the Arduino core: {e}") from None


def core_archive(board: ArduinoBoard) -> Path:
    """The core compiled for the board (core.a), once per core version and board in the cache."""
    require_tools("avr-gcc")
    sources = sorted(p for p in board.core.iterdir() if p.suffix in (".c", ".cpp", ".S"))
    h = hashlib.sha256("\0".join([*board.defines(), *C_FLAGS, *CXX_FLAGS]).encode())
    for p in sources + sorted(board.core.glob("*.h")) + sorted(board.variant.glob("*.h")):
        h.update(p.name.encode() + p.read_bytes())
    out = cache_dir() / f"arduino-avr-{board.name}-{h.hexdigest()[:12]}.a"
    if out.is_file():
        return out
    work = out.with_name(f"{out.name}.{os.getpid()}.d")
    objs = []
    for src in sources:
        obj = work / (src.name + ".o")
        _compile(src, obj, board, [], own=False)
        objs.append(str(obj))
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    run_checked(["avr-gcc-ar", "rcs", str(tmp), *objs])
    os.replace(tmp, out)
    for o in objs:
        Path(o).unlink()
    work.rmdir()
    return out


def build(
    sources: Sequence[Path],
    out: Path,
    board_name: str = "uno",
    flags: Sequence[str] = (),
    includes: Sequence[Path] = (),
) -> Path:
    """Compile sources (mcutrain's .c with C99 and warnings as errors; .cpp and .ino as the IDE does) with
    flags and include folders, link them against the core and return the ELF file out/firmware.elf."""
    board = arduino_board(board_name)
    archive = core_archive(board)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    extra = [*flags, *(f"-I{p}" for p in includes)]
    objs = []
    for i, src in enumerate(sources):
        obj = out / "obj" / f"{i:03d}-{Path(src).name}.o"
        _compile(Path(src), obj, board, extra, own=True)
        objs.append(str(obj))
    elf = out / "firmware.elf"
    try:
        run_checked(["avr-gcc", *LINK_FLAGS, f"-mmcu={board.mcu}", "-o", str(elf), *objs, str(archive), "-lm"])
    except McuTrainError as e:
        raise ArduinoCoreError(f"the firmware does not link on the Arduino core: {e}") from None
    return elf


def project_flags(project: Path, env: str) -> List[str]:
    """The build_flags of an exported project's env (with ${env.build_flags} expanded)."""
    import configparser

    ini = configparser.ConfigParser(interpolation=None)
    ini.read(Path(project) / "platformio.ini")
    if f"env:{env}" not in ini:
        raise ArduinoCoreError(f"{project}/platformio.ini has no env:{env}")
    common = ini["env"].get("build_flags", "").split() if "env" in ini else []
    flags: List[str] = []
    for f in ini[f"env:{env}"].get("build_flags", "").split():
        flags += common if f == "${env.build_flags}" else [f]
    return [f for f in flags if not f.startswith("-I")]


def build_project(project: Path, env: str = "uno", extra_flags: Sequence[str] = (), out: Optional[Path] = None) -> Path:
    """The real-board target (env) of an exported project built on the genuine core: src/ with the Arduino
    port, the core library in lib/; out defaults to .pio/build/ENV-arduino-core. Returns the ELF file."""
    project = Path(project)
    src = project / "src"
    lib = project / "lib" / "mcutrain_core" / "src"
    sources = sorted(src.glob("*.c")) + sorted(src.glob("*.cpp")) + [src / "ports" / "port_arduino.cpp"]
    sources += sorted(lib.glob("*.c"))
    out = out or project / ".pio" / "build" / f"{env}-arduino-core"
    flags = project_flags(project, env) + list(extra_flags)
    return build(sources, out, _board_of(project, env), flags, [src, lib, project / "include"])


def build_library_sketch(
    library: Path, sketch: Path, out: Path, board_name: str = "uno", flags: Sequence[str] = ()
) -> Path:
    """A sketch that uses a library export (`mcutrain export --library`), built on the genuine core as the
    Arduino IDE builds it: the sketch, then every source of the library's src/ folder and its subfolders."""
    src = Path(library) / "src"
    sources = [Path(sketch)] + sorted(p for p in src.rglob("*") if p.suffix in (".c", ".cpp"))
    return build(sources, out, board_name, flags, [src])


def _board_of(project: Path, env: str) -> str:
    """The `board = NAME` of the env (the name in the core's boards.txt)."""
    text = (Path(project) / "platformio.ini").read_text()
    m = re.search(rf"^\[env:{re.escape(env)}\][^\[]*?^board\s*=\s*(\S+)", text, re.M | re.S)
    return m.group(1) if m else env
