"""The generated PlatformIO project: platformio.ini for the board (the official platform for the
real board, mcutrain's offline platforms for the simulated stand-in and the native build), src/
with the firmware application and the generated model, the core as a library in lib/, and the
offline dev-platforms in platforms/."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

from .boards import Board
from .paths import HOST_MODEL as HOST_MODEL  # re-exported: the project keeps its model under this name
from .paths import firmware_dir

CALIBRATION = "calibration.npz"  # int8-full's calibration inputs, to rebuild the same device model
DEVICE_LOG = "device-training.jsonl"  # what `device train --project` sent, one JSON line per run (for `device pull`)

# the model-level API for a user's own firmware (`mcutrain export --library`); the protocol firmware does not use it
LIBRARY_ONLY = ("mcutrain.c", "mcutrain.h")
# build_flags of every env: the float semantics of host/device parity, and the generated headers
COMMON_BUILD_FLAGS = ["-ffp-contract=off", "-fno-math-errno", "-Iinclude"]


def _ini_list(key: str, values: List[str]) -> str:
    return f"{key} =\n" + "".join(f"    {v}\n" for v in values)


def sim_env_options(board: Board) -> Optional[Dict[str, str]]:
    """Settings of the offline env that runs this board's firmware in its simulator (None: no simulator). The
    stand-in keeps the real board's RAM (linker script) and storage (MCT_STORE_BYTES): what the board cannot do
    (e.g. SAVE on a board without storage), its stand-in cannot either."""
    kind = board.sim_kind
    if kind in (None, "native"):
        return None
    s = board.sim or {}
    if kind == "qemu-arm":
        return {
            "platform": "symlink://${PROJECT_DIR}/platforms/qemu-arm",
            "custom_qemu_machine": s["machine"],
            "custom_cpu_flags": s["cpu_flags"],
            "custom_ram_size": str(board.sim_ram),
            "custom_flash_size": str(board.flash),
            "custom_min_stack": str(board.stack_margin),
            "custom_opt_level": "O2",
            "build_flags": f"-DMCT_PORT_QEMU_ARM -DMCT_ALLOW_QUIT -DMCT_STORE_BYTES={board.storage}",
        }
    if kind == "qemu-riscv32":
        return {
            "platform": "symlink://${PROJECT_DIR}/platforms/qemu-riscv",
            "custom_qemu_machine": s["machine"],
            "custom_cpu_flags": s.get("cpu_flags", "-march=rv32imc -mabi=ilp32"),
            "custom_ram_size": str(board.sim_ram),
            "custom_flash_size": str(board.flash),
            "custom_min_stack": str(board.stack_margin),
            "custom_opt_level": "O2",
            "build_flags": f"-DMCT_PORT_QEMU_RISCV -DMCT_ALLOW_QUIT -DMCT_STORE_BYTES={board.storage}",
        }
    if kind == "simavr":
        return {
            "platform": "symlink://${PROJECT_DIR}/platforms/simavr",
            "custom_mcu": s["mcu"],
            "custom_f_cpu": str(s.get("freq", 16000000)),
            "custom_ram_size": str(board.sim_ram),
            "custom_flash_size": str(board.flash),
            "build_flags": f"-DMCT_PORT_SIMAVR -DMCT_ALLOW_QUIT -DMCT_STORE_BYTES={board.storage}",
        }
    raise ValueError(f"board {board.name}: unknown simulator kind {kind!r}")


def sim_test_command(board: Board) -> Optional[List[str]]:
    """test_testing_command of env:sim-BOARD (one argument per line in platformio.ini): how `pio test` runs the
    self-test firmware in the simulator with the firmware's serial line on stdout, where the test runner reads
    it. QEMU: the platform's machine, the UART on stdio, semihosting for the exit status. simavr: mcutrain's
    harness, which platforms/simavr builds next to the firmware in test builds, with serial=stdio."""
    kind = board.sim_kind
    env = f"sim-{board.name}"
    build = "${platformio.build_dir}/" + env
    if kind in ("qemu-arm", "qemu-riscv32"):
        from .sim_qemu import QemuArmSimulator, QemuRiscvSimulator

        qemu = QemuArmSimulator() if kind == "qemu-arm" else QemuRiscvSimulator()
        return qemu.command(board, f"{build}/firmware.elf", "stdio")
    if kind == "simavr":
        from .sim_avr import SimavrSimulator

        return SimavrSimulator().command(
            f"{build}/avr_run", f"{build}/firmware.elf", board, "stdio", f"{build}/simavr_test_report.json"
        )
    return None


def platformio_ini(board: Board, source: str, model_flags: Sequence[str] = ()) -> str:
    """platformio.ini: the board's env, its simulated stand-in (sim-NAME) and the native env; model_flags
    (which optimizer, loss, ops and activations the firmware compiles in) go to every env."""
    if board.name == "native":
        about = [
            "; env:native builds the firmware as a program for this computer, offline, with mcutrain's",
            ";   own platform in platforms/.",
        ]
    else:
        about = [
            f"; env:{board.name} builds for the real board with the official PlatformIO platform (installed",
            f";   once from the internet); env:sim-{board.name} (its simulated stand-in, where there is one)",
            ";   and env:native build offline with mcutrain's own platforms in platforms/.",
        ]
    out = (
        [f"; generated by mcutrain export from {source}: board {board.name} ({board.title})"]
        + about
        + [
            "",
            "[platformio]",
            f"default_envs = {'native' if board.name == 'native' else board.name}",
            "",
            "[env]",
            "test_framework = custom",
            "test_build_src = yes",
            _ini_list("build_flags", COMMON_BUILD_FLAGS + list(model_flags)).rstrip(),
            "",
        ]
    )
    if board.name != "native":
        pio = board.platformio
        out += [f"[env:{board.name}]", f"platform = {pio['platform']}", f"board = {pio['board']}"]
        if pio.get("framework"):
            out.append(f"framework = {pio['framework']}")
        if pio.get("framework") != "arduino":
            raise ValueError(
                f"board {board.name}: mcutrain's firmware runs on the Arduino framework "
                f'(framework = "arduino" in its board file)'
            )
        out += [
            _ini_list(
                "build_flags", ["${env.build_flags}", "-DMCT_PORT_ARDUINO", f"-DMCT_STORE_BYTES={board.storage}"]
            ).rstrip(),
            "monitor_speed = 115200",
            "",
        ]
        sim = sim_env_options(board)
        if sim:
            out.append(f"[env:sim-{board.name}]")
            flags = sim.pop("build_flags")
            out += [f"{k} = {v}" for k, v in sim.items()]
            out.append(_ini_list("build_flags", ["${env.build_flags}"] + flags.split()).rstrip())
            test_cmd = sim_test_command(board)
            if test_cmd:
                out.append(_ini_list("test_testing_command", test_cmd).rstrip())
            out.append("")
    out += [
        "[env:native]",
        "platform = symlink://${PROJECT_DIR}/platforms/host",
        _ini_list("build_flags", ["${env.build_flags}", "-DMCT_PORT_POSIX", "-DMCT_ALLOW_QUIT"]).rstrip(),
        "",
    ]
    return "\n".join(out)


def library_json() -> str:
    """lib/mcutrain_core/library.json: the core as a PlatformIO library (usable through lib_deps too)."""
    from mcutrain import __version__

    return (
        json.dumps(
            {
                "name": "mcutrain_core",
                "version": __version__,
                "description": (
                    "mcutrain's C core: layers, losses and optimizers for training small networks on the device"
                ),
                "keywords": ["machine learning", "neural network", "training", "tinyml"],
                "license": "MIT",
                "frameworks": "*",
                "platforms": "*",
                "build": {"flags": ["-ffp-contract=off", "-fno-math-errno"], "includeDir": "src", "srcDir": "src"},
            },
            indent=2,
        )
        + "\n"
    )


def write_project(
    out: Path, board: Board, files: Dict[str, Union[str, bytes]], source: str, model_flags: Sequence[str] = ()
) -> None:
    """Lay out the project in out (which must be empty or new); files: generated files by relative path, text
    or bytes."""
    fw = firmware_dir()
    out.mkdir(parents=True, exist_ok=True)
    (out / "src" / "ports").mkdir(parents=True)
    (out / "include").mkdir()
    core_dst = out / "lib" / "mcutrain_core" / "src"
    core_dst.mkdir(parents=True)
    for f in sorted((fw / "core").iterdir()):
        if f.suffix in (".c", ".h"):
            shutil.copyfile(f, core_dst / f.name)
    (out / "lib" / "mcutrain_core" / "library.json").write_text(library_json())
    for f in sorted((fw / "app").iterdir()):
        if f.suffix in (".c", ".h", ".cpp") and f.name not in LIBRARY_ONLY:
            shutil.copyfile(f, out / "src" / f.name)
    for f in sorted((fw / "app" / "ports").iterdir()):
        shutil.copyfile(f, out / "src" / "ports" / f.name)
    # the on-target self-test of `pio test` (test/test_model/expected.h comes with the generated files)
    shutil.copytree(fw / "app" / "test", out / "test", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(fw / "platforms", out / "platforms", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            (out / name).write_bytes(text)
        else:
            (out / name).write_text(text)
    (out / "platformio.ini").write_text(platformio_ini(board, source, model_flags))
    (out / ".gitignore").write_text(".pio/\n")
