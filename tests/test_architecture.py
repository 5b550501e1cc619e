"""The shape of the package, checked from the source: one installed name (`mcutrain`), layers that only
point down (trainer <- exporter <- fleet <- cli), and no import cycles.

The imports are read with `ast` from every module of the three Python folders, imports inside functions
included, so a lazy import cannot hide an upward dependency or a cycle. The folder -> package mapping is
read from setup.py (PACKAGE_DIRS), the one place that defines it.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The layers, bottom up: a module may import its own layer and the ones below it.
LAYERS = ["mcutrain", "mcutrain.exporter", "mcutrain.fleet", "mcutrain.cli"]
# Folders that hold package data only (C sources, board files): their Python files are not part of the API.
DATA_PACKAGES = {"mcutrain.firmware", "mcutrain.boards"}


def package_dirs() -> Dict[str, str]:
    """setup.py's PACKAGE_DIRS (package name -> repository folder), read without running setup.py."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PACKAGE_DIRS" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py defines no PACKAGE_DIRS")


def code_modules() -> Dict[str, Path]:
    """Every Python module of the code packages: dotted name -> file."""
    out: Dict[str, Path] = {}
    for pkg, folder in package_dirs().items():
        if pkg in DATA_PACKAGES:
            continue
        for f in sorted((ROOT / folder).glob("*.py")):
            out[pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"] = f
        if (ROOT / folder / "_core.pyx").exists():
            out[f"{pkg}._core"] = ROOT / folder / "_core.pyx"
    return out


def imports_of(name: str, path: Path, modules: Dict[str, Path]) -> List[Tuple[str, int]]:
    """(imported mcutrain module, line) for every import in the file, anywhere in it. `from P import x`
    counts as importing P.x when that is a module, else P itself (its __init__)."""
    if path.suffix == ".pyx":
        return []  # the extension imports only numpy and the C core
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.stem == "__init__"
    here = name if is_pkg else name.rpartition(".")[0]
    out: List[Tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "mcutrain"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            if base.split(".")[0] != "mcutrain":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((sub if sub in modules else base, node.lineno))
    return out


def layer_of(module: str) -> int:
    """Index in LAYERS of the deepest layer the module belongs to."""
    return max(i for i, pkg in enumerate(LAYERS) if module == pkg or module.startswith(pkg + "."))


@pytest.fixture(scope="module")
def graph() -> Dict[str, Set[str]]:
    """module -> the mcutrain modules it imports."""
    mods = code_modules()
    g: Dict[str, Set[str]] = {}
    for name, path in mods.items():
        g[name] = {m for m, _ in imports_of(name, path, mods) if m != name}
    return g


def test_every_module_is_found() -> None:
    """The scan sees the three layers (a broken mapping would make the other tests pass vacuously)."""
    mods = code_modules()
    for must in ("mcutrain.module", "mcutrain._core", "mcutrain.exporter.export", "mcutrain.cli"):
        assert must in mods, f"{must} not found; setup.py PACKAGE_DIRS: {package_dirs()}"


def test_imports_only_point_down() -> None:
    """trainer (mcutrain) imports neither the exporter nor the CLI; the exporter does not import the CLI."""
    mods = code_modules()
    bad = []
    for name, path in mods.items():
        for target, line in imports_of(name, path, mods):
            if target in mods or target in LAYERS:
                if layer_of(target) > layer_of(name):
                    bad.append(f"{path.relative_to(ROOT)}:{line}: {name} imports {target} (a layer above it)")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_imports_name_existing_modules() -> None:
    """Every mcutrain import names a module or package that exists (a stale name after a move fails here)."""
    mods = code_modules()
    packages = set(package_dirs())
    bad = []
    for name, path in mods.items():
        for target, line in imports_of(name, path, mods):
            if target not in mods and target not in packages:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {target}")
    assert not bad, "imports of modules that do not exist:\n" + "\n".join(bad)


def cycles(g: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles(graph: Dict[str, Set[str]]) -> None:
    """No module reaches itself through imports (in-function imports count)."""
    found = cycles(graph)
    text = "\n".join(
        " <-> ".join(c) + "\n    " + "\n    ".join(f"{a} imports {', '.join(sorted(graph[a] & set(c)))}" for a in c)
        for c in found
    )
    assert not found, "import cycles:\n" + text


def test_cycle_finder_finds_a_cycle() -> None:
    """The checker itself: a -> b -> c -> a is reported, a chain is not."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_every_error_class_derives_from_mcutrainerror() -> None:
    """Every exception class the package defines is a McuTrainError (so the CLI shows its message and a
    program can catch mcutrain's errors in one clause); the CLI's own click errors are the exception."""
    import importlib

    from mcutrain.errors import McuTrainError

    found = []
    for name in code_modules():
        if name.startswith("mcutrain.cli") or name == "mcutrain._core":
            continue
        mod = importlib.import_module(name)
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, BaseException) and obj.__module__ == name:
                found.append(obj)
                assert issubclass(obj, McuTrainError), f"{name}.{obj.__name__} does not derive from McuTrainError"
    assert len(found) >= 10, [c.__name__ for c in found]


def test_the_wheel_installs_one_top_level_name(tmp_path: Path) -> None:
    """`pip wheel .` builds a wheel whose only top-level name is mcutrain (besides its .dist-info), with the
    C core and the board files inside it as package data, and the console script mcutrain.cli:run."""
    src = tmp_path / "src"  # a copy, so the build leaves nothing behind in the checkout
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git", "build", "dist", ".pio", ".pio-core", "*.so", "*.egg-info", "__pycache__", ".venv", "_core.c"
        ),
    )
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "MCUTRAIN_MARCH": "x86-64"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    wheels = list(tmp_path.glob("mcutrain-*.whl"))
    assert len(wheels) == 1, wheels
    names = zipfile.ZipFile(wheels[0]).namelist()
    top = {n.split("/")[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"mcutrain"}, sorted(top)
    for must in (
        "mcutrain/firmware/core/mct.h",
        "mcutrain/firmware/app/mct_app.c",
        "mcutrain/boards/uno.toml",
        "mcutrain/exporter/export.py",
        "mcutrain/cli/__init__.py",
        "mcutrain/fleet/server.py",
    ):
        assert must in names, f"{must} is missing from the wheel"
    assert any(n.startswith("mcutrain/_core.") and n.endswith(".so") for n in names), "no compiled extension"
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "mcutrain = mcutrain.cli:run" in zipfile.ZipFile(wheels[0]).read(entry).decode()
