"""What `pip install mcutrain` gives: the base install carries no framework (they are extras), the demo's set-up
installs the base only and the test command the `test` extra, an optional feature used without its extra
stops with one line naming it, the package carries its license, and the sdist every file its build reads."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
FRAMEWORKS = ("torch", "keras", "jax", "flwr", "onnx", "onnxruntime", "scikit-learn", "matplotlib", "tensorflow")


def _name(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].strip().lower()


def test_the_base_install_carries_no_framework_and_each_has_its_extra() -> None:
    """The base dependencies are what train/export/build/sim/flash need; each framework is in its extra and
    `all` installs every extra the features name."""
    base = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert not base & set(FRAMEWORKS), base
    extras = PYPROJECT["project"]["optional-dependencies"]
    wanted = {"onnx": "onnx", "keras": "keras", "sklearn": "scikit-learn", "fleet": "flwr", "plot": "matplotlib"}
    for extra, package in wanted.items():
        assert package in {_name(r) for r in extras[extra]}, (extra, extras[extra])
    assert set(wanted) <= set(re.search(r"\[(.*)\]", extras["all"][0]).group(1).split(","))
    assert "mcutrain[all]" in extras["test"]


def test_the_demo_sets_up_the_base_and_the_tests_the_test_extra() -> None:
    """scripts/demo.sh calls scripts/setup.sh without extras (so no PyTorch, Keras, JAX or Flower), and
    scripts/test.sh with the `test` extra; setup.sh installs exactly the extras it is given."""
    demo = (ROOT / "scripts" / "demo.sh").read_text()
    assert re.search(r"^\./scripts/setup\.sh\s*(#.*)?$", demo, re.M), demo
    assert re.search(r"^\./scripts/setup\.sh test\s*$", (ROOT / "scripts" / "test.sh").read_text(), re.M)
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    script = 'extras=${1:-}; echo ".${extras:+[$extras]}"'
    assert 'pip install -q -e ".${extras:+[$extras]}"' in setup and "extras=${1:-}" in setup
    for arg, want in (([], "."), (["test"], ".[test]")):
        out = subprocess.run(["bash", "-c", script, "setup.sh", *arg], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == want


def test_an_optional_feature_without_its_extra_names_it_in_one_line(tmp_path: Path) -> None:
    """`mcutrain plot` where matplotlib cannot be imported: exit 1, one line saying `pip install
    'mcutrain[plot]'`, no traceback, no PNG written."""
    import mcutrain as mct
    from mcutrain import Sequential
    from mcutrain import layers as L

    net = Sequential(L.Linear(3, 4), L.Tanh())
    net.rand_params(seed=1, scale=1.0)
    mct.save_model(tmp_path / "m.mct", net)
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from mcutrain.cli import run\n"
        f"sys.argv = ['mcutrain', 'plot', {str(tmp_path / 'm.mct')!r}, '--weights', '-o', "
        f"{str(tmp_path / 'w.png')!r}]\n"
        "run()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "pip install 'mcutrain[plot]'" in lines[0], r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "w.png").exists()


def test_the_license_is_the_metadata_license() -> None:
    """LICENSE is the MIT license the metadata names, and the package metadata points at it."""
    assert PYPROJECT["project"]["license"] == "MIT"
    assert "LICENSE" in PYPROJECT["project"]["license-files"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text
    assert (ROOT / "CHANGELOG.md").read_text().startswith("# Changelog")


def test_the_sdist_carries_every_file_the_extension_is_built_from(tmp_path: Path) -> None:
    """`python -m build --sdist` packs the Cython module with the files it includes (_feat.pxi), the dispatcher
    (trainer/isa_dispatch.c, .h), the build's flags (trainer/host_build.py) and every C core file, so the wheel
    that `python -m build` makes from the sdist builds."""
    import tarfile

    src = tmp_path / "src"
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files"], check=True, capture_output=True, text=True).stdout
    for rel in tracked.split():
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes((ROOT / rel).read_bytes())
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--sdist",
            "--no-isolation",
            "--skip-dependency-check",
            "-o",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (sdist,) = (tmp_path / "dist").glob("mcutrain-*.tar.gz")
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    pyx = (ROOT / "trainer" / "_core.pyx").read_text()
    included = {"trainer/" + f for f in re.findall(r'^include "([^"]+)"', pyx, flags=re.MULTILINE)}
    assert included, "the Cython module includes its feature bindings (_feat.pxi)"
    core = {str(p.relative_to(ROOT)) for p in (ROOT / "firmware" / "core").iterdir() if p.suffix in (".c", ".h")}
    need = {
        "setup.py",
        "trainer/_core.pyx",
        "trainer/isa_dispatch.c",
        "trainer/isa_dispatch.h",
        "trainer/host_build.py",
    }
    missing = sorted((need | included | core) - names)
    assert not missing, f"the sdist lacks {missing}"
