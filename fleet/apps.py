"""The fleet's Flower apps, on Flower's Message API (flwr.serverapp / flwr.clientapp).

server_app: the coordinator (mcutrain.fleet.server.Coordinator) on the Grid that Flower's SuperLink gives
it. It reads the fleet from its run config: `fleet-config`, the fleet file as JSON (FleetConfig.to_json;
its paths are paths on the SuperLink's machine), and `resume` (go on from the global model file and log).

client_app: one device's ClientApp. Flower starts one for every message a SuperNode receives; it hands
the message to the node's device keeper (mcutrain.fleet.node), found through the SuperNode's node config
(`keeper`: the keeper's private folder, with its socket and key), and answers with what the device did:
the trained parameters and metrics, or the device's fault ({'device': {'name', 'error'}}), which the
coordinator counts as a drop. On Flower's Simulation Engine a virtual node has no keeper: its node config
names its partition, the fleet's device of that number, a host twin (mcutrain.fleet.twin_device) that the
ClientApp runs itself, its state kept in the fleet's work folder between requests.

APP_PYPROJECT is the Flower app project that `flwr run` submits: it names these two objects and the run
config's keys; app_folder() writes it.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Dict

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

server_app = ServerApp()
client_app = ClientApp()

APP_PYPROJECT = """# The Flower app of an mcutrain fleet (written by mcutrain: `flwr run` submits this folder)
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "mcutrain-fleet"
version = "1.0.0"
description = "mcutrain fleet learning: microcontrollers as Flower SuperNodes"
license = "Apache-2.0"
dependencies = ["mcutrain", "flwr>=1.42"]

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "mcutrain"

[tool.flwr.app.components]
serverapp = "mcutrain.fleet.apps:server_app"
clientapp = "mcutrain.fleet.apps:client_app"

[tool.flwr.app.config]
fleet-config = ""
resume = false
"""


def app_folder(folder: Path) -> Path:
    """Write the Flower app project (APP_PYPROJECT) into folder; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(APP_PYPROJECT)
    return folder


def encode_config(text: str) -> str:
    """A fleet config's JSON as a run-config value (base64: no quoting trouble on the command line)."""
    return base64.urlsafe_b64encode(text.encode()).decode()


def _fleet_config(context: Context) -> Any:
    """The fleet's FleetConfig from the run config."""
    from mcutrain.errors import FleetError

    from .config import FleetConfig

    raw = str(context.run_config.get("fleet-config", ""))
    if not raw:
        raise FleetError("the run has no fleet-config: start it with `mcutrain fleet run FLEET_FILE`")
    return FleetConfig.from_json(base64.urlsafe_b64decode(raw.encode()).decode())


@server_app.main()
def coordinate(grid: Grid, context: Context) -> None:
    """The ServerApp: the fleet's rounds (see the module docstring)."""
    from .server import Coordinator

    Coordinator(_fleet_config(context), resume=bool(context.run_config.get("resume", False))).run(grid)


def _answer(msg: Message, name: str, reply: Dict[str, Any]) -> Message:
    """The ClientApp's reply to msg from a device's answer (mcutrain.fleet.worker.serve_request)."""
    if not reply["ok"]:
        if "fault" in reply:
            return Message(RecordDict({"device": ConfigRecord({"name": name, "error": reply["fault"]})}), reply_to=msg)
        raise RuntimeError(f"{name}: {reply['error']}")
    metrics = MetricRecord({"num-examples": int(reply["num-examples"]), **reply["metrics"]})
    content: Dict[str, Any] = {"metrics": metrics, "device": ConfigRecord({"name": name})}
    if "arrays" in reply:
        content["arrays"] = ArrayRecord(reply["arrays"])
    return Message(RecordDict(content), reply_to=msg)


def _ask_keeper(kind: str, msg: Message, context: Context) -> Message:
    from multiprocessing.connection import Client

    folder = Path(str(context.node_config["keeper"]))
    key = bytes.fromhex((folder / "keeper.key").read_text().strip())
    arrays = msg.content.array_records["arrays"].to_numpy_ndarrays()
    config: Dict[str, Any] = dict(msg.content.config_records["config"])
    with Client(str(folder / "keeper.sock"), family="AF_UNIX", authkey=key) as conn:
        conn.send((kind, arrays, config))
        reply = conn.recv()
    return _answer(msg, str(context.node_config.get("device", "?")), reply)


def _ask_twin(kind: str, msg: Message, context: Context) -> Message:
    """A virtual node of Flower's Simulation Engine: the fleet's device number partition-id, a host twin whose
    state is kept in the fleet's work folder between its requests (mcutrain.fleet.twin_device)."""
    from mcutrain.errors import FleetError

    from .twin_device import twin_model
    from .worker import DeviceWorker, serve_request

    cfg = _fleet_config(context)
    i = int(context.node_config["partition-id"])
    if not 0 <= i < len(cfg.devices) or not cfg.devices[i].twin:
        raise FleetError(f"virtual node {i}: the fleet has no twin device number {i + 1}")
    spec = cfg.devices[i]
    model = twin_model(cfg.model, cfg.trainable, cfg.quant)
    worker = DeviceWorker(spec, i, cfg.data, store=twin_state_file(cfg.workdir, spec.name), twin=model)
    try:
        arrays = msg.content.array_records["arrays"].to_numpy_ndarrays()
        reply = serve_request(worker, kind, arrays, dict(msg.content.config_records["config"]), lambda s: None)
    finally:
        worker.close()
    return _answer(msg, spec.name, reply)


def twin_state_file(workdir: Path, name: str) -> Path:
    """Where a fleet's twin device keeps its state between requests."""
    return workdir / "twins" / f"{name}.npz"


def _ask_device(kind: str, msg: Message, context: Context) -> Message:
    if "keeper" in context.node_config:
        return _ask_keeper(kind, msg, context)
    if "partition-id" in context.node_config:
        return _ask_twin(kind, msg, context)
    raise RuntimeError("this SuperNode runs no mcutrain device: start it with `mcutrain fleet node`")


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """A round of local training on the node's device."""
    return _ask_device("train", msg, context)


@client_app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """The global model on the node's device's evaluation data."""
    return _ask_device("evaluate", msg, context)


__all__ = ["server_app", "client_app", "app_folder", "encode_config", "twin_state_file", "APP_PYPROJECT"]
