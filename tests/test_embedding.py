"""mcutrain in the user's own firmware (docs/embedding.md): the model-level C API of mcutrain.h, the library
export (`mcutrain export --library`), its plain C example built and run natively and on a Cortex-M4F in QEMU
(the Arduino sketch runs on the genuine Arduino core in test_arduino_core.py), and what the device pays for:
`--optimizer` and `--save`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import pytest
from click.testing import CliRunner

from helpers import assert_same_bits, int8_full_net, onehot_samples
from mcutrain import Checkpoint, Sequential, TrainParams, save_model
from mcutrain import layers as L
from mcutrain.cli.commands import main as cli
from mcutrain.corefacts import save_slot_bytes
from mcutrain.exporter import sim
from mcutrain.exporter.boards import get_board
from mcutrain.exporter.export import ExportError, ExportResult, export_project
from mcutrain.exporter.folders import FolderError
from mcutrain.exporter.memplan import MemoryPlanError
from mcutrain.exporter.paths import firmware_dir

EXAMPLE_LINE = re.compile(
    r"^mcutrain example: loaded (\d) steps (\d+) loss first ([0-9.]+) last ([0-9.]+) accuracy (\d+)/200 save (\d+)$"
)


def checkpoint(optimizer: str = "momentum") -> Checkpoint:
    """4 -> 8 (tanh) -> 2 (softmax), cross-entropy, with an optimizer."""
    net = Sequential(L.Linear(4, 8), L.Tanh(), L.Linear(8, 2), L.Softmax()).rand_params(seed=3)
    opts = {
        "momentum": lambda: net.new_momentum(TrainParams(lr=0.05), 0.9),
        "adam": lambda: net.new_adam(TrainParams(lr=0.01)),
        "sgd": lambda: None,
    }
    return Checkpoint(net, opts[optimizer](), {"loss": "cross_entropy"})


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> ExportResult:
    return export_project(checkpoint(), "uno", tmp_path_factory.mktemp("lib") / "my_model", library=True)


# ---- the library ----
def test_the_library_has_both_formats_metadata_and_the_api(library: ExportResult) -> None:
    p = library.path
    meta = json.loads((p / "library.json").read_text())
    assert meta["name"] == "my_model" and meta["build"]["srcDir"] == "src"
    assert "-ffp-contract=off" in meta["build"]["flags"]
    assert set(library.model.build_flags()) <= set(meta["build"]["flags"])
    props = dict(line.split("=", 1) for line in (p / "library.properties").read_text().splitlines() if line)
    assert props["name"] == "my_model" and props["includes"] == "mcutrain.h" and props["architectures"] == "*"
    kind = json.loads((p / "mcutrain.json").read_text())
    assert kind["kind"] == "library" and kind["hash"] == library.hash and kind["device_optimizer"] == "momentum"
    for name in ("mcutrain.h", "model.h", "model.c", "mct_config.h", "mct.h", "mct_app.c", "mct_arduino.cpp"):
        assert (p / "src" / name).is_file(), name
    assert (p / "examples" / "learn_on_device" / "learn_on_device.ino").is_file()
    assert (p / "examples" / "plain_c" / "main.c").is_file()
    assert not (p / "platformio.ini").exists() and not (p / "src" / "main.c").exists()
    # mct_config.h carries the model's build flags for builds that pass none (the Arduino IDE)
    config = (p / "src" / "mct_config.h").read_text()
    for flag in library.model.build_flags():
        name, _, value = flag[2:].partition("=")
        assert f"#define {name} {value}" in config


def test_every_public_function_of_the_api_has_one_line_of_doc() -> None:
    """mcutrain.h: every declaration is preceded by a one-line comment."""
    lines = (firmware_dir() / "app" / "mcutrain.h").read_text().splitlines()
    decls = [i for i, ln in enumerate(lines) if re.match(r"^(int|void|uint32_t) mct_model_\w+\(", ln)]
    names = {re.search(r"mct_model_\w+", lines[i]).group(0) for i in decls}  # type: ignore[union-attr]
    assert names == {
        "mct_model_init",
        "mct_model_predict",
        "mct_model_train",
        "mct_model_save",
        "mct_model_load",
        "mct_model_reset",
        "mct_model_steps",
        # models trained on raw windows (MCT_MODEL_FEAT) only
        "mct_model_predict_raw",
        "mct_model_train_raw",
        "mct_model_features",
    }
    for i in decls:
        assert lines[i - 1].startswith("/* ") and lines[i - 1].endswith(" */"), lines[i - 1]


def test_a_library_is_not_written_over_anything_without_force(library: ExportResult, tmp_path: Path) -> None:
    out = tmp_path / "lib"
    export_project(checkpoint(), "uno", out, library=True)
    (out / "mine.txt").write_text("keep")
    with pytest.raises(FolderError, match="pass --force"):
        export_project(checkpoint("sgd"), "uno", out, library=True)
    assert (out / "mine.txt").read_text() == "keep"
    r = export_project(checkpoint("sgd"), "uno", out, library=True, force=True)
    assert not (out / "mine.txt").exists() and json.loads((out / "mcutrain.json").read_text())["hash"] == r.hash


# ---- the plain C example ----
def parse_example(out: str) -> Dict[str, float]:
    m = EXAMPLE_LINE.match(out.strip())
    assert m, out
    keys = ("loaded", "steps", "first", "last", "right", "save")
    return {k: float(v) for k, v in zip(keys, m.groups())}


def native_example(library: Path, out: Path, sanitize: bool) -> Path:
    exe = out / "example"
    flags = ["-std=c99", "-O1", "-g", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-pedantic"]
    if sanitize:
        flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    src = library / "src"
    sources = [*sorted(src.glob("*.c")), src / "ports" / "port_posix.c", library / "examples" / "plain_c" / "main.c"]
    subprocess.run(
        ["gcc", *flags, "-DMCT_PORT_POSIX", f"-I{src}", *map(str, sources), "-o", str(exe)], check=True, timeout=300
    )
    return exe


def test_the_c_example_learns_natively_and_carries_on_from_its_save(library: ExportResult, tmp_path: Path) -> None:
    """Built with warnings as errors and under AddressSanitizer/UBSan: the loss falls with no host frames, the
    accuracy on fresh readings is high, and a second run starts from the first one's save."""
    exe = native_example(library.path, tmp_path, sanitize=True)
    env = {"MCUTRAIN_STORE": str(tmp_path / "store.bin"), "PATH": "/usr/bin:/bin"}
    r1 = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=300)
    assert r1.returncode == 0, r1.stdout + r1.stderr
    a = parse_example(r1.stdout)
    assert a["loaded"] == 0 and a["steps"] == 3000 and a["save"] == 0
    assert a["last"] < 0.7 * a["first"] and a["right"] >= 170, a
    r2 = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=300)
    b = parse_example(r2.stdout)
    assert b["loaded"] == 1 and b["steps"] == 6000 and b["first"] < a["first"], b


INT8_MAIN = r"""
#include <stdio.h>
#include <string.h>
#include "mcutrain.h"
int mct_posix_argc;      /* the POSIX port reads its options from here */
char **mct_posix_argv;
int main(void) {   /* reads MCT_N_IN floats per line of stdin; prints the outputs' bits, then TRAIN's status */
    float x[MCT_N_IN], y[MCT_N_OUT], loss = 1.0f;
    mct_model_init();
    for (;;) {
        for (int i = 0; i < MCT_N_IN; i++) if (scanf("%a", &x[i]) != 1) goto done;
        mct_model_predict(x, y);
        for (int j = 0; j < MCT_N_OUT; j++) { unsigned u; memcpy(&u, &y[j], 4); printf("%08x ", u); }
        printf("\n");
    }
done:
    printf("train %d\n", mct_model_train(x, y, &loss));
    return 0;
}
"""


def test_the_c_api_of_a_frozen_full_integer_model_predicts_the_host_bits(tmp_path: Path) -> None:
    """A library of a frozen model, full-integer from its QUANT to its DEQUANT (the firmware takes int8 at its
    boundary, mct_app_input quantizing each input, mct_app_output dequantizing each output): built with warnings as
    errors and under AddressSanitizer/UBSan, mct_model_predict gives the host twin's bits and mct_model_train
    answers MCT_ST_UNSUPPORTED (nothing trains)."""
    from mcutrain.corefacts import ReplyStatus
    from mcutrain.exporter.twin import DeviceTwin

    net = int8_full_net()
    rng = np.random.default_rng(4)
    cal = rng.standard_normal((200, net.n_in)).astype(np.float32)
    x = np.concatenate([2 * rng.standard_normal((8, net.n_in)), np.zeros((1, net.n_in))]).astype(np.float32)
    lib = tmp_path / "lib"
    r = export_project(Checkpoint(net, net.new_sgd(TrainParams(lr=0.01))), "native", lib, quant="int8-full",
                       trainable="none", library=True, calibration=cal)  # fmt: skip
    assert r.model.int8_io
    (tmp_path / "main.c").write_text(INT8_MAIN)
    flags = ["-std=c99", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined",
             "-fno-sanitize-recover=all"]  # fmt: skip
    src = lib / "src"
    sources = [*sorted(src.glob("*.c")), src / "ports" / "port_posix.c", tmp_path / "main.c"]
    exe = tmp_path / "int8"
    subprocess.run(["gcc", *flags, "-DMCT_PORT_POSIX", f"-I{src}", *map(str, sources), "-o", str(exe)], check=True,
                   timeout=300)  # fmt: skip
    stdin = "".join(" ".join(float(v).hex() for v in row) + "\n" for row in x)
    out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, timeout=60,
                         env={"MCUTRAIN_STORE": str(tmp_path / "store.bin")})  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.split("\n")
    got = np.array([[int(w, 16) for w in line.split()] for line in lines[: len(x)]], np.uint32).view(np.float32)
    assert_same_bits(got, DeviceTwin(r.model).predict(x), "mct_model_predict of the int8-full library")
    assert lines[len(x)] == f"train {int(ReplyStatus.UNSUPPORTED)}", out.stdout


def example_stream(steps: int) -> Tuple[np.ndarray, np.ndarray]:
    """The plain C example's synthetic readings and targets (its xorshift32 sensor and its labelling rule),
    computed in NumPy float32."""
    s, xs = 0x2545F491, []
    for _ in range(steps * 4):
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        xs.append(np.float32(s >> 8) * np.float32(1.0 / 8388608.0) - np.float32(1.0))
    x = np.array(xs, np.float32).reshape(steps, 4)
    t = np.eye(2, dtype=np.float32)[(x[:, 0] > x[:, 1]).astype(int)]
    return x, t


def test_the_c_api_trains_exactly_as_the_host_twin(library: ExportResult, tmp_path: Path) -> None:
    """The example's 3,000 steps through mct_model_train end in the parameters the host's twin of the device
    reaches on the same readings, bit for bit (read from the example's save: header, then the parameters)."""
    from mcutrain.corefacts import SAVE_HEADER
    from mcutrain.exporter.twin import DeviceTwin

    exe = native_example(library.path, tmp_path, sanitize=False)
    store = tmp_path / "store.bin"
    r = subprocess.run([str(exe)], capture_output=True, text=True, env={"MCUTRAIN_STORE": str(store)}, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    twin = DeviceTwin(library.model)
    x, t = example_stream(3000)
    for k in range(3000):
        twin.train(x[k], t[k])
    n = library.model.program.n_params
    saved = np.frombuffer(store.read_bytes()[SAVE_HEADER : SAVE_HEADER + 4 * n], "<f4")
    assert_same_bits(saved, twin.params, "parameters after 3,000 steps of the C API")


def test_the_c_example_learns_on_a_cortex_m4f_in_qemu_with_the_same_bits(library: ExportResult, tmp_path: Path) -> None:
    """The same example, cross-compiled for the Cortex-M4F (mps2-an386) with mcutrain's startup code and QEMU
    port, prints exactly the native run's figures (the same float bits, six decimals shown)."""
    if shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None:
        pytest.skip("needs gcc-arm-none-eabi and qemu-system-arm (scripts/setup.sh)")
    native = subprocess.run(
        [str(native_example(library.path, tmp_path, sanitize=False))],
        capture_output=True,
        text=True,
        env={"MCUTRAIN_STORE": str(tmp_path / "native.bin")},
        timeout=300,
    )
    fw = firmware_dir()
    src = library.path / "src"
    board = get_board("nucleo_f401re")
    (tmp_path / "mem.ld").write_text(
        "MEMORY\n{\n  FLASH (rx) : ORIGIN = 0x00000000, LENGTH = 524288\n"
        f"  RAM (rwx) : ORIGIN = 0x20000000, LENGTH = {board.ram}\n}}\n__min_stack = 2048;\nINCLUDE sections.ld\n"
    )
    elf = tmp_path / "example.elf"
    cmd = [
        "arm-none-eabi-gcc",
        *board.sim["cpu_flags"].split(),
        "-std=c99",
        "-O2",
        "-ffp-contract=off",
        "-fno-math-errno",
        "-ffunction-sections",
        "-fdata-sections",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-DMCT_PORT_QEMU_ARM",
        "-DMCT_QEMU_UART_CMSDK=0x40004000",
        f'-DMCT_STORE_PATH="{tmp_path / "qemu.bin"}"',
        f"-I{src}",
        *map(str, sorted(src.glob("*.c"))),
        str(src / "ports" / "port_qemu_arm.c"),
        str(library.path / "examples" / "plain_c" / "main.c"),
        str(fw / "platforms" / "qemu-arm" / "startup" / "startup.c"),
        "--specs=nano.specs",
        "-nostartfiles",
        "-Wl,--gc-sections",
        f"-L{fw / 'platforms' / 'qemu-arm' / 'ldscripts'}",
        "-T",
        str(tmp_path / "mem.ld"),
        "-o",
        str(elf),
    ]
    subprocess.run(cmd, check=True, timeout=300)
    qemu = sim.simulator_for(board).command(board, str(elf), "stdio")
    r = subprocess.run(qemu, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.replace("\r", "") == native.stdout, (r.stdout, native.stdout)
    assert parse_example(r.stdout)["save"] == 0


# ---- what the device pays for: --optimizer and --save ----
def test_the_optimizer_the_device_trains_with_can_be_chosen(tmp_path: Path) -> None:
    """--optimizer sgd from a momentum model: no optimizer state on the device; adam from a model without
    optimizer: two slots; the choice is recorded and costs what the plan says."""
    mom = export_project(checkpoint("momentum"), "native", tmp_path / "m")
    sgd = export_project(checkpoint("momentum"), "native", tmp_path / "s", optimizer="sgd")
    adam = export_project(checkpoint("sgd"), "native", tmp_path / "a", optimizer="adam")
    n = mom.model.program.n_params
    rows = {r.optimizer: dict((w, b) for w, b, _ in r.plan.rows)["optimizer state"] for r in (mom, sgd, adam)}
    assert rows == {"momentum": 4 * n, "sgd": 0, "adam": 8 * n}
    assert (sgd.model.opt_slots, adam.model.opt_slots) == (0, 2)
    assert json.loads((tmp_path / "a" / "mcutrain.json").read_text())["device_optimizer"] == "adam"
    # the learning rate stays the model's
    assert np.float32(sgd.model.opt_cfg[0]["lr"]) == np.float32(0.05)
    with pytest.raises(ExportError, match="--optimizer must be one of .*sgd.*adam"):
        export_project(checkpoint(), "native", tmp_path / "x", optimizer="lion")


def wide_checkpoint() -> Checkpoint:
    """8 -> 12 (tanh) -> 4 with Adam: its parameters fit the Uno's RAM, its Adam state does not."""
    net = Sequential(L.Linear(8, 12), L.Tanh(), L.Linear(12, 4), L.Softmax()).rand_params(seed=1)
    return Checkpoint(net, net.new_adam(TrainParams(lr=0.01)), {"loss": "cross_entropy"})


def test_the_plan_advises_a_stateless_optimizer_when_that_is_enough(tmp_path: Path) -> None:
    with pytest.raises(MemoryPlanError, match=r"--optimizer sgd") as e:
        export_project(wide_checkpoint(), "uno", tmp_path / "p")
    assert "optimizer state" in str(e.value)
    r = export_project(wide_checkpoint(), "uno", tmp_path / "p", optimizer="sgd")
    assert r.plan.fits() and r.optimizer == "sgd"


def test_saves_keep_the_optimizer_state_only_where_it_fits(tmp_path: Path) -> None:
    """Default: 'all' where two saves of parameters and optimizer state fit the board's storage, else
    'params'; the plan's storage figure follows (the core's save layout)."""
    small = export_project(checkpoint("momentum"), "uno", tmp_path / "small")
    n = small.model.program.n_params
    assert small.model.save == "all" and small.plan.save_bytes == 2 * save_slot_bytes(n, 1) <= 1024
    net = Sequential(L.Linear(6, 10), L.Tanh(), L.Linear(10, 3)).rand_params(seed=2)
    ck = Checkpoint(net, net.new_momentum(TrainParams(lr=0.05)), {"loss": "mse"})
    big = export_project(ck, "uno", tmp_path / "big")
    m = big.model.program.n_params
    assert 2 * save_slot_bytes(m, 1) > 1024 >= 2 * save_slot_bytes(m, 0)
    assert big.model.save == "params" and big.plan.save_bytes == 2 * save_slot_bytes(m, 0)
    assert "device saves (the parameters) use" in big.plan.table()
    forced = export_project(ck, "uno", tmp_path / "forced", save="all")
    assert "SAVE will answer 'not supported' (save the parameters only with --save params" in forced.plan.table()
    too_big = export_project(wide_checkpoint(), "uno", tmp_path / "too_big", optimizer="sgd")
    assert too_big.model.save == "params"
    need = 2 * save_slot_bytes(too_big.model.program.n_params, 0)  # 1,360 B: two headers and two blobs
    assert f"need {need:,} B of storage, uno has 1,024 B: SAVE will answer 'not supported' (train fewer layers)" in (
        too_big.plan.table()
    )
    with pytest.raises(ExportError, match="--save must be one of params, all"):
        export_project(ck, "uno", tmp_path / "bad", save="some")


def test_a_params_only_save_restores_the_parameters_and_restarts_the_optimizer(tmp_path: Path) -> None:
    """On the native firmware: after SAVE and a restart the parameters and the step are the saved ones, the
    optimizer slots start from zero (and Adam's bias correction from step 0)."""
    r = export_project(checkpoint("adam"), "native", tmp_path / "fw", save="params")
    x, t = onehot_samples(np.random.default_rng(5), 6, 4, 2, inputs="uniform")
    store = tmp_path / "store.bin"
    native = get_board("native")
    with sim.start(r.path, native, store=store) as s:
        for k in range(5):
            s.device.train(x[k], t[k])
        assert s.device.save() == 1
        params, state, _ = s.device.pull()
        assert np.any(state != 0)
        s.report()
    assert store.stat().st_size == save_slot_bytes(r.model.program.n_params, 0)  # one slot, no optimizer state
    with sim.start(r.path, native, store=store, build=False) as s:
        info = s.device.info()
        assert info.loaded_save and info.step == 5
        p2, state2, ts = s.device.pull()
        assert_same_bits(p2, params, "parameters")
        assert not np.any(state2), "the optimizer slots start afresh"
        assert np.frombuffer(bytes(ts), "<f4")[1:].tolist() == [1.0, 1.0], "Adam's powers restart"
        s.report()


def test_the_cli_exports_a_library_with_the_choices(tmp_path: Path) -> None:
    model = tmp_path / "m.mct"
    ck = checkpoint("momentum")
    save_model(model, ck.net, ck.optimizer, ck.metadata)
    out = tmp_path / "lib"
    args = ["export", str(model), "--board", "uno", "--optimizer", "sgd", "--save", "params", "--library", "-o"]
    res = CliRunner().invoke(cli, [*args, str(out)])
    assert res.exit_code == 0, res.output
    assert f"wrote library {out}" in res.output and "optimizer sgd, saves keep params" in res.output
    meta = json.loads((out / "mcutrain.json").read_text())
    assert (meta["kind"], meta["device_optimizer"], meta["save"]) == ("library", "sgd", "params")
    assert "#define MCT_MODEL_SAVE_SLOTS 0" in (out / "src" / "model.h").read_text()
    res = CliRunner().invoke(cli, ["build", str(out)])
    assert res.exit_code == 1 and "is a library for your own firmware" in res.output
    res = CliRunner().invoke(cli, ["export", str(model), "--board", "uno", "--optimizer", "lion"])
    assert res.exit_code == 2 and "--optimizer" in res.output
    # `info` plans the same device: no optimizer state in RAM, parameters-only saves
    res = CliRunner().invoke(cli, ["info", str(model), "--board", "uno", "--optimizer", "sgd", "--save", "params"])
    assert res.exit_code == 0, res.output
    assert re.search(r"optimizer state\s+0\s+0", res.output) and "device saves (the parameters) use" in res.output
    res = CliRunner().invoke(cli, ["info", str(model), "--board", "uno"])
    assert re.search(r"optimizer state\s+232\s+0", res.output), res.output
    assert "device saves (the parameters and the optimizer state) use" in res.output


def test_firmware_is_a_platformio_library_by_path(library: ExportResult, pio_core: Path, tmp_path: Path) -> None:
    """firmware/library.json: a PlatformIO project that takes the core and the model API through
    `lib_deps = mcutrain=symlink://.../firmware`, with the exported model.h in include/ and model.c, the example
    and a port in src/, builds offline and learns; its version is the package's."""
    from mcutrain import __version__
    from mcutrain.exporter import pio

    fw = firmware_dir()
    assert json.loads((fw / "library.json").read_text())["version"] == __version__
    assert f"version={__version__}" in (fw / "library.properties").read_text().splitlines()
    (tmp_path / "include").mkdir()
    (tmp_path / "src").mkdir()
    shutil.copyfile(library.path / "src" / "model.h", tmp_path / "include" / "model.h")
    for f in (library.path / "src" / "model.c", library.path / "examples" / "plain_c" / "main.c"):
        shutil.copyfile(f, tmp_path / "src" / f.name)
    shutil.copyfile(fw / "app" / "ports" / "port_posix.c", tmp_path / "src" / "port_posix.c")
    (tmp_path / "platformio.ini").write_text(
        "[env:native]\n"
        f"platform = symlink://{fw / 'platforms' / 'host'}\n"
        f"lib_deps = mcutrain=symlink://{fw}\n"
        "build_flags = -DMCT_PORT_POSIX -Iinclude\n"
    )
    r = pio.run(["run", "-e", "native"], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run = subprocess.run(
        [str(tmp_path / ".pio" / "build" / "native" / "program")],
        capture_output=True,
        text=True,
        env={"MCUTRAIN_STORE": str(tmp_path / "store.bin")},
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    a = parse_example(run.stdout)
    assert a["last"] < 0.7 * a["first"]
