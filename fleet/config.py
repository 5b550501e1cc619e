"""The fleet file: a small TOML file that names the starting model, the devices (a serial port, or a board
the fleet simulates) with the data shard each one learns from, and how the Flower rounds run.

    model = "start.mct"          # the network every device runs (the global model starts from it)
    rounds = 10
    strategy = "fedavg"          # a Flower strategy, see STRATEGIES
    local_steps = 100            # TRAIN frames per device per round
    test = "test.npz"            # held-out data: accuracy of the global model after every round
    output = "global.mct"        # the global model, rewritten (atomically) after every round
    log = "fleet.jsonl"          # one JSON line per round; `mcutrain plot` draws it

    [data]                       # how the data files are read (as `mcutrain train` reads them)
    classify = true

    [[device]]
    name = "kitchen"
    port = "/dev/ttyACM0"        # a board that runs an export of `model` (same trainable/quant)
    data = "kitchen.npz"

    [[device]]
    board = "native"             # simulated: exported, built and started by the fleet
    data = "shard-1.npz"

A fleet whose devices all say board = "twin" runs on Flower's Simulation Engine: every device is the host
twin of the export (the same C core, bit for bit the board's arithmetic), so a thousand fit on one machine.

A coordinator whose devices sit on other machines (`mcutrain fleet run`) lists no devices and says how
many nodes it waits for instead: nodes = 4.

Relative paths are relative to the fleet file's folder. Every mistake is a FleetError that names the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from mcutrain.errors import FleetError
from mcutrain.files import read_bounded
from mcutrain.plaindata import parse_toml
from mcutrain.sources import DataSettings

MAX_FLEET_FILE = 1 << 20
MAX_DEVICES = 4096
# Flower strategies a device fleet can use: name -> class name in flwr.serverapp.strategy. FedProx
# is left out: its proximal term belongs in the device's local update, which the firmware does not have.
STRATEGIES: Dict[str, str] = {
    "fedavg": "FedAvg",
    "fedavgm": "FedAvgM",
    "fedadam": "FedAdam",
    "fedyogi": "FedYogi",
    "fedadagrad": "FedAdagrad",
    "fedmedian": "FedMedian",
    "fedtrimmedavg": "FedTrimmedAvg",
}
TOP_KEYS = {
    "model",
    "trainable",
    "quant",
    "rounds",
    "strategy",
    "strategy_options",
    "local_steps",
    "min_devices",
    "seed",
    "test",
    "output",
    "log",
    "workdir",
    "timeout",
    "round_timeout",
    "eval_samples",
    "nodes",
    "data",
    "device",
}
DEVICE_KEYS = {"name", "port", "baud", "board", "data", "eval"}
TWIN_BOARD = "twin"  # a device that is the host twin of the export (no firmware; Flower's Simulation Engine)
DATA_KEYS = {"classify", "x_key", "y_key", "inputs", "targets"}


@dataclass
class DeviceSpec:
    """One device of the fleet: a serial port, or a board the fleet simulates; its training data (and
    optionally data it evaluates the global model on)."""

    name: str
    data: Path
    port: Optional[str] = None
    baud: int = 115200
    board: Optional[str] = None
    eval: Optional[Path] = None

    @property
    def simulated(self) -> bool:
        """Is the device a simulated board (started by the fleet) rather than a port?"""
        return self.board is not None

    @property
    def twin(self) -> bool:
        """Is the device the host twin of the export (board = "twin"), run without firmware?"""
        return self.board == TWIN_BOARD


@dataclass
class FleetConfig:
    """A fleet file, checked: see the module docstring for the keys."""

    model: Path
    devices: List[DeviceSpec]
    rounds: int = 10
    strategy: str = "fedavg"
    strategy_options: Dict[str, Any] = field(default_factory=dict)
    local_steps: int = 100
    min_devices: int = 1
    seed: int = 0
    trainable: str = "all"
    quant: str = "f32"
    test: Optional[Path] = None
    output: Path = Path("global.mct")
    log: Optional[Path] = Path("fleet.jsonl")
    workdir: Path = Path("fleet-work")
    timeout: float = 5.0
    round_timeout: float = 600.0
    eval_samples: int = 200
    nodes: int = 0  # SuperNodes the coordinator waits for (0: one per device listed)
    data: DataSettings = field(default_factory=DataSettings)

    @property
    def twins(self) -> bool:
        """Is every device a host twin (the fleet runs on Flower's Simulation Engine)?"""
        return bool(self.devices) and all(d.twin for d in self.devices)

    @property
    def n_nodes(self) -> int:
        """How many devices (SuperNodes) the fleet has."""
        return self.nodes or len(self.devices)

    def to_json(self) -> str:
        """The config as JSON (paths as strings): how the ServerApp receives it in its run config."""
        import dataclasses
        import json

        def plain(v: Any) -> Any:
            if isinstance(v, Path):
                return str(v)
            if isinstance(v, dict):
                return {k: plain(x) for k, x in v.items()}
            if isinstance(v, list):
                return [plain(x) for x in v]
            return v

        return json.dumps(plain(dataclasses.asdict(self)), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> FleetConfig:
        """The config to_json() wrote."""
        import json

        d = json.loads(text)
        opt = {"test", "log"}
        for k in ("model", "test", "output", "log", "workdir"):
            d[k] = Path(d[k]) if d[k] is not None or k not in opt else None
        d["devices"] = [
            DeviceSpec(**{**x, "data": Path(x["data"]), "eval": Path(x["eval"]) if x["eval"] else None})
            for x in d["devices"]
        ]
        d["data"] = DataSettings(**d["data"])
        return cls(**d)

    def data_settings(self, path: Path) -> DataSettings:
        """How to read one data file of the fleet."""
        d = self.data
        return DataSettings(
            path=str(path), inputs=d.inputs, targets=d.targets, x_key=d.x_key, y_key=d.y_key, classify=d.classify
        )


def _want(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise FleetError(f"{where}: {what}")


def _int(v: Any, where: str, lo: int, hi: int) -> int:
    _want(isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi, where, f"must be a whole number {lo}..{hi}")
    return int(v)


def _float(v: Any, where: str) -> float:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    _want(ok, where, "must be a positive number of seconds")
    return float(v)


def _str(v: Any, where: str) -> str:
    _want(isinstance(v, str) and v.strip() != "", where, "must be a non-empty string")
    return str(v)


def parse_config(doc: Dict[str, Any], base: Union[str, Path], name: str = "fleet file") -> FleetConfig:
    """A FleetConfig from the parsed TOML of a fleet file whose folder is `base` (relative paths start
    there); FleetError naming the first key that is wrong."""
    base = Path(base)
    unknown = sorted(set(doc) - TOP_KEYS)
    _want(not unknown, name, f"unknown key(s) {', '.join(unknown)}; the keys are {', '.join(sorted(TOP_KEYS))}")
    _want("model" in doc, name, 'give the starting model: model = "start.mct" (a model file)')

    def path(v: Any, where: str) -> Path:
        p = Path(_str(v, where)).expanduser()
        return p if p.is_absolute() else base / p

    devices_raw = doc.get("device", [])
    nodes = _int(doc.get("nodes", 0), f"{name}: nodes", 0, MAX_DEVICES)
    _want(
        isinstance(devices_raw, list) and (len(devices_raw) > 0 or nodes > 0),
        name,
        "list the devices in [[device]] tables (or, for a coordinator whose devices sit on other machines, "
        "say how many SuperNodes to wait for: nodes = N)",
    )
    _want(len(devices_raw) <= MAX_DEVICES, name, f"at most {MAX_DEVICES} devices")
    devices: List[DeviceSpec] = []
    for i, d in enumerate(devices_raw):
        where = f"{name}: device {i + 1}"
        _want(isinstance(d, dict), where, "must be a table ([[device]])")
        unknown = sorted(set(d) - DEVICE_KEYS)
        _want(not unknown, where, f"unknown key(s) {', '.join(unknown)}; a device has {', '.join(sorted(DEVICE_KEYS))}")
        _want(("port" in d) != ("board" in d), where, 'give either port = "/dev/..." or board = "native" (simulated)')
        _want("data" in d, where, 'give its training data: data = "shard.npz"')
        dev = DeviceSpec(
            name=_str(d.get("name", f"device-{i + 1}"), f"{where} name"),
            data=path(d["data"], f"{where} data"),
            port=_str(d["port"], f"{where} port") if "port" in d else None,
            baud=_int(d.get("baud", 115200), f"{where} baud", 300, 10_000_000),
            board=_str(d["board"], f"{where} board") if "board" in d else None,
            eval=path(d["eval"], f"{where} eval") if "eval" in d else None,
        )
        devices.append(dev)
    names = [d.name for d in devices]
    dup = sorted({n for n in names if names.count(n) > 1})
    _want(not dup, name, f"device names must differ; {', '.join(dup)} appear more than once")
    twins = sum(d.twin for d in devices)
    _want(
        twins in (0, len(devices)),
        name,
        f'{twins} of the {len(devices)} devices say board = "{TWIN_BOARD}": a fleet of twins runs on Flower\'s '
        "Simulation Engine, the others on its Deployment Engine; make them all twins or none",
    )
    strategy = _str(doc.get("strategy", "fedavg"), f"{name}: strategy").lower()
    _want(
        strategy in STRATEGIES,
        f"{name}: strategy",
        f"{strategy!r} is not one of {', '.join(STRATEGIES)} (FedProx needs a proximal term in the device's "
        "own update, which the firmware does not have)",
    )
    opts = doc.get("strategy_options", {})
    _want(isinstance(opts, dict), f"{name}: strategy_options", "must be a table of Flower strategy arguments")
    data = doc.get("data", {})
    _want(isinstance(data, dict), f"{name}: data", "must be a table (classify, x_key, y_key, inputs, targets)")
    unknown = sorted(set(data) - DATA_KEYS)
    _want(not unknown, f"{name}: [data]", f"unknown key(s) {', '.join(unknown)}; it has {', '.join(sorted(DATA_KEYS))}")
    classify = data.get("classify", False)
    _want(isinstance(classify, bool), f"{name}: data.classify", "must be true or false")
    settings = DataSettings(
        inputs=data.get("inputs"),
        targets=data.get("targets"),
        x_key=_str(data.get("x_key", "x"), f"{name}: data.x_key"),
        y_key=_str(data.get("y_key", "y"), f"{name}: data.y_key"),
        classify=classify,
    )
    cfg = FleetConfig(
        model=path(doc["model"], f"{name}: model"),
        devices=devices,
        rounds=_int(doc.get("rounds", 10), f"{name}: rounds", 1, 1_000_000),
        strategy=strategy,
        strategy_options=dict(opts),
        local_steps=_int(doc.get("local_steps", 100), f"{name}: local_steps", 1, 100_000_000),
        min_devices=_int(doc.get("min_devices", 1), f"{name}: min_devices", 1, nodes or len(devices)),
        seed=_int(doc.get("seed", 0), f"{name}: seed", 0, 2**63 - 1),
        trainable=_str(doc.get("trainable", "all"), f"{name}: trainable"),
        quant=_str(doc.get("quant", "f32"), f"{name}: quant"),
        test=path(doc["test"], f"{name}: test") if "test" in doc else None,
        output=path(doc.get("output", "global.mct"), f"{name}: output"),
        log=path(doc["log"], f"{name}: log") if "log" in doc else base / "fleet.jsonl",
        workdir=path(doc.get("workdir", "fleet-work"), f"{name}: workdir"),
        timeout=_float(doc.get("timeout", 5.0), f"{name}: timeout"),
        round_timeout=_float(doc.get("round_timeout", 600.0), f"{name}: round_timeout"),
        eval_samples=_int(doc.get("eval_samples", 200), f"{name}: eval_samples", 0, 100_000_000),
        nodes=nodes,
        data=settings,
    )
    return cfg


def load_config(path: Union[str, Path]) -> FleetConfig:
    """Read and check a fleet file (FleetError for a missing, oversized or malformed file)."""
    p = Path(path)
    raw = read_bounded(p, MAX_FLEET_FILE, "fleet file", FleetError)
    doc = parse_toml(raw, f"fleet file {p}", FleetError)
    return parse_config(doc, p.resolve().parent, str(p))
