"""A fork server for the Flower processes of a fleet's nodes, so that a node's SuperNode, its SuperExec and
the ClientApp process Flower starts for every message do not each import Flower anew.

Importing Flower's commands costs a Python process about 1.2 s of CPU and 130 MB. A node runs three such
processes, and its SuperExec starts a `flwr-clientapp` for every message (two per round): at 16 nodes on two
cores that was most of a round. The fork server is one process (per local fleet, or per node started on
its own) that has imported Flower's node commands (`flower-supernode`, `flower-superexec`,
`flwr-clientapp`) and the fleet's ClientApp once; each command then starts as a fork of it, in about 10 ms,
sharing its memory until it writes to it.

Flower starts its helpers by name (mcutrain.fleet.processes.flower_env puts launchers for them first on
PATH). When the environment names a fork server (FORKSERVER_ENV), a launcher does not import Flower: it
hands the server its command line, environment, working folder and standard streams (over a Unix socket,
the descriptors as SCM_RIGHTS), the server forks, and the fork runs Flower's own entry point of that
command (the function its console script runs) with them. The launcher stays as the command's stand-in for
whoever started it: it passes on SIGTERM, SIGINT and SIGHUP, and ends with the command's exit status. A
launcher that is SIGKILLed (alone or with its process group) takes its fork with it: the fork sees the
launcher's connection close and SIGKILLs itself. Forks stay in the fork server's process group, which
mcutrain started (mcutrain.processes): they end with it however mcutrain ends.

This module uses only the standard library: a launcher (a Python started without `site`) loads it by its
path before it knows whether it needs Flower.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import traceback
from importlib import import_module
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

FORKSERVER_ENV = "MCUTRAIN_FLOWER_FORKSERVER"  # the fork server's socket, for the launchers
FORKED = ("flower-supernode", "flower-superexec", "flwr-clientapp")  # the node commands it starts
PRELOAD = ("mcutrain.fleet.apps", "flwr.supernode.main")  # imported too: the ClientApp, the SuperNode's API
SOCKET = "forkserver.sock"
_HEADER = struct.Struct("!I")


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError("the peer closed the connection")
        data += chunk
    return data


def _entry_points(commands: Tuple[str, ...]) -> Dict[str, Tuple[str, str]]:
    """Flower's console scripts of commands: name -> (module, function)."""
    from importlib.metadata import entry_points

    out = {}
    for ep in entry_points(group="console_scripts"):
        if ep.name in commands:
            module, _, func = ep.value.partition(":")
            out[ep.name] = (module, func)
    return out


class ForkServer:
    """The server (see the module docstring): serve() runs until SIGTERM."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: Dict[str, Callable[[], Any]] = {}
        self.children: Dict[int, socket.socket] = {}  # fork's pid -> its launcher's connection

    def load(self) -> None:
        """Import Flower's node commands and the fleet's ClientApp (what every fork would import)."""
        for name, (module, func) in _entry_points(FORKED).items():
            self.entries[name] = getattr(import_module(module), func)
        for module in PRELOAD:
            import_module(module)
        if threading.active_count() != 1:  # a fork copies only the thread that forks: none may run now
            raise RuntimeError("importing Flower started a thread: the fork server cannot fork safely")
        gc.freeze()  # the forks' garbage collector leaves what was imported alone: its pages stay shared

    def serve(self) -> None:
        """Listen on self.path and fork a command for every launcher that connects."""
        if self.path.exists():
            self.path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        listener.listen(128)
        print(f"fork server ready on {self.path} ({', '.join(sorted(self.entries))})", flush=True)
        try:
            while True:
                ready, _, _ = select.select([listener], [], [], 0.2)
                if ready:
                    conn, _ = listener.accept()
                    try:
                        self._start(conn, listener)
                    except (OSError, EOFError, ValueError, KeyError) as e:
                        print(f"fork server: a request failed: {type(e).__name__}: {e}", flush=True)
                        conn.close()
                self._reap()
        finally:
            listener.close()

    def _start(self, conn: socket.socket, listener: socket.socket) -> None:
        conn.settimeout(10.0)
        head, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
        try:
            if len(head) < _HEADER.size:
                head += _recv_exact(conn, _HEADER.size - len(head))
            req = json.loads(_recv_exact(conn, _HEADER.unpack(head)[0]))
            if len(fds) != 3:
                raise ValueError(f"{len(fds)} standard streams, need 3")
            command = str(req["command"])
            entry = self.entries[command]
            conn.settimeout(None)  # the fork waits on it as long as it runs
            pid = os.fork()
            if pid == 0:  # the fork: never returns
                listener.close()
                _run_fork(conn, fds, command, entry, req)
        finally:
            for fd in fds:
                os.close(fd)
        self.children[pid] = conn
        conn.sendall(f"pid {pid}\n".encode())

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            try:
                conn.sendall(f"exit {code if code >= 0 else 128 - code}\n".encode())
            except OSError:
                pass
            conn.close()


def _run_fork(conn: socket.socket, fds: List[int], command: str, entry: Callable[[], Any], req: Dict[str, Any]) -> None:
    """In the fork: take the launcher's streams, folder, environment and arguments, run the command's entry
    point, exit with its status."""
    code = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = [command, *req["argv"]]
        threading.Thread(target=_end_with_launcher, args=(conn,), daemon=True).start()
        try:
            result = entry()
            code = result if isinstance(result, int) else 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        os._exit(code)


def _end_with_launcher(conn: socket.socket) -> None:
    """In a fork: wait until the launcher's connection closes, then die as it did. A launcher passes on every
    signal it can catch and lives until its fork has ended, so one that went away first was SIGKILLed: the
    fork is killed so too (a SuperNode killed mid-round leaves no goodbye to the SuperLink)."""
    try:
        while conn.recv(64):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def _run_here(module: str, func: str) -> int:
    if sys.flags.no_site:  # a launcher starts without site: run it again with it, Flower's helpers (Ray's
        # workers) inherit the interpreter's flags
        os.execv(sys.executable, [sys.executable, sys.argv[0], *sys.argv[1:]])
    result = getattr(import_module(module), func)()
    return result if isinstance(result, int) else 0


def launch(command: str, module: str, func: str) -> int:
    """A launcher's body: run Flower's command through the fork server named in the environment, or (none
    named, or it cannot be reached) import its entry point and run it here. Returns the exit status."""
    path = os.environ.get(FORKSERVER_ENV)
    conn = None
    if path and command in FORKED:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
        except OSError:
            conn.close()
            conn = None
    if conn is None:
        return _run_here(module, func)
    req = json.dumps({"command": command, "argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()})
    data = req.encode()
    try:
        socket.send_fds(conn, [_HEADER.pack(len(data))], [0, 1, 2])
        conn.sendall(data)
    except OSError:  # a standard stream that is closed: run the command here
        conn.close()
        return _run_here(module, func)
    reader = conn.makefile("r")
    first = reader.readline().split()
    if len(first) != 2 or first[0] != "pid":
        print(f"{command}: the fork server ({path}) did not start it", file=sys.stderr)
        return 1
    pid = int(first[1])

    def forward(signum: int, frame: Any) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    last = reader.readline().split()
    return int(last[1]) if len(last) == 2 and last[0] == "exit" else 1


def main(argv: Optional[List[str]] = None) -> int:
    """`python -m mcutrain.fleet.forkserver SOCKET`: load Flower, then serve until SIGTERM."""
    args = sys.argv[1:] if argv is None else argv
    server = ForkServer(Path(args[0]))
    server.load()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["ForkServer", "launch", "FORKSERVER_ENV", "FORKED"]
