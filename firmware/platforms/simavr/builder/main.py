# SConscript of mcutrain's offline "simavr" dev-platform: Debian's avr-gcc + avr-libc from PATH, no
# downloads. `pio run -e sim-BOARD` builds firmware.elf and checks its static RAM and flash against the
# MCU; `pio run -e sim-BOARD -t upload` (or -t exec) runs it in simavr through mcutrain's harness
# (harness/avr_run.c, a link to firmware/host_tools/avr_run.c that exported projects get as a copy;
# built here with the host gcc and libsimavr): it prints "PTY /dev/pts/N", serves the firmware's serial
# line there until the firmware quits, and writes simavr_report.json.
#
# Options (platformio.ini): custom_mcu (atmega328p), custom_f_cpu (16000000), custom_ram_size and
# custom_flash_size (bytes; default: the MCU's), custom_store_path (EEPROM image file, as for the QEMU
# platforms; the older name custom_store works too; default mcutrain_store_<env>.bin in the project).
# The parts all of mcutrain's platforms share are in ../common/mcutrain_builder.py.
# `pio test -e sim-BOARD` builds the harness next to the firmware ($BUILD_DIR/avr_run), so the env's
# test_testing_command can run the self-test in it (serial=stdio).
#
# Flash is the Uno's scarcest resource: the build uses link-time optimization (as Arduino's AVR core
# does) and linker relaxation (short calls and jumps where they reach); the exported model's build flags
# (MCT_OPS_MASK and friends, see mct.h) leave out of the core what the model does not use.
import importlib.util
import os
import shutil
import subprocess
import sys

from SCons.Script import COMMAND_LINE_TARGETS, Default, DefaultEnvironment

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


common = load_common()
platform = env.PioPlatform()

# RAM and flash bytes of the MCUs simavr knows that mcutrain's boards use
MCU_MEMORY = {
    "atmega328p": (2048, 32768),
    "atmega328": (2048, 32768),
    "atmega168": (1024, 16384),
    "atmega644p": (4096, 65536),
    "atmega1284p": (16384, 131072),
    "atmega2560": (8192, 262144),
}
common.require_tool(env, "avr-gcc", "gcc-avr avr-libc")
common.require_tool(env, "avr-size", "binutils-avr")

mcu = env.GetProjectOption("custom_mcu", "atmega328p")
f_cpu = env.GetProjectOption("custom_f_cpu", "16000000")
ram_default, flash_default = MCU_MEMORY.get(mcu, (0, 0))
ram_size = common.option_int(env, "custom_ram_size", ram_default)
flash_size = common.option_int(env, "custom_flash_size", flash_default)

common.use_gnu_toolchain(env, "avr-", SIZEPRINTCMD="$SIZETOOL -A $SOURCES")
mcu_flags = ["-mmcu=" + mcu]
env.Append(
    ASFLAGS=mcu_flags + ["-x", "assembler-with-cpp"],
    CCFLAGS=mcu_flags + ["-Os", "-flto", "-Wall", "-ffunction-sections", "-fdata-sections"] + common.FLOAT_FLAGS,
    CFLAGS=["-std=gnu99"],
    CPPDEFINES=[("F_CPU", f_cpu + "UL")],
    LINKFLAGS=mcu_flags + ["-Os", "-flto", "-mrelax", "-Wl,--gc-sections"],
)


def section_sizes(elf):
    """{section: bytes} from `avr-size -A`."""
    out = subprocess.run([env.subst("$SIZETOOL"), "-A", elf], capture_output=True, text=True, check=True).stdout
    sizes = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(".") and parts[1].isdigit():
            sizes[parts[0]] = int(parts[1])
    return sizes


def check_size(target, source, env):
    """Print static RAM (.data + .bss + .noinit) and flash (.text + .data); fail the build (and remove the
    ELF, so the next build checks again) when either exceeds the MCU."""
    elf = str(target[0])
    s = section_sizes(elf)
    ram = s.get(".data", 0) + s.get(".bss", 0) + s.get(".noinit", 0)
    flash = s.get(".text", 0) + s.get(".data", 0)
    print(
        f"RAM:   {ram:6d} B static (.data + .bss) of {ram_size} B"
        + (f"; {ram_size - ram} B left for the stack" if ram < ram_size else "")
    )
    print(f"Flash: {flash:6d} B (.text + .data) of {flash_size} B")
    over = []
    if ram_size and ram > ram_size:
        over.append(f"static RAM {ram} B > {ram_size} B")
    if flash_size and flash > flash_size:
        over.append(f"flash {flash} B > {flash_size} B")
    if over:
        sys.stderr.write("Error: the firmware does not fit the {}: {}\n".format(mcu, " and ".join(over)))
        os.remove(elf)
        return 1
    return 0


HARNESS_SRC = os.path.join(platform.get_dir(), "harness", "avr_run.c")


def build_harness(build_dir, force=False):
    """Compile harness/avr_run.c with the host gcc against libsimavr (once per build folder, unless force)."""
    src = HARNESS_SRC
    exe = os.path.join(build_dir, "avr_run")
    if not force and os.path.isfile(exe) and os.path.getmtime(exe) >= os.path.getmtime(src):
        return exe
    if not shutil.which("gcc"):
        raise RuntimeError("gcc not found: install it (Debian/Ubuntu: sudo apt-get install gcc)")
    if not os.path.isfile("/usr/include/simavr/sim_avr.h"):
        raise RuntimeError("libsimavr not found: install it (Debian/Ubuntu: sudo apt-get install simavr libsimavr-dev)")
    r = subprocess.run(
        ["gcc", "-O2", "-I/usr/include/simavr", src, "-o", exe, "-lsimavr", "-lutil"], capture_output=True, text=True
    )
    if r.returncode:
        raise RuntimeError("building the simavr harness failed:\n" + r.stderr)
    return exe


def run_in_simavr(target, source, env):
    """Run the firmware in the harness on a pty until it quits; the harness's status is the result."""
    build_dir = env.subst("$BUILD_DIR")
    try:
        harness = build_harness(build_dir)
    except RuntimeError as e:
        sys.stderr.write(f"Error: {e}\n")
        return 1
    store = (
        env.GetProjectOption("custom_store_path", "")
        or env.GetProjectOption("custom_store", "")
        or os.path.join(env.subst("$PROJECT_DIR"), "mcutrain_store_{}.bin".format(env.subst("$PIOENV")))
    )
    cmd = [
        harness,
        str(source[0]),
        "mcu=" + mcu,
        "freq=" + f_cpu,
        "serial=pty",
        "eeprom=" + store,
        "report=" + os.path.join(build_dir, "simavr_report.json"),
    ]
    print(f"Running in simavr ({mcu} at {f_cpu} Hz); connect the device client to the PTY below")
    sys.stdout.flush()
    return subprocess.call(cmd)


def build_harness_for_test(target, source, env):
    """SCons action (SCons decides when it is out of date): build the harness for `pio test`, whose
    test_testing_command runs it."""
    try:
        build_harness(os.path.dirname(str(target[0])), force=True)
    except RuntimeError as e:
        sys.stderr.write(f"Error: {e}\n")
        return 1
    return 0


program = env.BuildProgram()
env.AddPostAction(program, env.VerboseAction(check_size, "Checking RAM and flash of $TARGET"))
if "__test" in COMMAND_LINE_TARGETS:
    harness = env.Command(
        os.path.join("$BUILD_DIR", "avr_run"),
        HARNESS_SRC,
        env.VerboseAction(build_harness_for_test, "Building the simavr harness $TARGET"),
    )
    Default(harness)
common.add_run_targets(env, program, run_in_simavr, "Running $SOURCE in simavr")
Default([program])
