"""Running PlatformIO: find it, make its build tool (tool-scons) available without internet, run it.

Every `pio run` needs the core package platformio/tool-scons. On a machine with internet PlatformIO
downloads it; offline, mcutrain installs the same SCons release from PyPI into the core folder and
marks it as the registry package (what PlatformIO checks), so the offline dev-platforms build."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .. import processes
from ..errors import McuTrainError


class PioError(McuTrainError, RuntimeError):
    """PlatformIO is missing or failed; the message says what to do."""


def pio_command() -> List[str]:
    """How to run PlatformIO: the module in this Python, else `pio` on PATH."""
    try:
        import platformio  # noqa: F401

        return [sys.executable, "-m", "platformio"]
    except ImportError:
        exe = shutil.which("pio") or shutil.which("platformio")
        if exe:
            return [exe]
    raise PioError("PlatformIO is not installed: run `pip install platformio` (it comes with `pip install mcutrain`)")


def core_dir() -> Path:
    """PlatformIO's core folder ($PLATFORMIO_CORE_DIR, else ~/.platformio)."""
    return Path(os.environ.get("PLATFORMIO_CORE_DIR") or Path.home() / ".platformio")


def _scons_requirement() -> str:
    """The SCons release PlatformIO wants, from its tool-scons requirement (~4.41101.0 -> 4.11.1)."""
    try:
        from platformio.dependencies import get_core_dependencies

        spec = get_core_dependencies()["tool-scons"]
    except Exception:
        spec = "~4.41101.0"
    m = re.search(r"(\d+)\.(\d)(\d\d)(\d\d)", spec)
    if not m:
        return "4.11.1"
    return f"{int(m.group(1))}.{int(m.group(3))}.{int(m.group(4))}"


def ensure_scons(core: Optional[Path] = None) -> Path:
    """Make sure core/packages/tool-scons exists; install it from PyPI when PlatformIO cannot fetch it."""
    core = core or core_dir()
    dest = core / "packages" / "tool-scons"
    if (dest / "scons.py").is_file() and (dest / ".piopm").is_file():
        return dest
    version = _scons_requirement()
    tmp = dest.with_name("tool-scons.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    r = processes.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(tmp), f"scons=={version}"],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PioError(f"could not install SCons {version} for PlatformIO: {r.stderr.strip()[-400:]}")
    for extra in tmp.glob("scons-*.dist-info"):
        shutil.rmtree(extra)
    shutil.rmtree(tmp / "bin", ignore_errors=True)
    (tmp / "scons.py").write_text(
        "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
        "from SCons.Script import main\nif __name__ == '__main__':\n    main()\n"
    )
    major, minor, patch = (int(x) for x in version.split("."))
    pkg_version = f"{major}.{major}{minor:02d}{patch:02d}.0"
    (tmp / "package.json").write_text(
        json.dumps(
            {"name": "tool-scons", "version": pkg_version, "description": f"SCons {version} (installed by mcutrain)"}
        )
    )
    (tmp / ".piopm").write_text(
        json.dumps(
            {
                "type": "tool",
                "name": "tool-scons",
                "version": pkg_version,
                "spec": {"owner": "platformio", "id": None, "name": "tool-scons", "requirements": None, "uri": None},
            }
        )
    )
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def run(
    args: Sequence[str], project: Path, timeout: Optional[float] = None, extra_env: Optional[Dict[str, str]] = None
) -> subprocess.CompletedProcess:
    """Run `pio ARGS` in a project folder (telemetry off, output captured as text, extra_env added to the
    environment); PioError when PlatformIO is missing."""
    cmd = pio_command() + list(args)
    env = dict(
        os.environ, PLATFORMIO_SETTING_ENABLE_TELEMETRY="No", PLATFORMIO_SETTING_CHECK_PLATFORMIO_INTERVAL="3650"
    )
    env.update(extra_env or {})
    ensure_scons()
    return processes.run(cmd, cwd=str(project), capture_output=True, text=True, timeout=timeout, env=env)


def build(project: Path, env_name: str, verbose: bool = False) -> subprocess.CompletedProcess:
    """`pio run -e ENV` in project; PioError with PlatformIO's last lines if it fails."""
    r = run(["run", "-e", env_name] + (["-v"] if verbose else []), project)
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-25:])
        hint = ""
        if "HTTPClientError" in tail or "Could not resolve" in tail or "InternetIsOffline" in tail:
            hint = (
                f"\nenv:{env_name} needs its PlatformIO platform, which is downloaded once from the "
                f"internet; offline, use the simulated env (sim-BOARD) or native"
            )
        raise PioError(f"pio run -e {env_name} failed:\n{tail}{hint}")
    return r
