"""Every program mcutrain starts (a simulator, the native firmware, PlatformIO and the compilers it runs, the
processes of a fleet) starts here, so that none outlives mcutrain however mcutrain ends:

- **Its own process group.** Each child leads a new process group, so stopping it (`stop`) ends what it
  started too (a build's compilers, a simulator's helpers). A Ctrl-C at the terminal reaches mcutrain only;
  mcutrain then stops its children itself.
- **Ended on every exit mcutrain can see.** Live children are listed; at exit (a normal end, an error,
  Ctrl-C, SIGTERM, SIGHUP) each group gets SIGTERM, then SIGKILL after a short grace.
- **Ended on the exits it cannot see.** On Linux a watchdog process, which holds the only other end of a pipe
  from mcutrain and is told every child's process group, ends the groups still listed when the pipe closes:
  whatever ended mcutrain, SIGKILL or a crash included, a child's own children end too. Each child also
  asks the kernel for SIGKILL when mcutrain dies
  (`prctl(PR_SET_PDEATHSIG)`, set by util-linux's `setpriv --pdeathsig KILL` just before the program runs),
  so a SIGKILL of mcutrain, or a crash, ends its children too. The kernel sends it when the *thread* that
  started the child ends, so children are started from the main thread or from one spawner thread that lives
  as long as the process, never from a worker thread that may end first (a fleet's Flower client threads).
- **SIGTERM like Ctrl-C.** `terminate_like_interrupt` (the command line calls it) makes SIGTERM and SIGHUP
  run whatever SIGINT runs at that moment (KeyboardInterrupt, or `train`'s stop-and-save), so the same
  cleanup happens.

A process that leaves its group (calls setsid or setpgid itself) is out of reach of the group signals; the
programs mcutrain starts do not.
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
from pathlib import Path
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
    """Popen in a process group of its own (in a session of its own with start_new_session=True) with SIGKILL
    as the parent-death signal (where available)."""
    session = bool(kw.pop("start_new_session", False))
    kw.pop("process_group", None)
    args = [str(a) for a in args]
    kw["env"] = {**(kw.get("env") or os.environ), "MCUTRAIN_FAMILY": FAMILY_TOKEN}  # the watchdog's mark
    prefix = _death_signal_prefix()
    if prefix:
        _check_program(args, kw)
    if session:
        kw["start_new_session"] = True
    elif sys.version_info >= (3, 11):
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


# The watchdog: a small process that holds the read end of a pipe whose write end only mcutrain holds. mcutrain
# tells it every child's process group as it starts and stops. While the pipe is open it also reads /proc four
# times a second and keeps every descendant of mcutrain (pid and start time), so that a process started in a
# session of its own (Flower's SuperExec starts the ServerApp so) is known before its parent dies and it is
# reparented to init. When the pipe closes (mcutrain ended in any way, SIGKILL included) it ends every group
# still listed and every known descendant still running: SIGTERM, then SIGSTOP until no new child appears, then
# SIGKILL. A pid whose start time changed belongs to another process (started later) and is left alone.
_WATCHDOG_CODE = r"""
import os, select, signal, sys, time
root, me = int(sys.argv[2]), os.getpid()
groups, known = {}, {}
def table():
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat", "rb").read()
            except OSError:
                continue
            rest = stat[stat.rindex(b")") + 2:].split()
            out[int(d)] = (int(rest[1]), rest[19], rest[0])
    return out
def follow():
    t = table()
    todo = [root] + [p for p, s in known.items() if p in t and t[p][1] == s]
    while todo:
        parent = todo.pop()
        for pid, (ppid, start, _) in t.items():
            if ppid == parent and pid != me and known.get(pid) != start:
                known[pid] = start
                todo.append(pid)
    return t
buf = b""
while True:
    try:
        ready = select.select([0], [], [], 0.25)[0]
        chunk = os.read(0, 4096) if ready else None
    except InterruptedError:
        continue
    if chunk is None:
        follow()
        continue
    if not chunk:
        break
    buf += chunk
    *lines, buf = buf.split(b"\n")
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[0] == b"+":
            groups[int(parts[1])] = parts[2]
        elif len(parts) == 2 and parts[0] == b"-":
            groups.pop(int(parts[1]), None)
    follow()
def same(pid, start):
    try:
        stat = open(f"/proc/{pid}/stat", "rb").read()
    except OSError:
        return True  # the leader is gone; its pid stays reserved while its group has members
    return stat[stat.rindex(b")") + 2:].split()[19] == start
def living():
    t = table()
    return [p for p, s in known.items() if p in t and t[p][1] == s and t[p][2] != b"Z"]
def signal_all(sig):
    for g in [g for g, s in groups.items() if same(g, s)]:
        try:
            os.killpg(g, sig)
        except OSError:
            pass
    for p in living():
        try:
            os.kill(p, sig)
        except OSError:
            pass
signal_all(signal.SIGTERM)
deadline = time.monotonic() + 0.5
while living() and time.monotonic() < deadline:
    time.sleep(0.05)
for _ in range(20):  # freeze the family, taking in what it started meanwhile, until it stops growing
    before = len(known)
    signal_all(signal.SIGSTOP)
    follow_from = [p for p in living()]
    t = table()
    for pid, (ppid, start, _) in t.items():
        if ppid in follow_from and pid != me and known.get(pid) != start:
            known[pid] = start
    if len(known) == before:
        break
signal_all(signal.SIGKILL)
# then every process that carries this mcutrain's mark in its environment
mark = b"MCUTRAIN_FAMILY=" + sys.argv[1].encode()
for d in os.listdir("/proc"):
    if d.isdigit() and int(d) != me:
        try:
            if mark in open(f"/proc/{d}/environ", "rb").read().split(b"\0"):
                os.kill(int(d), signal.SIGKILL)
        except OSError:
            pass
"""
# The mark every child's environment carries (inherited by its own children): MCUTRAIN_FAMILY=<this token>.
FAMILY_TOKEN = f"{os.getpid()}-{os.urandom(6).hex()}"


class _Watchdog:
    """The watchdog process (Linux; started with the first child) and the pipe to it."""

    def __init__(self) -> None:
        self._proc: Optional[subprocess.Popen] = None
        self._lock = threading.Lock()
        self._failed = False

    def _start(self) -> Optional[subprocess.Popen]:
        if self._proc is None and not self._failed and sys.platform.startswith("linux"):
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-S", "-c", _WATCHDOG_CODE, FAMILY_TOKEN, str(os.getpid())],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # out of reach of the terminal's Ctrl-C and of a kill of our group
                )
            except OSError:
                self._failed = True
        return self._proc

    def tell(self, line: str) -> None:
        with self._lock:
            proc = self._start()
            if proc is None or proc.stdin is None:
                return
            try:
                proc.stdin.write(line.encode() + b"\n")
                proc.stdin.flush()
            except OSError:
                self._failed = True


_WATCHDOG = _Watchdog()


def rely_on_parent_watchdog() -> None:
    """Start no watchdog in this process: for a child of an mcutrain process whose watchdog follows every
    descendant already (a local fleet's nodes: 64 watchdogs, each reading all of /proc four times a second,
    took both cores of a 2-core machine). What this process starts still gets SIGKILL when it dies
    (the parent-death signal), and the parent's watchdog ends it when the parent dies."""
    with _WATCHDOG._lock:
        _WATCHDOG._failed = True


def _start_time(pid: int) -> str:
    """The kernel's start time of a process (field 22 of /proc/PID/stat), '0' where there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2 :].split()[19]
    except (OSError, ValueError, IndexError):
        return "0"


def spawn(args: Sequence[str], **kw: Any) -> subprocess.Popen:
    """subprocess.Popen(args, **kw) for a child that ends with mcutrain (see the module docstring); stop it
    with `stop`."""
    if threading.current_thread() is threading.main_thread():
        proc = _popen(args, kw)
    else:
        proc = _SPAWNER.start(args, kw)
    with _live_lock:
        _live.add(proc)
    _WATCHDOG.tell(f"+ {proc.pid} {_start_time(proc.pid)}")
    return proc


def _forget(proc: subprocess.Popen) -> None:
    with _live_lock:
        _live.discard(proc)
    _WATCHDOG.tell(f"- {proc.pid}")


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
        _forget(proc)
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
    _forget(proc)
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
    for p in procs:
        _forget(p)


atexit.register(stop_all)


def as_interrupt(signum: int, frame: Any) -> None:
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
                signal.signal(sig, as_interrupt)


def was_terminated() -> bool:
    """Did a SIGTERM or SIGHUP (rather than Ctrl-C) end the run?"""
    return _terminated.is_set()
