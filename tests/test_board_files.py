"""Board files (boards/*.toml) with values of the wrong type or range: a BoardError naming the file, the key and
the value, never a ValueError from int() or a KeyError from the project generator later."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcutrain.errors import McuTrainError
from mcutrain.exporter.boards import BoardError, all_boards, load_board_file
from mcutrain.exporter.paths import boards_dir


def edited(tmp_path: Path, board: str, old: str, new: str) -> Path:
    """A copy of a shipped board file with one line replaced (the line must be there)."""
    text = (boards_dir() / f"{board}.toml").read_text()
    assert old in text, f"{board}.toml has no line {old!r}"
    p = tmp_path / f"{board}.toml"
    p.write_text(text.replace(old, new, 1))
    return p


def test_every_shipped_board_passes_the_checks() -> None:
    boards = all_boards()
    assert len(boards) >= 10 and all(b.ram > 0 and b.flash > 0 for b in boards)


@pytest.mark.parametrize(
    "board,old,new,words",
    [
        ("uno", "ram = 2048", 'ram = "lots"', "ram must be a whole number of bytes from 1 to 2^32 - 1, got 'lots'"),
        ("uno", "ram = 2048", "ram = -2048", "ram must be a whole number of bytes from 1 to 2^32 - 1, got -2048"),
        ("uno", "ram = 2048", "ram = 2048.5", "got 2048.5"),
        ("uno", "ram = 2048", "ram = true", "got True"),
        ("uno", "storage = 1024", "storage = -1", "storage must be a whole number of bytes from 0"),
        ("uno", "fpu = false", 'fpu = "no"', "fpu must be true or false, got 'no'"),
        ("uno", 'core = "avr"', "core = 7", "core must be a non-empty string, got 7"),
        ("uno", 'board = "uno"', "board = 3", "platformio.board must be a string, got 3"),
        ("uno", 'mcu = "atmega328p"', 'chip = "atmega328p"', "sim.mcu must be a non-empty string (a simavr"),
        ("uno", "freq = 16000000", 'freq = "fast"', "sim.freq must be a whole number"),
        ("uno", 'kind = "simavr"', 'kind = "bochs"', "sim.kind must be one of qemu-arm, qemu-riscv32, simavr, native"),
        ("nucleo_f401re", 'machine = "mps2-an386"', "", "sim.machine must be a non-empty string (a qemu-arm"),
    ],
)
def test_bad_values_name_the_file_key_and_value(tmp_path: Path, board: str, old: str, new: str, words: str) -> None:
    p = edited(tmp_path, board, old, new)
    with pytest.raises(BoardError) as e:
        load_board_file(p)
    assert isinstance(e.value, McuTrainError) and words in str(e.value) and str(p) in str(e.value), str(e.value)


def test_missing_keys_and_broken_toml(tmp_path: Path) -> None:
    with pytest.raises(BoardError, match="lacks the key 'ram'"):
        load_board_file(edited(tmp_path, "uno", "ram = 2048", ""))
    with pytest.raises(BoardError, match="is not a valid TOML file"):
        load_board_file(edited(tmp_path, "uno", "ram = 2048", "ram = = 2048"))
