"""`pio test` of exported projects, offline: the on-target self-test (test/test_model/test_main.c with the
exporter's test/test_model/expected.h, run by the project's test/test_custom_runner.py) on env:native and on
the simulated boards env:sim-nucleo_f401re (Cortex-M4F in QEMU mps2-an386), env:sim-esp32c3 (rv32imc in QEMU
virt) and env:sim-uno (ATmega328P in mcutrain's simavr harness, biases trainable).

Each project's test must pass (the target computes the host's bits for PREDICT and TRAIN), and must fail once
one expected value in expected.h has one bit flipped, naming the value. The expected values themselves are
checked against the host trainer's Python API (not the C core view the exporter used to make them).

Needs PlatformIO and the toolchains and simulators of TOOLCHAINS.md (no skips)."""

from __future__ import annotations

import re
import subprocess
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

from helpers import bits, export_int8_full, own_pio_env
from mcutrain import Checkpoint, Residual, Sequential, TrainParams, losses
from mcutrain import layers as L
from mcutrain.exporter import pio
from mcutrain.exporter.export import ExportResult, export_project
from mcutrain.module import Module
from mcutrain.optim import Optimizer
from mcutrain.train import train_step

TEST_NAMES = ["test_model_hash", "test_net_check", "test_predict", "test_train_step"]
LOSS = losses.cross_entropy
PIO_TIMEOUT = 300.0


@dataclass(frozen=True)
class Case:
    """One exported project: its board, the env `pio test` runs, what trains on the device, the optimizer,
    and which expected.h array gets a bit flipped (its first value) and so which test must then fail."""

    board: str
    env: str
    trainable: str
    optimizer: str
    corrupt: str
    fails: str


# The Uno trains with momentum: Adam's soft-float code (about 4.5 KB more) and the self-test's (about 2.4 KB,
# mostly mct_net_check) would leave less than 300 B of its 32,256 B of flash.
CASES = [
    Case("native", "native", "all", "adam", "mct_test_params_crc", "test_train_step"),
    Case("nucleo_f401re", "sim-nucleo_f401re", "all", "adam", "mct_test_y", "test_predict"),
    Case("esp32c3", "sim-esp32c3", "all", "adam", "mct_test_loss", "test_train_step"),
    Case("uno", "sim-uno", "biases", "momentum", "mct_test_probe", "test_train_step"),
]


def small_net() -> Module:
    """Linear, RMSNorm, SiLU, a residual block with Tanh, Softmax: small enough for the Uno's flash and RAM."""
    return Sequential(
        L.Linear(6, 10), L.RMSNorm(10), L.SiLU(), Residual(L.Linear(10, 10), L.Tanh()), L.Linear(10, 3), L.Softmax()
    ).rand_params(seed=29)


def optimizer(net: Module, kind: str) -> Optimizer:
    """Adam (two slots of state) or momentum (one), with warm-up, L2 and clipping; fresh state."""
    tp = TrainParams(lr=2e-2, warmup_steps=2, l2=1e-3, clip=2.0)
    return net.new_adam(tp, 0.9, 0.999, 1e-8) if kind == "adam" else net.new_momentum(tp, 0.9)


def checkpoint(kind: str) -> Checkpoint:
    """The exported model: the network with its (untrained) optimizer."""
    net = small_net()
    return Checkpoint(net, optimizer(net, kind))


# ---- expected.h ----
def c_arrays(text: str) -> Dict[str, np.ndarray]:
    """The uint32 arrays of an expected.h, shaped as declared."""
    out: Dict[str, np.ndarray] = {}
    for m in re.finditer(r"static const uint32_t (\w+)((?:\[\d+\])+) MCT_CONST = \{(.*?)\};", text, re.S):
        dims = [int(d) for d in re.findall(r"\[(\d+)\]", m.group(2))]
        words = [int(w, 16) for w in re.findall(r"0x([0-9a-f]{8})u", m.group(3))]
        out[m.group(1)] = np.array(words, np.uint32).reshape(dims)
    return out


def c_define(text: str, name: str) -> int:
    """An integer #define of an expected.h."""
    m = re.search(rf"^#define {name} (\d+)$", text, re.M)
    assert m, f"expected.h defines no {name}"
    return int(m.group(1))


def flip_first_bit(path: Path, array: str) -> Tuple[int, int]:
    """Flip the lowest bit of the first value of an array in expected.h; returns (old, new)."""
    text = path.read_text()
    start = text.index(f"static const uint32_t {array}[")
    m = re.compile(r"0x([0-9a-f]{8})u").search(text, text.index("{", start))
    assert m
    old = int(m.group(1), 16)
    new = old ^ 1
    path.write_text(text[: m.start()] + f"0x{new:08x}u" + text[m.end() :])
    return old, new


# ---- the runs ----
@dataclass
class Run:
    """A project, its pristine expected.h, `pio test` on it, and `pio test` after one flipped bit."""

    case: Case
    result: ExportResult
    expected_h: str
    passed: subprocess.CompletedProcess
    corrupted: subprocess.CompletedProcess
    old: int
    new: int

    @property
    def path(self) -> Path:
        return self.result.path


def pio_test(project: Path, env: str, core: Path, *extra: str) -> subprocess.CompletedProcess:
    """`pio test -e ENV` in project with its own PlatformIO core folder and build cache."""
    return pio.run(["test", "-e", env, *extra], project, timeout=PIO_TIMEOUT, extra_env=own_pio_env(core))


def core_dir(base: Path, name: str) -> Path:
    """A PlatformIO core folder of its own (platforms are registered by name per core folder, so parallel
    runs must not share one) with the one offline tool-scons."""
    core = base / f"pio-core-{name}"
    if not core.exists():
        (core / "packages").mkdir(parents=True)
        (core / "packages" / "tool-scons").symlink_to(pio.ensure_scons(), target_is_directory=True)
    return core


def run_case(case: Case, base: Path) -> Run:
    """Export, `pio test`, flip a bit of expected.h, `pio test` again."""
    r = export_project(
        checkpoint(case.optimizer), case.board, base / case.board, loss=LOSS, trainable=case.trainable, sim=True
    )
    core = core_dir(base, case.board)
    expected = r.path / "test" / "test_model" / "expected.h"
    pristine = expected.read_text()
    passed = pio_test(r.path, case.env, core)
    old, new = flip_first_bit(expected, case.corrupt)
    corrupted = pio_test(r.path, case.env, core)
    return Run(case, r, pristine, passed, corrupted, old, new)


@pytest.fixture(scope="module")
def own_core(pio_core: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of this module's PlatformIO core folders: `pio test` runs in parallel, so each project
    gets a core folder of its own (core_dir), sharing the tool-scons that pio.ensure_scons() installs in
    the session's core folder (conftest.pio_core)."""
    pio.ensure_scons()
    return tmp_path_factory.mktemp("piotest")


@pytest.fixture(scope="module")
def runs(own_core: Path) -> Dict[str, Run]:
    """Every case exported and tested (pass, then corrupted), four projects at a time."""
    with ThreadPoolExecutor(max_workers=len(CASES)) as pool:
        return {c.board: r for c, r in zip(CASES, pool.map(lambda c: run_case(c, own_core), CASES))}


def output(r: subprocess.CompletedProcess) -> str:
    return r.stdout + r.stderr


def case_status(text: str, name: str) -> List[str]:
    """Statuses PlatformIO printed for a test case, e.g. ['PASSED'], with the case's message."""
    return re.findall(rf"test/test_model/test_main\.c:\d+: {name}(?:: [^\t\n]*)?\t\[(\w+)\]", text)


# ---- tests ----
@pytest.mark.parametrize("case", CASES, ids=[c.board for c in CASES])
def test_pio_test_passes_on_the_target(runs: Dict[str, Run], case: Case) -> None:
    """`pio test -e ENV` builds the self-test, runs it natively or in the simulator, and every test passes:
    the target holds the model, accepts its table and computes the host's PREDICT and TRAIN bits."""
    run = runs[case.board]
    text = output(run.passed)
    assert run.passed.returncode == 0, text[-3000:]
    for name in TEST_NAMES:
        assert case_status(text, name) == ["PASSED"], (name, text[-3000:])
    assert re.search(rf"^{re.escape(case.env)}\s+test_model\s+PASSED", text, re.M), text[-2000:]
    assert "4 test cases: 4 succeeded" in text
    assert "FAILED" not in text and "ERRORED" not in text


def test_pio_test_of_a_frozen_full_integer_model(own_core: Path, tmp_path: Path) -> None:
    """A frozen model, full-integer from its QUANT to its DEQUANT, takes int8 at the firmware's boundary
    (mct_app_input quantizes, mct_app_output dequantizes, the arena is the int8 buffer alone): natively, `pio test`
    finds the host's PREDICT bits and TRAIN refused (expected.h has no TRAIN steps for it); with one predicted bit
    flipped, test_predict fails."""
    r, _, _ = export_int8_full("native", tmp_path / "p")
    assert r.model.int8_io
    expected = r.path / "test" / "test_model" / "expected.h"
    assert c_define(expected.read_text(), "MCT_TEST_N_TRAIN") == 0
    core = core_dir(own_core, "int8-io")
    res = pio_test(r.path, "native", core)
    text = output(res)
    assert res.returncode == 0, text[-3000:]
    for name in TEST_NAMES:
        assert case_status(text, name) == ["PASSED"], (name, text[-3000:])
    flip_first_bit(expected, "mct_test_y")
    res = pio_test(r.path, "native", core)
    assert res.returncode == 1 and case_status(output(res), "test_predict") == ["FAILED"], output(res)[-3000:]


@pytest.mark.parametrize("case", CASES, ids=[c.board for c in CASES])
def test_a_flipped_expected_bit_fails(runs: Dict[str, Run], case: Case) -> None:
    """With one bit of one expected value flipped, `pio test` exits 1 and reports that test FAILED, with the
    target's value (the original) and the corrupted expectation; the other tests still pass."""
    run = runs[case.board]
    text = output(run.corrupted)
    assert run.corrupted.returncode == 1, text[-3000:]
    assert case_status(text, case.fails) == ["FAILED"], text[-3000:]
    assert f"got 0x{run.old:08x}, expected 0x{run.new:08x}" in text
    for name in TEST_NAMES:
        if name != case.fails:
            assert case_status(text, name) == ["PASSED"], (name, text[-3000:])
    assert re.search(rf"^{re.escape(case.env)}\s+test_model\s+FAILED", text, re.M), text[-2000:]
    assert "4 test cases: 1 failed, 3 succeeded" in text


def test_expected_values_are_the_host_trainers(runs: Dict[str, Run]) -> None:
    """expected.h of the fully trainable export holds what the host trainer's Python API computes: the
    network's outputs for its inputs, and for each TRAIN step (fresh Adam, one sample at a time, the
    one-hot targets) the loss, the step, the CRC-32 of all parameters and of the optimizer state, and the
    probed parameters; the hash is the export's."""
    run = runs["native"]
    text = run.expected_h
    a = c_arrays(text)
    n_predict, n_train = c_define(text, "MCT_TEST_N_PREDICT"), c_define(text, "MCT_TEST_N_TRAIN")
    assert n_predict >= 2 and n_train >= 2 and c_define(text, "MCT_TEST_N_PROBES") >= 1
    hash_c = ", ".join(f"0x{b:02x}" for b in bytes.fromhex(run.result.hash))
    assert f"mct_test_hash[8] = {{{hash_c}}};" in text
    x = a["mct_test_x"].view(np.float32)
    t = a["mct_test_t"].view(np.float32)
    assert x.shape == (n_predict, 6) and t.shape == (n_train, 3)
    assert np.all((x >= -1) & (x < 1)) and len({r.tobytes() for r in x}) == n_predict
    assert np.all(t.sum(axis=1) == 1) and np.all((t == 0) | (t == 1))
    net = small_net()
    opt = optimizer(net, "adam")
    assert np.array_equal(bits(net.forward(x)), a["mct_test_y"])
    probes = a["mct_test_probe_index"]
    for s in range(n_train):
        loss = train_step(opt, net, LOSS, x[s], t[s])
        assert bits(np.float32(loss)) == a["mct_test_loss"][s]
        assert a["mct_test_step"][s] == s + 1 == opt.step
        assert a["mct_test_params_crc"][s] == zlib.crc32(np.ascontiguousarray(net.params, np.float32).tobytes())
        assert a["mct_test_state_crc"][s] == zlib.crc32(np.ascontiguousarray(opt.state, np.float32).tobytes())
        assert np.array_equal(bits(net.params[probes]), a["mct_test_probe"][s])
    # the probes are parameters the first step changed
    assert np.all(bits(small_net().params[probes]) != a["mct_test_probe"][0])


def test_expected_h_is_deterministic(tmp_path: Path, runs: Dict[str, Run]) -> None:
    """The same model exported again gives the same expected.h, byte for byte."""
    again = export_project(checkpoint("adam"), "native", tmp_path / "again", loss=LOSS)
    assert (again.path / "test" / "test_model" / "expected.h").read_text() == runs["native"].expected_h


def test_a_run_that_ends_before_tests_done_is_an_error(runs: Dict[str, Run], own_core: Path) -> None:
    """A test program that stops early (here: its output cut after two results) fails `pio test` as ERRORED
    with the reason, although every result it printed passed."""
    run = runs["native"]
    (run.path / "test" / "test_model" / "expected.h").write_text(run.expected_h)
    ini = run.path / "platformio.ini"
    ini.write_text(
        ini.read_text().replace(
            "[env:native]\n",
            "[env:native]\ntest_testing_command =\n    sh\n    -c\n"
            "    ${platformio.build_dir}/native/program | head -n 2\n",
            1,
        )
    )
    r = pio_test(run.path, "native", core_dir(own_core, "native"))
    text = output(r)
    assert r.returncode == 1, text[-3000:]
    assert "before TESTS_DONE" in text
    assert re.search(r"^native\s+test_model\s+ERRORED", text, re.M), text[-2000:]
    assert case_status(text, "test_model_hash") == ["PASSED"]
