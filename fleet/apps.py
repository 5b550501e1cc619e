"""The fleet's Flower apps, on Flower's Message API (flwr.serverapp / flwr.clientapp).

server_app: the coordinator (mcutrain.fleet.server.Coordinator) on the Grid that Flower's SuperLink gives
it. It reads the fleet from its run config: `fleet-config`, the fleet file as JSON (FleetConfig.to_json;
its paths are paths on the SuperLink's machine), and `resume` (go on from the global model file and log).

client_app: one device's ClientApp. Flower starts one for every message a SuperNode receives; it hands
the message to the node's device keeper (mcutrain.fleet.node), found through the SuperNode's node config
(`keeper`: the keeper's private folder, with its socket and key), and answers with what the device did:
the trained parameters and metrics, or the device's fault ({'device': {'name', 'error'}}), which the
coordinator counts as a drop.

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


@server_app.main()
def coordinate(grid: Grid, context: Context) -> None:
    """The ServerApp: the fleet's rounds (see the module docstring)."""
    from mcutrain.errors import FleetError

    from .config import FleetConfig
    from .server import Coordinator

    raw = str(context.run_config.get("fleet-config", ""))
    if not raw:
        raise FleetError("the run has no fleet-config: start it with `mcutrain fleet run FLEET_FILE`")
    cfg = FleetConfig.from_json(base64.urlsafe_b64decode(raw.encode()).decode())
    Coordinator(cfg, resume=bool(context.run_config.get("resume", False))).run(grid)


def _ask_keeper(kind: str, msg: Message, context: Context) -> Message:
    from multiprocessing.connection import Client

    folder = Path(str(context.node_config["keeper"]))
    key = bytes.fromhex((folder / "keeper.key").read_text().strip())
    arrays = msg.content.array_records["arrays"].to_numpy_ndarrays()
    config: Dict[str, Any] = dict(msg.content.config_records["config"])
    with Client(str(folder / "keeper.sock"), family="AF_UNIX", authkey=key) as conn:
        conn.send((kind, arrays, config))
        reply = conn.recv()
    name = str(context.node_config.get("device", "?"))
    if not reply["ok"]:
        if "fault" in reply:
            return Message(RecordDict({"device": ConfigRecord({"name": name, "error": reply["fault"]})}), reply_to=msg)
        raise RuntimeError(f"{name}: {reply['error']}")
    metrics = MetricRecord({"num-examples": int(reply["num-examples"]), **reply["metrics"]})
    content: Dict[str, Any] = {"metrics": metrics, "device": ConfigRecord({"name": name})}
    if "arrays" in reply:
        content["arrays"] = ArrayRecord(reply["arrays"])
    return Message(RecordDict(content), reply_to=msg)


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """A round of local training on the node's device."""
    return _ask_keeper("train", msg, context)


@client_app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """The global model on the node's device's evaluation data."""
    return _ask_keeper("evaluate", msg, context)


__all__ = ["server_app", "client_app", "app_folder", "encode_config", "APP_PYPROJECT"]
