# SConscript of mcutrain's offline "qemu-riscv" dev-platform: Debian's riscv64-unknown-elf-gcc with picolibc
# (libc only: no semihosting library, no stdio), our startup code, and a memory layout with the board's RAM
# and flash, so a model too large for the board fails at link time. The build itself is
# build_qemu_firmware in ../common/mcutrain_builder.py, which lists the platformio.ini options
# (custom_qemu_machine here: virt; custom_cpu_flags default -march=rv32imc -mabi=ilp32; RAM and flash
# capped at 32 MiB each; virt runs the code from RAM).
#
# The code is compiled for rv32imc/ilp32 (the ESP32-C3's ISA, soft float). Debian ships no rv32imc
# multilib of libgcc and picolibc, so the link uses the rv32im ones (a subset of rv32imc).
# `pio run -e ENV -t upload` runs the firmware in QEMU with its UART on a new pty (QEMU prints
# "char device redirected to /dev/pts/N"); connect mcutrain's device client there.
import importlib.util
import os
import sys

from SCons.Script import DefaultEnvironment

env = DefaultEnvironment()


def load_common():
    """../common/mcutrain_builder.py, the part mcutrain's platforms share."""
    path = os.path.join(env.PioPlatform().get_dir(), os.pardir, "common", "mcutrain_builder.py")
    if not os.path.isfile(path):
        sys.stderr.write(
            f"Error: {os.path.normpath(path)} is missing: mcutrain's platforms must stay together in one platforms/ "
            "folder (platform = symlink://.../platforms/NAME)\n"
        )
        env.Exit(1)
    spec = importlib.util.spec_from_file_location("mcutrain_builder", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# machine -> (flash origin, flash bytes, RAM origin, RAM bytes, UART define); virt has 128 MiB of RAM
# at 0x80000000 (-m 128M): the first 32 MiB stand in for flash, the next 32 MiB for RAM.
MACHINES = {
    "virt": (0x80000000, 32 << 20, 0x82000000, 32 << 20, "MCT_QEMU_UART_16550=0x10000000"),
}

load_common().build_qemu_firmware(
    env,
    "qemu-riscv",
    MACHINES,
    default_machine="virt",
    prefix="riscv64-unknown-elf-",
    apt_packages="gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf",
    default_cpu_flags="-march=rv32imc -mabi=ilp32",
    link_arch=["-march=rv32im", "-mabi=ilp32"],
    cc_specs=["--specs=picolibc.specs"],
    link_specs=["--specs=picolibc.specs"],
    # link with gcc even when the project has C++ files (the Arduino port, which is empty here): Debian's
    # rv32 toolchain has no libstdc++, which g++ would ask for
    LINK="riscv64-unknown-elf-gcc",
    qemu_command="qemu-system-riscv32 -M %s -m 128M -bios none -nographic -monitor none -serial pty "
    "-semihosting-config enable=on,target=native -kernel $SOURCE",
)
