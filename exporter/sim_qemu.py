"""QEMU stand-ins: Cortex-M boards in qemu-system-arm (mps2-an385/an386/an500/an505, microbit) and the
ESP32-C3 in qemu-system-riscv32 (virt, rv32imc).

The firmware (env:sim-BOARD, built with platforms/qemu-arm or platforms/qemu-riscv) speaks the protocol
over the machine's UART, which QEMU puts on a pty: the Device client talks to it as to a board. Exit and
saves (to a host file) use semihosting. With measure=True, mcutrain's TCG plugin (firmware/host_tools/
insn_plugin.c, built once into sim.cache_dir()) counts the instructions between the firmware's marker
functions: one PREDICT's forward pass and one TRAIN step.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..host_build import HOST_TOOLS
from .boards import Board
from .paths import firmware_dir
from .sim import (
    EXIT_TIMEOUT,
    SIMULATORS,
    ProcessLink,
    ProcessSpec,
    SimError,
    SimSession,
    Simulator,
    build_host_tool,
    launch_process,
    quit_process,
    require_tools,
    run_checked,
    section_sizes,
)

# measured regions: name -> (begin marker, end marker) of ports/port_qemu_common.h
REGIONS = {
    "predict": ("mct_mark_predict_begin", "mct_mark_predict_end"),
    "train": ("mct_mark_train_begin", "mct_mark_train_end"),
    "empty": ("mct_mark_empty_begin", "mct_mark_empty_end"),
}
START_TIMEOUT = 15.0  # seconds for QEMU to offer its pty
REPLY_TIMEOUT = 30.0  # seconds the client waits for an answer


def _qemu_opt(value: str) -> str:
    """A value inside a QEMU option list (commas are doubled)."""
    return value.replace(",", ",,")


def build_plugin() -> Path:
    """The instruction-counting TCG plugin (firmware/host_tools/insn_plugin.c), built once per version
    into sim.cache_dir()."""
    source, cflags, libs, suffix = HOST_TOOLS["insn_plugin"]
    return build_host_tool(firmware_dir() / Path(source).relative_to("firmware"), "insn_plugin", cflags, libs, suffix)


def symbol_addresses(nm: str, elf: Path, names: List[str]) -> Dict[str, int]:
    """Addresses of the named symbols of an ELF file; SimError when one is missing."""
    out = run_checked([nm, str(elf)]).stdout
    found: Dict[str, int] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] in names:
            found[parts[2]] = int(parts[0], 16)
    missing = [n for n in names if n not in found]
    if missing:
        raise SimError(
            f"{elf} lacks the marker functions {', '.join(missing)}: was it built from an mcutrain "
            f"export with the QEMU port (env:sim-BOARD)?"
        )
    return found


def elf_sizes(size_tool: str, elf: Path) -> Dict[str, int]:
    """{'text', 'data', 'bss', 'flash', 'ram_static'} bytes of a firmware: flash = code and constants + the
    .data image; static RAM = .data + .bss (the stack reserve of the linker script not counted)."""
    sec = section_sizes(size_tool, elf)
    ram_sections = (".data", ".bss")
    skip = (
        ram_sections
        + (".stack", ".comment")
        + tuple(s for s in sec if s.startswith((".debug", ".ARM.attributes", ".riscv.attributes")))
    )
    text = sum(v for k, v in sec.items() if k not in skip)
    return {
        "text": text,
        "data": sec.get(".data", 0),
        "bss": sec.get(".bss", 0),
        "flash": text + sec.get(".data", 0),
        "ram_static": sec.get(".data", 0) + sec.get(".bss", 0),
    }


def parse_plugin_output(text: str) -> Dict[str, Any]:
    """{'insn_total': N, 'regions': {name: {'insns', 'pairs', 'min', 'max'}}} from the plugin's file."""
    out: Dict[str, Any] = {"insn_total": None, "regions": {}}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "insn_total" in fields:
            out["insn_total"] = int(fields["insn_total"])
        elif "region" in fields:
            out["regions"][fields["region"]] = {k: int(fields[k]) for k in ("insns", "pairs", "min", "max")}
    return out


def set_env_option(project: Path, env: str, key: str, value: str) -> None:
    """Set (or add) `key = value` in [env:ENV] of a project's platformio.ini, e.g. custom_opt_level = Os
    or a smaller custom_ram_size."""
    ini = Path(project) / "platformio.ini"
    text = ini.read_text()
    head = f"[env:{env}]"
    if head not in text:
        raise SimError(f"{ini} has no {head}")
    start = text.index(head)
    end = text.find("\n[", start + len(head))
    end = len(text) if end < 0 else end
    section = text[start:end]
    line = re.compile(rf"^{re.escape(key)}\s*=.*$", re.M)
    if line.search(section):
        section = line.sub(f"{key} = {value}", section)
    else:
        section = section.replace(head, f"{head}\n{key} = {value}", 1)
    ini.write_text(text[:start] + section + text[end:])


class QemuLink(ProcessLink):
    """The serial line to the firmware in QEMU."""

    def __init__(self, port: str, process: subprocess.Popen, log: Path, timeout: float = REPLY_TIMEOUT) -> None:
        super().__init__(port, 115200, process, log, timeout, "QEMU")


class QemuSimulator(Simulator):
    """Common part of the QEMU kinds."""

    qemu = ""
    nm = ""
    size_tool = ""

    def machine_args(self, board: Board) -> List[str]:
        """QEMU's machine options for the board's stand-in."""
        raise NotImplementedError

    def command(self, board: Board, firmware: str, serial: str, semihosting_args: str = "") -> List[str]:
        """QEMU's command line for the firmware: the firmware's UART on `serial` (pty, stdio), no display or
        monitor, semihosting (exit status, saves) with `semihosting_args` (",arg=..." items) appended."""
        return (
            [self.qemu]
            + self.machine_args(board)
            + [
                "-display",
                "none",
                "-monitor",
                "none",
                "-serial",
                serial,
                "-semihosting-config",
                "enable=on,target=native" + semihosting_args,
                "-kernel",
                firmware,
            ]
        )

    def serve_spec(
        self, firmware: Path, board: Board, project: Path, store: Optional[Path], sensor: Optional[Path] = None
    ) -> ProcessSpec:
        """QEMU with the firmware's UART on a pty (QEMU serves client after client), saves in `store` (default:
        store_path) and the sensor reading the file `sensor` (copied beside the store, where QEMU runs)."""
        require_tools(self.qemu)
        firmware = Path(firmware).resolve()
        store = Path(store or self.store_path(project, board)).resolve()
        store.parent.mkdir(parents=True, exist_ok=True)
        if len(store.name) > 200:
            raise SimError(
                f"the store file name {store.name!r} is too long (at most 200 characters: the firmware "
                f"reads it from the semihosting command line into a 256-byte buffer)"
            )
        # QEMU runs in the store's folder; the firmware opens the store by its name (semihosting paths are
        # relative to QEMU's working folder), given on the semihosting command line
        played = ""
        if sensor is not None:  # the firmware reads its name up to a space into 64 bytes: a short name beside the store
            near = store.parent / f"mcutrain_sensor_{self.env_name(board)}.bin"
            if Path(sensor).resolve() != near.resolve():
                shutil.copyfile(sensor, near)
            played = ",arg=sensor=" + _qemu_opt(near.name)
        args = ",arg=firmware" + played + ",arg=store=" + _qemu_opt(store.name)
        cmd = self.command(board, str(firmware), "pty", args)
        return ProcessSpec(cmd, firmware.parent / "qemu.log", "QEMU", START_TIMEOUT, store, cwd=store.parent)

    def launch(
        self,
        firmware: Path,
        board: Board,
        project: Path,
        measure: bool,
        store: Optional[Path],
        sensor: Optional[Path] = None,
    ) -> SimSession:
        """Start the firmware in QEMU with its UART on a pty, saves in `store` (default: store_path) and the sensor
        reading `sensor`; with measure, the TCG plugin counts the instructions of the marked regions."""
        spec = self.serve_spec(firmware, board, project, store, sensor)
        firmware, store, cmd, log = Path(firmware).resolve(), spec.store, spec.cmd, spec.log
        run_dir = firmware.parent
        plugin_out: Optional[Path] = None
        if measure:
            plugin = build_plugin()
            names = [n for pair in REGIONS.values() for n in pair]
            addr = symbol_addresses(self.nm, firmware, names)
            plugin_out = run_dir / "insns.txt"
            plugin_out.unlink(missing_ok=True)
            args = [str(plugin), "out=" + str(plugin_out)] + [
                f"region={name}:0x{addr[b]:x}:0x{addr[e]:x}" for name, (b, e) in REGIONS.items()
            ]
            cmd += ["-plugin", ",".join(_qemu_opt(a) for a in args)]
        dev = launch_process(
            cmd, log, "QEMU", START_TIMEOUT, lambda port, proc: QemuLink(port, proc, log), cwd=store.parent
        )
        extra = {
            "command": cmd,
            "log": log,
            "plugin_out": plugin_out,
            "store": store,
            "port": dev.link.port,
            "machine": (board.sim or {}).get("machine"),
        }
        return SimSession(dev, board, self, self.env_name(board), firmware, extra)

    def report(self, session: SimSession) -> Dict[str, Any]:
        """QUIT the firmware and collect: instructions per PREDICT and per TRAIN step (when measured: region
        total / pairs; 'marker_overhead' is what one empty marker pair costs and is included in both),
        static RAM and flash of the ELF, peak stack (STATS)."""
        stats, code = quit_process(session, "QEMU", EXIT_TIMEOUT)
        if stats is None:  # QEMU ended before the report: say why
            raise session.device.link.why_ended()
        stack_peak, stack_avail, saves = stats
        if code != 0:
            raise SimError(f"QEMU ended with status {code}: {Path(session.extra['log']).read_text(errors='replace')}")
        if stack_avail and stack_peak >= stack_avail:  # the M0 has no stack guard: the paint tells
            raise SimError(
                f"stack overflow: the firmware used all {stack_avail} B of its stack (and maybe more); "
                f"give the board more RAM or the model less (see the memory plan)"
            )
        sizes = elf_sizes(self.size_tool, session.firmware)
        rep: Dict[str, Any] = {
            "board": session.board.name,
            "simulator": self.kind,
            "machine": session.extra.get("machine"),
            "core": session.board.core,
            "unit": "instructions",
            "predict": None,
            "train": None,
            "predict_calls": 0,
            "train_calls": 0,
            "marker_overhead": None,
            "insn_total": None,
            "ram_static": sizes["ram_static"],
            "flash": sizes["flash"],
            "text": sizes["text"],
            "data": sizes["data"],
            "bss": sizes["bss"],
            "stack_peak": stack_peak,
            "stack_available": stack_avail,
            "saves": saves,
        }
        out = session.extra.get("plugin_out")
        if out is not None:
            if not Path(out).is_file():
                raise SimError(f"the instruction-counting plugin wrote no results ({out})")
            res = parse_plugin_output(Path(out).read_text())
            rep["insn_total"] = res["insn_total"]
            regions = res["regions"]
            for name in ("predict", "train"):
                r = regions.get(name)
                if r and r["pairs"]:
                    rep[name] = r["insns"] / r["pairs"]
                    rep[f"{name}_calls"] = r["pairs"]
                    rep[f"{name}_min"], rep[f"{name}_max"] = r["min"], r["max"]
            empty = regions.get("empty")
            if empty and empty["pairs"]:
                rep["marker_overhead"] = empty["insns"] / empty["pairs"]
        return rep


class QemuArmSimulator(QemuSimulator):
    """Cortex-M boards in qemu-system-arm."""

    kind = "qemu-arm"
    qemu = "qemu-system-arm"
    nm = "arm-none-eabi-nm"
    size_tool = "arm-none-eabi-size"
    tools = ["qemu-system-arm", "arm-none-eabi-gcc"]

    def machine_args(self, board: Board) -> List[str]:
        return ["-M", (board.sim or {})["machine"]]


class QemuRiscvSimulator(QemuSimulator):
    """The ESP32-C3 (rv32imc) in qemu-system-riscv32 -M virt."""

    kind = "qemu-riscv32"
    qemu = "qemu-system-riscv32"
    nm = "riscv64-unknown-elf-nm"
    size_tool = "riscv64-unknown-elf-size"
    tools = ["qemu-system-riscv32", "riscv64-unknown-elf-gcc"]

    def machine_args(self, board: Board) -> List[str]:
        return ["-M", (board.sim or {}).get("machine", "virt"), "-m", "128M", "-bios", "none"]


SIMULATORS[QemuArmSimulator.kind] = QemuArmSimulator
SIMULATORS[QemuRiscvSimulator.kind] = QemuRiscvSimulator
