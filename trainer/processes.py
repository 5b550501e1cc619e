"""Every program mcutrain starts (a simulator, the native firmware, PlatformIO and the compilers it runs, the
processes of a fleet) starts here, so that none outlives mcutrain however mcutrain ends:

- **Its own process group.** Each child leads a new process group, so stopping it (`stop`) ends what it
  started too (a build's compilers, a simulator's helpers). A Ctrl-C at the terminal reaches mcutrain only;
  mcutrain then stops its children itself.
- **Ended on every exit mcutrain can see.** Live children are listed; at exit (a normal end, an error,
  Ctrl-C, SIGTERM, SIGHUP) each group gets SIGTERM, then SIGKILL after a short grace.
- **Ended on the exits it cannot see.** On Linux each child asks the kernel for SIGKILL when mcutrain dies
  (`prctl(PR_SET_PDEATHSIG)`, set by util-linux's `setpriv --pdeathsig KILL` just before the program runs),
  so a SIGKILL of mcutrain, or a crash, ends its children too. The kernel sends it when the *thread* that
  started the child ends, so children are started from the main thread or from one spawner thread that lives
  as long as the process, never from a worker thread that may end first (a fleet's Flower client threads).
- **SIGTERM like Ctrl-C.** `terminate_like_interrupt` (the command line calls it) makes SIGTERM and SIGHUP
  run whatever SIGINT runs at that moment (KeyboardInterrupt, or `train`'s stop-and-save), so the same
  cleanup happens.

Descendants that a child starts inherit no death signal: after a SIGKILL of mcutrain itself, a child's own
children (a compiler under PlatformIO) run on until they end by themselves, which for a compiler is seconds.
"""

from __future__ import annotations

import atexit
import errno
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, List, Optional, Sequence, Set

STOP_GRACE = 2.0  # seconds between SIGTERM and SIGKILL when a child is stopped
EXIT_GRACE = 0.5  # the same at exit (children have had their chance to quit cleanly by then)
REAP_WAIT = 10.0  # seconds to wait for a child to end after SIGKILL

_live: Set[subprocess.Popen] = set()
_live_lock = threading.Lock()
_terminated = threading.Event()


def _find_setpriv() -> Optional[str]:
    """util-linux's setpriv when it can set the parent-death signal (Linux; util-linux 2.33 and later)."""
    if not sys.platform.startswith("linux"):
        return None
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return path if "--pdeathsig" in r.stdout else None


_SETPRIV: Optional[str] = None
_SETPRIV_CHECKED = False


def _death_signal_prefix() -> List[str]:
    """The command that runs a program with SIGKILL as its parent-death signal, or [] where there is none.

    The signal is set by `setpriv --pdeathsig KILL` (util-linux) in the child just before it runs the program,
    rather than by a preexec_fn: a preexec_fn makes Python fork the whole process instead of using vfork, and a
    fork runs the fork handlers of libraries such as gRPC (Flower's), whose event engine then aborts in the
    child."""
    global _SETPRIV, _SETPRIV_CHECKED
    if not _SETPRIV_CHECKED:
        _SETPRIV, _SETPRIV_CHECKED = _find_setpriv(), True
    return [_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []


def _check_program(args: Sequence[str], kw: Any) -> None:
    """FileNotFoundError, as Popen raises it, when the program does not exist (the wrapper would otherwise
    start and report it with an exit status)."""
    prog = str(args[0])
    if os.sep in prog:
        full: Optional[str] = prog if os.path.isabs(prog) or not kw.get("cwd") else os.path.join(str(kw["cwd"]), prog)
        ok = full is not None and os.path.isfile(full) and os.access(full, os.X_OK)
    else:
        ok = shutil.which(prog, path=(kw.get("env") or os.environ).get("PATH", os.defpath)) is not None
    if not ok:
        raise FileNotFoundError(errno.ENOENT, f"No such file or directory: {prog!r}", prog)


def _popen(args: Sequence[str], kw: Any) -> subprocess.Popen:
    """Popen in a process group of its own with SIGKILL as the parent-death signal (where available)."""
    kw.pop("start_new_session", None)
    kw.pop("process_group", None)
    args = [str(a) for a in args]
    prefix = _death_signal_prefix()
    if prefix:
        _check_program(args, kw)
    if sys.version_info >= (3, 11):
        kw["process_group"] = 0
    else:  # pragma: no cover - Python 3.9/3.10: a new session is a new process group as well
        kw["start_new_session"] = True
    return subprocess.Popen(prefix + args, **kw)


class _Spawner:
    """One thread that lives as long as the process and starts the children asked for from other threads
    (the kernel's parent-death signal follows the thread that forked)."""

    def __init__(self) -> None:
        self._jobs: queue.Queue = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def start(self, args: Sequence[str], kw: Any) -> subprocess.Popen:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="mcutrain-spawner", daemon=True)
                self._thread.start()
        done: queue.Queue = queue.Queue(maxsize=1)
        self._jobs.put((args, kw, done))
        ok, value = done.get()
        if not ok:
            raise value
        return value

    def _serve(self) -> None:
        while True:
            args, kw, done = self._jobs.get()
            try:
                done.put((True, _popen(args, kw)))
            except BaseException as e:  # noqa: B902 - handed to the thread that asked
                done.put((False, e))


_SPAWNER = _Spawner()


def spawn(args: Sequence[str], **kw: Any) -> subprocess.Popen:
    """subprocess.Popen(args, **kw) for a child that ends with mcutrain (see the module docstring); stop it
    with `stop`."""
    if threading.current_thread() is threading.main_thread():
        proc = _popen(args, kw)
    else:
        proc = _SPAWNER.start(args, kw)
    with _live_lock:
        _live.add(proc)
    return proc


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """sig to the child's process group (while its leader is not yet reaped, so the group is its own)."""
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except OSError:
            pass


def stop(proc: subprocess.Popen, grace: float = STOP_GRACE) -> Optional[int]:
    """End a child started by spawn and everything in its process group: SIGTERM, SIGKILL after `grace`
    seconds; returns its exit status (None if it could not be reaped)."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    # the group may outlive its leader (a child's own children): end what is left of it
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.wait(timeout=REAP_WAIT)  # SIGKILL cannot be refused: this is the kernel's time to end it
    except subprocess.TimeoutExpired:
        return None
    finally:
        with _live_lock:
            _live.discard(proc)
    return proc.returncode


def run(
    args: Sequence[str],
    *,
    input: Any = None,
    capture_output: bool = False,
    timeout: Optional[float] = None,
    **kw: Any,
) -> subprocess.CompletedProcess:
    """subprocess.run for a child started by spawn: an exception while it runs (a timeout, Ctrl-C, SIGTERM)
    stops its whole process group before it propagates."""
    if capture_output:
        kw["stdout"] = kw["stderr"] = subprocess.PIPE
    if input is not None:
        kw["stdin"] = subprocess.PIPE
    proc = spawn(args, **kw)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except BaseException:
        stop(proc, EXIT_GRACE)
        raise
    with _live_lock:
        _live.discard(proc)
    return subprocess.CompletedProcess(list(args), proc.returncode, out, err)


def live() -> List[subprocess.Popen]:
    """The children started by spawn that have not been stopped or seen to end."""
    with _live_lock:
        return [p for p in _live if p.poll() is None]


def stop_all(grace: float = EXIT_GRACE) -> None:
    """End every live child and its group: SIGTERM to all, then SIGKILL to what is left after `grace`."""
    procs = live()
    for p in procs:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            p.wait(timeout=REAP_WAIT)
        except subprocess.TimeoutExpired:
            pass
    with _live_lock:
        _live.difference_update(procs)


atexit.register(stop_all)


def _as_interrupt(signum: int, frame: Any) -> None:
    """SIGTERM/SIGHUP: whatever SIGINT does now (KeyboardInterrupt, or a handler such as train's)."""
    _terminated.set()
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def terminate_like_interrupt() -> None:
    """Make SIGTERM and SIGHUP act like Ctrl-C in this process (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is not None and signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _as_interrupt)


def was_terminated() -> bool:
    """Did a SIGTERM or SIGHUP (rather than Ctrl-C) end the run?"""
    return _terminated.is_set()
