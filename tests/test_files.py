"""mcutrain.files.atomic_write: the permissions of what it writes, and nothing half-written or left over."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mcutrain.files import atomic_write, current_umask


def mode(p: Path) -> int:
    """The permission bits of a file."""
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077, 0o027])
def test_a_new_file_gets_0666_less_the_umask(tmp_path: Path, umask: int) -> None:
    """Not the 0600 of a temporary file: a model or plot shared with a team stays readable to them."""
    old = os.umask(umask)
    try:
        assert current_umask() == umask
        atomic_write(tmp_path / "model.mct", b"data")
        plain = tmp_path / "plain.txt"
        with open(plain, "wb") as f:  # what any program would create
            f.write(b"x")
    finally:
        os.umask(old)
    assert mode(tmp_path / "model.mct") == 0o666 & ~umask == mode(plain)
    assert (tmp_path / "model.mct").read_bytes() == b"data"


def test_a_replaced_file_keeps_its_permissions(tmp_path: Path) -> None:
    """Replacing a file the user made 0640 (or 0644) keeps that mode."""
    p = tmp_path / "model.mct"
    for m in (0o640, 0o604):
        p.write_bytes(b"old")
        os.chmod(p, m)
        atomic_write(p, b"new")
        assert mode(p) == m and p.read_bytes() == b"new"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    """An error while writing (here: data that is not bytes) keeps the old contents, and the temporary file
    is removed."""
    p = tmp_path / "model.mct"
    p.write_bytes(b"old")
    with pytest.raises(TypeError):
        atomic_write(p, "not bytes")  # type: ignore[arg-type]
    assert p.read_bytes() == b"old"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["model.mct"]


def test_a_missing_folder_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    """The folder must exist: FileNotFoundError, nothing created."""
    with pytest.raises(FileNotFoundError):
        atomic_write(tmp_path / "no" / "model.mct", b"data")
    assert list(tmp_path.iterdir()) == []
