"""A simulated board kept running as a serial device (`mcutrain serve`): the firmware of an exported
project runs in the board's stand-in (QEMU, simavr, or natively) with its serial line on a pty, and any
number of clients (`mcutrain device ... --port PTY`) connect to it one after another until it is stopped.

    with serve.serve(project, board) as b:
        print(b.port)            # /dev/pts/N: give it to `mcutrain device --port`
        b.wait()                 # until the firmware ends (a client's QUIT) or Ctrl-C
"""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .. import processes
from . import pio
from .boards import Board
from .sim import EXIT_TIMEOUT, ProcessSpec, SimError, require_tools, sensor_file, simulator_for, start_served


@dataclass
class ServedBoard:
    """A running stand-in that serves its firmware's serial line on `port`."""

    board: Board
    port: str
    process: subprocess.Popen
    spec: ProcessSpec
    firmware: Path

    @property
    def store(self) -> Path:
        """The host file that holds the board's saves."""
        return self.spec.store

    def running(self) -> bool:
        """Is the simulator still running?"""
        return self.process.poll() is None

    def wait(self, timeout: Optional[float] = None) -> int:
        """Wait for the simulator to end by itself (a client's QUIT, a crash); its exit status."""
        return self.process.wait(timeout)

    def log_tail(self) -> str:
        """The end of the simulator's log (why it ended)."""
        log = self.spec.log
        return log.read_text(errors="replace").strip()[-1500:] if log.is_file() else ""

    def stop(self) -> Optional[int]:
        """Stop the simulator as Ctrl-C would (SIGINT: simavr writes its EEPROM image first; QEMU and the native
        program write saves as they happen), killed after EXIT_TIMEOUT seconds; its exit status (None: it had
        ended before)."""
        if self.process.poll() is not None:
            return None
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            return processes.stop(self.process, 0)

    def __enter__(self) -> ServedBoard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(
    project: Path, board: Board, store: Optional[Path] = None, build: bool = True, sensor: Optional[Path] = None
) -> ServedBoard:
    """Build the project for the board's stand-in (unless build=False) and start its firmware as a serial device
    that serves client after client; saves go to `store` (default: the project's store file of that
    simulator, the one `mcutrain sim` uses); its sensor (CAPTURE) plays back the recording `sensor` (a WAV, a
    folder of WAVs, an NPZ or a CSV of raw windows). SimError when it cannot start."""
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
    played = sensor_file(project, board, sensor) if sensor is not None else None
    spec = sim.serve_spec(fw, board, project, store, played)
    process, port = start_served(spec)
    return ServedBoard(board, port, process, spec, fw)
