"""Build and run the C core's own test program (tests/c/test_core.c) with the system gcc.

The program is built twice from the same sources and run once per build:
- the device tiling (1 x 4 register tiles) with AddressSanitizer (leak detection on) and UBSan,
- the host kernels and tiling with the flags the Cython extension is built with (mcutrain.host_build).
Each C test is reported as its own pytest item (test_c[build-name]); test_c_program_clean checks the
exit code, the summary line and that no sanitizer reported anything. Separately, every
firmware/core/*.c must compile on its own with -std=c99 -Wall -Wextra -Werror -pedantic.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mcutrain.host_build import HOST_CORE_FLAGS

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "firmware" / "core"
TEST_C = ROOT / "tests" / "c" / "test_core.c"
GCC = shutil.which("gcc") or "gcc"


@pytest.fixture(scope="module", autouse=True)
def gcc_installed() -> None:
    """The C core tests need gcc: without it they fail (no skips) and say what to install."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is not installed: the C core tests need a C compiler (apt-get install gcc)")


WARN = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
SANITIZE = ["-ffp-contract=off", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "SUMMARY: ")


def core_sources() -> list[Path]:
    """Every C file of the core, sorted (the test links all of them)."""
    files = sorted(CORE.glob("*.c"))
    assert files, f"no C sources in {CORE}"
    return files


def compile_program(out: Path, flags: list[str]) -> None:
    """Compile tests/c/test_core.c with all core sources into the executable `out`, failing the test
    with the compiler's messages when the build fails."""
    cmd = [GCC, *WARN, *flags, f"-I{CORE}", str(TEST_C), *map(str, core_sources()), "-lm", "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"build failed: {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"


def run_program(exe: Path) -> subprocess.CompletedProcess[str]:
    """Run a built test program with leak detection on and return the finished process."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1"
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env, cwd=exe.parent)


def c_test_names() -> list[str]:
    """The C tests that main() of tests/c/test_core.c runs, in order (its RUN(...) lines)."""
    names = re.findall(r"^\s*RUN\((\w+)\);", TEST_C.read_text(), flags=re.MULTILINE)
    assert names, f"no RUN(...) lines in {TEST_C}"
    return names


BUILDS = {"sanitized_device_tiles": SANITIZE, "host_tiles_o3": HOST_CORE_FLAGS}  # the second as setup.py builds it


@pytest.fixture(scope="module", params=sorted(BUILDS))
def c_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """Build the C test program once per build flavour and run it once; every test below reads the result."""
    exe = tmp_path_factory.mktemp(request.param) / "test_core"
    compile_program(exe, BUILDS[request.param])
    return run_program(exe)


def describe(proc: subprocess.CompletedProcess[str]) -> str:
    """The program's output, for assertion messages."""
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


def test_c_program_clean(c_run: subprocess.CompletedProcess[str]) -> None:
    """The program ran every test to the end, printed a consistent summary and exit code, and no
    sanitizer (address, leak, undefined behaviour) reported anything."""
    for marker in SANITIZER_MARKERS:
        assert marker not in c_run.stderr, f"sanitizer report ({marker!r}):\n{describe(c_run)}"
    summary = re.search(r"^(\d+) passed, (\d+) failed$", c_run.stdout, flags=re.MULTILINE)
    assert summary is not None, f"no summary line: the program did not finish\n{describe(c_run)}"
    passed, failed = int(summary.group(1)), int(summary.group(2))
    lines = re.findall(r"^(\w+): (PASS|FAIL)", c_run.stdout, flags=re.MULTILINE)
    assert [name for name, _ in lines] == c_test_names(), describe(c_run)
    assert passed == sum(r == "PASS" for _, r in lines) and failed == sum(r == "FAIL" for _, r in lines)
    assert c_run.returncode in (0, 1), f"crashed or aborted\n{describe(c_run)}"
    assert (c_run.returncode != 0) == (failed > 0), describe(c_run)
    failing = [name for name, r in lines if r == "FAIL"]
    assert c_run.returncode == 0, f"exit code {c_run.returncode}: C tests failed: {failing}"


def check_lines(stdout: str) -> dict[str, list[str]]:
    """The failed-check lines (indented) each C test printed before its own PASS/FAIL line."""
    out: dict[str, list[str]] = {}
    pending: list[str] = []
    for line in stdout.splitlines():
        m = re.match(r"^(\w+): (PASS|FAIL)", line)
        if m:
            out[m.group(1)] = pending
            pending = []
        elif line.startswith(" "):
            pending.append(line.strip())
    return out


@pytest.mark.parametrize("name", c_test_names())
def test_c(c_run: subprocess.CompletedProcess[str], name: str) -> None:
    """One C test of tests/c/test_core.c passed."""
    ok = re.search(rf"^{name}: PASS$", c_run.stdout, flags=re.MULTILINE) is not None
    assert ok, f"{name} failed:\n" + "\n".join(check_lines(c_run.stdout).get(name, ["(no output)"]))


@pytest.mark.parametrize("source", core_sources(), ids=lambda p: p.name)
def test_core_file_compiles_alone(source: Path, tmp_path: Path) -> None:
    """Each core file compiles on its own as strict, warning-free C99."""
    obj = tmp_path / (source.stem + ".o")
    cmd = [GCC, *WARN, f"-I{CORE}", "-c", str(source), "-o", str(obj)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    assert obj.stat().st_size > 0


def test_device_math_gives_the_host_math_bits(tmp_path: Path) -> None:
    """Devices branch around the rare cases of exp and of the division (mct_math.h, MCT_MATH_BRANCHES), the
    host does not and is built with -fno-trapping-math (its loops of exp and log vectorise):
    tests/c/math_variants.c runs both builds of exp, tanh, log, log1p and sigmoid at every 257th
    float32 bit pattern and the special values, and the division at quotients around the subnormal range,
    and finds no result whose bits differ."""
    src = ROOT / "tests" / "c"
    flags = [*WARN, "-O2", "-ffp-contract=off", "-fno-math-errno", f"-I{CORE}"]
    # the host as setup.py builds it, the devices as the exporter's projects do
    builds = {"_host": HOST_CORE_FLAGS, "_dev": []}
    objs = []
    for suffix, extra in builds.items():
        obj = tmp_path / f"math{suffix}.o"
        cmd = [GCC, *flags, *extra, f"-DVARIANT={suffix}", "-c", str(src / "math_variant.c"), "-o", str(obj)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
        objs.append(str(obj))
    exe = tmp_path / "math_variants"
    cmd = [GCC, *flags, str(src / "math_variants.c"), *objs, "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    run = subprocess.run([str(exe), "257"], capture_output=True, text=True, timeout=300)
    summary = re.search(r"^(\d+) checked, (\d+) differ$", run.stdout, flags=re.MULTILINE)
    assert summary is not None, describe(run)
    assert int(summary.group(1)) > 16_000_000, describe(run)
    assert run.returncode == 0 and summary.group(2) == "0", describe(run)
