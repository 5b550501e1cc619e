"""The parts every simulator shares (mcutrain.exporter.sim): host tools built once per version into the
cache, and starting a process that announces the pty of the firmware's serial line. No simulator needed:
gcc and sh stand in for them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mcutrain.exporter import sim
from mcutrain.exporter.sim import SimError

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def test_host_tool_is_built_once_per_source_and_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same source and flags give the same cached file, built once; other flags or another source give
    another file; nothing half-built is left beside them."""
    monkeypatch.setenv("MCUTRAIN_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "tool.c"
    src.write_text("int main(void) { return 7; }\n")
    exe = sim.build_host_tool(src, "tool", ["-O2"])
    assert exe.parent == tmp_path / "cache" and exe.name.startswith("tool-")
    assert subprocess.run([str(exe)]).returncode == 7
    built_at = exe.stat().st_mtime_ns
    assert sim.build_host_tool(src, "tool", ["-O2"]) == exe and exe.stat().st_mtime_ns == built_at
    assert sim.build_host_tool(src, "tool", ["-O1"]) != exe
    src.write_text("int main(void) { return 8; }\n")
    other = sim.build_host_tool(src, "tool", ["-O2"])
    assert other != exe and subprocess.run([str(other)]).returncode == 8
    lib = sim.build_host_tool(src, "tool", ["-shared", "-fPIC"], suffix=".so")
    assert lib.name.endswith(".so")
    assert not list((tmp_path / "cache").glob("*.tmp"))


def test_host_tool_that_does_not_compile_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCUTRAIN_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "broken.c"
    src.write_text("int main(void) { return missing_name; }\n")
    with pytest.raises(SimError, match="missing_name"):
        sim.build_host_tool(src, "broken", ["-O2"])
    assert not list((tmp_path / "cache").iterdir())


def _never_linked(port: str, proc: subprocess.Popen) -> sim.ProcessLink:
    raise AssertionError(f"no link expected, got a pty {port}")


def test_a_process_that_ends_without_a_pty_is_reported_with_its_output(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    with pytest.raises(SimError, match=r"(?s)the simulator did not start \(exit status 3\).*no such machine"):
        sim.launch_process(["sh", "-c", "echo no such machine >&2; exit 3"], log, "the simulator", 10.0, _never_linked)


def test_a_process_that_announces_no_pty_is_stopped(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    with pytest.raises(SimError, match=r"(?s)offered no serial pty within 1 s.*starting"):
        sim.launch_process(
            [sys.executable, "-c", "import time; print('starting', flush=True); time.sleep(60)"],
            log,
            "the simulator",
            1.0,
            _never_linked,
        )


class Stop(Exception):
    """Raised by a test's link factory."""


@pytest.mark.parametrize("announcement", ["PTY {port}", "char device redirected to {port} (label serial0)"])
def test_the_announced_pty_is_connected(tmp_path: Path, announcement: str) -> None:
    """Both ways a pty is announced (mcutrain's harness and native program, QEMU) are understood; the link
    gets the announced port and the process."""
    seen = {}

    def link(port: str, proc: subprocess.Popen) -> sim.ProcessLink:
        seen["port"], seen["proc"] = port, proc
        raise Stop()  # fail to connect: launch_process must then end the process

    line = announcement.format(port="/dev/pts/999")
    with pytest.raises(Stop):
        sim.launch_process(
            [sys.executable, "-c", f"import time; print({line!r}, flush=True); time.sleep(60)"],
            tmp_path / "run.log",
            "the simulator",
            10.0,
            link,
        )
    assert seen["port"] == "/dev/pts/999"
    assert seen["proc"].poll() is not None


# a process that serves a pty and never reads it (a firmware that has stopped reading its line)
DEAF = (
    "import os, time, tty; m, s = os.openpty(); tty.setraw(m); "
    "print('PTY ' + os.ttyname(s), flush=True); time.sleep(60)"
)


def test_a_write_the_firmware_does_not_take_gives_up_after_the_timeout(tmp_path: Path) -> None:
    """A megabyte to a line nobody reads fills the pty's buffers: the write ends with an error after the
    link's timeout, from the simulator's link (SimError) and from a port opened with Device.open (pyserial's
    write timeout, an OSError), instead of waiting for ever."""
    import time

    import serial

    from mcutrain.exporter.client import Device

    def link(port: str, proc: subprocess.Popen) -> sim.ProcessLink:
        return sim.ProcessLink(port, 115200, proc, tmp_path / "run.log", 1.0, "the deaf program")

    dev = sim.launch_process([sys.executable, "-c", DEAF], tmp_path / "run.log", "the deaf program", 10.0, link)
    try:
        t0 = time.monotonic()
        with pytest.raises(SimError, match="the deaf program took no input for 1 s"):
            dev.link.write(bytes(1 << 20))
        assert time.monotonic() - t0 < 10
        port = Device.open(dev.link.port, timeout=1.0)
        try:
            with pytest.raises(serial.SerialTimeoutException):
                port.link.write(bytes(1 << 20))
        finally:
            port.close()
    finally:
        dev.close()
