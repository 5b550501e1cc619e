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
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type

from .. import processes
from ..errors import McuTrainError
from ..host_build import host_tool_file
from . import pio
from .boards import Board
from .client import Device
from .paths import firmware_dir


class SimError(McuTrainError, RuntimeError):
    """A simulation that cannot run (missing simulator or toolchain, no stand-in for the board, a crash);
    the message says what to install or change."""


NATIVE_TIMEOUT = 10.0  # seconds the native program may take to offer its pty, and to answer
EXIT_TIMEOUT = 10.0  # seconds a simulator (or the native program) may take to end after QUIT
# how a simulator announces the pty of the firmware's serial line on its output: mcutrain's simavr harness
# and the native program print "PTY /dev/pts/N", QEMU "char device redirected to /dev/pts/N (label ...)"
PTY_ANNOUNCEMENT = re.compile(r"(?:^PTY |char device redirected to )(/dev/\S+)", re.M)


APT_HINT = {
    "qemu-system-arm": "qemu-system-arm",
    "qemu-system-riscv32": "qemu-system-misc",
    "arm-none-eabi-gcc": "gcc-arm-none-eabi libnewlib-arm-none-eabi",
    "riscv64-unknown-elf-gcc": "gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf",
    "avr-gcc": "gcc-avr avr-libc",
    "simavr": "simavr libsimavr-dev",
    "gcc": "gcc",
}


def require_tools(*tools: str) -> None:
    """SimError naming the Debian packages to install when a tool is not on PATH."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pkgs = " ".join(dict.fromkeys(APT_HINT.get(t, t) for t in missing))
        raise SimError(f"{', '.join(missing)} not found: install it (Debian/Ubuntu: sudo apt-get install {pkgs})")


def cache_dir() -> Path:
    """Where built host tools (QEMU plugin, simavr harness) are kept: $MCUTRAIN_CACHE, else
    ~/.cache/mcutrain."""
    d = Path(os.environ.get("MCUTRAIN_CACHE") or Path.home() / ".cache" / "mcutrain")
    d.mkdir(parents=True, exist_ok=True)
    return d


def prebuilt_host_tool(
    source: Path, name: str, cflags: Sequence[str], libs: Sequence[str] = (), suffix: str = ""
) -> Optional[Path]:
    """The copy of a host tool built into the package (firmware/host_tools/bin, by setup.py) for exactly this
    source and these flags, or None."""
    file = host_tool_file(name, Path(source).read_bytes(), list(cflags), list(libs), suffix)
    f = firmware_dir() / "host_tools" / "bin" / file
    return f if f.is_file() else None


def build_host_tool(source: Path, name: str, cflags: Sequence[str], libs: Sequence[str] = (), suffix: str = "") -> Path:
    """A host tool (a program, or a shared object with cflags -shared -fPIC): the package's prebuilt copy
    (prebuilt_host_tool), else compiled with the host gcc from one C file, once per version of the source
    and the flags: cache_dir()/NAME-DIGEST+SUFFIX. It is
    compiled under a temporary name and renamed, so a parallel session never runs half a file. SimError
    with gcc's messages when it does not compile."""
    prebuilt = prebuilt_host_tool(source, name, cflags, libs, suffix)
    if prebuilt is not None:
        return prebuilt
    require_tools("gcc")
    source = Path(source)
    out = cache_dir() / host_tool_file(name, source.read_bytes(), list(cflags), list(libs), suffix)
    if not out.is_file():
        tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
        run_checked(["gcc", *cflags, str(source), "-o", str(tmp), *libs])
        os.replace(tmp, out)
    return out


@dataclass
class SimSession:
    """A running simulated (or native) firmware and the device client connected to it."""

    device: Device
    board: Board
    sim: Simulator
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
            process = self.device.process
            ended = process is not None and process.poll() is not None
            if self._report is None and not ended:  # an ended simulator was reported when it ended
                try:
                    self.report()
                except Exception:
                    if not quiet:
                        raise
        finally:
            self.device.close()

    def __enter__(self) -> SimSession:
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

    def launch(
        self,
        firmware: Path,
        board: Board,
        project: Path,
        measure: bool,
        store: Optional[Path],
        sensor: Optional[Path] = None,
    ) -> SimSession:
        """Start the firmware and connect a Device to it (its sensor plays back `sensor`, a file of raw windows
        as sensor_file writes it)."""
        raise NotImplementedError

    def report(self, session: SimSession) -> Dict[str, Any]:
        """End the run and return {'board', 'simulator', 'predict', 'train' (instructions or cycles per
        call, with 'unit'), 'ram_static', 'stack_peak', 'flash', ...}."""
        raise NotImplementedError

    def serve_spec(
        self, firmware: Path, board: Board, project: Path, store: Optional[Path], sensor: Optional[Path] = None
    ) -> ProcessSpec:
        """How to start the firmware as a serial device that serves client after client (mcutrain serve), its
        sensor playing back `sensor` (a file of raw windows)."""
        raise NotImplementedError


@dataclass
class ProcessSpec:
    """A simulator's command line for a firmware, where it logs, and what it is called in messages."""

    cmd: List[str]
    log: Path
    what: str
    start_timeout: float
    store: Path
    cwd: Optional[Path] = None
    env: Optional[Dict[str, str]] = None


class NativeSimulator(Simulator):
    """The firmware built as a program for this computer (env:native), over a pty."""

    kind = "native"
    tools = ["gcc"]

    def env_name(self, board: Board) -> str:
        return "native"

    def firmware_path(self, project: Path, board: Board) -> Path:
        return project / ".pio" / "build" / "native" / "program"

    def serve_spec(
        self, firmware: Path, board: Board, project: Path, store: Optional[Path], sensor: Optional[Path] = None
    ) -> ProcessSpec:
        """The program with --pty (it serves client after client; saves go to `store`, default store_path; its
        sensor reads the file `sensor`)."""
        store = Path(store or self.store_path(project, board)).resolve()
        env = dict(os.environ, MCUTRAIN_STORE=str(store))
        env.pop("MCUTRAIN_SENSOR", None)
        if sensor is not None:
            env["MCUTRAIN_SENSOR"] = str(Path(sensor).resolve())
        return ProcessSpec(
            [str(Path(firmware).resolve()), "--pty"],
            Path(firmware).parent / "native.log",
            "the native firmware",
            NATIVE_TIMEOUT,
            store,
            env=env,
        )

    def launch(
        self,
        firmware: Path,
        board: Board,
        project: Path,
        measure: bool,
        store: Optional[Path],
        sensor: Optional[Path] = None,
    ) -> SimSession:
        """Start the program with --pty (saves go to `store`, default store_path; the sensor reads `sensor`) and
        connect a Device."""
        spec = self.serve_spec(firmware, board, project, store, sensor)
        log = spec.log
        dev = launch_process(
            spec.cmd,
            log,
            spec.what,
            spec.start_timeout,
            lambda port, proc: ProcessLink(port, 115200, proc, log, NATIVE_TIMEOUT, "the native firmware"),
            env=spec.env,
        )
        extra = {"command": spec.cmd, "log": log, "store": spec.store, "port": dev.link.port}
        return SimSession(dev, board, self, "native", firmware, extra)

    def report(self, session: SimSession) -> Dict[str, Any]:
        """QUIT the program; a host build measures no instructions, memory or stack, only its saves."""
        stats, _ = quit_process(session, "the native firmware", EXIT_TIMEOUT)
        return {
            "board": session.board.name,
            "simulator": "native",
            "unit": None,
            "predict": None,
            "train": None,
            "ram_static": None,
            "stack_peak": None,
            "flash": None,
            "saves": stats[2] if stats else None,
        }


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
    SimError that why_ended() makes. A write that the firmware does not take within `timeout` seconds
    (it stopped reading its line) is a SimError too."""

    def __init__(self, port: str, baud: int, process: subprocess.Popen, log: Path, timeout: float, what: str) -> None:
        import serial  # pyserial

        try:
            self._serial = serial.Serial(port, baud, timeout=0.2, write_timeout=timeout)
        except (serial.SerialException, OSError) as e:
            raise SimError(f"cannot open {what}'s serial port {port}: {e}") from None
        self._write_timed_out = serial.SerialTimeoutException
        self.port = port
        self.process = process
        self.log = log
        self.timeout = timeout
        self.what = what

    def log_tail(self) -> str:
        """The end of the simulator's log."""
        return self.log.read_text(errors="replace").strip()[-1500:] if self.log.is_file() else ""

    def why_ended(self) -> SimError:
        """The error that says why the process ended (its status and the end of its log)."""
        return SimError(
            f"{self.what} ended (exit status {self.process.returncode}) while the host waited for "
            f"the firmware:\n{self.log_tail()}"
        )

    def _why_pty_closed(self) -> SimError:
        """why_ended(), once the process that closed the pty has ended."""
        self.process.wait(timeout=10)  # the pty went away: the process is ending
        return self.why_ended()

    def read(self, n: int) -> bytes:
        """Up to n bytes; fewer only after `timeout` seconds without them."""
        out = b""
        deadline = time.monotonic() + self.timeout
        while len(out) < n:
            try:
                out += self._serial.read(n - len(out))
            except OSError:  # pyserial's SerialException is an OSError
                raise self._why_pty_closed() from None
            if len(out) < n:
                if self.process.poll() is not None:
                    raise self.why_ended()
                if time.monotonic() > deadline:
                    break
        return out

    def write(self, data: bytes) -> int:
        """Send bytes to the firmware."""
        if self.process.poll() is not None:
            raise self.why_ended()
        try:
            return self._serial.write(data)
        except self._write_timed_out:
            raise SimError(
                f"{self.what} took no input for {self._serial.write_timeout:g} s (the firmware stopped reading "
                f"its serial line):\n{self.log_tail()}"
            ) from None
        except OSError:
            raise self._why_pty_closed() from None

    def close(self) -> None:
        """Close the pty."""
        self._serial.close()


def launch_process(
    cmd: Sequence[str],
    log: Path,
    what: str,
    start_timeout: float,
    make_link: Callable[[str, subprocess.Popen], ProcessLink],
    cwd: Optional[Path] = None,
    env: Optional[Mapping[str, str]] = None,
) -> Device:
    """Start a simulator (or the native program) that serves the firmware's serial line on a pty and
    announces it on its output (PTY_ANNOUNCEMENT), and connect a Device to it through make_link(port,
    process). The process's stdout and stderr go to log. SimError with the end of the log when the process
    ends, or announces nothing within start_timeout seconds; the process is then stopped."""
    proc = _start_logged(cmd, log, cwd, env)
    try:
        return Device(make_link(_wait_for_pty(proc, log, what, start_timeout), proc), proc)
    except BaseException:
        processes.stop(proc, 0)
        raise


def _start_logged(
    cmd: Sequence[str],
    log: Path,
    cwd: Optional[Path],
    env: Optional[Mapping[str, str]],
    new_session: bool = False,
) -> subprocess.Popen:
    """Start a process with its stdout and stderr in log (in a session of its own with new_session, so a
    Ctrl-C on the terminal reaches only the caller, which stops it in order)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        return processes.spawn(
            list(cmd),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=None if cwd is None else str(cwd),
            env=None if env is None else dict(env),
            start_new_session=new_session,
        )


def start_served(spec: ProcessSpec) -> Tuple[subprocess.Popen, str]:
    """Start a process that serves a firmware's serial line on a pty, without connecting to it: (the process,
    the pty it announced). SimError (the process stopped) when it ends or announces nothing in time."""
    proc = _start_logged(spec.cmd, spec.log, spec.cwd, spec.env, new_session=True)
    try:
        return proc, _wait_for_pty(proc, spec.log, spec.what, spec.start_timeout)
    except BaseException:
        processes.stop(proc, 0)
        raise


def _wait_for_pty(proc: subprocess.Popen, log: Path, what: str, timeout: float) -> str:
    """The pty a starting process announces in its log."""
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text(errors="replace") if log.is_file() else ""
        m = PTY_ANNOUNCEMENT.search(text)
        if m:
            return m.group(1)
        if proc.poll() is not None:
            raise SimError(f"{what} did not start (exit status {proc.returncode}): {text.strip()[-1500:]}")
        if time.monotonic() > deadline:
            raise SimError(f"{what} offered no serial pty within {timeout:.0f} s: {text.strip()[-1500:]}")
        time.sleep(0.01)


def quit_process(session: SimSession, what: str, timeout: float) -> Tuple[Optional[Tuple[int, int, int]], int]:
    """End a session's firmware: STATS (peak stack, stack available, saves), QUIT, and wait up to timeout
    seconds for the process to end (killed after that: SimError). Returns (STATS, or None when the process
    had already ended; its exit status)."""
    dev, proc = session.device, session.device.process
    assert proc is not None, "a simulated firmware has a process"
    stats = None
    if proc.poll() is None:
        stats = dev.stats()
        try:
            dev.quit()
        except SimError:
            if proc.poll() is None:  # ended before its reply was read: that is what QUIT asks for
                raise
    try:
        return stats, proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        processes.stop(proc, 0)
        raise SimError(f"{what} did not end after QUIT (killed); log: {session.extra.get('log')}") from None


def simulator_for(board: Board) -> Simulator:
    """The simulator that stands in for a board; SimError if there is none."""
    _register_kinds()
    kind = board.sim_kind
    if kind is None:
        raise SimError(
            f"no simulator stands in for {board.name} ({board.title}); build it with "
            f"`mcutrain build` and flash a real board, or pick another board (see `mcutrain boards`)"
        )
    if kind not in SIMULATORS:
        raise SimError(f"simulator kind {kind!r} of board {board.name} is not available in this mcutrain")
    return SIMULATORS[kind]()


def sensor_file(project: Path, board: Board, recording: Path) -> Path:
    """The file of raw windows a simulated board's sensor plays back (in the project, one per env), written from a
    recording (a WAV, a folder of WAVs, an NPZ or a CSV: featdata.sensor_windows) for the pipeline of the project's
    model. SimError when the project's model takes no raw windows."""
    from ..featdata import FrontEnd, sensor_windows
    from ..modelfile import load_model
    from .paths import HOST_MODEL

    model = Path(project) / HOST_MODEL
    d = load_model(model).metadata.get("frontend") if model.is_file() else None
    fe = FrontEnd.from_dict(d) if d else None
    if fe is None or fe.spec is None:
        raise SimError(
            f"{project}'s model takes no raw windows, so its board has no sensor: train it with --features and "
            "export it again"
        )
    out = Path(project) / f"mcutrain_sensor_{simulator_for(board).env_name(board)}.bin"
    out.write_bytes(sensor_windows(recording, fe.spec).tobytes())
    return out


def start(
    project: Path,
    board: Board,
    measure: bool = False,
    store: Optional[Path] = None,
    build: bool = True,
    sensor: Optional[Path] = None,
) -> SimSession:
    """Build the project for the board's simulator (unless build=False) and start the firmware in it; its sensor
    plays back the recording `sensor` (see sensor_file)."""
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
    return sim.launch(fw, board, project, measure, store, played)


def section_sizes(size_tool: str, elf: Path) -> Dict[str, int]:
    """{section: bytes} of an ELF file, from `SIZE_TOOL -A -d` (arm-none-eabi-size, avr-size, ...)."""
    sizes: Dict[str, int] = {}
    for line in run_checked([size_tool, "-A", "-d", str(elf)]).stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(".") and parts[1].isdigit():
            sizes[parts[0]] = int(parts[1])
    return sizes


def run_checked(cmd: List[str], **kw: Any) -> subprocess.CompletedProcess:
    """subprocess.run that turns a failure into SimError with the command's output."""
    r = processes.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SimError(f"{' '.join(cmd[:3])} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-800:]}")
    return r
