"""Run an exported project's firmware without hardware: natively, or in the simulator that stands in
for the board (QEMU for Cortex-M and RISC-V, simavr for AVR). The device client then talks to it
over a pty exactly as to a real board.

    with sim.start(project_dir, board) as s:
        s.device.predict(x)
        report = s.report()        # instructions or cycles per call, RAM, flash

Each simulator kind is a `Simulator` subclass registered in SIMULATORS by `kind` (boards/*.toml [sim]).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Type

from . import pio
from .boards import Board
from .client import Device


class SimError(RuntimeError):
    """A simulation that cannot run (missing simulator or toolchain, no stand-in for the board, a crash);
    the message says what to install or change."""


APT_HINT = {
    "qemu-system-arm": "qemu-system-arm", "qemu-system-riscv32": "qemu-system-misc",
    "arm-none-eabi-gcc": "gcc-arm-none-eabi libnewlib-arm-none-eabi",
    "riscv64-unknown-elf-gcc": "gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf",
    "avr-gcc": "gcc-avr avr-libc", "simavr": "simavr libsimavr-dev", "gcc": "gcc",
}


def require_tools(*tools: str) -> None:
    """SimError naming the Debian packages to install when a tool is not on PATH."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pkgs = " ".join(dict.fromkeys(APT_HINT.get(t, t) for t in missing))
        raise SimError(f"{', '.join(missing)} not found: install it (Debian/Ubuntu: sudo apt-get install {pkgs})")


def cache_dir() -> Path:
    """Where built helper tools (QEMU plugin, simavr harness) are kept."""
    d = Path(os.environ.get("MCUTRAIN_CACHE") or Path.home() / ".cache" / "mcutrain")
    d.mkdir(parents=True, exist_ok=True)
    return d


@dataclass
class SimSession:
    """A running simulated (or native) firmware and the device client connected to it."""
    device: Device
    board: Board
    sim: "Simulator"
    env: str
    firmware: Path
    extra: Dict[str, Any] = field(default_factory=dict)
    _report: Optional[Dict[str, Any]] = None

    def report(self) -> Dict[str, Any]:
        """Stops the firmware (QUIT) and returns the measurements (see Simulator.report)."""
        if self._report is None:
            self._report = self.sim.report(self)
        return self._report

    def close(self, quiet: bool = False) -> None:
        """Stop the firmware if it still runs (through report(), whose errors, e.g. a stack overflow the
        simulator saw, are raised unless quiet)."""
        try:
            process = getattr(self.device.link, "process", None) or self.device.process
            ended = process is not None and process.poll() is not None
            if self._report is None and not ended:   # an ended simulator was reported when it ended
                try:
                    self.report()
                except Exception:
                    if not quiet:
                        raise
        finally:
            self.device.close()

    def __enter__(self) -> "SimSession":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        # an error inside the block wins over one from stopping the firmware
        self.close(quiet=exc_type is not None)


class Simulator:
    """One kind of stand-in: how to build for it and how to run the firmware in it."""
    kind = ""
    tools: List[str] = []

    def env_name(self, board: Board) -> str:
        """The platformio.ini env that builds for this simulator."""
        return f"sim-{board.name}"

    def firmware_path(self, project: Path, board: Board) -> Path:
        """The built firmware."""
        return project / ".pio" / "build" / self.env_name(board) / "firmware.elf"

    def store_path(self, project: Path, board: Board) -> Path:
        """The host file that stands in for the device's storage (one per env: saves of one build are not
        another's)."""
        return Path(project) / f"mcutrain_store_{self.env_name(board)}.bin"

    def launch(self, firmware: Path, board: Board, project: Path, measure: bool,
               store: Optional[Path]) -> SimSession:
        """Start the firmware and connect a Device to it."""
        raise NotImplementedError

    def report(self, session: SimSession) -> Dict[str, Any]:
        """End the run and return {'board', 'simulator', 'predict', 'train' (instructions or cycles per
        call, with 'unit'), 'ram_static', 'stack_peak', 'flash', ...}."""
        raise NotImplementedError


class NativeSimulator(Simulator):
    """The firmware built as a program for this computer (env:native), over a pty."""
    kind = "native"
    tools = ["gcc"]

    def env_name(self, board: Board) -> str:
        return "native"

    def firmware_path(self, project: Path, board: Board) -> Path:
        return project / ".pio" / "build" / "native" / "program"

    def launch(self, firmware: Path, board: Board, project: Path, measure: bool,
               store: Optional[Path]) -> SimSession:
        env = dict(os.environ, MCUTRAIN_STORE=str(store or self.store_path(project, board)))
        dev = Device.spawn([str(firmware), "--pty"], env=env)
        return SimSession(dev, board, self, "native", firmware)

    def report(self, session: SimSession) -> Dict[str, Any]:
        """QUIT the program; a host build measures no instructions, memory or stack, only its saves."""
        _, _, saves = session.device.stats()
        session.device.quit()
        return {"board": session.board.name, "simulator": "native", "unit": None, "predict": None,
                "train": None, "ram_static": None, "stack_peak": None, "flash": None, "saves": saves}


SIMULATORS: Dict[str, Type[Simulator]] = {"native": NativeSimulator}


def _register_kinds() -> None:
    """Import the modules that register the QEMU and simavr kinds."""
    import importlib
    for name in ("sim_qemu", "sim_avr"):
        try:
            importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.{name}":
                raise


class ProcessLink:
    """The serial line (a pty) to a simulator process. Reads and writes notice when the process has ended
    (a crash, a stack overflow, the firmware's exit) instead of waiting for the timeout, and raise the
    SimError that ended() makes, which says why."""

    def __init__(self, port: str, baud: int, process: subprocess.Popen, log: Path, timeout: float,
                 what: str) -> None:
        import serial  # pyserial
        try:
            self._serial = serial.Serial(port, baud, timeout=0.2)
        except (serial.SerialException, OSError) as e:
            raise SimError(f"cannot open {what}'s serial port {port}: {e}") from None
        self.process = process
        self.log = log
        self.timeout = timeout
        self.what = what

    def log_tail(self) -> str:
        """The end of the simulator's log."""
        return self.log.read_text(errors="replace").strip()[-1500:] if self.log.is_file() else ""

    def ended(self) -> SimError:
        """Why the process ended, as an error."""
        return SimError(f"{self.what} ended (exit status {self.process.returncode}) while the host waited for "
                        f"the firmware:\n{self.log_tail()}")

    def _gone(self) -> SimError:
        self.process.wait(timeout=10)      # the pty went away: the process is ending
        return self.ended()

    def read(self, n: int) -> bytes:
        """Up to n bytes; fewer only after `timeout` seconds without them."""
        out = b""
        deadline = time.monotonic() + self.timeout
        while len(out) < n:
            try:
                out += self._serial.read(n - len(out))
            except OSError:       # pyserial's SerialException is an OSError
                raise self._gone() from None
            if len(out) < n:
                if self.process.poll() is not None:
                    raise self.ended()
                if time.monotonic() > deadline:
                    break
        return out

    def write(self, data: bytes) -> int:
        """Send bytes to the firmware."""
        if self.process.poll() is not None:
            raise self.ended()
        try:
            return self._serial.write(data)
        except OSError:
            raise self._gone() from None

    def close(self) -> None:
        """Close the pty."""
        self._serial.close()


def simulator_for(board: Board) -> Simulator:
    """The simulator that stands in for a board; SimError if there is none."""
    _register_kinds()
    kind = board.sim_kind
    if kind is None:
        raise SimError(f"no simulator stands in for {board.name} ({board.title}); build it with "
                       f"`mcutrain build` and flash a real board, or pick another board (see `mcutrain boards`)")
    if kind not in SIMULATORS:
        raise SimError(f"simulator kind {kind!r} of board {board.name} is not available in this mcutrain")
    return SIMULATORS[kind]()


def start(project: Path, board: Board, measure: bool = False, store: Optional[Path] = None,
          build: bool = True) -> SimSession:
    """Build the project for the board's simulator (unless build=False) and start the firmware in it."""
    project = Path(project)
    if not (project / "platformio.ini").is_file():
        raise SimError(f"{project} is not an exported project (no platformio.ini): run `mcutrain export` first")
    sim = simulator_for(board)
    require_tools(*sim.tools)
    if build:
        pio.build(project, sim.env_name(board))
    fw = sim.firmware_path(project, board)
    if not fw.is_file():
        raise SimError(f"{fw} was not built: run `mcutrain build {project} --env {sim.env_name(board)}`")
    return sim.launch(fw, board, project, measure, store)


def run_checked(cmd: List[str], **kw: Any) -> subprocess.CompletedProcess:
    """subprocess.run that turns a failure into SimError with the command's output."""
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SimError(f"{' '.join(cmd[:3])} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-800:]}")
    return r
