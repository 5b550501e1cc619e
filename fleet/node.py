"""A fleet node: one device on a gateway, joined to the fleet's SuperLink as a Flower SuperNode.

Flower starts a new ClientApp process for every message, but a device must stay connected between rounds
(a serial port opened again may reset the board; a simulated board would start from scratch). So a node
is two parts: a device keeper, this process, which holds the device (mcutrain.fleet.worker) and serves
train and evaluate requests on a Unix socket that only it and the ClientApps of its SuperNode can use
(the socket's folder is private, and a random key authenticates every connection); and Flower's SuperNode
(`flower-supernode`), started by the keeper, whose ClientApps (mcutrain.fleet.apps) forward the
coordinator's messages to the keeper. The SuperNode learns where the keeper is through its node config.

A SuperNode that ends (it was killed, or lost the SuperLink for good) is started again: the node rejoins
the fleet, with the same node ID when it authenticates with a key. The SuperLink lets a node with that key
in again only once the killed one missed its heartbeats (about a minute): until then the node keeps
trying. A node whose first SuperNode the SuperLink refuses (a key it has not registered) ends with a
FleetError.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Listener
from pathlib import Path
from typing import Any, Dict, List, Optional

from mcutrain.errors import FleetError
from mcutrain.sources import DataSettings

from .config import DeviceSpec
from .forkserver import FORKSERVER_ENV
from .processes import flower_env, free_port, start_forkserver, start_process, stop_forkserver, stop_process
from .worker import DeviceWorker, serve_request

REFUSED = "Failed to activate SuperNode"  # what flower-supernode logs when the SuperLink refuses it
ACTIVATED = "SuperNode ID:"  # what it logs when the SuperLink let it in
RESTART_DELAY = 2.0  # seconds before a SuperNode that ended is started again
CONNECT_RETRIES = 2  # a SuperNode gives up connecting after this many retries (the node starts it again)
# seconds between a SuperExec's asks for a task (Flower's FLWR_SUPEREXEC_TASK_POLL_INTERVAL, whose default
# this is): every ask is an HTTP request that the SuperNode serves; a node waits up to this long more per message
TASK_POLL = 1.0
SOCKET = "keeper.sock"
KEY = "keeper.key"


@dataclass
class NodeSpec:
    """Everything a node needs: its device, its data, where the SuperLink is and how to reach it safely."""

    device: DeviceSpec
    superlink: str  # host:port of the SuperLink
    folder: Path  # the node's own folder (keeper socket and key, SuperNode log, Flower's home)
    index: int = 0  # the device's number in the fleet (seeds its sample order)
    data: DataSettings = field(default_factory=DataSettings)
    project: Optional[Path] = None  # a simulated board's built export
    root_certificates: Optional[Path] = None  # the CA certificate that signed the SuperLink's (TLS)
    auth_key: Optional[Path] = None  # the node's private key (SuperNode authentication)
    insecure: bool = False  # no TLS: only on localhost unless allow_insecure
    runtime_port: int = 0  # the SuperNode's local Runtime API port (0: a free one)
    task_poll: float = TASK_POLL  # seconds between the SuperExec's asks for a task (see TASK_POLL)

    def to_json(self) -> str:
        """The spec as JSON (how the local launcher hands it to a node process)."""
        d = asdict(self)
        return json.dumps(d, default=str, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> NodeSpec:
        """The spec to_json() wrote."""
        d = json.loads(text)
        dev = d["device"]
        d["device"] = DeviceSpec(
            **{**dev, "data": Path(dev["data"]), "eval": Path(dev["eval"]) if dev["eval"] else None}
        )
        d["data"] = DataSettings(**d["data"])
        for k in ("folder", "project", "root_certificates", "auth_key"):
            d[k] = Path(d[k]) if d[k] else None
        return cls(**d)


def check_transport(superlink: str, insecure: bool, allow_insecure: bool) -> None:
    """FleetError unless the connection is TLS, or insecure to this machine, or insecure by explicit choice."""
    host = superlink.rsplit(":", 1)[0].strip("[]")
    if insecure and not allow_insecure and host not in ("127.0.0.1", "localhost", "::1"):
        raise FleetError(
            f"the SuperLink {superlink} is not on this machine: without TLS anyone on the network can read and "
            "change the models and join the fleet. Use TLS and node keys (make them with `mcutrain fleet certs`), "
            "or pass --allow-insecure to give that up knowingly"
        )


class Keeper:
    """The device keeper: serves the ClientApps' requests for one DeviceWorker on a Unix socket."""

    def __init__(self, worker: DeviceWorker, say: Any = print) -> None:
        import tempfile

        self.worker = worker
        # a short private folder (mode 0700): a Unix socket's path has at most 107 bytes
        self.folder = folder = Path(tempfile.mkdtemp(prefix="mct-keeper-"))
        self.say = say
        self.key = secrets.token_bytes(32)
        key_file = folder / KEY
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.key.hex().encode())
        sock = folder / SOCKET
        if sock.exists():
            sock.unlink()
        self.listener = Listener(str(sock), family="AF_UNIX", authkey=self.key)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="keeper", daemon=True)
        self._closed = False

    def start(self) -> None:
        """Serve requests in a thread."""
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn = self.listener.accept()
            except OSError:  # closed, or a connection that failed authentication
                if self._closed:
                    return
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: Any) -> None:
        try:
            kind, arrays, config = conn.recv()
            with self._lock:
                reply = self.handle(kind, arrays, config)
            conn.send(reply)
        except (EOFError, OSError):  # the ClientApp went away (its SuperNode was killed)
            pass
        finally:
            conn.close()

    def handle(self, kind: str, arrays: List[Any], config: Dict[str, Any]) -> Dict[str, Any]:
        """One request (see mcutrain.fleet.worker.serve_request)."""
        return serve_request(self.worker, kind, arrays, config, self.say)

    def close(self) -> None:
        """Stop serving and close the device."""
        import shutil

        self._closed = True
        self.listener.close()
        self.worker.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def supernode_command(spec: NodeSpec, runtime_port: int, keeper: Path) -> List[str]:
    """The flower-supernode command line of a node."""
    cmd = ["flower-supernode", "--superlink", spec.superlink, "--port", str(runtime_port)]
    cmd += ["--max-retries", str(CONNECT_RETRIES)]
    if spec.insecure:
        cmd.append("--insecure")
    elif spec.root_certificates is not None:
        cmd += ["--root-certificates", str(spec.root_certificates)]
    if spec.auth_key is not None:
        cmd += ["--auth-supernode-private-key", str(spec.auth_key)]
    node_config = {"device": spec.device.name, "keeper": str(keeper)}
    cmd += ["--node-config", " ".join(f"{k}={json.dumps(v)}" for k, v in node_config.items())]
    return cmd


def run_node(spec: NodeSpec, stop: Optional[threading.Event] = None, say: Any = print) -> int:
    """Run a node until `stop` is set (or SIGTERM/SIGINT): the keeper, and its SuperNode started again
    whenever it ends. FleetError when the SuperLink refuses the node."""
    if spec.root_certificates is None and not spec.insecure:
        raise FleetError("give the CA certificate of the SuperLink (--root-certificates) or choose --insecure")
    stop = stop or threading.Event()
    worker = DeviceWorker(
        spec.device, spec.index, spec.data, spec.project, spec.folder / f"{spec.device.name}-store.bin"
    )
    keeper = Keeper(worker, say)
    env = flower_env(spec.folder, spec.folder / "flwr-home", spec.task_poll)
    log = spec.folder / "supernode.log"
    proc = None
    fork = None
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    keeper.start()
    activated = False
    mark = 0
    try:
        if env.get(FORKSERVER_ENV) is None:  # none given (a local fleet gives one to all its nodes): its own
            fork = start_forkserver(env, spec.folder / "forkserver.log")
            env[FORKSERVER_ENV] = str(fork[1])
        while not stop.is_set():
            if proc is None:
                port = spec.runtime_port or free_port()
                mark = log.stat().st_size if log.is_file() else 0
                proc = start_process(supernode_command(spec, port, keeper.folder), log, env, own_group=False)
                say(f"{spec.device.name}: SuperNode started (pid {proc.pid}), SuperLink {spec.superlink}")
            code = proc.poll()
            if not activated and ACTIVATED in _since(log, mark):
                activated = True
            if code is not None:
                if REFUSED in _since(log, mark) and not activated:
                    raise FleetError(
                        f"the SuperLink {spec.superlink} refused {spec.device.name}: its key is not registered "
                        f"(register {spec.auth_key}.pub with `mcutrain fleet register`); see {log}"
                    )
                say(f"{spec.device.name}: SuperNode ended with code {code}; starting it again")
                proc = None
                stop.wait(RESTART_DELAY)
                continue
            stop.wait(0.2)
        return 0
    finally:
        if proc is not None:
            stop_process(proc, own_group=False)
        keeper.close()
        if fork is not None:
            stop_forkserver(*fork)


def _since(log: Path, mark: int) -> str:
    """What log says after byte mark."""
    try:
        with open(log, "rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def main(argv: Optional[List[str]] = None) -> int:
    """`python -m mcutrain.fleet.node SPEC.json`: a node as the local launcher starts it."""
    from mcutrain import processes

    args = sys.argv[1:] if argv is None else argv
    spec = NodeSpec.from_json(Path(args[0]).read_text())
    processes.rely_on_parent_watchdog()  # the local fleet's follows the node's processes
    try:
        return run_node(spec, say=lambda s: print(f"{time.strftime('%H:%M:%S')} {s}", flush=True))
    except FleetError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["NodeSpec", "Keeper", "run_node", "supernode_command", "check_transport"]
