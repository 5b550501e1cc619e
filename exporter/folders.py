"""Output folders that mcutrain writes and replaces whole (an exported project): checked before any work,
locked against a second writer, built next to their place and exchanged in one step.

- The marker: every such folder holds MARKER (mcutrain.json), a JSON object whose "kind" says what made it
  ("project" for `mcutrain export`; KINDS lists the kinds, so another, e.g. a library, is one more entry).
  `--force` replaces only a folder whose marker has the kind being written: a user's folder is refused.
- The lock: an exclusive fcntl lock on `.NAME.lock` beside the folder, held from the check to the swap, so two
  writers of one folder (two processes, or two threads) take turns instead of mixing their files. It is
  released when its holder ends, even by a kill, so it can never be left stale.
- The swap: the new folder is built complete in `.NAME.mcutrain-new` beside the target, every file and folder
  flushed to the disk, then exchanged with the old one by renameat2(RENAME_EXCHANGE) (Linux 3.15+, on the
  local file systems that support it): readers see the old folder or the new one, never none and never a
  mix, even after a kill or a power cut. Where the exchange is not available, two renames are used: the old
  folder moves to `.NAME.mcutrain-old` and stays there until the new one is in place; if the process dies
  between the two, the next run (under the lock) puts the old folder back before doing anything else.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import shutil
import stat
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Union

from mcutrain.errors import McuTrainError
from mcutrain.files import fsync_dir

MARKER = "mcutrain.json"
KINDS: Dict[str, str] = {
    "project": "an exported project (mcutrain export)",
    "library": "an exported library (mcutrain export --library)",
}
LOCK_WAIT = 120.0  # seconds a writer waits for another writer of the same folder
MAX_MARKER_BYTES = 1 << 20


class FolderError(McuTrainError, ValueError):
    """An output folder that cannot be written or replaced; the message says which and what to do."""


class NotOurFolderError(FolderError):
    """--force given for a folder that mcutrain did not make (or made as another kind): it is left untouched."""


class FolderBusyError(FolderError):
    """Another process (or thread) is writing the same output folder."""


def _new_path(path: Path) -> Path:
    return path.parent / f".{path.name}.mcutrain-new"


def _old_path(path: Path) -> Path:
    return path.parent / f".{path.name}.mcutrain-old"


def lock_path(path: Union[str, Path]) -> Path:
    """The lock file of an output folder: `.NAME.lock` beside it (there only while a writer holds it)."""
    p = Path(path)
    return p.parent / f".{p.name}.lock"


def folder_kind(path: Union[str, Path]) -> Optional[str]:
    """What made the folder, from its marker: a kind of KINDS (or another string a newer mcutrain wrote), or
    None for a folder without a readable marker. A marker without "kind" that has "board" and "hash" is a
    project exported before the marker had its kind."""
    marker = Path(path) / MARKER
    try:
        st = marker.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MARKER_BYTES:
            return None
        meta: Any = json.loads(marker.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(meta, dict):
        return None
    kind = meta.get("kind")
    if isinstance(kind, str):
        return kind
    if kind is None and "board" in meta and "hash" in meta:
        return "project"
    return None


def _describe(kind: Optional[str]) -> str:
    if kind is None:
        return "it has no mcutrain.json marking it as mcutrain's"
    return f"its {MARKER} says it is {KINDS.get(kind, repr(kind))}"


def check_folder(path: Union[str, Path], kind: str, force: bool, what: str = "project") -> Path:
    """Check, before any work starts, that the output folder can be written: FolderError for an empty name,
    the current folder (or one holding it), a file, a symbolic link, an existing non-empty folder without
    force, a folder on the way that is a file or that cannot be written; NotOurFolderError (with force) for a
    folder whose marker is not of this kind. Makes the missing parent folders. Returns the path."""
    if kind not in KINDS:
        raise ValueError(f"unknown folder kind {kind!r}; known: {', '.join(KINDS)}")
    if str(path) in ("", ".", ".."):
        raise FolderError(f"give the {what} a folder name (not {str(path)!r})")
    p = Path(path)
    if p.name in ("", ".", ".."):
        raise FolderError(f"give the {what} a folder name ({p} names a folder above it)")
    cwd = Path.cwd().resolve()
    if p.resolve() == cwd or p.resolve() in cwd.parents:
        raise FolderError(f"{p} is the current folder or holds it: give the {what} another folder")
    if p.is_symlink():
        raise FolderError(f"{p} is a symbolic link: give the {what} a folder of its own (or the link's target)")
    if p.exists():
        if not p.is_dir():
            raise FolderError(f"{p} is a file, not a folder: give the {what} another name")
        if any(p.iterdir()):
            if not force:
                raise FolderError(f"{p} exists and is not empty; pass --force to replace it")
            found = folder_kind(p)
            if found != kind:
                raise NotOurFolderError(
                    f"{p} is not {KINDS[kind]} ({_describe(found)}), so --force will not replace it: "
                    f"choose another folder, or move it away yourself"
                )
    parent = p.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise FolderError(f"cannot write the {what} {p}: a folder on the way ({parent}) is a file") from None
    except OSError as e:
        raise FolderError(f"cannot write the {what} {p}: cannot make the folder {parent} ({e.strerror})") from None
    if not parent.is_dir():
        raise FolderError(f"cannot write the {what} {p}: {parent} is a file, not a folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=f".{p.name}.mcutrain-probe-", dir=str(parent)))
    except OSError as e:
        raise FolderError(f"cannot write the {what} {p}: {parent} is not writable ({e.strerror})") from None
    return p


@contextmanager
def folder_lock(path: Union[str, Path], wait: float = LOCK_WAIT) -> Iterator[None]:
    """Hold the folder's lock (its parent must exist): FolderBusyError if another writer still holds it after
    `wait` seconds. The lock file is removed on release; a writer that locked a file its predecessor had
    already removed notices and locks the new one."""
    lock = lock_path(path)
    deadline = time.monotonic() + max(0.0, float(wait))
    while True:
        try:
            fd = os.open(str(lock), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise FolderError(f"cannot lock {path}: cannot make {lock} ({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                raise FolderBusyError(
                    f"another mcutrain process is writing {path} (it holds {lock}): wait for it to finish and run again"
                ) from None
            time.sleep(0.02)
            continue
        try:
            now = os.stat(str(lock))
            mine = os.fstat(fd)
            current = (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)
        except FileNotFoundError:
            current = False
        if current:
            break
        os.close(fd)  # the previous holder removed this file as we locked it: lock the one on disk now
    try:
        yield
    finally:
        try:
            os.unlink(str(lock))
        except OSError:
            pass
        os.close(fd)


def recover(path: Union[str, Path]) -> None:
    """Finish what an interrupted swap left (call it holding the lock): a half-built `.NAME.mcutrain-new` is
    removed; an old folder that two renames had moved aside is put back if the new one never got into place,
    removed otherwise."""
    p = Path(path)
    old, new = _old_path(p), _new_path(p)
    if os.path.lexists(old):
        if not os.path.lexists(p):
            os.rename(old, p)
            fsync_dir(p.parent)
        else:
            shutil.rmtree(old)
    if os.path.lexists(new):
        shutil.rmtree(new)


def sync_tree(root: Path) -> None:
    """Flush every file and folder under root (root too) to the disk."""
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(folder))


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_renameat2: Any = None
try:  # glibc 2.28+; elsewhere (musl before 1.2.?, macOS, Windows) the two-rename fallback is used
    _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    _renameat2.restype = ctypes.c_int
except (AttributeError, OSError, TypeError):  # pragma: no cover - depends on the C library
    _renameat2 = None


def exchange(a: Union[str, Path], b: Union[str, Path]) -> bool:
    """Swap two existing paths in one atomic step (renameat2 RENAME_EXCHANGE). False where the system or the
    file system cannot (the caller falls back); OSError for any other failure."""
    if _renameat2 is None:
        return False
    rc = _renameat2(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_folder(path: Union[str, Path], fill: Callable[[Path], None]) -> Path:
    """Write the folder at path whole: fill(folder) builds it in `.NAME.mcutrain-new` beside path, everything
    is flushed to the disk, then it takes path's place in one step (see the module docstring). Call it holding
    folder_lock(path), after check_folder. Returns path."""
    p = Path(path)
    parent = p.parent
    new, old = _new_path(p), _old_path(p)
    recover(p)
    os.mkdir(new)
    try:
        if p.is_dir():
            os.chmod(new, stat.S_IMODE(p.stat().st_mode))  # a replaced project keeps its permissions
        fill(new)
        sync_tree(new)
        fsync_dir(parent)
        if not os.path.lexists(p):
            os.rename(new, p)
        elif exchange(new, p):
            fsync_dir(parent)
            shutil.rmtree(new)  # now the old folder
        else:
            os.rename(p, old)  # kept until the new folder is in place; recover() puts it back after a crash
            fsync_dir(parent)
            os.rename(new, p)
            fsync_dir(parent)
            shutil.rmtree(old)
    except BaseException:
        if os.path.lexists(old) and not os.path.lexists(p):
            os.rename(old, p)
        shutil.rmtree(new, ignore_errors=True)
        raise
    fsync_dir(parent)
    return p
