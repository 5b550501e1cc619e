"""Packaging of mcutrain: one import package, `mcutrain`, from the repository's folders, and the Cython
extension mcutrain._core built from trainer/_core.pyx plus the C core in firmware/core.

    trainer/   -> mcutrain             layers, networks, training, model files, data
    exporter/  -> mcutrain.exporter    device model, quantization, C generation, projects, simulators
    fleet/     -> mcutrain.fleet       fleet learning: devices as Flower clients, Flower rounds
    cli/       -> mcutrain.cli         the `mcutrain` command line
    firmware/  -> mcutrain.firmware    package data: the C core, the firmware app, ports, platforms
    boards/    -> mcutrain.boards      package data: one TOML file per board

The folders under firmware/ hold data only (C sources, linker scripts, PlatformIO builders); each is listed
as a data package (mcutrain.firmware.<folder>) with all its files as package data, which is how setuptools
wants data in sub-folders declared (without it, it warns that each would be ignored as a package).

The C core's flags for the host build are trainer/host_build.py's (HOST_CORE_FLAGS, which says why
each is there); the C core tests build the host variant with the same list. MCUTRAIN_MARCH selects the
-march flag (default: native; set it to e.g. x86-64-v2 for a portable wheel).
"""

import glob
import os
import sys
from runpy import run_path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_namespace_packages, setup

HOST_CORE_FLAGS = run_path(os.path.join("trainer", "host_build.py"))["HOST_CORE_FLAGS"]
march = os.environ.get("MCUTRAIN_MARCH", "native")
cflags = [
    "-std=c99",
    *HOST_CORE_FLAGS,
    "-fopenmp",
    "-Wall",
    "-Wextra",
    "-Wno-unused-function",
    "-Wno-unreachable-code",
]
if march:
    cflags.append("-march=" + march)
if sys.platform == "darwin":
    cflags.remove("-fopenmp")

core_sources = sorted(glob.glob("firmware/core/*.c"))
ext = Extension(
    "mcutrain._core",
    sources=["trainer/_core.pyx"] + core_sources,
    include_dirs=["firmware/core", numpy.get_include()],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    extra_compile_args=cflags,
    extra_link_args=[] if sys.platform == "darwin" else ["-fopenmp"],
)

PACKAGE_DIRS = {
    "mcutrain": "trainer",
    "mcutrain.exporter": "exporter",
    "mcutrain.fleet": "fleet",
    "mcutrain.cli": "cli",
    "mcutrain.firmware": "firmware",
    "mcutrain.boards": "boards",
}

FIRMWARE_DATA = ["mcutrain.firmware." + p for p in find_namespace_packages(where="firmware", exclude=["*__pycache__*"])]
NOT_DATA = ["__pycache__/*", "*.pyc", "*.so"]

setup(
    ext_modules=cythonize([ext], language_level=3),
    package_dir=PACKAGE_DIRS,
    packages=[*PACKAGE_DIRS, *FIRMWARE_DATA],
    package_data={"mcutrain.firmware": ["*.json", "*.properties"], "mcutrain.boards": ["*.toml"]}
    | {p: ["*"] for p in FIRMWARE_DATA},
    exclude_package_data={p: NOT_DATA for p in ["mcutrain.firmware", *FIRMWARE_DATA]},
)
