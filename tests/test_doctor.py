"""`mcutrain doctor` on this machine, where every tool is installed, and with a PATH that holds none of them:
each tool is listed with what it is for, the missing ones with the command that installs them (the
simulators' own package hints), and the exit code says whether something is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from mcutrain.exporter import sim
from mcutrain.exporter.doctor import checks

CLI = [sys.executable, "-c", "from mcutrain.cli import run; run(['doctor'])"]


def test_doctor_finds_the_tools_of_this_machine() -> None:
    """Every tool a simulator needs is checked; here all are installed, so the exit code is 0."""
    sim._register_kinds()
    names = {c.name for c in checks()}
    wanted = {t for cls in sim.SIMULATORS.values() for t in cls.tools} | {"platformio", "libsimavr", "gcc"}
    assert wanted <= names, wanted - names
    r = subprocess.run(CLI, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in wanted:
        line = next(ln for ln in r.stdout.splitlines() if f" {name} " in ln)
        assert line.split()[0] == "ok", line
    assert "everything mcutrain uses is installed" in r.stdout


def test_doctor_names_what_is_missing_and_how_to_install_it(tmp_path: Path) -> None:
    """With a PATH of an empty folder (PlatformIO still runs as a module of this Python), every program is
    MISSING, the install lines carry the Debian packages (qemu-system-misc for qemu-system-riscv32), and
    the exit code is 4 (a tool is missing)."""
    env = {**os.environ, "PATH": str(tmp_path)}
    r = subprocess.run(CLI, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 4, r.stdout + r.stderr
    status = {
        ln.split()[1]: ln.split()[0] for ln in r.stdout.splitlines() if ln.startswith("  ") and len(ln.split()) > 2
    }
    for tool in ("gcc", "qemu-system-arm", "qemu-system-riscv32", "arm-none-eabi-gcc", "avr-gcc"):
        assert status.get(tool) == "MISSING", (tool, r.stdout)
    assert status.get("platformio") == "ok", r.stdout
    install = r.stdout.split("to install what is missing (Debian/Ubuntu):", 1)[1]
    assert "sudo apt-get install qemu-system-misc" in install and "gcc-arm-none-eabi" in install, install
    assert shutil.which("gcc") is not None  # this machine has them: the test restricted PATH, not the machine
