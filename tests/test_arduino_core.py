"""The genuine Arduino AVR core (Debian's arduino-core-avr, ArduinoCore-avr 1.8.7), not a stand-in.

The Uno firmware's real-board target (env:uno: the protocol through ports/port_arduino.cpp on the core's
interrupt-driven HardwareSerial, saves through the core's EEPROM library) and the example sketch of a library
export are built on the core with avr-gcc (mcutrain.exporter.arduino_avr, the IDE's build as a few functions)
and run in simavr through mcutrain's harness: the device client talks to the real HardwareSerial, the saves
survive restarts and power cuts in the middle of a SAVE, and the sketch learns by itself. The stand-in of
tests/arduino_stub stays for the 32-bit Arduino cores (STM32, nRF52, Teensy, ESP32, RP2040: not packaged for
Debian, so nothing here can run them)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

from helpers import assert_device_equals_twin, assert_same_bits, onehot_samples, train_lockstep
from mcutrain import Checkpoint, McuTrainError, Sequential, TrainParams
from mcutrain import layers as L
from mcutrain.exporter import arduino_avr, sim
from mcutrain.exporter.boards import get_board
from mcutrain.exporter.export import ExportResult, export_project
from mcutrain.exporter.memplan import plan
from mcutrain.exporter.sim_avr import SimavrSimulator, avr_sizes, build_harness, read_report
from mcutrain.exporter.twin import DeviceTwin

UNO = get_board("uno")
SIM_FLAGS = ["-DMCT_SIM_HINTS", "-DMCT_ALLOW_QUIT"]  # the harness's registers; QUIT ends the run

pytestmark = pytest.mark.skipif(
    not (arduino_avr.ARDUINO_AVR_DIR / "boards.txt").is_file() or shutil.which("avr-gcc") is None,
    reason="needs the genuine Arduino AVR core and avr-gcc (scripts/setup.sh: arduino-core-avr gcc-avr avr-libc)",
)


@pytest.fixture(scope="module", autouse=True)
def tool_dirs(pio_core: Path) -> Path:
    """The session's own tool folders (conftest.pio_core): the harness and core.a go to its mcutrain cache."""
    return pio_core


def checkpoint() -> Checkpoint:
    """4 -> 8 (tanh) -> 2 (softmax), momentum, cross-entropy: small enough to train whole on the Uno."""
    net = Sequential(L.Linear(4, 8), L.Tanh(), L.Linear(8, 2), L.Softmax()).rand_params(seed=3)
    return Checkpoint(net, net.new_momentum(TrainParams(lr=0.05), 0.9), {"loss": "cross_entropy"})


@pytest.fixture(scope="module")
def uno(tmp_path_factory: pytest.TempPathFactory) -> Tuple[ExportResult, Path]:
    """The export for the Uno and its env:uno firmware built on the genuine core."""
    r = export_project(checkpoint(), "uno", tmp_path_factory.mktemp("uno") / "fw")
    return r, arduino_avr.build_project(r.path, "uno", SIM_FLAGS)


def launch(uno: Tuple[ExportResult, Path], store: Path, cut: int = 0) -> sim.SimSession:
    r, elf = uno
    return SimavrSimulator().launch(elf, UNO, r.path, True, store, cut_after_eeprom_writes=cut)


def samples(n: int, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    return onehot_samples(np.random.default_rng(seed), n, 4, 2, inputs="uniform")


def test_the_core_is_built_from_its_own_board_definition() -> None:
    """The Uno's MCU, clock and variant come from the core's boards.txt; an unknown board is refused."""
    b = arduino_avr.arduino_board("uno")
    assert (b.mcu, b.f_cpu, b.board) == ("atmega328p", "16000000L", "AVR_UNO")
    assert (b.variant / "pins_arduino.h").is_file()
    with pytest.raises(arduino_avr.ArduinoCoreError, match="no complete board 'no_such_board'"):
        arduino_avr.arduino_board("no_such_board")


def test_a_missing_core_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MCUTRAIN_ARDUINO_AVR", str(tmp_path))
    with pytest.raises(arduino_avr.ArduinoCoreError, match="apt-get install arduino-core-avr"):
        arduino_avr.arduino_board("uno")


def test_the_protocol_runs_over_the_real_hardware_serial(uno: Tuple[ExportResult, Path], tmp_path: Path) -> None:
    """INFO, PREDICT and TRAIN over the core's HardwareSerial give the host twin's bits; the firmware's RAM
    (static + the stack the harness saw) is within what the memory plan counts for the real board."""
    r, elf = uno
    twin = DeviceTwin(r.model)
    x, t = samples(12, seed=1)
    with launch(uno, tmp_path / "eeprom.bin") as s:
        dev = s.device
        info = dev.info()
        assert info.hash == r.hash and info.can_save and not info.loaded_save
        assert_same_bits(dev.predict(x), twin.predict(x), "PREDICT")
        train_lockstep(dev, twin, x, t)
        assert_device_equals_twin(dev, twin)
        rep = s.report()
    assert rep["predict_calls"] == 12 and rep["train_calls"] == 12
    sizes = avr_sizes(elf)
    mp = plan(r.model, UNO, sim=False)
    assert sizes["ram_static"] + rep["stack_peak"] <= mp.ram, (sizes, rep["stack_peak"], mp.table())
    assert sizes["flash"] <= mp.flash, (sizes, mp.table())


def test_the_digits_cnn_trains_its_head_on_the_real_uno_firmware(tmp_path: Path) -> None:
    """The digits CNN (scikit-learn's 8x8 digits, a few host epochs) with a full-integer int8 body and its head's 10
    biases training (--quant int8-full --trainable biases), built on the genuine core: PREDICT and TRAIN steps give
    the host twin's bits, and the RAM the firmware uses (static + the stack's peak the harness saw, serial buffers
    and interrupts included) is within the real board's memory plan, which is within the Uno's 2,048 B."""
    from sklearn.datasets import load_digits

    from mcutrain import losses
    from mcutrain.tiny_models import digits_cnn

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32).reshape(-1, 64)
    y = np.eye(10, dtype=np.float32)[d.target]
    net = digits_cnn().rand_params(seed=2)
    net.fit(net.new_adam(TrainParams(lr=0.003)), losses.cross_entropy, x[:1200], y[:1200], epochs=4, batch=32)
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.05)), {"loss": "cross_entropy"})
    r = export_project(ck, "uno", tmp_path / "fw", quant="int8-full", trainable="biases", calibration=x[:300],
                       loss=losses.cross_entropy)  # fmt: skip
    elf = arduino_avr.build_project(r.path, "uno", SIM_FLAGS)
    twin = DeviceTwin(r.model)
    with launch((r, elf), tmp_path / "eeprom.bin") as s:
        assert_same_bits(s.device.predict(x[1500:1506]), twin.predict(x[1500:1506]), "PREDICT")
        train_lockstep(s.device, twin, x[1200:1208], y[1200:1208])
        assert_device_equals_twin(s.device, twin)
        rep = s.report()
    sizes = avr_sizes(elf)
    mp = plan(r.model, UNO, sim=False)
    assert sizes["ram_static"] + rep["stack_peak"] <= mp.ram <= 2048, (sizes, rep["stack_peak"], mp.table())
    assert sizes["flash"] <= mp.flash <= UNO.flash, (sizes, mp.table())
    print(
        f"\ndigits CNN int8-full, head biases training, genuine core: {sizes['ram_static']:,} B static + "
        f"{rep['stack_peak']:,} B stack (plan {mp.ram:,} B), flash {sizes['flash']:,} B (plan {mp.flash:,} B), "
        f"PREDICT {rep['predict']:,.0f} cycles, TRAIN {rep['train']:,.0f} cycles"
    )


def test_saves_go_to_the_real_eeprom_and_survive_a_restart(uno: Tuple[ExportResult, Path], tmp_path: Path) -> None:
    store = tmp_path / "eeprom.bin"
    x, t = samples(8, seed=2)
    with launch(uno, store) as s:
        dev = s.device
        for k in range(5):
            dev.train(x[k], t[k])
        assert dev.save() == 1
        saved = dev.pull()
        dev.train(x[5], t[5])
        s.report()
    assert store.stat().st_size == 1024  # the ATmega328P's EEPROM
    with launch(uno, store) as s:
        dev = s.device
        info = dev.info()
        assert info.loaded_save and info.step == 5
        for got, want, what in zip(dev.pull()[:2], saved[:2], ("parameters", "optimizer state")):
            assert_same_bits(got, want, what)
        dev.train(x[6], t[6])
        assert dev.load() == 1
        assert_same_bits(dev.pull()[0], saved[0], "parameters after LOAD")
        s.report()


def _second_save(uno: Tuple[ExportResult, Path], store: Path, cut: int) -> Dict[str, Any]:
    """Boot from store (which holds save 1), train 3 steps and SAVE, with a power cut after `cut` EEPROM writes
    (0: none); returns the harness's report."""
    x, t = samples(3, seed=4)
    s = launch(uno, store, cut)
    try:
        dev = s.device
        assert dev.info().step == 5
        for k in range(3):
            dev.train(x[k], t[k])
        if cut:
            with pytest.raises(McuTrainError):  # the line goes dead mid-reply
                dev.save()
            assert s.device.process is not None and s.device.process.wait(timeout=30) == 86, "no power cut"
        else:
            assert dev.save() == 2
            s.report()
    finally:
        s.device.close()
        if s.device.process is not None and s.device.process.poll() is None:
            s.device.process.kill()
    rep = read_report(Path(s.extra["report"]))
    assert rep is not None
    return rep


def test_a_power_cut_during_save_loses_nothing(uno: Tuple[ExportResult, Path], tmp_path: Path) -> None:
    """Power cuts at the first byte, the middle and the last byte of a SAVE (each byte goes through the core's
    EEPROM.write): the next boot has save 1 exactly; a SAVE that completes makes save 2 the one loaded."""
    base = tmp_path / "save1.bin"
    x, t = samples(5, seed=3)
    with launch(uno, base) as s:
        for k in range(5):
            s.device.train(x[k], t[k])
        assert s.device.save() == 1
        saved = s.device.pull()
        s.report()
    full = tmp_path / "full.bin"
    shutil.copyfile(base, full)
    writes = _second_save(uno, full, 0)["eeprom_writes"]
    assert writes > 100  # the whole second slot (the other one holds save 1)
    for cut in (1, writes // 2, writes - 1):
        store = tmp_path / f"cut{cut}.bin"
        shutil.copyfile(base, store)
        rep = _second_save(uno, store, cut)
        assert rep["reason"] == "power_cut" and rep["eeprom_writes"] == cut
        with launch(uno, store) as s:
            info = s.device.info()
            assert info.loaded_save and info.step == 5, f"cut after {cut} of {writes} writes: step {info.step}"
            params, state, _ = s.device.pull()
            assert_same_bits(params, saved[0], f"parameters after a cut at write {cut}")
            assert_same_bits(state, saved[1], f"optimizer state after a cut at write {cut}")
            s.report()
    with launch(uno, full) as s:
        info = s.device.info()
        assert info.loaded_save and info.step == 8
        s.report()


# ---- the example sketch of a library export, learning by itself ----
LOSS_LINE = re.compile(r"^step (\d+) loss ([0-9.]+)$")


def run_sketch(elf: Path, store: Path, cycles: int) -> Tuple[List[str], List[Tuple[int, float]]]:
    """Run a sketch in the harness for `cycles` (the sketch runs for ever) with its Serial on stdout and the
    EEPROM kept in store; its lines and its (step, mean loss) reports."""
    cmd = SimavrSimulator().command(
        str(build_harness()), str(elf), UNO, "stdio", str(elf.parent / "report.json"), str(store), cycles
    )
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    assert r.returncode == 124, r.stderr.decode(errors="replace")  # the cycle limit, nothing else
    lines = r.stdout.decode(errors="replace").replace("\r", "").splitlines()
    losses = [(int(m.group(1)), float(m.group(2))) for m in map(LOSS_LINE.match, lines) if m]
    return lines, losses


@pytest.fixture(scope="module")
def sketch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The library export's learn_on_device sketch, built on the genuine core."""
    base = tmp_path_factory.mktemp("sketch")
    r = export_project(checkpoint(), "uno", base / "my_model", library=True)
    ino = r.path / "examples" / "learn_on_device" / "learn_on_device.ino"
    return arduino_avr.build_library_sketch(r.path, ino, base / "build")


def test_the_example_sketch_learns_on_the_device_without_a_host(sketch: Path, tmp_path: Path) -> None:
    """From its own (synthetic) readings, with no host frames: the mean loss falls, the sketch saves to
    EEPROM, and after a reset it carries on from the save."""
    store = tmp_path / "eeprom.bin"
    lines, losses = run_sketch(sketch, store, 220_000_000)
    assert lines[0] == "mcutrain: model ready, as exported", lines[:3]
    assert len(losses) >= 12, lines
    first, last = losses[0][1], float(np.mean([v for _, v in losses[-4:]]))
    assert last < 0.6 * first, losses
    assert "saved: ok" in lines
    lines2, losses2 = run_sketch(sketch, store, 40_000_000)
    assert lines2[0] == "mcutrain: model ready, carrying on from the last save", lines2[:3]
    assert losses2 and losses2[0][0] == 1100, losses2  # the save at step 1000, then 100 more steps
    assert losses2[0][1] < first


def test_the_sketch_takes_its_label_from_a_pin(tmp_path: Path) -> None:
    """With LABEL_PIN set the label is digitalRead of that pin (INPUT_PULLUP: HIGH while nothing pulls it
    down, as in the simulator): the sketch learns that the class is always 1."""
    r = export_project(checkpoint(), "uno", tmp_path / "my_model", library=True)
    ino = r.path / "examples" / "learn_on_device" / "learn_on_device.ino"
    elf = arduino_avr.build_library_sketch(r.path, ino, tmp_path / "build", flags=["-DLABEL_PIN=7"])
    _, losses = run_sketch(elf, tmp_path / "eeprom.bin", 100_000_000)
    assert len(losses) >= 5 and losses[-1][1] < 0.2 * losses[0][1], losses


def test_the_sketch_learns_from_its_own_sensor_windows_through_the_feature_pipeline(tmp_path: Path) -> None:
    """A model with a motion feature pipeline (windows of 32 samples, 5 statistics computed on the board): the
    example sketch reads whole windows (synthetic noise at a random level: the library's port_sensor_read has
    no sensor), labels them by their level and trains on the raw windows through the pipeline; the mean loss
    falls. The data here: 400 such windows, labelled by the same rule, for the one host step that makes the
    model file."""
    from helpers import cli_ok
    from mcutrain.modelfile import load_model

    rng = np.random.default_rng(0)
    level = rng.uniform(0.0, 1.0, 400)
    x = (level[:, None, None] * rng.uniform(-1.0, 1.0, (400, 32, 1))).astype(np.float32)
    np.savez(tmp_path / "w.npz", x=x, y=(np.abs(x).mean(axis=(1, 2)) > 0.25).astype(int))
    cli_ok("train", "--data", str(tmp_path / "w.npz"), "--features", "motion:rate=50,length=32,axes=1,"
           "stats=mean+rms+std+min+max", "--net", "linear:5x6,tanh,linear:6x2,softmax", "--loss", "xent",
           "--opt", "sgd", "--lr", "0.05", "--steps", "1", "-o", str(tmp_path / "m.mct"))  # fmt: skip
    r = export_project(load_model(tmp_path / "m.mct"), "uno", tmp_path / "my_model", library=True)
    ino = r.path / "examples" / "learn_on_device" / "learn_on_device.ino"
    elf = arduino_avr.build_library_sketch(r.path, ino, tmp_path / "build")
    assert avr_sizes(elf)["flash"] <= r.plan.flash <= r.plan.flash_budget, (avr_sizes(elf), r.plan.table())
    lines, losses = run_sketch(elf, tmp_path / "eeprom.bin", 400_000_000)
    assert lines[0] == "mcutrain: model ready, as exported", lines[:3]
    assert len(losses) >= 8, lines
    first, last = float(np.mean([v for _, v in losses[:2]])), float(np.mean([v for _, v in losses[-3:]]))
    assert last < 0.7 * first, losses


def test_the_cli_builds_the_uno_env_on_the_arduino_core(uno: Tuple[ExportResult, Path]) -> None:
    from click.testing import CliRunner

    from mcutrain.cli.commands import main

    r, _ = uno
    res = CliRunner().invoke(main, ["build", str(r.path), "--arduino-core"])
    assert res.exit_code == 0, res.output
    elf = r.path / ".pio" / "build" / "uno-arduino-core" / "firmware.elf"
    sizes = avr_sizes(elf)
    assert f"Flash: {sizes['flash']:,} of 32,256 B; RAM (static): {sizes['ram_static']:,} of 2,048 B" in res.output
    res = CliRunner().invoke(main, ["build", str(r.path), "--arduino-core", "--sim"])
    assert res.exit_code == 1 and "leave out --env and --sim" in res.output
