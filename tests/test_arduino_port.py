"""The Arduino port (firmware/app/ports/port_arduino.cpp), used by every real board's env.

On the Uno the port runs on the genuine Arduino AVR core in simavr (tests/test_arduino_core.py). The
32-bit boards' Arduino cores (STM32, nRF52, Teensy, ESP32, RP2040) are downloaded by PlatformIO and not
packaged for Debian, so nothing here can run them: for those the port is compiled here with g++ against a
minimal stand-in of the Arduino API (tests/arduino_stub: Serial on stdin/stdout, EEPROM in a file) and run
on the host: the real firmware code (protocol, saves, the port's Serial and EEPROM use) answers the device
client exactly as the host's twin of the device."""

from __future__ import annotations

import os
import re
import select
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from helpers import assert_device_equals_twin, assert_same_bits, model_flags, onehot_samples, train_lockstep
from mcutrain import Sequential, TrainParams
from mcutrain import layers as L
from mcutrain.exporter.client import Device
from mcutrain.exporter.export import ExportResult, export_project
from mcutrain.exporter.sim import require_tools
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.modelfile import Checkpoint

ROOT = Path(__file__).resolve().parent.parent
STUB = ROOT / "tests" / "arduino_stub"


class PipeLink:
    """The device client's link over a child process's stdin/stdout, with a read timeout."""

    def __init__(self, proc: subprocess.Popen, timeout: float = 10.0) -> None:
        self.proc, self.timeout = proc, timeout

    def read(self, n: int) -> bytes:
        assert self.proc.stdout is not None
        out = b""
        while len(out) < n:
            ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
            if not ready:
                break
            chunk = os.read(self.proc.stdout.fileno(), n - len(out))
            if not chunk:
                break
            out += chunk
        return out

    def write(self, data: bytes) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()
        return len(data)

    def close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            if f:
                f.close()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> ExportResult:
    net = Sequential(L.Linear(8, 12), L.Tanh(), L.Linear(12, 4), L.Softmax()).rand_params(seed=3)
    opt = net.new_momentum(TrainParams(lr=0.05), 0.8)
    # saves keep the optimizer state (the build below gives the port 4,096 B of EEPROM, more than the board file's)
    return export_project(
        Checkpoint(net, opt, {"loss": "cross_entropy"}),
        "nucleo_f401re",
        tmp_path_factory.mktemp("arduino") / "p",
        save="all",
    )


@pytest.fixture(scope="module")
def program(exported: ExportResult) -> Path:
    """The project's firmware with the Arduino port, built with the host's gcc/g++ against the stand-in."""
    require_tools("gcc", "g++")
    p = exported.path
    out = p / "arduino-host"
    out.mkdir()
    inc = [f"-I{p / 'src'}", f"-I{p / 'lib' / 'mcutrain_core' / 'src'}", f"-I{STUB}"]
    flags = (
        [
            "-O1",
            "-ffp-contract=off",
            "-fno-math-errno",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-DMCT_PORT_ARDUINO",
            "-DARDUINO=10819",
            "-DMCT_STORE_BYTES=4096",
        ]
        + model_flags(p)
        + inc
    )
    objs = []
    for src in sorted((p / "src").glob("*.c")) + sorted((p / "lib" / "mcutrain_core" / "src").glob("*.c")):
        obj = out / (src.stem + ".o")
        subprocess.run(["gcc", "-std=c99", "-pedantic", *flags, "-c", str(src), "-o", str(obj)], check=True)
        objs.append(str(obj))
    for src in [p / "src" / "ports" / "port_arduino.cpp", STUB / "arduino_main.cpp"]:
        obj = out / (src.stem + ".o")
        subprocess.run(["g++", "-std=c++11", *flags, "-c", str(src), "-o", str(obj)], check=True)
        objs.append(str(obj))
    exe = out / "firmware"
    subprocess.run(["g++", *objs, "-o", str(exe)], check=True)
    return exe


@contextmanager
def start(exe: Path, eeprom: Path) -> Iterator[Device]:
    """The firmware with the Arduino port running on the host (its Serial on our pipes, its EEPROM in the
    file eeprom), a Device talking to it; ended on exit."""
    proc = subprocess.Popen(
        [str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ, MCT_TEST_EEPROM=str(eeprom))
    )
    dev = Device(PipeLink(proc), proc)
    try:
        yield dev
    finally:
        dev.close()


def test_the_arduino_port_serves_the_protocol_and_saves(exported: ExportResult, program: Path, tmp_path: Path) -> None:
    """INFO, PREDICT and TRAIN over Serial give the host twin's bits; SAVE goes to EEPROM and the next
    boot loads it."""
    eeprom = tmp_path / "eeprom.bin"
    twin = DeviceTwin(exported.model)
    x, t = onehot_samples(np.random.default_rng(0), 12, 8, 4, inputs="uniform")
    with start(program, eeprom) as dev:
        info = dev.info()
        assert info.hash == exported.hash and info.can_save and not info.loaded_save
        assert_same_bits(dev.predict(x), twin.predict(x), "PREDICT")
        train_lockstep(dev, twin, x, t)
        assert_device_equals_twin(dev, twin)
        assert dev.save() == 1
    with start(program, eeprom) as dev:
        info = dev.info()
        assert info.loaded_save and info.step == 12
        assert_device_equals_twin(dev, twin)
        assert_same_bits(dev.predict(x), twin.predict(x), "PREDICT after the restart")


def test_the_self_test_runs_on_the_arduino_framework(exported: ExportResult, tmp_path: Path) -> None:
    """`pio test` on a real board's env: the Arduino core owns main(), so the self-test runs from setup()
    (test/test_model/arduino_glue.cpp) and the firmware's setup()/loop() stay out (PIO_UNIT_TESTING); built
    against the stand-in, it prints the runner's lines and every test passes."""
    p = exported.path
    inc = [f"-I{p / 'src'}", f"-I{p / 'lib' / 'mcutrain_core' / 'src'}", f"-I{STUB}", f"-I{p / 'test' / 'test_model'}"]
    flags = (
        [
            "-O1",
            "-ffp-contract=off",
            "-fno-math-errno",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-DMCT_PORT_ARDUINO",
            "-DARDUINO=10819",
            "-DMCT_STORE_BYTES=4096",
            "-DPIO_UNIT_TESTING",
        ]
        + model_flags(p)
        + inc
    )
    c_files = (
        sorted((p / "src").glob("*.c"))
        + sorted((p / "lib" / "mcutrain_core" / "src").glob("*.c"))
        + [p / "test" / "test_model" / "test_main.c"]
    )
    cpp_files = [
        p / "src" / "ports" / "port_arduino.cpp",
        p / "test" / "test_model" / "arduino_glue.cpp",
        STUB / "arduino_main.cpp",
    ]
    objs = []
    for src in c_files + cpp_files:
        obj = tmp_path / f"{src.parent.name}_{src.stem}.o"
        cmd = ["gcc", "-std=c99", "-pedantic"] if src.suffix == ".c" else ["g++", "-std=c++11"]
        subprocess.run(cmd + flags + ["-c", str(src), "-o", str(obj)], check=True)
        objs.append(str(obj))
    exe = tmp_path / "selftest"
    subprocess.run(["g++", *objs, "-o", str(exe)], check=True)
    proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    link = PipeLink(proc)
    out = b""
    try:
        while b"TESTS_DONE" not in out:
            chunk = link.read(1)
            assert chunk, f"no TESTS_DONE line: {out.decode(errors='replace')}"
            out += chunk
        out += link.read(3)
    finally:
        proc.kill()
        proc.wait()
        link.close()
    text = out.decode()
    results = re.findall(r":(test_\w+):(PASS|FAIL|IGNORE)", text)
    assert {name for name, _ in results} >= {"test_model_hash", "test_predict", "test_train_step"}, text
    assert all(status == "PASS" for _, status in results), text
    assert re.search(r"TESTS_DONE 0", text), text
