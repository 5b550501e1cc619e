"""Writing files so that nothing is ever half-written: a temporary file in the same folder, flushed to the
disk, then renamed over the target (and the folder flushed too). Readers see the old file or the new one,
never a mix, even after a crash or a power cut.

A new file gets the permissions any program would give it (0666 less the user's umask), a replaced file
keeps the permissions it had, so a model or a plot shared with a team stays readable to them."""

from __future__ import annotations

import os
import re
import stat
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO, Type, Union

_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process's umask. Read from /proc where it can be (no change to the process); elsewhere set and
    restored at once under a lock (os.umask has no read-only form)."""
    try:
        m = re.search(r"^Umask:\s*([0-7]+)$", Path("/proc/self/status").read_text(), re.M)
        if m:
            return int(m.group(1), 8)
    except OSError:
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (a rename, a new file) to the disk, where the system allows it."""
    try:
        fd = os.open(str(folder), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Union[str, Path], data: bytes) -> None:
    """Write data to path through a temporary file in the same folder and a rename (see the module
    docstring for the permissions). The folder must exist."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    try:
        mode = p.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~current_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(folder))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(folder)


def read_limited(f: BinaryIO, limit: int, size: int = 0) -> bytes:
    """At most limit + 1 bytes of a stream (so a caller sees that it holds more than limit), reserving memory
    only for what is there: a read of n bytes reserves n up front, so asking for the limit at once would
    reserve it for a tiny file. Asks for size + 1 bytes first (size: what the file held when checked), then
    reads on in pieces of 1 MiB while there is more (a file that grew, a /proc file whose size says 0, an
    unpacking gzip stream)."""
    data = f.read(min(size, limit) + 1)
    parts, total = [data], len(data)
    while total > size and total <= limit:
        more = f.read(min(1 << 20, limit + 1 - total))
        if not more:
            break
        parts.append(more)
        total += len(more)
    return b"".join(parts) if len(parts) > 1 else data


def read_bounded(path: Union[str, Path], limit: int, what: str, error: Type[Exception]) -> bytes:
    """The bytes of a regular file of at most `limit` bytes. `error` (with a message naming the file) for a
    missing file, anything but a regular file (a folder; a device such as /dev/zero that never ends; a
    pipe that would block) or a larger file, checked before reading; `what` names the kind of file in
    messages, e.g. 'model file'."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise error(f"{what} {p} does not exist") from None
    except OSError as e:
        raise error(f"cannot read {what} {p}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{p} is a folder: give the path of a {what}")
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{p} is not a regular file (a device, pipe or socket): give the path of a {what}")
    if st.st_size > limit:
        raise error(f"{p} has {st.st_size:,} bytes; a {what} has at most {limit:,}")
    try:
        with open(p, "rb") as f:
            data = read_limited(f, limit, st.st_size)
    except OSError as e:
        raise error(f"cannot read {what} {p}: {e.strerror}") from None
    if len(data) > limit:
        raise error(f"{p} grew past {limit:,} bytes while being read; a {what} has at most {limit:,}")
    return data
