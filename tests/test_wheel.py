"""The wheel as a user gets it: `pip wheel` of the source builds it (the simulators' host tools inside),
auditwheel repairs it into a manylinux wheel and `auditwheel show` accepts that, and the wheel installed into a
fresh virtual environment runs the README's main job (train, export, sim in QEMU with the instruction counts)
with no host C compiler on PATH (the cross compilers stay) and an empty mcutrain cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOST_COMPILERS = {"gcc", "cc", "c89", "c99", "g++", "c++", "cpp", "clang", "clang++", "tcc"}

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="manylinux wheels: Linux only")


def _run(cmd: list, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=900, **kw)
    assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-3000:])
    return r


def _is_host_compiler(name: str) -> bool:
    base = name.split("-")[0] if name.startswith(("gcc-", "g++-", "cpp-", "clang-")) else name
    return base in HOST_COMPILERS or name.startswith(("x86_64-linux-gnu-", "aarch64-linux-gnu-"))


def path_without_host_compiler(folder: Path) -> str:
    """A folder of links to every program on PATH except the host C compilers (arm-none-eabi-gcc stays)."""
    folder.mkdir()
    for d in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            src = Path(d) / name
            if _is_host_compiler(name) or (folder / name).exists() or not os.access(src, os.X_OK) or src.is_dir():
                continue
            (folder / name).symlink_to(src)
    return str(folder)


def test_the_wheel_repairs_installs_and_runs_train_export_sim_without_a_host_compiler(tmp_path: Path) -> None:
    if shutil.which("auditwheel") is None and not (Path(sys.executable).parent / "auditwheel").exists():
        pytest.fail("auditwheel is not installed: pip install -e '.[test]'")
    src = tmp_path / "src"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git", "build", "dist", ".pio", ".pio-core", "*.so", "*.egg-info", "__pycache__", ".venv", "_core.c", "bin"
        ),
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MCUTRAIN_MARCH", "MCUTRAIN_ISA", "PYTHONPATH")}
    dist, fixed = tmp_path / "dist", tmp_path / "fixed"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist, src], env=env)
    (raw,) = dist.glob("mcutrain-*.whl")
    names = zipfile.ZipFile(raw).namelist()
    assert any(n.startswith("mcutrain/firmware/host_tools/bin/insn_plugin-") for n in names), names
    auditwheel = [sys.executable, "-m", "auditwheel"]
    _run([*auditwheel, "repair", "-w", fixed, raw], env=env)
    (wheel,) = fixed.glob("mcutrain-*manylinux*.whl")
    show = " ".join(_run([*auditwheel, "show", wheel], env=env).stdout.split())
    assert "manylinux_" in show and "consistent with the following platform tag" in show, show

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv])
    py = venv / "bin" / "python"
    # the wheel's dependencies (numpy, pyserial, ...) come from the interpreter running the tests, which may be
    # a virtual environment itself: its site folders go on the new venv's path after the venv's own
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (Path(site) / "test-interpreter-packages.pth").write_text("".join(f"{d}\n" for d in sorted(ours)))
    _run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel], env=env)
    path = os.pathsep.join([str(venv / "bin"), path_without_host_compiler(tmp_path / "path")])
    assert shutil.which("gcc", path=path) is None and shutil.which("arm-none-eabi-gcc", path=path) is not None
    cache = tmp_path / "cache"
    run_env = {
        **env,
        "PATH": path,
        "MCUTRAIN_CACHE": str(cache),
        "PLATFORMIO_CORE_DIR": str(tmp_path / "pio-core"),
        "PLATFORMIO_BUILD_CACHE_DIR": str(tmp_path / "pio-cache"),
    }
    work = tmp_path / "work"
    work.mkdir()
    mct = venv / "bin" / "mcutrain"
    where = _run([py, "-c", "import mcutrain; print(mcutrain.__file__)"], env=run_env, cwd=work).stdout
    assert where.startswith(str(venv)), where  # the wheel's package, not the checkout
    _run([mct, "train", "-o", "model.mct", "--steps", "300"], env=run_env, cwd=work)
    _run([mct, "export", "model.mct", "--board", "nucleo_f401re", "-o", "fw"], env=run_env, cwd=work)
    out = _run([mct, "sim", "fw", "--report", "report.json"], env=run_env, cwd=work).stdout
    assert "device and host (same C core) match bit for bit" in out, out
    rep = json.loads((work / "report.json").read_text())
    assert rep["simulator"] == "qemu-arm" and rep["unit"] == "instructions" and 0 < rep["predict"] < rep["train"]
    assert not list(cache.glob("insn_plugin-*")), "the plugin was compiled again instead of taken from the wheel"
