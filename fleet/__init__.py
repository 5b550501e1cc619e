"""Fleet learning (mcutrain.fleet): many devices learn on their own data, Flower aggregates.

The fleet runs on Flower's Deployment Engine. A SuperLink coordinates; every device (a board on a serial
port, or a simulated board: the native firmware, QEMU, simavr) is a node (mcutrain.fleet.node): a device
keeper that holds the device (mcutrain.fleet.worker) and a Flower SuperNode whose ClientApp
(mcutrain.fleet.apps) hands it the coordinator's messages: WRITE the global parameters, TRAIN on its own
data shard, READ back what it learned. The ServerApp (mcutrain.fleet.apps, mcutrain.fleet.server) runs the
rounds with Flower's strategies (FedAvg, FedAdam, ...), writes the global model after every round and a
JSON-lines log. mcutrain.fleet.deploy starts a whole fleet on 127.0.0.1 (the SuperLink and the nodes as
processes, mcutrain.fleet.processes; a node's Flower processes start as forks of one process that imported
Flower once, mcutrain.fleet.forkserver) or the parts of a fleet spread over machines; mcutrain.fleet.certs
makes the TLS certificates and node keys. A fleet is described by a small TOML file
(mcutrain.fleet.config); mcutrain.fleet.split makes a simulated fleet from a data set, split non-IID.

This layer sits between the exporter (whose device client and simulators it uses) and the command line.
Flower is an optional dependency: pip install 'mcutrain[fleet]'.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FleetConfig", "DeviceSpec", "load_config", "run_fleet", "Fleet", "simulate_fleet", "non_iid_split"]

_WHERE = {
    "FleetConfig": "config",
    "DeviceSpec": "config",
    "load_config": "config",
    "run_fleet": "deploy",
    "Fleet": "deploy",
    "simulate_fleet": "split",
    "non_iid_split": "split",
}


def __getattr__(name: str) -> Any:
    """The public names, loaded on first use (Flower is imported only when a fleet runs)."""
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
