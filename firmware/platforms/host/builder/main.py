# SConscript of mcutrain's offline "native" dev-platform: the system C compiler, no downloads.
# `pio run -t upload` / `-t exec` run the program (it then reads protocol frames on stdin).
import importlib.util
import os
import sys

from SCons.Script import Default, DefaultEnvironment

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
common.use_gnu_toolchain(env, "", PROGNAME="program", PROGSUFFIX="")
env.Append(CCFLAGS=["-O2"] + common.FLOAT_FLAGS + ["-Wall", "-Wextra"], CFLAGS=["-std=c99"])

program = env.BuildProgram()
common.add_run_targets(env, program, "$SOURCE", "Running $SOURCE")
Default([program])
