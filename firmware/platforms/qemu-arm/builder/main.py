# SConscript of mcutrain's offline "qemu-arm" dev-platform: Debian's arm-none-eabi-gcc and newlib (libc
# only: no semihosting library, no stdio), our startup code, and a memory layout with the board's RAM and
# flash, so a model too large for the board fails at link time. The build itself is
# build_qemu_firmware in ../common/mcutrain_builder.py, which lists the platformio.ini options
# (custom_qemu_machine here: mps2-an385 | mps2-an386 | mps2-an500 | mps2-an505 | microbit).
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


# machine -> (flash origin, flash bytes, RAM origin, RAM bytes, UART define)
MACHINES = {
    "mps2-an385": (0x00000000, 4 << 20, 0x20000000, 4 << 20, "MCT_QEMU_UART_CMSDK=0x40004000"),
    "mps2-an386": (0x00000000, 4 << 20, 0x20000000, 4 << 20, "MCT_QEMU_UART_CMSDK=0x40004000"),
    "mps2-an500": (0x00000000, 4 << 20, 0x20000000, 4 << 20, "MCT_QEMU_UART_CMSDK=0x40004000"),
    # boots in the Secure state: the Secure aliases of SSRAM1 (code), SSRAM2 (data) and UART0
    "mps2-an505": (0x10000000, 4 << 20, 0x38000000, 2 << 20, "MCT_QEMU_UART_CMSDK=0x50200000"),
    "microbit": (0x00000000, 256 << 10, 0x20000000, 16 << 10, "MCT_QEMU_UART_NRF51=0x40002000"),
}

load_common().build_qemu_firmware(
    env,
    "qemu-arm",
    MACHINES,
    default_machine="mps2-an386",
    prefix="arm-none-eabi-",
    apt_packages="gcc-arm-none-eabi libnewlib-arm-none-eabi",
    default_cpu_flags="-mcpu=cortex-m4 -mthumb -mfpu=fpv4-sp-d16 -mfloat-abi=hard",
    link_specs=["--specs=nano.specs"],
    qemu_command="qemu-system-arm -M %s -nographic -monitor none -serial pty "
    "-semihosting-config enable=on,target=native -kernel $SOURCE",
)
