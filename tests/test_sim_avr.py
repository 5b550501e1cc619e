"""Exported firmware on the simulated Arduino Uno: an ATmega328P in simavr, driven by mcutrain's harness
(firmware/host_tools/avr_run.c) through mcutrain.exporter.sim_avr, built offline by platforms/simavr (avr-gcc, -Os).

The device must compute exactly what the host's C core computes for its layer table (DeviceModel.core()):
the same outputs and, after training on the device, the same parameters, bit for bit. The Uno has 2 KB
of RAM, so only the biases train on it (the memory plan's verdict for both networks here); the harness
measures exact cycles per call, the peak stack, and catches stack overflows.

Needs gcc-avr, avr-libc, simavr, libsimavr-dev and PlatformIO; a missing tool fails with the SimError
that names the package to install (no skips)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, FrozenSet, List, Optional, Tuple

import numpy as np
import pytest

from helpers import (
    assert_device_equals_twin,
    assert_same_bits,
    export_int8_full,
    onehot_samples,
    own_pio_env,
    quant_tie_inputs,
    readme_net,
    train_lockstep,
    with_extreme_qdense_constants,
    write_model_project,
)
from mcutrain import Checkpoint, Sequential, TrainParams
from mcutrain import layers as L
from mcutrain.exporter import pio, sim
from mcutrain.exporter.boards import get_board
from mcutrain.exporter.cgen import DeviceModel
from mcutrain.exporter.client import Device, read_pty_line
from mcutrain.exporter.device import build_device_model
from mcutrain.exporter.export import export_project
from mcutrain.exporter.memplan import MemoryPlan, MemoryPlanError, plan
from mcutrain.exporter.sim import SimError
from mcutrain.exporter.sim_avr import build_harness
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.module import Module

ROOT = Path(__file__).resolve().parent.parent
UNO = get_board("uno")
STEPS = 100


@pytest.fixture(scope="module", autouse=True)
def tool_dirs(pio_core: Path) -> Path:
    """The session's own PlatformIO core folder and mcutrain cache (conftest.pio_core); the parallel builds
    of the `projects` fixture each use a core folder of their own on top."""
    return pio_core


# ---- networks and exports ----
def relu_net() -> Module:
    """64 -> 32 (ReLU) -> 10 (softmax)."""
    return Sequential(L.Linear(64, 32), L.Relu(), L.Linear(32, 10), L.Softmax()).rand_params(seed=11)


def small_net() -> Module:
    """8 -> 12 (tanh) -> 4: small enough to keep f32 weights in flash and train a whole Linear in RAM."""
    return Sequential(L.Linear(8, 12), L.Tanh(), L.Linear(12, 4)).rand_params(seed=5)


def wide_net() -> Module:
    """60 -> 35 (sigmoid) -> 10 (softmax): with Adam, too big for the Uno's RAM."""
    return Sequential(L.Linear(60, 35), L.Sigmoid(), L.Linear(35, 10), L.Softmax()).rand_params(seed=3)


NETS: Dict[str, Tuple[Callable[[], Module], str]] = {
    "readme": (lambda: readme_net(seed=7, scale=1.0), "cross_entropy"),
    "relu": (relu_net, "cross_entropy"),
    "small": (small_net, "mse"),
    "wide": (wide_net, "cross_entropy"),
}


def checkpoint(net: str, optimizer: str) -> Checkpoint:
    """A checkpoint of a network with its optimizer and loss."""
    make, loss = NETS[net]
    m = make()
    opts = {
        "sgd": lambda: None,
        "momentum": lambda: m.new_momentum(TrainParams(lr=0.05).and_l2(1e-3), 0.9),
        "adam": lambda: m.new_adam(TrainParams(lr=0.01), 0.9, 0.999, 1e-8),
    }
    return Checkpoint(m, opts[optimizer](), {"loss": loss})


@dataclass(frozen=True)
class Config:
    """One export for the uno: network, optimizer, weights of the frozen layers, what trains; checked =
    False leaves the memory plan check out."""

    net: str
    optimizer: str
    quant: str = "f32"
    trainable: str = "biases"
    checked: bool = True

    @property
    def name(self) -> str:
        return f"{self.net}-{self.optimizer}-{self.quant}-{self.trainable.replace(':', '')}"


# Both networks train their biases on the Uno (the memory plan's verdict for its 2 KB of RAM).
README_SGD = Config("readme", "sgd", "f32")
README_MOMENTUM = Config("readme", "momentum", "f32")
RELU_SGD = Config("relu", "sgd", "f32")
RELU_MOMENTUM = Config("relu", "momentum", "f32")
RELU_INT8 = Config("relu", "sgd", "int8")
SMALL_F32 = Config("small", "momentum", "f32", "last:1")  # a frozen f32 Linear in flash, a whole one trains
WIDE_ADAM = Config("wide", "adam", "int8", checked=False)  # the plan refuses it (see the test)
ALL = [README_SGD, README_MOMENTUM, RELU_SGD, RELU_MOMENTUM, RELU_INT8, SMALL_F32, WIDE_ADAM]


@dataclass
class Built:
    """An exported project, its device model and plan, and why there is no firmware if there is none (the
    plan refused the export, or the build failed)."""

    path: Path
    model: DeviceModel
    plan: MemoryPlan
    hash: str
    error: Optional[str] = None
    refused: bool = False


def export_unchecked(ck: Checkpoint, out: Path, trainable: str, quant: str) -> Built:
    """export_project without the memory plan check: what a plan that let an oversized model through
    would produce (the same device model, generated files and project layout)."""
    m = build_device_model(ck, trainable, quant, board=UNO)
    write_model_project(out, UNO, m, "an unchecked export")
    return Built(out, m, plan(m, UNO, sim=True), m.hash().hex())


def export_and_build(cfg: Config, base: Path) -> Built:
    """Export a config and build env:sim-uno (the error text is kept when the build fails). Each build has
    a PlatformIO core folder of its own (sharing the one tool-scons): PlatformIO registers a symlink://
    platform by name per core folder, so parallel builds of several projects must not share one."""
    ck = checkpoint(cfg.net, cfg.optimizer)
    if cfg.checked:
        try:
            r = export_project(ck, "uno", base / cfg.name, quant=cfg.quant, trainable=cfg.trainable, sim=True)
        except MemoryPlanError as e:
            m = build_device_model(ck, cfg.trainable, cfg.quant, board=UNO)
            return Built(
                base / cfg.name, m, plan(m, UNO, sim=True), m.hash().hex(), f"the memory plan refused it: {e}", True
            )
        b = Built(r.path, r.model, r.plan, r.hash)
    else:
        b = export_unchecked(ck, base / cfg.name, cfg.trainable, cfg.quant)
    core = base / f"pio-core-{cfg.name}"
    (core / "packages").mkdir(parents=True)
    (core / "packages" / "tool-scons").symlink_to(pio.ensure_scons(), target_is_directory=True)
    r = pio.run(["run", "-e", "sim-uno"], b.path, extra_env=own_pio_env(core))
    if r.returncode != 0:
        b.error = "\n".join((r.stdout + r.stderr).strip().splitlines()[-25:])
    return b


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory) -> Dict[Config, Built]:
    """Every config exported and built once, three builds at a time."""
    base = tmp_path_factory.mktemp("projects")
    pio.ensure_scons()
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(ALL, pool.map(lambda c: export_and_build(c, base), ALL)))


@pytest.fixture(scope="module")
def built(projects: Dict[Config, Built]) -> Callable[[Config], Built]:
    """A config's project, which must have built."""

    def get(cfg: Config) -> Built:
        b = projects[cfg]
        assert b.error is None, f"{cfg.name} did not build:\n{b.error}"
        return b

    return get


def samples(n_in: int, n_out: int, count: int, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """Inputs in [-1, 1) and one-hot targets, from a generator seeded with seed."""
    return onehot_samples(np.random.default_rng(seed), count, n_in, n_out, inputs="uniform")


def start(r: Built, store: Optional[Path] = None) -> sim.SimSession:
    """The built project running in simavr, with an EEPROM file of its own unless store is given (so no
    test boots into another test's save)."""
    if store is None:
        fd, name = tempfile.mkstemp(prefix="eeprom-", suffix=".bin", dir=str(r.path))
        os.close(fd)
        os.unlink(name)
        store = Path(name)
    return sim.start(r.path, UNO, measure=True, store=store, build=False)


# ---- tests ----
@pytest.mark.parametrize("net", ["readme", "relu"])
def test_fully_trainable_networks_do_not_fit_the_uno(net: str, tmp_path: Path) -> None:
    """Training every parameter on the Uno is refused before anything is written, with the numbers and the
    way out."""
    out = tmp_path / "p"
    with pytest.raises(MemoryPlanError) as e:
        export_project(checkpoint(net, "sgd"), "uno", out, trainable="all")
    msg = str(e.value)
    m = re.search(r"needs ([\d,]+) B RAM, uno has 2,048 B", msg)
    assert m and int(m.group(1).replace(",", "")) > 2048, msg
    # the way out: bias-only training, or for the 64-32-10 network (whose bias-only plan is 20 B over since the layer
    # rows grew the spatial fields) predicting only
    assert "--trainable biases" in msg or (net == "relu" and "--trainable none" in msg), msg
    assert not out.exists()


@pytest.mark.parametrize("cfg", [README_SGD, README_MOMENTUM, RELU_SGD, RELU_INT8, SMALL_F32], ids=lambda c: c.name)
def test_predict_and_training_match_the_host_bit_for_bit(cfg: Config, built: Callable[[Config], Built]) -> None:
    """PREDICT equals the host core's forward pass; after 100 TRAIN steps the losses, parameters, optimizer
    state and train state equal the host core's training run, bit for bit; the run stays in 2 KB."""
    r = built(cfg)
    host = DeviceTwin(r.model)
    n_in, n_out = r.model.program.n_in, r.model.program.n_out
    x, t = samples(n_in, n_out, STEPS, seed=3)
    with start(r) as s:
        dev = s.device
        info = dev.info()
        assert info.hash == r.hash and info.n_params == host.n_params and info.step == 0
        probe = x[:4]
        assert_same_bits(dev.predict(probe), host.predict(probe), "PREDICT before training")
        train_lockstep(dev, host, x, t)
        assert_device_equals_twin(dev, host)
        assert not np.array_equal(host.params, r.model.params), "training changed nothing"
        # the trained network still predicts as the host's does
        assert_same_bits(dev.predict(probe), host.predict(probe), "PREDICT after training")
        rep = s.report()
    assert rep["unit"] == "cycles" and rep["predict_calls"] == 8 and rep["train_calls"] == STEPS
    assert 0 < rep["predict_min"] <= rep["predict"] <= rep["predict_max"] < rep["train"] <= rep["train_max"]
    assert rep["ram_static"] + rep["stack_peak"] <= 2048 and rep["flash"] <= UNO.flash
    assert rep["stack_peak"] >= rep["stack_painted"] > 0


def test_cycle_counts_are_exact_and_repeatable(built: Callable[[Config], Built]) -> None:
    """The same input costs the same number of cycles every time, in every run; the report counts every
    call and says nothing about calls that were not made."""
    r = built(README_SGD)
    x, _ = samples(20, 10, 1, seed=5)
    with start(r) as s:
        for _ in range(3):
            s.device.predict(x[0])
        rep = s.report()
    assert rep["predict_calls"] == 3 and rep["predict_min"] == rep["predict_max"] == rep["predict"] > 0
    assert rep["train_calls"] == 0 and rep["train"] is None
    assert rep["cycles_total"] > 3 * rep["predict"]
    with start(r) as s:
        s.device.predict(x[0])
        again = s.report()
    assert again["predict"] == rep["predict"]


def test_saves_persist_across_restarts_and_load_restores_exactly(
    built: Callable[[Config], Built], tmp_path: Path
) -> None:
    """SAVE writes the EEPROM, which the harness keeps in a file: a restarted simulator boots into the
    saved model, and LOAD brings it back exactly after more training."""
    r = built(README_SGD)
    store = tmp_path / "eeprom.bin"
    x, t = samples(20, 10, 10, seed=9)
    with start(r, store) as s:
        dev = s.device
        assert not dev.info().loaded_save
        for k in range(5):
            dev.train(x[k], t[k])
        seq = dev.save()
        saved, saved_state, saved_ts = dev.pull()
        for k in range(5, 8):
            dev.train(x[k], t[k])
        assert not np.array_equal(dev.pull()[0], saved)
        s.report()
    assert store.stat().st_size == UNO.storage
    with start(r, store) as s:
        dev = s.device
        info = dev.info()
        assert info.loaded_save and info.step == 5
        params, state, ts = dev.pull()
        assert_same_bits(params, saved, "parameters after the restart")
        assert_same_bits(state, saved_state, "optimizer state after the restart")
        assert bytes(ts) == bytes(saved_ts)
        dev.train(x[8], t[8])
        assert dev.load() == seq
        params, state, ts = dev.pull()
        assert_same_bits(params, saved, "parameters after LOAD")
        assert_same_bits(state, saved_state, "optimizer state after LOAD")
        assert bytes(ts) == bytes(saved_ts)
        assert dev.save() == seq + 1
        assert s.report()["saves"] == 1


def measure(b: Built) -> Dict[str, object]:
    """One PREDICT and one TRAIN in simavr: the report, or {'error': ...} for a run that failed."""
    x, t = samples(b.model.program.n_in, b.model.program.n_out, 1, seed=1)
    try:
        with start(b) as s:
            s.device.predict(x[0])
            s.device.train(x[0], t[0])
            return s.report()
    except SimError as e:
        return {"error": str(e)}


# The plan accepts all six of these exports for the Uno: with only the biases (or, for SMALL_F32, one small
# Linear) in RAM they need between 1,213 B (SMALL_F32) and 2,021 B (RELU_MOMENTUM) of its 2,048 B, and at
# most 30,460 B of its 32,256 B of flash. The plan refusing any of them would be a regression of its own, and
# would also let the check below pass without measuring that export.
PLAN_CHECKED = (README_SGD, README_MOMENTUM, RELU_SGD, RELU_MOMENTUM, RELU_INT8, SMALL_F32)
EXPECTED_REFUSED: FrozenSet[str] = frozenset()


def test_memory_plan_covers_what_the_firmware_uses(projects: Dict[Config, Built]) -> None:
    """For every export the plan accepts for the Uno, its figures must cover what the firmware really uses:
    RAM = static data (.data + .bss of the ELF) + the peak stack the harness measured, and flash = the
    ELF's .text + .data (a build whose code does not fit flash, or a run whose stack overflows, fails
    this). Which exports the plan refuses is fixed (EXPECTED_REFUSED: none), so the check cannot pass by
    refusing them."""
    refused = {cfg.name for cfg in PLAN_CHECKED if projects[cfg].refused}
    assert refused == EXPECTED_REFUSED, (
        f"the memory plan refuses {sorted(refused)} (expected {sorted(EXPECTED_REFUSED)}): "
        + "; ".join(f"{c.name}: {projects[c].error}" for c in PLAN_CHECKED if projects[c].refused)
    )
    rows: List[str] = []
    bad = False
    for cfg in PLAN_CHECKED:
        b = projects[cfg]
        p = f"{cfg.name}: plan RAM {b.plan.ram} B, flash {b.plan.flash} B; "
        if b.refused:
            continue
        if b.error:
            m = re.search(r"overflowed by (\d+) bytes", b.error)
            rows.append(p + (f"the firmware is {m.group(1)} B larger than flash" if m else "build failed"))
            bad = True
            continue
        rep = measure(b)
        if "error" in rep:
            rows.append(p + str(rep["error"]))
            bad = True
            continue
        ram = int(rep["ram_static"]) + int(rep["stack_peak"])
        ok = ram <= b.plan.ram and int(rep["flash"]) <= b.plan.flash
        bad |= not ok
        rows.append(
            p + f"measured RAM {ram} B (static {rep['ram_static']} + stack {rep['stack_peak']}), "
            f"flash {rep['flash']} B" + ("" if ok else "  <- underestimated")
        )
    assert not bad, "the memory plan underestimates the Uno's use:\n" + "\n".join(rows)


def test_oversized_models_are_caught_by_the_plan_and_by_the_harness(
    projects: Dict[Config, Built], tmp_path: Path
) -> None:
    """A model too big for the Uno's RAM: the memory plan refuses to export it; built anyway (plan check
    left out), its static data still passes the build's size check, but at run time its stack runs into
    the static data, and the harness stops it and reports the numbers."""
    with pytest.raises(MemoryPlanError, match="does not fit"):
        export_project(
            checkpoint(WIDE_ADAM.net, WIDE_ADAM.optimizer),
            "uno",
            tmp_path / "p",
            trainable=WIDE_ADAM.trainable,
            quant=WIDE_ADAM.quant,
            sim=True,
        )
    b = projects[WIDE_ADAM]
    assert b.error is None, b.error
    x, t = samples(60, 10, 1, seed=2)
    with pytest.raises(SimError) as e:
        with start(b) as s:
            s.device.info()
            s.device.train(x[0], t[0])
            s.report()
    msg = str(e.value)
    assert "stack overflow" in msg
    m = re.search(r"(\d+) B of static RAM \(\.data \+ \.bss\) leave (\d+) B for the stack", msg)
    assert m and int(m.group(1)) + int(m.group(2)) == 2048, msg
    rep = json.loads((b.path / ".pio" / "build" / "sim-uno" / "simavr_report.json").read_text())
    assert rep["reason"] == "stack_overflow" and rep["status"] == 97
    assert rep["overflow"]["sp"] + 1 < rep["ram_floor"] == 0x100 + rep["data_size"] + rep["bss_size"]


def test_pio_upload_runs_the_firmware_in_simavr(built: Callable[[Config], Built], tmp_path: Path) -> None:
    """`pio run -e sim-uno -t upload` starts the harness on a pty that the device client can use."""
    r = built(README_SGD)
    env = dict(
        os.environ, PLATFORMIO_SETTING_ENABLE_TELEMETRY="No", PLATFORMIO_SETTING_CHECK_PLATFORMIO_INTERVAL="3650"
    )
    # a session of its own, so that a failure ends the harness under PlatformIO too
    proc = subprocess.Popen(
        pio.pio_command() + ["run", "-e", "sim-uno", "-t", "upload"],
        cwd=str(r.path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        port = read_pty_line(proc.stdout.fileno(), 60)
        assert port, f"PlatformIO printed no PTY line (status {proc.poll()})"
        with Device.open(port, timeout=30) as dev:
            assert dev.info().hash == r.hash
            dev.quit()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out.decode(errors="replace")
    rep = json.loads((r.path / ".pio" / "build" / "sim-uno" / "simavr_report.json").read_text())
    assert rep["reason"] == "exit" and rep["exit_code"] == 0


def test_missing_tools_name_the_packages(
    built: Callable[[Config], Built], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the AVR compiler the simulator refuses to start and says what to install."""
    r = built(README_SGD)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SimError, match=r"avr-gcc.*not found.*apt-get install .*gcc-avr avr-libc"):
        sim.start(r.path, UNO, build=False)


def test_int8_full_predicts_the_host_output(tmp_path: Path) -> None:
    """Full-integer int8 on the ATmega328P (the ld/lpm/muls dot product, requantization in 32-bit pieces, QUANT
    in soft float) equals the host's C core bit for bit: with the exporter's constants, with QDENSE
    constants at their limits (saturating biases, negative and -2^31 multipliers, shifts outside [1, 62] and on
    both sides of 32), and built with -DMCT_NO_ASM (the C loops beside the assembly)."""
    r, _, x = export_int8_full("uno", tmp_path / "p")
    x = np.concatenate([x, quant_tie_inputs(r.model)])
    extreme = with_extreme_qdense_constants(r.model)
    out = write_model_project(tmp_path / "extreme", UNO, extreme, "extreme QDENSE constants")
    plain = write_model_project(tmp_path / "no-asm", UNO, r.model, "no inline assembly", ("-DMCT_NO_ASM",))
    for path, m in [(r.path, r.model), (out, extreme), (plain, r.model)]:
        want = DeviceTwin(m).predict(x)
        with sim.start(path, UNO, store=path / "eeprom.bin") as s:
            assert s.device.info().hash == m.hash().hex()
            assert_same_bits(s.device.predict(x), want, f"int8-full PREDICT ({path.name})")
    assert not np.array_equal(DeviceTwin(extreme).predict(x), DeviceTwin(r.model).predict(x))


def test_avr_float_operations_match_the_host(tmp_path: Path) -> None:
    """The float operations the core is made of (+ - * /, int to float, and the core's exp, log, tanh,
    sigmoid, sqrt, log1p, sin, cos) give the same bits on the AVR (avr-libc's soft float under simavr) as
    on the host, over normal, tiny/subnormal and arbitrary operands.

    avr-libc's __divsf3 mis-rounds some quotients that come out subnormal (below 2^-126): when the exact
    quotient lies just above the midpoint between two subnormals it rounds to the even one (down) instead
    of up, as if the remainder (the sticky bit) were dropped when the quotient is shifted into the
    subnormal range; e.g. 0x29fa7a68 / 0x69d80593 is 0x00251aa8 on the AVR, 0x00251aa9 (correct) on the
    host. Normal quotients are correctly rounded. The core therefore divides only through mct_div, which
    flushes subnormal quotients to zero. The probe compares bare divisions only where the quotient is
    normal; the core's functions are compared over their whole range, so a function that divided into the
    subnormal range without mct_div (the sigmoid 1 / (1 + e^-x) for x below about -87.3) would show it."""
    src = ROOT / "tests" / "c" / "avr_float_probe.c"
    core = ROOT / "firmware" / "core"
    flags = ["-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wextra", f"-I{core}", str(src)]
    sim.require_tools("gcc", "avr-gcc")
    subprocess.run(["gcc", "-std=c99", "-O2", *flags, "-o", str(tmp_path / "probe")], check=True)
    subprocess.run(["avr-gcc", "-mmcu=atmega328p", "-Os", *flags, "-o", str(tmp_path / "probe.elf")], check=True)
    host = subprocess.run([str(tmp_path / "probe")], capture_output=True, check=True).stdout
    avr = subprocess.run(
        [str(build_harness()), str(tmp_path / "probe.elf"), "serial=stdio", "max_cycles=500000000"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
    )
    assert avr.returncode == 0, avr.stderr.decode(errors="replace")
    ops = "add sub mul div exp log tanh sigmoid sqrt log1p sin cos i2f u2f".split()
    h = np.frombuffer(host, "<u4").reshape(3, len(ops), -1)
    a = np.frombuffer(avr.stdout, "<u4").reshape(h.shape)
    diff = []
    for c, cls in enumerate(("normal", "tiny", "any")):
        for o, op in enumerate(ops):
            bad = np.nonzero(h[c, o] != a[c, o])[0]
            if len(bad):
                k = bad[0]
                diff.append(
                    f"{cls}/{op}: {len(bad)} of {h.shape[2]} differ, e.g. host 0x{h[c, o, k]:08x} "
                    f"({h[c, o, k : k + 1].view('<f4')[0]!r}), AVR 0x{a[c, o, k]:08x}"
                )
    assert not diff, diff
