"""Flower's Deployment Engine for a fleet: the SuperLink, the `flwr` connection to it, the node keys it
accepts and `flwr run` of the fleet's app (mcutrain.fleet.apps); and Fleet, the one-command local fleet:
a SuperLink and one node per device (mcutrain.fleet.node) started as processes on 127.0.0.1, the same
apps, everything stopped when the run ends, fails or is interrupted (Ctrl-C, SIGTERM).

A real deployment uses the same parts from the command line: `mcutrain fleet link` on the coordinator,
`mcutrain fleet node` on every gateway, `mcutrain fleet run` to start the rounds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from mcutrain.errors import FleetError

from .apps import app_folder, encode_config
from .config import FleetConfig
from .forkserver import FORKSERVER_ENV
from .processes import (
    flower_env,
    free_port,
    http_ready,
    start_forkserver,
    start_process,
    stop_forkserver,
    stop_process,
    wait_until,
)
from .server import FleetModel, FleetResult, RoundReport

LINK_START = 120.0  # seconds a SuperLink has to answer /health (its first start imports a lot)
CONNECTION = "fleet"  # the name of the SuperLink connection in FLWR_HOME/config.toml
SIM_CPUS_PER_NODE = 1  # CPUs the Simulation Engine reserves per virtual node (its default, 2, runs one at a time here)


@dataclass
class LinkSecurity:
    """How the SuperLink is reached: TLS (the CA that signed its certificate, and its certificate and key on
    the SuperLink's side) and SuperNode authentication; or insecure."""

    ca: Optional[Path] = None
    cert: Optional[Path] = None
    key: Optional[Path] = None
    auth: bool = False

    @property
    def insecure(self) -> bool:
        return self.ca is None


def superlink_command(
    host: str, port: int, sec: LinkSecurity, database: Optional[Path] = None, simulation: bool = False
) -> List[str]:
    """The flower-superlink command line (with simulation: its runs go to Flower's Simulation Engine)."""
    cmd = ["flower-superlink", "--host", host, "--port", str(port), "--disable-runtime-dependency-installation"]
    if simulation:
        cmd.append("--simulation")
    if sec.insecure:
        cmd.append("--insecure")
    else:
        if sec.cert is None or sec.key is None:
            raise FleetError("a TLS SuperLink needs its certificate and key (--certfile, --keyfile)")
        cmd += ["--ssl-ca-certfile", str(sec.ca), "--ssl-certfile", str(sec.cert), "--ssl-keyfile", str(sec.key)]
    if sec.auth:
        if sec.insecure:
            raise FleetError("SuperNode authentication needs TLS: give the certificates too")
        cmd.append("--enable-supernode-auth")
    if database is not None:
        cmd += ["--database", str(database)]
    return cmd


def write_connection(flwr_home: Path, address: str, ca: Optional[Path]) -> None:
    """The `flwr` CLI's connection to the SuperLink (FLWR_HOME/config.toml, named CONNECTION)."""
    flwr_home.mkdir(parents=True, exist_ok=True)
    lines = [
        "[superlink]",
        f'default = "{CONNECTION}"',
        "",
        f"[superlink.{CONNECTION}]",
        f"address = {json.dumps(address)}",
    ]
    lines.append(f"root-certificates = {json.dumps(str(ca.resolve()))}" if ca is not None else "insecure = true")
    (flwr_home / "config.toml").write_text("\n".join(lines) + "\n")


def flwr_command(args: List[str], env: Dict[str, str], log: Path, timeout: float = 120.0) -> str:
    """Run `flwr ARGS` to its end; its output. FleetError when it fails."""
    p = start_process(["flwr", *args], log, env)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        stop_process(p)
        raise FleetError(f"flwr {args[0]} did not end within {timeout:.0f} s; see {log}") from None
    finally:
        stop_process(p, grace=2)
    out = log.read_text(errors="replace")
    if p.returncode != 0:
        raise FleetError(f"flwr {' '.join(args[:2])} failed (code {p.returncode}); see {log}")
    return out


def register_node(public_key: Path, env: Dict[str, str], log: Path) -> None:
    """Register a node's public key with the SuperLink (SuperNode authentication)."""
    if not public_key.is_file():
        raise FleetError(f"{public_key} does not exist: make the node keys with `mcutrain fleet certs`")
    out = flwr_command(["supernode", "register", str(public_key), CONNECTION], env, log)
    if "registered" not in out.lower():
        raise FleetError(f"the SuperLink did not register {public_key}; see {log}")


def follow_log(path: Optional[Path], pos: int, on_record: Callable[[Dict[str, Any]], None]) -> int:
    """Hand the complete JSON lines of path after byte pos to on_record; returns the new position."""
    if path is None or not path.is_file():
        return pos
    with open(path, "rb") as f:
        f.seek(pos)
        data = f.read()
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        if line.strip():
            on_record(json.loads(line))
    return pos + end


def run_app(
    cfg: FleetConfig,
    env: Dict[str, str],
    folder: Path,
    resume: bool = False,
    on_record: Optional[Callable[[Dict[str, Any]], None]] = None,
    watch: Optional[Callable[[], None]] = None,
    federation_config: Optional[str] = None,
) -> List[Dict[str, Any]]:
    """`flwr run` the fleet's app on the connection in env's FLWR_HOME and wait for the run to end, handing
    every new log record to on_record (and calling watch() meanwhile); the run's log records. FleetError
    when the ServerApp failed (`flwr run` itself says 0 then too: the log's last event tells).
    federation_config goes to `flwr run --federation-config` (a simulation's virtual nodes)."""
    app = app_folder(folder / "app")
    # the run config as a file: a fleet of a thousand devices is longer than a command line's argument may be
    run_config = folder / "run-config.toml"
    run_config.write_text(
        f"fleet-config = {json.dumps(encode_config(cfg.to_json()))}\nresume = {'true' if resume else 'false'}\n"
    )
    log = folder / "flwr-run.log"
    pos = 0
    if cfg.log is not None and cfg.log.is_file():
        if resume:
            pos = cfg.log.stat().st_size
        else:
            cfg.log.unlink()  # the ServerApp writes it anew; the records of an older run must not be taken
    records: List[Dict[str, Any]] = []

    def take(rec: Dict[str, Any]) -> None:
        records.append(rec)
        if on_record is not None:
            on_record(rec)

    cmd = ["flwr", "run", str(app), CONNECTION, "--stream", "--run-config", str(run_config)]
    if federation_config:
        cmd += ["--federation-config", federation_config]
    p = start_process(cmd, log, env)
    try:
        while p.poll() is None:
            pos = follow_log(cfg.log, pos, take)
            if watch is not None:
                watch()
            time.sleep(0.3)
        pos = follow_log(cfg.log, pos, take)
    finally:
        stop_process(p, grace=3)
    events = [r.get("event") for r in records]
    if "error" in events:
        raise FleetError(f"the fleet's ServerApp failed: {records[events.index('error')]['error']}")
    if "end" not in events:
        raise FleetError(
            f"the fleet's run ended without finishing its rounds (flwr run code {p.returncode}); see {log}"
        )
    return records


def build_simulated(
    ck: Any, board_name: str, workdir: Path, quant: str, trainable: str, on_status: Callable[[str], None]
) -> Path:
    """The project the simulated devices of a board run (workdir/fw-BOARD): exported and built once per model."""
    from mcutrain.exporter import pio, sim
    from mcutrain.exporter.boards import get_board
    from mcutrain.exporter.device import build_device_model
    from mcutrain.exporter.export import export_project

    board = get_board(board_name)
    simulator = sim.simulator_for(board)
    sim.require_tools(*simulator.tools)
    project = workdir / f"fw-{board.name}"
    meta = project / "mcutrain.json"
    fw = simulator.firmware_path(project, board)
    model_hash = build_device_model(ck, trainable, quant).hash().hex()
    same = meta.is_file() and json.loads(meta.read_text()).get("hash") == model_hash
    if not (same and fw.is_file()):
        on_status(f"exporting and building the firmware for {board.name} ({simulator.kind})")
        export_project(ck, board.name, project, quant, trainable, force=True, sim=True)
        pio.build(project, simulator.env_name(board))
    return project


class Fleet:
    """The local fleet (see the module docstring). on_round(report) is called after every round (round 0 is
    the starting model); on_status(text) with progress. With tls, the SuperLink serves TLS with certificates
    made for the run and accepts only the nodes whose keys it registered. The nodes' folders are spread over
    `gateways` folders (deploy/gateway-K/NAME), as they would be over machines."""

    def __init__(
        self,
        cfg: FleetConfig,
        on_round: Optional[Callable[[RoundReport], None]] = None,
        on_status: Optional[Callable[[str], None]] = None,
        tls: bool = False,
        gateways: int = 1,
    ) -> None:
        self.cfg = cfg
        self.gateways = max(1, gateways)
        self.on_round = on_round
        self.on_status = on_status or (lambda s: None)
        self.tls = tls
        self.folder = cfg.workdir / "deploy"
        self.processes: Dict[str, subprocess.Popen] = {}
        self.logs: Dict[str, Path] = {}
        self.address = ""
        self.env: Dict[str, str] = {}
        self.fm: Optional[FleetModel] = None
        self.forkserver: Optional[Tuple[subprocess.Popen, Path]] = None  # the nodes' (processes.start_forkserver)
        self.node_env: Dict[str, str] = {}

    # ---- setup ----
    def _export(self, board_name: str) -> Path:
        assert self.fm is not None
        return build_simulated(
            self.fm.ck, board_name, self.cfg.workdir, self.cfg.quant, self.cfg.trainable, self.on_status
        )

    def prepare(self) -> None:
        """Check the model and data, export and build the simulated boards' firmware."""
        cfg = self.cfg
        if not cfg.devices:
            raise FleetError("a local fleet needs its devices listed in [[device]] tables")
        if cfg.twins:  # Flower's Simulation Engine runs on Ray: without it the run would fail after starting
            from mcutrain.extras import require

            require("ray", "fleet-sim")
        self.fm = FleetModel(cfg)
        for d in cfg.devices:
            self.fm.load(d.data)
            if d.eval:
                self.fm.load(d.eval)
        cfg.workdir.mkdir(parents=True, exist_ok=True)
        self.projects = {d.board: self._export(d.board) for d in cfg.devices if d.board and not d.twin}

    # ---- processes ----
    def _start(self, name: str, cmd: List[str], env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
        log = self.folder / "logs" / f"{name}.log"
        p = start_process(cmd, log, env or self.env)
        self.processes[name], self.logs[name] = p, log
        return p

    def node_spec(self, i: int, certs: Any = None) -> Any:
        """The NodeSpec of device i."""
        from .node import NodeSpec

        d = self.cfg.devices[i]
        return NodeSpec(
            device=d,
            superlink=self.address,
            folder=self.folder / f"gateway-{i % self.gateways + 1}" / d.name,
            index=i,
            data=self.cfg.data,
            project=self.projects.get(d.board) if d.board else None,
            root_certificates=certs.ca if certs else None,
            auth_key=certs.node_keys[d.name] if certs else None,
            insecure=certs is None,
            task_poll=node_task_poll(len(self.cfg.devices)),
        )

    def start_node(self, i: int, spec: Any = None) -> subprocess.Popen:
        """Start device i's node process (again)."""
        spec = spec or self.node_spec(i, self.certs)
        spec.folder.mkdir(parents=True, exist_ok=True)
        path = spec.folder / "node.json"
        path.write_text(spec.to_json())
        cmd = [sys.executable, "-m", "mcutrain.fleet.node", str(path)]
        return self._start(f"node-{self.cfg.devices[i].name}", cmd, self.node_env)

    def start(self) -> None:
        """Start the SuperLink and the nodes on 127.0.0.1."""
        from .certs import make_certs

        cfg = self.cfg
        self.folder.mkdir(parents=True, exist_ok=True)
        self.env = flower_env(self.folder, self.folder / "flwr-home")
        self.certs = None
        sec = LinkSecurity()
        if cfg.twins and self.tls:
            raise FleetError("a fleet of twins runs on this machine's Simulation Engine: it has no TLS to turn on")
        if self.tls:
            self.certs = make_certs(self.folder / "certs", ["127.0.0.1", "localhost"], [d.name for d in cfg.devices])
            sec = LinkSecurity(self.certs.ca, self.certs.server_cert, self.certs.server_key, auth=True)
        port = free_port()
        self.address = f"127.0.0.1:{port}"
        self.on_status(
            f"starting the SuperLink on {self.address}" + (" (TLS, node authentication)" if self.tls else "")
        )
        link = self._start("superlink", superlink_command("127.0.0.1", port, sec, simulation=cfg.twins))
        url = f"{'http' if sec.insecure else 'https'}://{self.address}/health"
        wait_until(lambda: http_ready(url, sec.ca), "the SuperLink", [link], LINK_START, self.logs["superlink"])
        write_connection(self.folder / "flwr-home", self.address, sec.ca)
        if self.certs is not None:
            for d in cfg.devices:
                pub = self.certs.node_keys[d.name].with_name(d.name + ".pub")
                register_node(pub, self.env, self.folder / "logs" / f"register-{d.name}.log")
        if cfg.twins:
            return  # the Simulation Engine makes a virtual node per device (run_app's federation config)
        # the nodes' Flower processes start as forks of one process that imported Flower once (unless the
        # environment says MCUTRAIN_FLOWER_FORKSERVER="": each a process of its own)
        self.node_env = dict(self.env)
        if self.env.get(FORKSERVER_ENV) != "":
            self.forkserver = start_forkserver(self.env, self.folder / "logs" / "forkserver.log")
            self.node_env[FORKSERVER_ENV] = str(self.forkserver[1])
        self.on_status(f"starting {len(cfg.devices)} nodes (a SuperNode and a device keeper each)")
        for i in range(len(cfg.devices)):
            self.start_node(i)

    def _watch(self) -> None:
        """A node process that ended (it is not the SuperNode, which the node restarts itself) ends the run."""
        for name, p in self.processes.items():
            if name.startswith("node-") and p.poll() is not None:
                tail = self.logs[name].read_text(errors="replace").strip().splitlines()[-1:]
                raise FleetError(f"{name} ended (code {p.returncode}): {' '.join(tail)}; see {self.logs[name]}")

    def stop(self) -> None:
        """Stop every process the fleet started (nodes first, then the fork server, the SuperLink last)."""
        nodes = [p for name, p in self.processes.items() if name != "superlink"]
        for p in nodes:  # all told at once: a node takes seconds to end, 64 of them in turn took minutes
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
        for p in nodes:
            stop_process(p)
        if self.forkserver is not None:  # the nodes' Flower processes that are still running end with it
            stop_forkserver(*self.forkserver)
            self.forkserver = None
        if "superlink" in self.processes:
            stop_process(self.processes["superlink"])

    # ---- the run ----
    def run(self, resume: bool = False) -> FleetResult:
        """Start everything, run the rounds, stop everything; the result. FleetError if the run failed."""
        if self.fm is None:
            self.prepare()
        assert self.fm is not None
        t0 = time.monotonic()
        reports: List[RoundReport] = []

        def on_record(rec: Dict[str, Any]) -> None:
            if rec.get("event") == "step":
                rep = RoundReport.from_record(rec)
                reports.append(rep)
                if self.on_round is not None:
                    self.on_round(rep)

        restore = None
        # SIGTERM as Ctrl-C, unless a handler is set already (the command line's: mcutrain.processes)
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
            signal.SIG_DFL,
            None,
        ):
            restore = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            self.start()
            federation = None
            if self.cfg.twins:
                federation = f"num-supernodes={len(self.cfg.devices)} client-resources-num-cpus={SIM_CPUS_PER_NODE}"
                if not resume:  # every twin boots from the export, as a flashed board would
                    shutil.rmtree(self.cfg.workdir / "twins", ignore_errors=True)
                self.on_status(f"running {self.cfg.rounds} rounds of {len(self.cfg.devices)} twins (Simulation Engine)")
            else:
                self.on_status(f"running {self.cfg.rounds} rounds (flwr run)")
            run_app(self.cfg, self.env, self.folder, resume, on_record, self._watch, federation)
        finally:
            self.stop()
            if restore is not None:
                signal.signal(signal.SIGTERM, restore)
        arrays = self.fm.arrays_of(self.cfg.output)
        return FleetResult(reports, self.fm.layout.join(arrays), self.cfg.output, self.cfg.log, time.monotonic() - t0)


def node_task_poll(n_nodes: int) -> float:
    """Seconds between the SuperExec's asks for a task on each of a local fleet's n_nodes nodes: 0.25 s for a
    few (a message waits less), up to 2 s for 64 and more (their asks, HTTP requests every node serves, cost
    a core at 0.5 s; each message waits up to the interval more)."""
    return min(2.0, max(0.25, n_nodes / 32))


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_fleet(
    cfg: FleetConfig,
    on_round: Optional[Callable[[RoundReport], None]] = None,
    on_status: Optional[Callable[[str], None]] = None,
    tls: bool = False,
) -> FleetResult:
    """Prepare and run a local fleet (see Fleet)."""
    fleet = Fleet(cfg, on_round, on_status, tls)
    fleet.prepare()
    return fleet.run()


__all__ = [
    "Fleet",
    "LinkSecurity",
    "run_fleet",
    "run_app",
    "superlink_command",
    "write_connection",
    "register_node",
]
