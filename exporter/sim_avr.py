"""simavr stand-in: AVR boards (the Uno's ATmega328P) in libsimavr, through mcutrain's own harness.

The firmware (env:sim-BOARD, built with platforms/simavr and ports/port_simavr.c) speaks the protocol
over USART0; the harness (firmware/host_tools/avr_run.c, compiled once into sim.cache_dir() with gcc and
libsimavr) bridges that UART to a pty, so the Device client talks to it as to a board. The harness also
counts the exact cycles between the firmware's markers (one PREDICT's forward pass, one TRAIN step),
tracks the lowest stack pointer, stops the run when the stack grows into the static data (a stack
overflow: SimError with the numbers, never a silent pass), keeps the EEPROM in a file so saves
persist across runs, and plays a file of raw windows back as the sensor (CAPTURE) through an I/O register.
"""

from __future__ import annotations

import json
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
    prebuilt_host_tool,
    quit_process,
    require_tools,
    section_sizes,
)

SIMAVR_HEADER = Path("/usr/include/simavr/sim_avr.h")
START_TIMEOUT = 15.0  # seconds for the harness to offer its pty
REPLY_TIMEOUT = 60.0  # seconds the client waits for an answer (soft-float training is slow)
REGION_NAMES = {0: "predict", 1: "train"}  # port_mark regions
EXIT_OVERFLOW = 97  # the harness's status for a stack overflow


def build_harness() -> Path:
    """The harness (firmware/host_tools/avr_run.c, linked against libsimavr), built once per version into
    sim.cache_dir()."""
    source, cflags, libs, suffix = HOST_TOOLS["avr_run"]
    path = firmware_dir() / Path(source).relative_to("firmware")
    prebuilt = prebuilt_host_tool(path, "avr_run", cflags, libs, suffix)
    if prebuilt is not None:
        return prebuilt
    if not SIMAVR_HEADER.is_file():
        raise SimError("libsimavr not found: install it (Debian/Ubuntu: sudo apt-get install simavr libsimavr-dev)")
    return build_host_tool(path, "avr_run", cflags, libs, suffix)


def avr_sizes(elf: Path) -> Dict[str, int]:
    """{'text', 'data', 'bss', 'flash', 'ram_static'} bytes of an AVR firmware: flash = .text + the .data
    image, static RAM = .data + .bss + .noinit."""
    sec = section_sizes("avr-size", elf)
    data, bss, noinit = sec.get(".data", 0), sec.get(".bss", 0), sec.get(".noinit", 0)
    return {
        "text": sec.get(".text", 0),
        "data": data,
        "bss": bss + noinit,
        "flash": sec.get(".text", 0) + data,
        "ram_static": data + bss + noinit,
    }


def overflow_message(rep: Dict[str, Any], board: str) -> str:
    """The stack overflow the harness found, with its numbers."""
    o = rep.get("overflow") or {}
    static = rep.get("data_size", 0) + rep.get("bss_size", 0)
    floor, ramend = rep.get("ram_floor", 0), rep.get("ramend", 0)
    return (
        f"stack overflow on the simulated {board}: the stack grew {o.get('below_floor', '?')} B into the "
        f"static data (SP 0x{o.get('sp', 0):04x} below ram_floor 0x{floor:04x} at PC 0x{o.get('pc', 0):04x}, "
        f"cycle {o.get('cycle', '?')}): {static} B of static RAM (.data + .bss) leave {ramend + 1 - floor} B "
        f"for the stack (RAM ends at 0x{ramend:04x}); freeze or quantize more layers (--trainable, "
        f"--quant int8) or use a smaller network"
    )


def read_report(path: Path) -> Optional[Dict[str, Any]]:
    """The harness's JSON report, if it wrote one."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class AvrLink(ProcessLink):
    """The serial line to the simulated AVR; a stack overflow the harness saw is reported with its numbers."""

    def __init__(
        self, port: str, process: subprocess.Popen, log: Path, report: Path, board: str, timeout: float = REPLY_TIMEOUT
    ) -> None:
        super().__init__(port, 1000000, process, log, timeout, "the simavr harness")
        self.report_path = report
        self.board = board

    def why_ended(self) -> SimError:
        """The error that says why the harness ended: the stack overflow it found, with the numbers, or its
        status and log."""
        rep = read_report(self.report_path)
        if rep and rep.get("overflow"):
            return SimError(overflow_message(rep, self.board))
        return super().why_ended()


class SimavrSimulator(Simulator):
    """AVR boards in simavr (board files: [sim] kind = "simavr", mcu, freq)."""

    kind = "simavr"
    tools = ["avr-gcc", "gcc"]  # avr-size comes with gcc-avr (binutils-avr)

    def command(
        self,
        harness: str,
        firmware: str,
        board: Board,
        serial: str,
        report: str,
        store: Optional[str] = None,
        max_cycles: int = 0,
        cut_after_eeprom_writes: int = 0,
        serve: bool = False,
        sensor: Optional[str] = None,
    ) -> List[str]:
        """The harness's command line: the board's MCU and clock, the firmware's serial line on `serial` (pty,
        stdio), the JSON report to `report`, the EEPROM image in `store` (none: not kept), stack overflow
        detection at the end of the static data, a cycle limit (0: none), and a power cut right after that many
        EEPROM byte writes (0: none; the harness then ends with status 86); with serve, a host that closes the pty
        ends nothing (the harness waits for the next one); the sensor plays back the file `sensor` (raw windows)."""
        s = board.sim or {}
        cmd = (
            [
                harness,
                firmware,
                f"mcu={s.get('mcu', 'atmega328p')}",
                f"freq={int(s.get('freq', 16000000))}",
                f"serial={serial}",
            ]
            + ([f"eeprom={store}"] if store else [])
            + [f"report={report}", "ram_floor=auto"]
        )
        cmd += [f"max_cycles={max_cycles}"] if max_cycles else []
        cmd += ["serve=1"] if serve else []
        cmd += [f"sensor={sensor}"] if sensor else []
        return cmd + ([f"cut_after_eeprom_writes={cut_after_eeprom_writes}"] if cut_after_eeprom_writes else [])

    def serve_spec(
        self, firmware: Path, board: Board, project: Path, store: Optional[Path], sensor: Optional[Path] = None
    ) -> ProcessSpec:
        """The harness in serve mode: the firmware's UART on a pty that serves client after client, the EEPROM
        image in `store` (default: store_path), the sensor playing back `sensor` (a file of raw windows)."""
        require_tools(*self.tools)
        harness = build_harness()
        firmware = Path(firmware).resolve()
        store = Path(store or self.store_path(project, board)).resolve()
        store.parent.mkdir(parents=True, exist_ok=True)
        report = firmware.parent / "simavr_serve_report.json"
        played = str(Path(sensor).resolve()) if sensor is not None else None
        cmd = self.command(
            str(harness), str(firmware), board, "pty", str(report), str(store), serve=True, sensor=played
        )
        return ProcessSpec(cmd, firmware.parent / "simavr_serve.log", "the simavr harness", START_TIMEOUT, store)

    def launch(
        self,
        firmware: Path,
        board: Board,
        project: Path,
        measure: bool,
        store: Optional[Path],
        sensor: Optional[Path] = None,
        cut_after_eeprom_writes: int = 0,
    ) -> SimSession:
        """Start the firmware in the harness (which always measures: counting cycles costs nothing) with
        the EEPROM image `store` (default: store_path) and connect a Device to its pty; a power cut after
        cut_after_eeprom_writes EEPROM byte writes if that is not 0; the sensor plays back `sensor` (a file of raw
        windows)."""
        require_tools(*self.tools)
        harness = build_harness()
        firmware = Path(firmware).resolve()
        store = Path(store or self.store_path(project, board)).resolve()
        store.parent.mkdir(parents=True, exist_ok=True)
        log = firmware.parent / "simavr.log"
        report = firmware.parent / "simavr_report.json"
        report.unlink(missing_ok=True)
        cmd = self.command(
            str(harness),
            str(firmware),
            board,
            "pty",
            str(report),
            str(store),
            int((board.sim or {}).get("max_cycles", 0)),
            cut_after_eeprom_writes,
            sensor=str(Path(sensor).resolve()) if sensor is not None else None,
        )
        dev = launch_process(
            cmd,
            log,
            "the simavr harness",
            START_TIMEOUT,
            lambda port, proc: AvrLink(port, proc, log, report, board.name),
        )
        extra = {
            "command": cmd,
            "log": log,
            "report": report,
            "store": store,
            "port": dev.link.port,
            "mcu": (board.sim or {}).get("mcu"),
        }
        return SimSession(dev, board, self, self.env_name(board), firmware, extra)

    def report(self, session: SimSession) -> Dict[str, Any]:
        """QUIT the firmware and collect the harness's measurements: exact cycles per PREDICT and per TRAIN
        step (region total / pairs, with min and max), static RAM and flash of the ELF, the peak stack
        the harness saw (exact: the lowest stack pointer) and the one STATS reports (stack painting)."""
        stats, code = quit_process(session, "the simavr harness", EXIT_TIMEOUT)
        stack_painted, stack_avail, saves = stats or (None, None, None)
        rep = read_report(Path(session.extra["report"]))
        log_tail = Path(session.extra["log"]).read_text(errors="replace").strip()[-1500:]
        if rep is None:
            raise SimError(f"the simavr harness ended (status {code}) without a report: {log_tail}")
        if rep.get("overflow") or code == EXIT_OVERFLOW:
            raise SimError(overflow_message(rep, session.board.name))
        if code != 0:
            raise SimError(f"the simavr harness ended with status {code} ({rep.get('reason')}): {log_tail}")
        sizes = avr_sizes(session.firmware)
        peak = int(rep["stack_peak"])
        out: Dict[str, Any] = {
            "board": session.board.name,
            "simulator": self.kind,
            "mcu": (session.board.sim or {}).get("mcu"),
            "core": session.board.core,
            "frequency": rep.get("frequency"),
            "unit": "cycles",
            "predict": None,
            "train": None,
            "predict_calls": 0,
            "train_calls": 0,
            "cycles_total": rep.get("cycles"),
            "ram_static": sizes["ram_static"],
            "flash": sizes["flash"],
            "text": sizes["text"],
            "data": sizes["data"],
            "bss": sizes["bss"],
            "stack_peak": peak,
            "stack_painted": stack_painted,
            "stack_available": stack_avail,
            "saves": saves,
            "ram_total": sizes["ram_static"] + peak,
            "ram_budget": session.board.sim_ram,
            "flash_budget": session.board.flash,
        }
        for reg in rep.get("regions", []):
            name = REGION_NAMES.get(int(reg["region"]))
            if name and reg["pairs"]:
                out[name] = reg["total"] / reg["pairs"]
                out[f"{name}_calls"] = reg["pairs"]
                out[f"{name}_min"], out[f"{name}_max"] = reg["min"], reg["max"]
                out[f"{name}_stack"] = reg["stack_peak"]
        return out


SIMULATORS[SimavrSimulator.kind] = SimavrSimulator
