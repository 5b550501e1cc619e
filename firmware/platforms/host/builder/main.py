# SConscript of mcutrain's offline "native" dev-platform: the system C compiler, no downloads.
# `pio run -t upload` / `-t exec` run the program (it then reads protocol frames on stdin).
from SCons.Script import AlwaysBuild, Default, DefaultEnvironment

env = DefaultEnvironment()
env.Replace(CC="gcc", CXX="g++", AR="gcc-ar", RANLIB="gcc-ranlib", AS="gcc", SIZETOOL="size",
            PROGNAME="program", PROGSUFFIX="")
env.Append(CCFLAGS=["-O2", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wextra"], CFLAGS=["-std=c99"])

program = env.BuildProgram()
for target in ("upload", "exec"):
    AlwaysBuild(env.Alias(target, program, env.VerboseAction("$SOURCE", "Running $SOURCE")))
Default([program])
