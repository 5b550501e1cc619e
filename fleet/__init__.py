"""Fleet learning (mcutrain.fleet): many devices learn on their own data, Flower aggregates.

Every device (a board on a serial port, or a simulated board: the native firmware, QEMU, simavr) is a
Flower client (mcutrain.fleet.client): it receives the global parameters, trains on the device with TRAIN
frames from its own data shard and returns what it learned; Flower's server and strategy (FedAvg, FedAdam,
...) run the rounds on 127.0.0.1 (mcutrain.fleet.server). A fleet is described by a small TOML file
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
