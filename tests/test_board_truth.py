"""Boards that tell the truth: a simulated stand-in can do only what its real board can (a board without
storage cannot save in its simulator either), `mcutrain boards` lists the storage, the README's real-board
section shows only what its board can do, and the memory plan's flash estimate is within 25% of what the
build of every simulated board measures."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
from click.testing import CliRunner

from mcutrain import Checkpoint, Residual, Sequential, TrainParams, save_model
from mcutrain import layers as L
from mcutrain.cli import main
from mcutrain.exporter import pio, sim
from mcutrain.exporter.boards import all_boards, get_board
from mcutrain.exporter.client import DeviceError
from mcutrain.exporter.export import export_project
from mcutrain.exporter.memplan import plan
from mcutrain.exporter.sim_avr import avr_sizes
from mcutrain.exporter.sim_qemu import elf_sizes

README = Path(__file__).resolve().parent.parent / "README.md"
SIZE_TOOL = {"qemu-arm": "arm-none-eabi-size", "qemu-riscv32": "riscv64-unknown-elf-size"}
SIMULATED = [b.name for b in all_boards() if b.sim_kind not in (None, "native")]


def mlp() -> Checkpoint:
    """4-8 tanh-2 softmax with Adam: the README's walk-through network."""
    net = Sequential(L.Linear(4, 8), L.Tanh(), L.Linear(8, 2), L.Softmax()).rand_params(seed=2)
    return Checkpoint(net, net.new_adam(TrainParams(lr=0.01)), {"loss": "cross_entropy"})


def every_op() -> Checkpoint:
    """A network with the heavier layers (SingleChannelConv1d, GLU, RMSNorm, DyT, Swish, Diag, ScalarScale,
    Residual)."""
    net = Sequential(
        L.SingleChannelConv1d(8, 6, 3),
        L.Linear(6, 8),
        L.GLU(8, 6),
        L.RMSNorm(),
        L.DyT(),
        L.Swish(),
        L.Diag(),
        L.ScalarScale(),
        Residual(Sequential(L.Linear(6, 6), L.Tanh())),
        L.Linear(6, 2),
        L.Softmax(),
    ).rand_params(seed=1)
    return Checkpoint(net, net.new_adam(TrainParams(lr=1e-3)), {"loss": "cross_entropy"})


def measured_flash(project: Path, board_name: str) -> int:
    """Flash of the stand-in's firmware, as the build's ELF says."""
    board = get_board(board_name)
    pio.build(project, f"sim-{board.name}")
    elf = project / ".pio" / "build" / f"sim-{board.name}" / "firmware.elf"
    return avr_sizes(elf)["flash"] if board.sim_kind == "simavr" else elf_sizes(SIZE_TOOL[board.sim_kind], elf)["flash"]


@pytest.mark.parametrize(
    "board_name, model",
    [(b, "mlp") for b in SIMULATED] + [("nano33ble", "every_op"), ("esp32c3", "every_op"), ("bluepill", "every_op")],
)
def test_the_flash_estimate_is_within_25_percent_of_the_build(
    pio_core: Path, tmp_path: Path, board_name: str, model: str
) -> None:
    ck = {"mlp": mlp, "every_op": every_op}[model]()
    r = export_project(ck, board_name, tmp_path / "fw", sim=True)
    estimate = plan(r.model, get_board(board_name), sim=True).flash
    flash = measured_flash(r.path, board_name)
    assert abs(estimate - flash) <= 0.25 * flash, f"{board_name}: estimate {estimate:,} B, the build {flash:,} B"


@pytest.mark.skipif(not Path("/usr/share/arduino/hardware/arduino/avr").is_dir(), reason="arduino-core-avr")
def test_the_uno_estimate_with_its_arduino_framework_is_within_25_percent_of_the_real_build(tmp_path: Path) -> None:
    from mcutrain.exporter import arduino_avr

    r = export_project(mlp(), "uno", tmp_path / "fw")
    estimate = r.plan.flash
    assert "Arduino framework (estimate)" in r.plan.table()
    flash = avr_sizes(arduino_avr.build_project(r.path, "uno"))["flash"]
    assert abs(estimate - flash) <= 0.25 * flash, f"estimate {estimate:,} B, the build {flash:,} B"


def test_a_board_without_storage_cannot_save_in_its_stand_in_either(pio_core: Path, tmp_path: Path) -> None:
    """nano33ble has no storage: its QEMU stand-in says it cannot save and answers SAVE 'not supported';
    nucleo_f401re, on the same QEMU machine, has 1 KB and saves."""
    assert get_board("nano33ble").storage == 0
    for name, can_save in (("nano33ble", False), ("nucleo_f401re", True)):
        r = export_project(mlp(), name, tmp_path / name)
        with sim.start(r.path, get_board(name)) as s:
            assert s.device.info().can_save is can_save, name
            if can_save:
                assert s.device.save() >= 1
            else:
                with pytest.raises(DeviceError, match="no storage"):
                    s.device.save()
                assert s.device.info().step == 0  # the model is untouched and still answers
                assert np.all(np.isfinite(s.device.predict(np.zeros((1, 4), np.float32))))
    assert "nano33ble has no storage for saves: SAVE will answer 'not supported'" in r_table("nano33ble", tmp_path)


def r_table(board: str, tmp_path: Path) -> str:
    path = tmp_path / "m.mct"
    ck = mlp()
    save_model(path, ck.net, ck.optimizer, ck.metadata)
    out = CliRunner().invoke(main, ["export", str(path), "--board", board, "-o", str(tmp_path / f"t-{board}")])
    assert out.exit_code == 0, out.output
    return out.output


def test_boards_lists_the_storage_of_every_board() -> None:
    r = CliRunner().invoke(main, ["boards", "--json"])
    rows: Dict[str, dict] = {row["name"]: row for row in json.loads(r.output)}
    for b in all_boards():
        assert rows[b.name]["storage"] == b.storage
    text = CliRunner().invoke(main, ["boards"]).output
    assert "storage" in text.splitlines()[0]
    line = {ln.split()[0]: ln for ln in text.splitlines()[2:] if ln.strip()}
    assert "1,024 B" in line["uno"] and " none " in line["nano33ble"]
    assert "16 KiB RAM" in line["pico"]  # where the stand-in differs, the table says so


def test_the_readme_real_board_section_shows_only_what_its_board_can_do() -> None:
    """Every command block of the README that exports for a board and then saves on the device is for a board
    with storage."""
    text = README.read_text(encoding="utf-8")
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        block = block.replace("\\\n", " ")  # continued lines
        lines = [shlex.split(ln, comments=True) for ln in block.splitlines() if ln.split("#", 1)[0].strip()]
        boards = [a[a.index("--board") + 1] for a in lines if "export" in a and "--board" in a]
        saves = [a for a in lines if a[:2] == ["mcutrain", "device"] and ("save" in a[2:3] or "--save" in a)]
        for name in boards:
            if saves:
                assert get_board(name).storage > 0, f"the README saves on {name}, which has no storage:\n{block}"


def test_sim_and_serve_say_where_a_stand_in_differs() -> None:
    pico = get_board("pico")
    assert pico.sim_ram < pico.ram
    assert any("16,384 B of RAM" in d for d in pico.stand_in_differences())
    assert get_board("nano33ble").stand_in_differences() == []
