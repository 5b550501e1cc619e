"""The processes a fleet starts (Flower's SuperLink and SuperNodes, `flwr run`, a node's device keeper): one
helper starts them all (start_process, through mcutrain.processes.spawn), each in its own process group so
that stop_process() ends the whole group, Flower's SuperExec and the app processes it started included, and
each ends with mcutrain however mcutrain ends.

Flower's commands are found on PATH, and Flower starts its own helpers (flower-superexec, flwr-serverapp,
flwr-clientapp) by name. flower_env() makes a folder of launchers for them that run this Python (the one
mcutrain is installed in) and puts it first on PATH, so every Flower process can import mcutrain.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from mcutrain import processes
from mcutrain.errors import FleetError

from .forkserver import FORKED

# Flower's commands a fleet runs (and those Flower starts by name), as their console-script names
FLOWER_COMMANDS = (
    "flower-superlink",
    "flower-supernode",
    "flower-superexec",
    "flwr-serverapp",
    "flwr-clientapp",
    "flwr-simulation",
    "flwr",
)
LAUNCHER = Path(__file__).resolve().with_name("forkserver.py")  # what the launchers load (standard library only)
STOP_GRACE = 10.0  # seconds a process group has to end after SIGTERM before it gets SIGKILL


def start_process(
    cmd: Sequence[str], log: Path, env: Optional[Dict[str, str]] = None, own_group: bool = True
) -> subprocess.Popen:
    """Start cmd, stdout and stderr to `log`, in its own process group (mcutrain.processes.spawn; with
    own_group False, in the caller's group: it ends with the caller's group)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = processes.spawn if own_group else subprocess.Popen  # spawn: its own group, ends with mcutrain
    with open(log, "ab") as out:
        try:
            # a session of its own: Flower's SuperNode and SuperExec fail their task tokens in a shared session
            kw = {"start_new_session": True} if own_group else {}
            return start(list(cmd), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, **kw)
        except OSError as e:
            raise FleetError(f"cannot start {cmd[0]}: {e}") from None


def stop_process(p: subprocess.Popen, grace: float = STOP_GRACE, own_group: bool = True) -> None:
    """End p's process group: SIGTERM, SIGKILL after `grace` seconds, and SIGKILL to what is left of the group
    (children that outlive their parent). With own_group False (p shares the caller's group) only p."""
    if not own_group:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                p.kill()
        p.wait()
        return
    # Flower starts some helpers in a session of their own (the SuperLink's SuperExec, and the ServerApp it
    # starts): they are ended as the group's descendants
    family = descendants(p.pid)
    _signal_all(family, signal.SIGTERM)
    processes.stop(p, grace)  # the group: SIGTERM, SIGKILL after grace, reaped
    _signal_all(family, signal.SIGKILL)


def descendants(pid: int) -> set:
    """The ids of pid's descendant processes, and of the processes in their process groups (Linux /proc;
    empty elsewhere)."""
    parent: Dict[int, int] = {}
    group: Dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parent[int(e)], group[int(e)] = int(fields[1]), int(fields[2])
    out: set = set()
    todo = [pid]
    while todo:
        cur = todo.pop()
        for child, ppid in parent.items():
            if ppid == cur and child not in out:
                out.add(child)
                todo.append(child)
    groups = {group[c] for c in out if c in group}
    out |= {q for q, g in group.items() if g in groups and g != os.getpgrp()}
    out.discard(os.getpid())
    return out


def _signal_all(pids: set, sig: int) -> None:
    for q in pids:
        try:
            os.kill(q, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_process(p: subprocess.Popen) -> None:
    """SIGKILL p's whole process group at once (a crash, as a test makes one)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on host now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def flower_env(folder: Path, flwr_home: Path, task_poll: float = 0.1) -> Dict[str, str]:
    """The environment of Flower's processes: FLWR_HOME, no telemetry or update check, a SuperExec that asks
    for tasks every task_poll seconds, and launchers (in folder/bin) that run Flower's commands with this
    Python first on PATH (through a fork server when the environment names one: mcutrain.fleet.forkserver;
    a launcher starts without `site` and loads only that module, by its path)."""
    from importlib.metadata import entry_points

    folder, flwr_home = folder.resolve(), flwr_home.resolve()
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts") if ep.name in FLOWER_COMMANDS}
    missing = sorted(set(FLOWER_COMMANDS) - set(scripts))
    if missing:
        raise FleetError(f"Flower's commands {', '.join(missing)} are missing: pip install 'flwr>=1.42'")
    for name, value in scripts.items():
        module, _, func = value.partition(":")
        if name not in FORKED:
            text = f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n"
        else:
            text = (
                f"#!{sys.executable} -S\nimport importlib.util, sys\n"
                f"spec = importlib.util.spec_from_file_location('mcutrain_flower_launcher', {str(LAUNCHER)!r})\n"
                "launcher = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(launcher)\n"
                f"sys.exit(launcher.launch({name!r}, {module!r}, {func!r}))\n"
            )
        path = bin_dir / name
        if not path.is_file() or path.read_text() != text:
            tmp = bin_dir / f".{name}.tmp"
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, path)
    flwr_home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        FLWR_HOME=str(flwr_home),
        FLWR_TELEMETRY_ENABLED="0",
        FLWR_DISABLE_UPDATE_CHECK="1",
        FLWR_SUPEREXEC_TASK_POLL_INTERVAL=f"{task_poll:g}",
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
    )
    return env


def start_forkserver(env: Dict[str, str], log: Path, timeout: float = 120.0) -> Tuple[subprocess.Popen, Path]:
    """Start a fork server for Flower's node commands (mcutrain.fleet.forkserver) with env (flower_env's):
    the process and its socket, once it serves. Stop it with stop_forkserver."""
    import tempfile

    from .forkserver import SOCKET

    folder = Path(tempfile.mkdtemp(prefix="mct-fork-"))  # short and private: a socket path has <= 107 bytes
    sock = folder / SOCKET
    p = start_process([sys.executable, "-m", "mcutrain.fleet.forkserver", str(sock)], log, env)
    try:
        wait_until(sock.exists, "the fork server of Flower's node commands", [p], timeout, log)
    except BaseException:
        stop_forkserver(p, sock)
        raise
    return p, sock


def stop_forkserver(p: subprocess.Popen, sock: Path) -> None:
    """Stop a fork server (and any fork still running) and remove its socket's folder."""
    import shutil

    stop_process(p)
    shutil.rmtree(sock.parent, ignore_errors=True)


def wait_until(ready: callable, what: str, procs: List[subprocess.Popen], timeout: float, log: Path) -> None:
    """Poll ready() until it is true; FleetError (pointing at `log`) when one of procs ends or after timeout."""
    t_end = time.monotonic() + timeout
    while not ready():
        for p in procs:
            if p.poll() is not None:
                raise FleetError(f"{what} ended with code {p.returncode} before it was ready; see {log}")
        if time.monotonic() > t_end:
            raise FleetError(f"{what} was not ready after {timeout:.0f} s; see {log}")
        time.sleep(0.2)


def http_ready(url: str, cafile: Optional[Path] = None) -> bool:
    """Does url answer (any HTTP status)? Used on the SuperLink's /health."""
    import ssl
    import urllib.error

    ctx = ssl.create_default_context(cafile=str(cafile)) if cafile else None
    try:
        urllib.request.urlopen(url, timeout=1.0, context=ctx)
        return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


__all__ = [
    "start_process",
    "stop_process",
    "kill_process",
    "free_port",
    "flower_env",
    "start_forkserver",
    "stop_forkserver",
    "wait_until",
    "http_ready",
]


def interrupt_on_sigterm() -> None:
    """From now on SIGTERM (and SIGINT, also when it was ignored) raise KeyboardInterrupt in the main thread,
    so that the `finally` blocks that stop what a command started run."""
    import threading

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, interrupt)
        signal.signal(signal.SIGTERM, processes.as_interrupt)  # what SIGINT does, noted as a SIGTERM (exit 143)
