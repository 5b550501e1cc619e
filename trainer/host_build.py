"""How the host trainer's copy of the C core is compiled: setup.py builds mcutrain._core with these flags
and the C core tests build the host variant with them, so both compile the same code.

-ffp-contract=off (as every firmware build has) keeps a*b+c two roundings, so the host computes a device's
bits. -fno-trapping-math lets the compiler evaluate both sides of a select (the special cases of exp and
log), so their loops vectorise; it changes no result, only when floating-point exception flags may be
raised. MCT_HOST_KERNELS and the tile sizes widen the register tiles of the matrix kernels for the host.

The extension itself is built for the machine's baseline instruction set (x86-64, aarch64), so a wheel runs on
any CPU of its architecture; the hot kernels (DISPATCHED_SOURCES) are compiled again for each wider
instruction set of ISA_VARIANTS and chosen at run time from what the CPU reports (trainer/isa_dispatch.c,
mcutrain.isa; MCUTRAIN_ISA=<name> forces one). Every variant has HOST_CORE_FLAGS, so the same summation order
and -ffp-contract=off: the bits do not depend on the variant.
This module imports nothing, so setup.py can read it before mcutrain is built.
"""

# what decides the host's results and speed (setup.py adds the language standard, warnings, OpenMP, -march)
HOST_CORE_FLAGS = [
    "-O3",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-DMCT_HOST_KERNELS",
    "-DMCT_TILE_M=4",
    "-DMCT_TILE_N=16",
]

# the kernels compiled once per variant (their public functions get the variant's name as a suffix)
DISPATCHED_SOURCES = ["firmware/core/gemm.c"]
# machine (platform.machine()) -> the variants besides the baseline, fastest last: name -> extra flags
ISA_VARIANTS = {
    "x86_64": {
        "avx2": ["-mavx2"],
        "avx512": ["-mavx2", "-mavx512f", "-mavx512vl", "-mavx512dq", "-mavx512bw", "-mprefer-vector-width=512"],
    },
}
ISA_VARIANTS["AMD64"] = ISA_VARIANTS["x86_64"]


def isa_variants(machine: str) -> dict:
    """The variants built on a machine: {"baseline": [], then the wider ones of ISA_VARIANTS}."""
    return {"baseline": [], **ISA_VARIANTS.get(machine, {})}


# The host tools the simulators run (firmware/host_tools): name -> (source, gcc flags, libraries, file suffix).
# setup.py builds them into the package (firmware/host_tools/bin) where it can, so `mcutrain sim` needs no host
# compiler; elsewhere the simulators compile them with the host gcc on first use (exporter/sim.py).
HOST_TOOLS = {
    "insn_plugin": ("firmware/host_tools/insn_plugin.c", ["-shared", "-fPIC", "-O2", "-Wall"], [], ".so"),
    "avr_run": ("firmware/host_tools/avr_run.c", ["-O2", "-Wall", "-I/usr/include/simavr"], ["-lsimavr", "-lutil"], ""),
}


def host_tool_file(name: str, source: bytes, cflags: list, libs: list, suffix: str) -> str:
    """The file name of a built host tool: NAME-DIGEST+SUFFIX, the digest over its source and flags, so a
    changed source or flag never runs an old build."""
    import hashlib

    digest = hashlib.sha256(source + "\0".join([*cflags, *libs]).encode()).hexdigest()[:12]
    return f"{name}-{digest}{suffix}"


__all__ = ["HOST_CORE_FLAGS", "DISPATCHED_SOURCES", "ISA_VARIANTS", "isa_variants", "HOST_TOOLS", "host_tool_file"]
