"""The README's demo (scripts/demo.sh) without its set-up step: its three mcutrain commands (train the built-in
example, export it for the Nucleo-F401RE, build and run it in QEMU) through the installed entry point, in a
folder of their own, with the session's PlatformIO core folder (conftest.pio_core)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "scripts" / "demo.sh"
OUT = "D"  # the demo's output folder ($out)


def demo_commands(out: str) -> List[List[str]]:
    """The mcutrain command lines of scripts/demo.sh, with its output folder ($out) set to out."""
    cmds = [
        shlex.split(line.replace('"$out', f'"{out}'))
        for line in DEMO.read_text().splitlines()
        if line.startswith("mcutrain ")
    ]
    assert cmds, f"{DEMO} runs no mcutrain command"
    return cmds


def entry_point() -> str:
    """The installed `mcutrain` script of this Python (else the one on PATH)."""
    exe = Path(sys.executable).parent / "mcutrain"
    if exe.is_file():
        return str(exe)
    found = shutil.which("mcutrain")
    if not found:
        pytest.fail("the mcutrain entry point is not installed: run `pip install -e .`")
    return found


def test_demo_commands_are_the_documented_path() -> None:
    """The demo trains the built-in example, exports it for the Nucleo-F401RE and simulates it with a report."""
    assert demo_commands(OUT) == [
        ["mcutrain", "train", "-o", f"{OUT}/model.mct", "--force"],
        ["mcutrain", "export", f"{OUT}/model.mct", "--board", "nucleo_f401re", "-o", f"{OUT}/fw", "--force"],
        ["mcutrain", "sim", f"{OUT}/fw", "--report", f"{OUT}/report.json", "--force"],
    ]


def test_demo_runs_and_the_device_matches_the_host(pio_core: Path, tmp_path: Path) -> None:
    """Each command exits 0; the simulation says the device's predictions and its training step match the
    host's bit for bit, and its JSON report has the instruction counts of one PREDICT and one TRAIN, the
    RAM and the flash of the firmware."""
    (tmp_path / OUT).mkdir()
    outputs = []
    for cmd in demo_commands(OUT):
        r = subprocess.run(
            [entry_point(), *cmd[1:]],
            cwd=str(tmp_path),
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-3000:])
        outputs.append(r.stdout)
    train_out, export_out, sim_out = outputs
    assert f"saved {OUT}/model.mct" in train_out
    assert "nucleo_f401re" in export_out and (tmp_path / OUT / "fw" / "platformio.ini").is_file()
    assert "predictions on 5 samples: device and host (same C core) match bit for bit" in sim_out, sim_out
    assert "one training step: device and host match bit for bit" in sim_out, sim_out
    assert "per PREDICT (instructions)" in sim_out and "per TRAIN (instructions)" in sim_out
    rep = json.loads((tmp_path / OUT / "report.json").read_text())
    assert rep["board"] == "nucleo_f401re" and rep["simulator"] == "qemu-arm" and rep["unit"] == "instructions"
    assert rep["check"]["predict"]["ok"] and rep["check"]["predict"]["max_diff"] == 0.0
    assert rep["check"]["train"]["ok"] and rep["check"]["train"]["device_loss"] == rep["check"]["train"]["host_loss"]
    assert rep["predict_calls"] > 0 and rep["train_calls"] > 0
    assert 0 < rep["predict"] < rep["train"]  # instructions per PREDICT and per TRAIN
    assert rep["ram_static"] > 4 * 1095 and rep["stack_peak"] > 0  # at least the 1,095 f32 parameters
    assert rep["flash"] >= rep["text"] > 0
