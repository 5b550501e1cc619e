"""How the host trainer's copy of the C core is compiled: setup.py builds mcutrain._core with these flags
and the C core tests build the host variant with them, so both compile the same code.

-ffp-contract=off (as every firmware build has) keeps a*b+c two roundings, so the host computes a device's
bits. -fno-trapping-math lets the compiler evaluate both sides of a select (the special cases of exp and
log), so their loops vectorise; it changes no result, only when floating-point exception flags may be
raised. MCT_HOST_KERNELS and the tile sizes widen the register tiles of the matrix kernels for the host.
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

__all__ = ["HOST_CORE_FLAGS"]
