# The part mcutrain's offline dev-platforms share (host, qemu-arm, qemu-riscv, simavr). PlatformIO loads each
# platform's builder/main.py on its own; every one of them loads this file by its path, ../common/ from the
# platform's folder (see load_common in their first lines). exporter/project.py copies all of platforms/,
# this folder included, into the exported project.
#
# It also holds the whole builder of the two QEMU platforms (build_qemu_firmware), which differ only in their
# toolchain, machines and libc.
import os
import sys

from SCons.Script import AlwaysBuild, Default

# The float semantics that host/device parity rests on: no fused multiply-add contraction (the M4F's vfma
# rounds once where the host rounds twice), and no errno from math functions. Every platform compiles with
# them; exporter/project.py also puts them into every env's build_flags.
FLOAT_FLAGS = ["-ffp-contract=off", "-fno-math-errno"]


def fail(env, msg):
    """Stop the build with an error message."""
    sys.stderr.write(f"Error: {msg}\n")
    env.Exit(1)


def require_tool(env, tool, apt_packages):
    """Stop the build when a tool is not on PATH, naming the Debian packages that bring it."""
    if not env.WhereIs(tool):
        fail(env, f"{tool} not found: install it (Debian/Ubuntu: sudo apt-get install {apt_packages})")


def option_int(env, name, default):
    """An integer option of the env in platformio.ini (decimal or 0x...); stops the build if it is not one."""
    raw = str(env.GetProjectOption(name, str(default))).strip()
    try:
        return int(raw, 0)
    except ValueError:
        fail(env, f"{name} = {raw!r} is not a number of bytes")


def use_gnu_toolchain(env, prefix, **overrides):
    """Point the build at a GNU toolchain on PATH (prefix: "" for the host's, "arm-none-eabi-", ...); the
    program is firmware.elf unless overrides say otherwise."""
    settings = dict(
        AR=prefix + "gcc-ar",
        AS=prefix + "gcc",
        CC=prefix + "gcc",
        CXX=prefix + "g++",
        GDB=prefix + "gdb",
        OBJCOPY=prefix + "objcopy",
        RANLIB=prefix + "gcc-ranlib",
        SIZETOOL=prefix + "size",
        PROGNAME="firmware",
        PROGSUFFIX=".elf",
    )
    settings.update(overrides)
    env.Replace(**settings)


def add_run_targets(env, program, action, title):
    """`pio run -t upload` and `-t exec` both run the program (there is no board to flash) with action."""
    for target in ("upload", "exec"):
        AlwaysBuild(env.Alias(target, program, env.VerboseAction(action, title)))


def optimization_flag(env, default="O2"):
    """-O<level> from custom_opt_level (Os, O2, O3, -O3, ...)."""
    opt = "-" + str(env.GetProjectOption("custom_opt_level", default)).strip().lstrip("-")
    return opt if opt.startswith("-O") else "-O" + opt[1:]


def write_if_changed(path, text):
    """Write text to path unless the file already holds it (so SCons does not rebuild for nothing)."""
    if not os.path.isfile(path) or open(path).read() != text:
        with open(path, "w") as f:
            f.write(text)


def build_qemu_firmware(
    env,
    platform_name,
    machines,
    default_machine,
    prefix,
    apt_packages,
    default_cpu_flags,
    qemu_command,
    link_arch=None,
    cc_specs=(),
    link_specs=(),
    **toolchain_overrides,
):
    """The whole build of a QEMU platform: firmware.elf for one of its machines, linked into a memory layout
    with the board's RAM and flash (so a model too large for the board fails at link time), plus `upload`
    and `exec` targets that run it in QEMU with its UART on a new pty.

    machines: {machine: (flash origin, flash bytes, RAM origin, RAM bytes, UART define)}; qemu_command: the
    QEMU command line with %s for the machine; link_arch: the -march/-mcpu flags of the link (default: the
    compile's custom_cpu_flags); cc_specs, link_specs: gcc --specs of the libc for compiling and linking.

    platformio.ini options of the env (exporter/project.py writes them):
      custom_qemu_machine  one of machines (default default_machine)
      custom_cpu_flags     the compiler's CPU flags (default default_cpu_flags)
      custom_ram_size      bytes of RAM of the board (capped at what the QEMU machine has)
      custom_flash_size    bytes of flash of the board (capped likewise)
      custom_opt_level     Os, O2 (default), O3, ...
      custom_min_stack     bytes the stack must keep free at least (default 1024)
      custom_store_path    host file for saves (default mcutrain_store_<env>.bin in QEMU's working folder,
                           the project folder under `pio run -t upload`; mcutrain's simulator uses the same)
    """
    platform = env.PioPlatform()
    require_tool(env, prefix + "gcc", apt_packages)

    machine = env.GetProjectOption("custom_qemu_machine", default_machine)
    if machine not in machines:
        fail(
            env,
            "custom_qemu_machine = {}: mcutrain's {} platform knows {}".format(
                machine, platform_name, ", ".join(sorted(machines))
            ),
        )
    flash_org, flash_max, ram_org, ram_max, uart = machines[machine]
    flash_size = min(option_int(env, "custom_flash_size", flash_max), flash_max) & ~7
    ram_size = min(option_int(env, "custom_ram_size", ram_max), ram_max) & ~7
    min_stack = option_int(env, "custom_min_stack", 1024)
    opt = optimization_flag(env)
    cpu_flags = env.GetProjectOption("custom_cpu_flags", default_cpu_flags).split()
    store = env.GetProjectOption("custom_store_path", "") or "mcutrain_store_{}.bin".format(env.subst("$PIOENV"))

    use_gnu_toolchain(env, prefix, SIZEPRINTCMD="$SIZETOOL -B -d $SOURCES", **toolchain_overrides)

    # the memory layout of this board on this machine
    build_dir = env.subst("$BUILD_DIR")
    os.makedirs(build_dir, exist_ok=True)
    memory_ld = os.path.join(build_dir, "mcutrain_memory.ld")
    write_if_changed(
        memory_ld,
        (
            f"/* generated by platforms/{platform_name} for {machine} */\n"
            "MEMORY\n{\n"
            f"  FLASH (rx) : ORIGIN = 0x{flash_org:08x}, LENGTH = {flash_size}\n"
            f"  RAM (rwx) : ORIGIN = 0x{ram_org:08x}, LENGTH = {ram_size}\n"
            "}\n"
            f"__min_stack = {min_stack};\nINCLUDE sections.ld\n"
        ),
    )

    env.Append(
        CPPDEFINES=[uart, ("MCT_STORE_PATH", '\\"{}\\"'.format(store.replace("\\", "/")))],
        ASFLAGS=cpu_flags,
        ASPPFLAGS=cpu_flags,
        CCFLAGS=list(cc_specs)
        + cpu_flags
        + [opt, "-ffunction-sections", "-fdata-sections"]
        + FLOAT_FLAGS
        + ["-Wall", "-Wextra"],
        CFLAGS=["-std=c99"],
        LINKFLAGS=list(link_specs)
        + list(cpu_flags if link_arch is None else link_arch)
        + [
            opt,
            "-nostartfiles",
            "-Wl,--gc-sections",
            "-L" + os.path.join(platform.get_dir(), "ldscripts"),
            "-T",
            memory_ld,
            "-Wl,-Map," + os.path.join(build_dir, "firmware.map"),
        ],
    )
    env.BuildSources(os.path.join("$BUILD_DIR", "qemu_startup"), os.path.join(platform.get_dir(), "startup"))

    program = env.BuildProgram()
    env.Depends(program, memory_ld)
    add_run_targets(
        env,
        program,
        qemu_command % machine,
        f"Running in QEMU {machine}; the firmware's UART is on the pty printed below",
    )
    Default([program])
    return program
