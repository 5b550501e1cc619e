"""Exported firmware on the QEMU stand-ins: every simulated Cortex-M core (M4F mps2-an386 for nano33ble and
nucleo_f401re, M3 mps2-an385 for bluepill, M0 microbit for pico, M7 mps2-an500 for teensy41, M33
mps2-an505 for nucleo_l552ze_q) and rv32imc (QEMU virt) for the esp32c3, built offline by
platforms/qemu-arm and platforms/qemu-riscv and driven through mcutrain.exporter.sim_qemu over QEMU's pty.

The device must compute exactly what the host's C core computes for its layer table (DeviceModel.core()):
the same outputs, the same loss at every step and, after training on the device, the same parameters,
optimizer state and train state, bit for bit (all builds use -ffp-contract=off).

Needs qemu-system-arm, qemu-system-misc, gcc-arm-none-eabi, libnewlib-arm-none-eabi, gcc-riscv64-unknown-elf,
picolibc-riscv64-unknown-elf, gcc and PlatformIO; a missing tool fails with the SimError that names the
package to install (no skips)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import List, Tuple

import numpy as np
import pytest
from layer_table import mixed_layers

from helpers import (
    assert_device_equals_twin,
    assert_same_bits,
    export_int8_full,
    onehot_samples,
    quant_tie_inputs,
    readme_net,
    train_lockstep,
    with_extreme_qdense_constants,
    write_model_project,
)
from mcutrain import Checkpoint, Sequential, TrainParams, losses
from mcutrain import layers as L
from mcutrain.corefacts import ReplyStatus, layer_size_of
from mcutrain.exporter import pio, sim
from mcutrain.exporter.boards import get_board
from mcutrain.exporter.client import DeviceError
from mcutrain.exporter.export import ExportResult, export_project
from mcutrain.exporter.memplan import MemoryPlanError
from mcutrain.exporter.sim import SimError
from mcutrain.exporter.sim_qemu import elf_sizes, set_env_option
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.losses import Loss
from mcutrain.module import Module
from mcutrain.optim import Optimizer
from mcutrain.problems import ModularAddition10

# one board per simulated core (nucleo_f401re, the other M4F board, runs in the int8 test)
CORE_BOARDS = ["nano33ble", "bluepill", "pico", "teensy41", "nucleo_l552ze_q", "esp32c3"]
ALL_BOARDS = CORE_BOARDS + ["nucleo_f401re"]
OPTIMIZERS = ["sgd", "momentum", "rmsprop", "rmsprop_momentum", "adam"]
STEPS = 100
EPOCHS = 5  # the networks of the issue learn 20 samples in 5 passes (100 steps)


@pytest.fixture(scope="module", autouse=True)
def tool_dirs(pio_core: Path) -> Path:
    """The session's own PlatformIO core folder, build cache and mcutrain cache (the QEMU plugin); see
    conftest.pio_core."""
    return pio_core


# ---- networks ----
def mixed_net() -> Module:
    """A small network through most layer kinds (fits the micro:bit's 16 KB with Adam's two slots)."""
    return Sequential(
        *mixed_layers(),
        L.Linear(6, 4),
        L.Softmax(0.8),
    ).rand_params(seed=11)


def quant_net() -> Module:
    """Three Linear layers: with trainable='last:1' the first two are frozen int8 weights in flash."""
    return Sequential(L.Linear(12, 16), L.Relu(), L.Linear(16, 8), L.Tanh(), L.Linear(8, 4), L.Softmax()).rand_params(
        seed=5
    )


def relu_net() -> Module:
    """64 -> 32 (ReLU) -> 10 (softmax)."""
    return Sequential(L.Linear(64, 32), L.Relu(), L.Linear(32, 10), L.Softmax()).rand_params(seed=21)


def optimizer_and_loss(net: Module, kind: str) -> Tuple[Optimizer, Loss]:
    """An optimizer of the kind (with a cosine schedule, warm-up, L1, L2 and clipping) and a loss; every
    optimizer gets another loss so all losses run on every core."""
    tp = TrainParams(
        lr=2e-2, schedule="cosine", lr_final=1e-3, decay_steps=80, warmup_steps=10, l1=1e-4, l2=1e-3, clip=2.0
    )
    return {
        "sgd": lambda: (net.new_sgd(tp), losses.mse),
        "momentum": lambda: (net.new_momentum(tp, 0.9), losses.huber(0.5)),
        "rmsprop": lambda: (net.new_rmsprop(tp, 0.9), losses.cross_entropy),
        "rmsprop_momentum": lambda: (net.new_rmsprop_with_momentum(tp, 0.8, 0.9), losses.logit_bce),
        "adam": lambda: (net.new_adam(tp, 0.9, 0.999, 1e-8), losses.cosine),
    }[kind]()


def export(net: Module, opt: Optimizer, loss: Loss, board: str, out: Path, **kw: object) -> ExportResult:
    """Export a network for a board's simulated stand-in."""
    return export_project(Checkpoint(net, opt), board, out, loss=loss, sim=True, **kw)


# ---- exact parity on every core ----
@pytest.mark.parametrize("kind", OPTIMIZERS)
@pytest.mark.parametrize("board", CORE_BOARDS)
def test_predict_and_train_match_host_bit_for_bit(board: str, kind: str, tmp_path: Path) -> None:
    net = mixed_net()
    opt, loss = optimizer_and_loss(net, kind)
    r = export(net, opt, loss, board, tmp_path / "p")
    twin = DeviceTwin(r.model)
    rng = np.random.default_rng(1)
    x_eval = rng.standard_normal((5, 8)).astype(np.float32)
    x_eval[4] *= np.float32(1e-39)  # subnormal inputs: every core must handle them as x86-64 does
    assert np.all(np.abs(x_eval[4]) < np.finfo(np.float32).tiny)
    xs, ts = onehot_samples(rng, STEPS, 8, 4)
    with sim.start(r.path, r.board) as s:
        info = s.device.info()
        assert info.hash == r.hash and info.n_params == twin.n_params and info.step == 0
        assert_same_bits(s.device.predict(x_eval), twin.predict(x_eval), "PREDICT before training")
        train_lockstep(s.device, twin, xs, ts)
        assert_device_equals_twin(s.device, twin)
        assert_same_bits(s.device.predict(x_eval), twin.predict(x_eval), "PREDICT after training")
        assert not np.array_equal(twin.params, r.model.params), "training changed nothing"


@pytest.mark.parametrize("board", ALL_BOARDS)
def test_int8_export_predicts_the_host_quantized_output(board: str, tmp_path: Path) -> None:
    net = quant_net()
    opt, loss = net.new_momentum(TrainParams(lr=0.05), 0.9), losses.cross_entropy
    r = export(net, opt, loss, board, tmp_path / "p", quant="int8", trainable="last:1")
    assert len(bytes(r.model.program.cdata)) > 0, "the frozen layers should be in flash"
    twin = DeviceTwin(r.model)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 12)).astype(np.float32)
    xs, ts = onehot_samples(rng, 20, 12, 4)
    with sim.start(r.path, r.board) as s:
        y = s.device.predict(x)
        assert_same_bits(y, twin.predict(x), "int8 PREDICT")
        assert not np.array_equal(y, net(x)), "the int8 export gave the f32 network's outputs"
        train_lockstep(s.device, twin, xs, ts)
        assert_device_equals_twin(s.device, twin)
        assert_same_bits(s.device.predict(x), twin.predict(x), "int8 PREDICT after training the last layer")


@pytest.mark.parametrize("board", CORE_BOARDS)
def test_int8_full_export_predicts_the_host_output(board: str, tmp_path: Path) -> None:
    """Full-integer int8 (QUANT, QDENSE, QLUT, DEQUANT) on every core equals the host's C core bit for bit: with
    the exporter's constants, and with QDENSE constants at their limits (saturating biases, negative and -2^31
    multipliers, shifts outside [1, 62] and on both sides of 32), which the cores requantize by different code
    (Cortex-M's SMLAD rows and 64-bit multiply, AVR's 32-bit pieces, the plain C loop). The model is frozen and
    full-integer from its QUANT to its DEQUANT, so the firmware takes the f32 input value by value into the int8
    buffer and dequantizes the output as it sends it: its arena is that buffer alone (no f32 input or output, no
    backward scratch or target), and TRAIN is refused."""
    r, net, x = export_int8_full(board, tmp_path / "p")
    m = r.model
    sizes = [layer_size_of(d) for d in m.program.layers]
    assert m.int8_io and m.scratch == 0
    assert m.app_arena == max(a.out + b.out for a, b in zip(sizes[:-2], sizes[1:-1])) < m.program.arena
    assert f"#define MCT_MODEL_APP_ARENA {m.app_arena} " in (r.path / "src" / "model.h").read_text()
    x = np.concatenate([x, quant_tie_inputs(r.model)])
    extreme = with_extreme_qdense_constants(r.model)
    out = write_model_project(tmp_path / "extreme", r.board, extreme, "extreme QDENSE constants")
    for path, m in [(r.path, r.model), (out, extreme)]:
        twin = DeviceTwin(m)
        want = twin.predict(x)
        with sim.start(path, r.board) as s:
            assert s.device.info().hash == m.hash().hex()
            assert_same_bits(s.device.predict(x), want, f"int8-full PREDICT ({path.name})")
            with pytest.raises(DeviceError) as e:
                s.device.train(x[0], np.zeros(m.program.n_out, np.float32))
            assert e.value.status == ReplyStatus.UNSUPPORTED, e.value
            assert_same_bits(s.device.predict(x[:2]), want[:2], "PREDICT after the refused TRAIN")
    assert not np.array_equal(DeviceTwin(extreme).predict(x), DeviceTwin(r.model).predict(x))
    assert not np.array_equal(DeviceTwin(r.model).predict(x), net(x)), "the export gave the f32 network's outputs"


# ---- the networks, fully trainable on the simulated Cortex-M4F ----
def mean_loss(loss: Loss, y: np.ndarray, t: np.ndarray) -> float:
    """The loss of outputs y against targets t, averaged over the samples."""
    return loss(y, t)[0]


def test_readme_network_trains_on_the_m4f_and_reports_its_cost(tmp_path: Path) -> None:
    net = readme_net(seed=456645, scale=1.0)
    opt, loss = net.new_rmsprop_with_momentum(TrainParams(lr=2e-2), 0.85, 0.8), losses.logit_bce
    r = export(net, opt, loss, "nano33ble", tmp_path / "p")
    assert r.model.n_trainable == net.param_count()
    twin = DeviceTwin(r.model)
    x, t = ModularAddition10(seed=3).sample_batch(20)
    x, t = np.asarray(x, np.float32), np.asarray(t, np.float32)
    with sim.start(r.path, r.board, measure=True) as s:
        before = s.device.predict(x)
        train_lockstep(s.device, twin, np.tile(x, (EPOCHS, 1)), np.tile(t, (EPOCHS, 1)))
        assert_device_equals_twin(s.device, twin)
        after = s.device.predict(x)
        assert_same_bits(after, twin.predict(x), "PREDICT after training")
        rep = s.report()
    assert mean_loss(loss, after, t) < 0.5 * mean_loss(loss, before, t)
    assert rep["board"] == "nano33ble" and rep["simulator"] == "qemu-arm" and rep["unit"] == "instructions"
    assert rep["predict_calls"] == 40 and rep["train_calls"] == 20 * EPOCHS
    assert 0 < rep["predict"] < rep["train"]
    assert rep["marker_overhead"] is not None and rep["marker_overhead"] < 20
    n_ram_floats = twin.n_params * (1 + r.model.opt_slots)
    assert rep["ram_static"] >= 4 * n_ram_floats
    assert rep["flash"] >= rep["text"] > 4 * twin.n_params  # the initial parameters are in flash too
    assert 0 < rep["stack_peak"] < rep["stack_available"]


def test_relu_64_32_10_network_trains_on_the_m4f(tmp_path: Path) -> None:
    net = relu_net()
    opt, loss = net.new_adam(TrainParams(lr=5e-3), 0.9, 0.999, 1e-8), losses.cross_entropy
    r = export(net, opt, loss, "nano33ble", tmp_path / "p")
    assert r.model.n_trainable == net.param_count()
    twin = DeviceTwin(r.model)
    x, t = onehot_samples(np.random.default_rng(4), 20, 64, 10)
    with sim.start(r.path, r.board) as s:
        before = s.device.predict(x)
        train_lockstep(s.device, twin, np.tile(x, (EPOCHS, 1)), np.tile(t, (EPOCHS, 1)))
        assert_device_equals_twin(s.device, twin)
        after = s.device.predict(x)
        assert_same_bits(after, twin.predict(x), "PREDICT after training")
    assert mean_loss(loss, after, t) < 0.5 * mean_loss(loss, before, t)


@pytest.mark.parametrize("trainable", ["all", "last:1"])
@pytest.mark.parametrize("board", ["nano33ble", "teensy41", "nucleo_l552ze_q"])
def test_plain_sgd_kernels_of_the_fpu_cores_match_the_host(board: str, trainable: str, tmp_path: Path) -> None:
    """Plain SGD (no clipping, no regularization) on the Cortex-M cores with an FPU takes gemm.c's assembly
    loops: tiles 8, 4, 2 and 1 wide (widths 15 = 8 + 4 + 2 + 1 and 10 = 8 + 2) and the update of four weights
    at a time with and without dL/dx, with tails (15 - 1 = 14 = 3 * 4 + 2); with trainable='last:1' the
    first layer is frozen f32 weights in flash, read by the same tiles. They must give the C core's bits."""
    net = Sequential(L.Linear(7, 15), L.Sigmoid(), L.Linear(15, 10), L.Softmax()).rand_params(seed=9)
    opt, loss = net.new_sgd(TrainParams(lr=0.1)), losses.cross_entropy
    r = export(net, opt, loss, board, tmp_path / "p", trainable=trainable)
    twin = DeviceTwin(r.model)
    rng = np.random.default_rng(7)
    x_eval = rng.standard_normal((6, 7)).astype(np.float32)
    x_eval[5] *= np.float32(1e-39)  # subnormal inputs
    xs, ts = onehot_samples(rng, 60, 7, 10)
    with sim.start(r.path, r.board) as s:
        assert_same_bits(s.device.predict(x_eval), twin.predict(x_eval), "PREDICT before training")
        train_lockstep(s.device, twin, xs, ts)
        assert_device_equals_twin(s.device, twin)
        assert_same_bits(s.device.predict(x_eval), twin.predict(x_eval), "PREDICT after training")
    assert not np.array_equal(twin.params, r.model.params), "training changed nothing"


def disassembly(elf: Path) -> str:
    """The firmware's code, disassembled (arm-none-eabi-objdump -d)."""
    return subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], capture_output=True, text=True, check=True).stdout


def test_no_asm_builds_leave_out_the_assembly_and_keep_the_bits(tmp_path: Path) -> None:
    """-DMCT_NO_ASM (docs/embedding.md) keeps the C loops for every inline-assembly path of the core. On the M4F
    the default build has the FPU tiles and the SMLAD int8 dot products (VLDM into s8, SXTB16 with rotation);
    built with the flag (the same model files otherwise) none is left, and the firmware still trains (plain SGD,
    the FPU tiles' and update's C twins) and predicts in full-integer int8 with the host's bits."""
    board = "nano33ble"
    net = Sequential(L.Linear(7, 15), L.Sigmoid(), L.Linear(15, 10), L.Softmax()).rand_params(seed=9)
    f32 = export(net, net.new_sgd(TrainParams(lr=0.1)), losses.cross_entropy, board, tmp_path / "f32")
    q, _, xq = export_int8_full(board, tmp_path / "q")
    xs, ts = onehot_samples(np.random.default_rng(7), 30, 7, 10)
    firmware = sim.simulator_for(f32.board).firmware_path
    for r in (f32, q):
        pio.build(r.path, f"sim-{board}")
        asm = disassembly(firmware(r.path, r.board))
        assert "vldm" in asm and ("sxtb16" in asm) == (r is q), "the default build lost its assembly"
        plain = write_model_project(
            tmp_path / f"{r.path.name}-no-asm", r.board, r.model, "no inline assembly", ("-DMCT_NO_ASM",)
        )
        twin = DeviceTwin(r.model)
        with sim.start(plain, r.board) as s:
            if r is q:
                assert_same_bits(s.device.predict(xq), twin.predict(xq), "int8-full PREDICT without assembly")
            else:
                train_lockstep(s.device, twin, xs, ts)
                assert_device_equals_twin(s.device, twin)
        asm = disassembly(firmware(plain, r.board))
        assert "sxtb16" not in asm and "smlad" not in asm
        assert not re.search(r"vldm(ia)?\s+r\d+!?, \{s8", asm), "an FPU tile's VLDM is still there"


# ---- saves go to a host file through semihosting ----
@pytest.mark.parametrize("board", ["teensy41", "esp32c3"])
def test_saves_survive_a_restart(board: str, tmp_path: Path) -> None:
    net = Sequential(L.Linear(12, 6), L.Tanh(), L.Linear(6, 4), L.Softmax()).rand_params(seed=13)
    opt, loss = net.new_adam(TrainParams(lr=1e-2)), losses.cross_entropy
    # saves with the optimizer state: two of them fit these boards' storage (4,284 and 4,096 B), which their
    # stand-ins have too (the saves go to a host file of that size)
    r = export(net, opt, loss, board, tmp_path / "p", save="all")
    store = tmp_path / "store dir" / "board,store.bin"  # a space and a comma: both must survive QEMU's options
    xs, ts = onehot_samples(np.random.default_rng(5), 10, 12, 4)
    with sim.start(r.path, r.board, store=store) as s:
        assert s.device.info().can_save and not s.device.info().loaded_save
        for x, t in zip(xs, ts):
            s.device.train(x, t)
        saved = s.device.pull()
        assert s.device.save() == 1
        s.device.train(xs[0], ts[0])  # after the save: lost at the restart
    assert store.is_file()
    with sim.start(r.path, r.board, store=store, build=False) as s:
        info = s.device.info()
        assert info.loaded_save and info.step == 10
        for got, want in zip(s.device.pull(), saved):
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
        assert s.device.save() == 2


# ---- models that do not fit ----
def big_net() -> Module:
    """About 20 KB of f32 parameters: more than a Blue Pill's RAM once the optimizer state is added."""
    return Sequential(L.Linear(64, 64), L.Tanh(), L.Linear(64, 16)).rand_params(seed=9)


def test_oversized_model_is_rejected_by_the_memory_plan(tmp_path: Path) -> None:
    net = big_net()
    with pytest.raises(MemoryPlanError) as e:
        export(net, net.new_adam(TrainParams()), losses.mse, "bluepill", tmp_path / "p")
    msg = str(e.value)
    assert "does not fit" in msg and "bluepill" in msg and "20,480" in msg
    assert "--trainable" in msg or "--quant" in msg or "smaller network" in msg  # says what to change
    assert not (tmp_path / "p").exists()


def test_model_too_large_for_the_stand_in_fails_at_link_time(tmp_path: Path) -> None:
    # fits the real Pico (264 KB) but not its simulated stand-in, the micro:bit (16 KB)
    net = big_net()
    r = export_project(Checkpoint(net, net.new_adam(TrainParams())), "pico", tmp_path / "p", loss=losses.mse)
    with pytest.raises(pio.PioError, match=r"region [`']?RAM'? overflowed by \d+ bytes"):
        sim.start(r.path, r.board)


# ---- stack overflow is caught: ARMv7-M MPU guard (M4F), ARMv8-M MSPLIM (M33), RISC-V PMP guard,
# ARMv6-M canary (M0) ----
@pytest.mark.parametrize("board", ["nano33ble", "nucleo_l552ze_q", "esp32c3", "pico"])
def test_stack_overflow_stops_the_firmware_with_a_message(board: str, tmp_path: Path) -> None:
    net = quant_net()
    r = export(net, net.new_adam(TrainParams()), losses.cross_entropy, board, tmp_path / "p")
    x, t = onehot_samples(np.random.default_rng(6), 1, 12, 4)
    with sim.start(r.path, r.board) as s:  # how much stack INFO and a training step need
        s.device.info()
        after_info = s.device.stats()[0]
        s.device.train(x[0], t[0])
        after_train = s.device.stats()[0]
    assert after_train > after_info + 100
    simulator = sim.simulator_for(r.board)
    env = simulator.env_name(r.board)
    static = elf_sizes(simulator.size_tool, simulator.firmware_path(r.path, r.board))["ram_static"]
    # RAM for the static data, the guard (aligned to 32 bytes) and a stack between the two needs
    stack = (after_info + after_train) // 2
    set_env_option(r.path, env, "custom_min_stack", "64")
    set_env_option(r.path, env, "custom_ram_size", str((static + 32 + 32 + stack + 7) // 8 * 8))
    with sim.start(r.path, r.board) as s:
        assert s.device.info().hash == r.hash
        with pytest.raises(SimError, match=r"exit status 99(.|\n)*stack overflow"):
            s.device.train(x[0], t[0])


# ---- missing tools ----
@pytest.mark.parametrize(
    "board,packages",
    [
        ("nano33ble", ["qemu-system-arm", "gcc-arm-none-eabi", "libnewlib-arm-none-eabi"]),
        ("esp32c3", ["qemu-system-misc", "gcc-riscv64-unknown-elf", "picolibc-riscv64-unknown-elf"]),
    ],
)
def test_missing_simulator_names_the_packages(
    board: str, packages: List[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = quant_net()
    r = export(net, net.new_sgd(TrainParams()), losses.mse, board, tmp_path / "p")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(SimError) as e:
        sim.start(r.path, get_board(board))
    for pkg in packages:
        assert pkg in str(e.value)
    assert "apt-get install" in str(e.value)
