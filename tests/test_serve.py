"""`mcutrain serve`: a simulated board kept running as a serial device. The README's walk-through (train,
export, serve, then predict -> train -> pull -> eval through `mcutrain device`) runs command for command on
a board in QEMU, in simavr and natively, each command a connection of its own to the one running board."""

from __future__ import annotations

import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import numpy as np
import pytest
from click.testing import CliRunner, Result

from helpers import assert_same_bits
from mcutrain.cli import main
from mcutrain.exporter.client import Device
from mcutrain.modelfile import load_model

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## A simulated board as a device"
PORT_LINE = re.compile(r" at (/dev/\S+)$", re.M)


def walkthrough() -> List[List[str]]:
    """The commands of the README's simulated-device section, as argument lists (comments dropped)."""
    text = README.read_text(encoding="utf-8")
    assert SECTION in text, "the README lost its simulated-device walk-through"
    block = text.split(SECTION, 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.split("#", 1)[0].strip()]


def on_board(args: List[str], board: str) -> List[str]:
    """The command with its --board replaced."""
    return [board if i and args[i - 1] == "--board" else a for i, a in enumerate(args)]


def entry_point() -> str:
    """The installed `mcutrain` script of this Python."""
    exe = Path(sys.executable).parent / "mcutrain"
    assert exe.is_file(), "the mcutrain entry point is not installed: run `pip install -e .`"
    return str(exe)


class Served:
    """`mcutrain serve ...` running as a process of its own, as in the user's second terminal."""

    def __init__(self, args: List[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [entry_point(), *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.out = b""
        self.port = self._read_until(PORT_LINE, 240).group(1)

    def _read_until(self, pattern: re.Pattern, timeout: float) -> re.Match:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = pattern.search(self.out.decode(errors="replace"))
            if m:
                return m
            if select.select([self.proc.stdout], [], [], 0.2)[0]:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk and self.proc.poll() is not None:
                    break
                self.out += chunk
        raise AssertionError(f"mcutrain serve printed no port: {self.out.decode(errors='replace')}")

    def stop(self) -> Tuple[int, str]:
        """Ctrl-C, as the user stops it: (exit status, everything it printed)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            rest, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rest, _ = self.proc.communicate()
        return self.proc.returncode, (self.out + rest).decode(errors="replace")


def run(args: List[str], env: Dict[str, str]) -> Result:
    r = CliRunner().invoke(main, args, env=env)
    assert r.exit_code == 0, f"mcutrain {shlex.join(args)}: {r.output}"
    return r


def eval_loss(output: str) -> float:
    m = re.search(r"cross_entropy loss\s+([0-9.e+-]+)", output)
    assert m, output
    return float(m.group(1))


@pytest.fixture
def in_tmp(tmp_path: Path, pio_core: Path) -> Iterator[Path]:
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


@pytest.mark.parametrize("board", ["nano33ble", "uno", "native"])
def test_the_readme_walkthrough_runs_on_a_served_simulated_board(in_tmp: Path, board: str) -> None:
    """The README's commands, as written (the board swapped): serve prints the port, every device command
    is a new connection to the same running board, which keeps what it learned between them; the device's
    outputs are the host's bits, the pulled model is what the device trained (step 1000) and evaluates
    better than the exported one; more connections after the walk-through still reach the board, and
    Ctrl-C stops it cleanly."""
    env: Dict[str, str] = {}
    served = None
    outputs: Dict[str, str] = {}
    try:
        for args in walkthrough():
            args = on_board(args, board)
            if args[0] == "export":
                name, _, value = args[1].partition("=")
                assert name == "MCUTRAIN_PORT" and served is not None and value.startswith("/dev/")
                env[name] = served.port  # the port serve printed, not the README's example
            elif args[:2] == ["mcutrain", "serve"]:
                served = Served(args[1:], in_tmp)
                assert served.proc.poll() is None
            else:
                assert args[0] == "mcutrain", args
                outputs[" ".join(args[1:3])] = run(args[1:], env).output
        assert served is not None and "device pull" in outputs and "eval learned.mct" in outputs

        # predict: the device's outputs are the host network's bits
        lines = outputs["device predict"].strip().splitlines()
        assert lines[0] == "y0,y1,class"
        got = np.array([float(v) for v in lines[1].split(",")[:2]], np.float32)
        host = load_model(in_tmp / "parity.mct").net.forward(np.array([[0, 1, 1, 0]], np.float32))[0]
        assert_same_bits(got, host, "device predict against the host")
        assert int(lines[1].split(",")[2]) == int(np.argmax(host))

        # train -> pull -> eval: the device trained 1000 steps and the pulled model is better than the export
        assert "trained on 1000 samples" in outputs["device train"] and "device step 1000" in outputs["device train"]
        learned = load_model(in_tmp / "learned.mct")
        assert learned.metadata["device"]["step"] == 1000
        before = eval_loss(run(["eval", "parity.mct", "--problem", "parity4"], env).output)
        after = eval_loss(outputs["eval learned.mct"])
        assert after < 0.9 * before, (before, after)

        # more clients, one after another, reach the same board, which kept its step
        for _ in range(3):
            with Device.open(served.port, timeout=30) as dev:
                assert dev.info().step == 1000
        assert served.proc.poll() is None, "the board stopped between clients"
    finally:
        if served is not None:
            code, text = served.stop()
    assert code == 0 and f"stopped the simulated {board}" in text, text


def test_serve_refuses_a_folder_that_is_not_an_exported_project(in_tmp: Path) -> None:
    r = CliRunner().invoke(main, ["serve", str(in_tmp)])
    assert r.exit_code == 1 and "not an exported project" in r.output and "mcutrain export" in r.output


def running_firmware(project: Path) -> List[str]:
    """Command lines of processes that run a firmware of the project (its build folder)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(project / ".pio").encode() in a for a in args):
            found.append(" ".join(a.decode(errors="replace") for a in args))
    return found


def test_device_sim_starts_a_board_for_one_command_and_stops_it(in_tmp: Path) -> None:
    """`mcutrain device ... --sim PROJECT`: no port needed; each command has a board of its own, which ends with
    the command; what a command saved is there at the next one's boot."""
    run(["train", "--net", "linear:4x8,tanh,linear:8x2,softmax", "--problem", "parity4", "--steps", "50"], {})
    run(["export", "model.mct", "--board", "native", "-o", "fw"], {})
    r = run(["device", "train", "--sim", "fw", "--problem", "parity4", "--samples", "20", "--save"], {})
    assert "device step 20" in r.output and "saved (#1)" in r.output
    assert running_firmware(in_tmp / "fw") == []
    info = run(["device", "info", "--sim", "fw", "--project", "fw"], {}).output
    rows = {ln[:22].strip(): ln[22:].strip() for ln in info.splitlines()[2:]}
    assert rows["loaded a save at boot"] == "yes" and rows["training step"] == "20", info
    assert running_firmware(in_tmp / "fw") == []
    r = CliRunner().invoke(main, ["device", "info"], env={"MCUTRAIN_PORT": ""})
    assert r.exit_code == 1 and "--port" in r.output and "--sim PROJECT" in r.output
