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
each is there); the C core tests build the host variant with the same list. The extension is built for the
machine's baseline instruction set, and the whole C core once more per wider one (host_build.ISA_VARIANTS),
each copy's names suffixed by a generated rename header, chosen at run time (trainer/isa_dispatch.c).
MCUTRAIN_MARCH=<arch> builds one copy with -march=<arch> instead (e.g. native: a build for this machine only,
as before the dispatch).
"""

import glob
import os
import platform
import shutil
import subprocess
import sys
from runpy import run_path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_namespace_packages, setup
from setuptools.command.build_ext import build_ext

HOST_BUILD = run_path(os.path.join("trainer", "host_build.py"))
HOST_CORE_FLAGS = HOST_BUILD["HOST_CORE_FLAGS"]
march = os.environ.get("MCUTRAIN_MARCH", "")
ISA_VARIANTS = HOST_BUILD["isa_variants"](platform.machine(), march)
cflags = [
    "-std=c99",
    *HOST_CORE_FLAGS,
    "-fopenmp",
    "-Wall",
    "-Wextra",
    "-Wno-unused-function",
    "-Wno-unreachable-code",
    "-Wno-sign-compare",  # Cython's generated code compares Py_ssize_t with size_t; the C core's own builds
    # (tests/c, the firmware) keep -Wextra -Werror, which includes it
]
if march:
    cflags.append("-march=" + march)
if sys.platform == "darwin":
    cflags.remove("-fopenmp")

core_sources = sorted(glob.glob("firmware/core/*.c"))
base_name, *wider = ISA_VARIANTS
ext = Extension(
    "mcutrain._core",
    sources=["trainer/_core.pyx", "trainer/isa_dispatch.c"],
    include_dirs=["firmware/core", "trainer", numpy.get_include()],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"), ("MCT_ISA_BASE_NAME", f'"{base_name}"')]
    + [("MCT_ISA_HAVE_" + name.upper(), "1") for name in wider],
    depends=core_sources + sorted(glob.glob("firmware/core/*.h")) + ["trainer/isa_dispatch.h", "trainer/host_build.py"],
    extra_compile_args=cflags,
    extra_link_args=[] if sys.platform == "darwin" else ["-fopenmp"],
)


class BuildExt(build_ext):
    """build_ext that first compiles the whole C core once per instruction-set variant, each into a folder of
    its own: the baseline copy with the core's names, then each wider one with a rename header (gcc -include)
    that suffixes every name the baseline objects define (their symbol table, read with nm); then the
    extension's own sources (the Cython module, trainer/isa_dispatch.c) with the generated headers of the
    table of entry points, linked with all the copies."""

    def build_extension(self, ext: Extension) -> None:
        gen = os.path.join(self.build_temp, "isa_headers")
        os.makedirs(gen, exist_ok=True)
        objects = self.compile_core(base_name, [], ext)
        nm = os.environ.get("NM", "nm")
        if shutil.which(nm) is None:
            sys.exit(f"error: {nm} not found: building mcutrain lists the C core's functions with nm (binutils)")
        listing = subprocess.run([nm, "-g", *objects], capture_output=True, text=True, check=True).stdout
        functions, data = HOST_BUILD["core_symbols"](listing, sys.platform == "darwin")
        for name, text in HOST_BUILD["entry_headers"](functions).items():
            self.write_if_changed(os.path.join(gen, name), text)
        for name in wider:
            rename = os.path.join(gen, f"isa_rename_{name}.h")
            self.write_if_changed(rename, HOST_BUILD["rename_header"](functions + data, name))
            objects += self.compile_core(name, ["-include", rename], ext)
        ext.extra_objects = [*(ext.extra_objects or []), *objects]
        ext.include_dirs = [*ext.include_dirs, gen]
        super().build_extension(ext)

    def compile_core(self, name: str, extra: list, ext: Extension) -> list:
        """The C core's objects for one variant, compiled with its flags (and `extra`, then a source's own flags
        of host_build.ISA_SOURCE_FLAGS) into isa_<name>/, in the order of core_sources."""
        own = HOST_BUILD["ISA_SOURCE_FLAGS"].get(name, {})
        objects = {}
        for group in [[c for c in core_sources if c not in own]] + [[c] for c in core_sources if c in own]:
            built = self.compiler.compile(
                group,
                output_dir=os.path.join(self.build_temp, "isa_" + name),
                include_dirs=["firmware/core"],
                extra_postargs=cflags + ISA_VARIANTS[name] + extra + own.get(group[0], []),
                debug=self.debug,
                depends=ext.depends,
            )
            objects.update(zip(group, built))
        return [objects[c] for c in core_sources]

    @staticmethod
    def write_if_changed(path: str, text: str) -> None:
        """Write a generated header unless it already holds `text` (an unchanged header keeps its time)."""
        if os.path.exists(path):
            with open(path) as f:
                if f.read() == text:
                    return
        with open(path, "w") as f:
            f.write(text)

    def run(self) -> None:
        super().run()
        self.build_host_tools()

    def build_host_tools(self) -> None:
        """The simulators' host tools (host_build.HOST_TOOLS) into firmware/host_tools/bin of the package, named
        as exporter/sim.py looks for them; one that cannot be built here (Linux only; avr_run needs libsimavr)
        is left to the simulators, which compile it with the host gcc on first use."""
        cc = os.environ.get("CC", "gcc").split()[0]
        if not sys.platform.startswith("linux") or shutil.which(cc) is None:
            return
        if self.inplace:
            firmware = self.get_finalized_command("build_py").get_package_dir("mcutrain.firmware")
        else:
            firmware = os.path.join(self.build_lib, "mcutrain", "firmware")
        out = os.path.join(firmware, "host_tools", "bin")
        os.makedirs(out, exist_ok=True)
        for name, (source, flags, libs, suffix) in HOST_BUILD["HOST_TOOLS"].items():
            with open(source, "rb") as f:
                target = os.path.join(out, HOST_BUILD["host_tool_file"](name, f.read(), flags, libs, suffix))
            r = subprocess.run([cc, *flags, source, "-o", target + ".tmp", *libs], capture_output=True, text=True)
            if r.returncode == 0:
                os.replace(target + ".tmp", target)
            else:
                print(f"note: {name} not built into the package ({r.stderr.strip().splitlines()[-1:]})")


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
    cmdclass={"build_ext": BuildExt},
    package_dir=PACKAGE_DIRS,
    packages=[*PACKAGE_DIRS, *FIRMWARE_DATA],
    package_data={"mcutrain.firmware": ["*.json", "*.properties"], "mcutrain.boards": ["*.toml"]}
    | {p: ["*"] for p in FIRMWARE_DATA},
    exclude_package_data={p: NOT_DATA for p in ["mcutrain.firmware", *FIRMWARE_DATA]},
)
