"""docs/embedding.md's step-by-step section, run as written: a PlatformIO project of the user's own with a
library export in its lib/, built offline by `mcutrain build` (the Uno env on Debian's genuine Arduino AVR
core) and run by `mcutrain sim` in simavr, which shows what the sketch prints and keeps its EEPROM between
runs."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest
from click.testing import CliRunner

from mcutrain.cli import main
from mcutrain.exporter import arduino_avr

DOC = Path(__file__).resolve().parent.parent / "docs" / "embedding.md"
SECTION = "## Step by step: your own PlatformIO project"
STEP_LINE = re.compile(r"^step (\d+) loss ([0-9.]+)$", re.M)

pytestmark = pytest.mark.skipif(
    not (arduino_avr.ARDUINO_AVR_DIR / "boards.txt").is_file() or shutil.which("avr-gcc") is None,
    reason="needs Debian's arduino-core-avr and avr-gcc",
)


def steps() -> List[Tuple[str, str]]:
    """The section's steps in order: ("file", path + NUL + text) for a file the doc shows, ("run", command)."""
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text, "docs/embedding.md lost its step-by-step section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    out: List[Tuple[str, str]] = []
    pattern = re.compile(r"(?:^`([^`\n]+)`:[^`]*?\n\n)?```(\w+)\n(.*?)```", re.M | re.S)
    for m in pattern.finditer(section):
        path, lang, body = m.groups()
        if path:
            out.append(("file", f"{path}\0{body}"))
        else:
            assert lang == "sh", f"a {lang} block without a file name in {DOC}"
            out += [("run", ln) for ln in body.splitlines() if ln.split("#", 1)[0].strip()]
    return out


@pytest.fixture
def in_tmp(tmp_path: Path, pio_core: Path) -> Iterator[Path]:
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


def test_the_embedding_steps_run_as_written(in_tmp: Path) -> None:
    outputs: List[Tuple[List[str], str]] = []
    for kind, what in steps():
        if kind == "file":
            path, body = what.split("\0", 1)
            (in_tmp / path).parent.mkdir(parents=True, exist_ok=True)
            (in_tmp / path).write_text(body)
            continue
        args = shlex.split(what, comments=True)
        assert args[0] == "mcutrain", what
        r = CliRunner().invoke(main, args[1:])
        assert r.exit_code == 0, f"{what}: {r.output}"
        outputs.append((args[1:], r.output))
    built = [o for a, o in outputs if a[0] == "build"]
    runs = [o for a, o in outputs if a[0] == "sim"]
    assert len(built) == 1 and len(runs) == 2
    # built offline, on the Arduino core, within the Uno's flash
    assert "on the Arduino AVR core" in built[0]
    flash = int(re.search(r"Flash: ([0-9,]+) of 32,256 B", built[0]).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert 0 < flash < 32256
    assert (in_tmp / "my_project" / ".pio" / "build" / "uno-arduino-core" / "firmware.elf").is_file()
    # the first run starts from the export, learns (the mean loss falls) and saves
    first = sketch_lines(runs[0])
    assert first[0] == "as exported", runs[0]
    losses = [float(v) for _, v in STEP_LINE.findall("\n".join(first))]
    assert len(losses) >= 4, runs[0]
    assert losses[-1] < 0.5 * losses[0], losses
    assert "saved" in first
    # the second run is a reset: it carries on from the save
    assert sketch_lines(runs[1])[0] == "carrying on from the last save", runs[1]


def sketch_lines(output: str) -> List[str]:
    """What the sketch printed: the lines of `mcutrain sim` between its build and its closing line."""
    lines = output.splitlines()
    start = next(i + 1 for i, ln in enumerate(lines) if ln.startswith("built "))
    assert lines[-1].startswith("ran my_project (env uno) for "), output
    return lines[start:-1]


def test_a_folder_without_a_library_export_says_what_to_do(in_tmp: Path) -> None:
    (in_tmp / "p" / "src").mkdir(parents=True)
    (in_tmp / "p" / "platformio.ini").write_text("[env:uno]\nplatform = atmelavr\nboard = uno\nframework = arduino\n")
    r = CliRunner().invoke(main, ["build", "p"])
    assert r.exit_code == 1 and "uses no library export in lib/" in r.output and "--library" in r.output
