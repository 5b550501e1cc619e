"""`mcutrain doctor`: which of the tools mcutrain drives are here (the host C compiler, PlatformIO, the cross
compilers, QEMU and simavr), what each is for, and how to install the missing ones. The tools and their
Debian packages are the simulators' own lists (sim.SIMULATORS, sim.APT_HINT), so this never disagrees with
what `mcutrain sim` asks for."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Optional

from . import sim
from .pio import PioError, pio_command
from .sim_avr import SIMAVR_HEADER

__all__ = ["Check", "checks"]

# what each simulator kind stands in for (the boards a user knows them by)
SIM_PURPOSE = {
    "native": "`sim` on the native board (the firmware built for this computer)",
    "qemu-arm": "`sim` of Cortex-M boards in QEMU",
    "qemu-riscv32": "`sim` of RISC-V boards in QEMU",
    "simavr": "`sim` of AVR boards (Arduino Uno) in simavr",
}


@dataclass
class Check:
    """One tool: found or not, its version line when found, what needs it, how to install it."""

    name: str
    ok: bool
    detail: str
    needed_for: str
    install: str


def _version(exe: str) -> str:
    """The first line of `exe --version` (empty when it prints none)."""
    try:
        r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = (r.stdout or r.stderr).strip().splitlines()
    return lines[0].strip() if lines else ""


def _tool(name: str, needed_for: str) -> Check:
    """A program on PATH."""
    path = shutil.which(name)
    hint = f"sudo apt-get install {sim.APT_HINT.get(name, name)}"
    return Check(name, path is not None, _version(path) or path if path else "not found", needed_for, hint)


def _platformio() -> Check:
    """PlatformIO, as mcutrain runs it (the module in this Python, else pio on PATH)."""
    try:
        cmd = pio_command()
    except PioError:
        return Check("platformio", False, "not found", "`build`, `flash`, `sim`", "pip install platformio")
    r = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=60)
    return Check(
        "platformio",
        r.returncode == 0,
        r.stdout.strip() or r.stderr.strip()[-200:],
        "`build`, `flash`, `sim`",
        "pip install platformio",
    )


def checks() -> List[Check]:
    """Every check, in the order `mcutrain doctor` prints them."""
    sim._register_kinds()
    needs: Dict[str, List[str]] = {}
    for kind, cls in sim.SIMULATORS.items():
        for tool in cls.tools:
            needs.setdefault(tool, []).append(SIM_PURPOSE.get(kind, f"`sim` ({kind})"))
    needs.setdefault("gcc", []).append("the simulators' host tools (QEMU's instruction counter, the simavr harness)")
    out = [_platformio()]
    for tool, why in needs.items():
        out.append(_tool(tool, "; ".join(dict.fromkeys(why))))
    header: Optional[str] = str(SIMAVR_HEADER) if SIMAVR_HEADER.is_file() else None
    out.append(
        Check(
            "libsimavr",
            header is not None,
            header or f"{SIMAVR_HEADER} not found",
            SIM_PURPOSE["simavr"],
            f"sudo apt-get install {sim.APT_HINT['simavr']}",
        )
    )
    return out
