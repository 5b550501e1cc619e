"""The coordinator of a fleet: the rounds that the ServerApp (mcutrain.fleet.apps) runs on Flower's Grid.

Flower does the federated part with its own code: the SuperLink that carries the messages to the devices'
SuperNodes, and the strategy chosen in the fleet file (flwr.serverapp.strategy: FedAvg, FedAdam, ...),
which builds the train and evaluate messages and aggregates the answers. mcutrain adds what is about
devices: a check of every device's answer before the strategy sees it, the global model written
atomically as a model file after every round, the evaluation of the global model on held-out data
through the device's own C core on the host, and a JSON-lines log.

Rounds: a device that fails (its node answers with a fault, Flower answers with an error because the node
or its ClientApp died, or no answer comes within `round_timeout`) is dropped for the round; the strategy
aggregates the rest. Before every round the coordinator waits up to REJOIN_WAIT seconds for every node,
then goes on with those connected, so a node that comes back joins the next round. A round in which fewer
devices than `min_devices` answered, or whose aggregation failed, keeps the previous global model and is
logged as failed; the run goes on.

Resume: with `resume`, a coordinator that was killed starts again from the global model file and its log:
the rounds go on after the last round the model file holds, the log is appended to.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from mcutrain.errors import FleetError
from mcutrain.files import atomic_write
from mcutrain.modelfile import Checkpoint, encode_model, load_model
from mcutrain.sources import load_dataset

from .baselines import evaluate_params
from .config import STRATEGIES, FleetConfig
from .link import ParamLayout
from .worker import Task

# strategy arguments the fleet sets itself (a fleet file may not)
RESERVED_OPTIONS = {
    "fraction_train",
    "fraction_evaluate",
    "min_train_nodes",
    "min_evaluate_nodes",
    "min_available_nodes",
    "weighted_by_key",
    "arrayrecord_key",
    "configrecord_key",
    "train_metrics_aggr_fn",
    "evaluate_metrics_aggr_fn",
}
JOIN_WAIT = 180.0  # seconds the coordinator waits for the fleet's nodes before the first round
REJOIN_WAIT = 10.0  # seconds it waits for missing nodes before a later round goes on without them
PULL_INTERVAL = 0.2  # seconds between the coordinator's asks for the replies of a round's messages


def require_flower() -> Any:
    """The flwr package; FleetError saying how to install it when it is missing."""
    try:
        import flwr
    except ImportError:
        raise FleetError("fleet learning needs Flower: pip install 'mcutrain[fleet]' (or pip install flwr)") from None
    return flwr


@dataclass
class RoundReport:
    """What one round did."""

    round: int
    answered: List[str] = field(default_factory=list)
    dropped: Dict[str, str] = field(default_factory=dict)
    accuracy: Optional[float] = None  # the global model on the held-out test set (host, device's C core)
    loss: Optional[float] = None
    device_accuracy: Optional[float] = None  # the global model on the devices' evaluation data (PREDICT)
    device_loss: Optional[float] = None
    train_loss: Optional[float] = None  # mean TRAIN loss of the devices that answered
    local_accuracy: Dict[str, float] = field(default_factory=dict)  # each device's local model on its data
    seconds: float = 0.0
    bytes: int = 0  # sent and received on all device lines during the round
    failed: Optional[str] = None  # why the global model was kept

    def record(self, lr: Optional[float]) -> Dict[str, Any]:
        """The round as a JSON-lines record that `mcutrain plot` draws (event 'step', step = round)."""
        rec: Dict[str, Any] = {
            "event": "step",
            "step": self.round,
            "round": self.round,
            "loss": self.train_loss,
            "lr": lr,
            "answered": self.answered,
            "dropped": self.dropped,
            "seconds": round(self.seconds, 4),
            "bytes": self.bytes,
        }
        if self.loss is not None:
            rec["val_loss"] = self.loss
        if self.accuracy is not None:
            rec["val_accuracy"] = self.accuracy
        if self.device_accuracy is not None:
            rec["val_device_accuracy"] = self.device_accuracy
        if self.failed:
            rec["failed"] = self.failed
        if self.local_accuracy:
            rec["local_accuracy"] = self.local_accuracy
        return rec

    @classmethod
    def from_record(cls, rec: Dict[str, Any]) -> RoundReport:
        """The report of a log record that record() wrote."""
        return cls(
            round=int(rec["round"]),
            answered=list(rec.get("answered", [])),
            dropped=dict(rec.get("dropped", {})),
            accuracy=rec.get("val_accuracy"),
            loss=rec.get("val_loss"),
            device_accuracy=rec.get("val_device_accuracy"),
            train_loss=rec.get("loss"),
            local_accuracy=dict(rec.get("local_accuracy", {})),
            seconds=float(rec.get("seconds", 0.0)),
            bytes=int(rec.get("bytes", 0)),
            failed=rec.get("failed"),
        )


@dataclass
class FleetResult:
    """A finished run: the round reports (round 0 is the starting model), the final global parameters (the
    device's RAM vector) and the paths written."""

    rounds: List[RoundReport]
    params: np.ndarray
    output: Path
    log: Optional[Path]
    seconds: float


def make_strategy(cfg: FleetConfig) -> Any:
    """The fleet file's Flower strategy (flwr.serverapp.strategy), sending to every connected node."""
    require_flower()
    from flwr.app import MetricRecord
    from flwr.serverapp import strategy as strategies

    bad = sorted(set(cfg.strategy_options) & RESERVED_OPTIONS)
    if bad:
        raise FleetError(f"strategy_options: {', '.join(bad)} are set by the fleet itself; remove them")
    cls = getattr(strategies, STRATEGIES[cfg.strategy])
    try:
        return cls(
            fraction_train=1.0,
            fraction_evaluate=1.0,
            min_train_nodes=1,
            min_evaluate_nodes=1,
            min_available_nodes=1,
            train_metrics_aggr_fn=lambda replies, key: MetricRecord(),  # the coordinator keeps its own
            evaluate_metrics_aggr_fn=lambda replies, key: MetricRecord(),
            **cfg.strategy_options,
        )
    except TypeError as e:
        raise FleetError(f"strategy_options do not fit Flower's {cls.__name__}: {e}") from None


class FleetModel:
    """The fleet's model as the coordinator (and the local launcher) holds it: the starting model file, the
    device model built from it, the trainable blocks, the held-out test set."""

    def __init__(self, cfg: FleetConfig) -> None:
        from mcutrain.exporter.device import DeviceSpecError, build_device_model
        from mcutrain.exporter.quantize import loss_of_model

        self.cfg = cfg
        self.ck: Checkpoint = load_model(cfg.model)
        if cfg.quant == "int8-full":
            raise FleetError(
                "quant = int8-full is not supported in a fleet (it needs calibration data): use f32 or int8"
            )
        try:
            self.model = build_device_model(self.ck, cfg.trainable, cfg.quant)
        except DeviceSpecError as e:
            raise FleetError(str(e)) from None
        self.layout = ParamLayout(self.model)
        if not self.layout.blocks:
            raise FleetError(f"trainable = {cfg.trainable!r} leaves nothing to train on the devices")
        self.loss = loss_of_model(self.model.loss_kind, self.model.loss_param)
        self.test = self.load(cfg.test) if cfg.test else None

    def load(self, path: Path) -> Tuple[np.ndarray, np.ndarray]:
        """A data file of the fleet, checked against the model's inputs and outputs."""
        from mcutrain.modelmeta import class_names

        ds = load_dataset(self.cfg.data_settings(path), class_names(self.ck.metadata))  # text labels: the model's
        n_in, n_out = self.model.program.n_in, self.model.program.n_out
        if ds.x.shape[1] != n_in or ds.y.shape[1] != n_out:
            raise FleetError(
                f"{path} has {ds.x.shape[1]} inputs and {ds.y.shape[1]} targets per sample; the model takes "
                f"{n_in} and outputs {n_out} (for integer class labels set classify = true in [data])"
            )
        return ds.x, ds.y

    def task(self, server_round: int) -> Task:
        """What the devices are told with a round's requests."""
        return Task(
            round=server_round,
            model_hash=self.model.hash().hex(),
            blocks=list(self.layout.blocks),
            n_in=self.model.program.n_in,
            n_out=self.model.program.n_out,
            loss_kind=int(self.model.loss_kind),
            loss_param=float(self.model.loss_param),
            local_steps=self.cfg.local_steps,
            seed=self.cfg.seed,
            eval_samples=self.cfg.eval_samples,
            timeout=self.cfg.timeout,
        )

    def evaluate_global(self, arrays: List[np.ndarray]) -> Optional[Dict[str, float]]:
        """Loss and accuracy of global parameters on the test set, through the device's C core on the host."""
        if self.test is None:
            return None
        return evaluate_params(self.model, self.layout.join(arrays), *self.test)

    def global_checkpoint(self, arrays: List[np.ndarray], report: RoundReport) -> Checkpoint:
        """The global model as a host model file: the starting network with the trainable blocks set."""
        net = self.ck.net
        net.params = self.model.to_host_params(self.layout.join(arrays), net.params)
        meta = dict(self.ck.metadata)
        meta["fleet"] = {
            "round": report.round,
            "strategy": self.cfg.strategy,
            "devices": self.cfg.n_nodes,
            "answered": report.answered,
            "test_accuracy": report.accuracy,
        }
        return Checkpoint(net, self.ck.optimizer, meta)

    def write_global(self, arrays: List[np.ndarray], report: RoundReport) -> None:
        """Write the global model file (atomically: a reader sees the old or the new model, never a mix)."""
        ck = self.global_checkpoint(arrays, report)
        atomic_write(self.cfg.output, encode_model(ck.net, ck.optimizer, ck.metadata))

    def arrays_of(self, path: Path) -> List[np.ndarray]:
        """The trainable blocks of a global model file written by the fleet (for resume and results)."""
        from mcutrain.exporter.device import build_device_model

        ck = load_model(path)
        return self.layout.split(build_device_model(ck, self.cfg.trainable, self.cfg.quant).params)

    def lr(self) -> Optional[float]:
        """The devices' learning rate (for the log)."""
        from mcutrain.corefacts import OPT_DTYPE

        return float(self.model.opt_cfg.view(OPT_DTYPE)[0]["lr"])


def _log(f: Any, rec: Dict[str, Any]) -> None:
    f.write(json.dumps(rec, sort_keys=True) + "\n")
    f.flush()


def resume_point(cfg: FleetConfig) -> int:
    """The last round the global model file holds (0: start afresh); FleetError when it cannot be resumed."""
    if not cfg.output.is_file():
        return 0
    meta = load_model(cfg.output).metadata.get("fleet")
    if not isinstance(meta, dict) or not isinstance(meta.get("round"), int):
        raise FleetError(f"{cfg.output} was not written by a fleet: it cannot be resumed; remove it or choose -o")
    return int(meta["round"])


def send_and_receive(grid: Any, messages: List[Any], timeout: float) -> List[Any]:
    """Flower's Grid.send_and_receive, asking for the replies every PULL_INTERVAL seconds instead of its 3 s
    (a round waits for its train and its evaluate replies: up to 6 s a round spent waiting): push the
    messages, pull the replies until all came or timeout seconds passed; the replies that came."""
    ids = set(grid.push_messages(messages))
    end = time.monotonic() + timeout
    replies: List[Any] = []
    while ids:
        got = list(grid.pull_messages(ids))
        replies += got
        ids -= {m.metadata.reply_to_message_id for m in got}
        if not ids or time.monotonic() >= end:
            break
        time.sleep(PULL_INTERVAL)
    return replies


class Coordinator:
    """The rounds on Flower's Grid (see the module docstring)."""

    def __init__(self, cfg: FleetConfig, resume: bool = False) -> None:
        self.cfg = cfg
        self.fm = FleetModel(cfg)
        self.resume = resume
        self.names: Dict[int, str] = {}  # node id -> device name (learned from the answers)

    def _wait_for_nodes(self, grid: Any, want: int, seconds: float) -> List[int]:
        t_end = time.monotonic() + seconds
        while True:
            ids = list(grid.get_node_ids())
            if len(ids) >= want or time.monotonic() > t_end:
                return ids
            time.sleep(0.5)

    def _name(self, node_id: int) -> str:
        return self.names.get(node_id, f"node {node_id}")

    def _collect(self, replies: List[Any], sent: List[Any], rep: RoundReport) -> List[Any]:
        """The usable replies; the others are noted in rep.dropped."""
        good = []
        answered = set()
        to = {m.metadata.message_id: m.metadata.dst_node_id for m in sent}
        for msg in replies:
            # an error Flower made for a node that is gone comes from the SuperLink: name it by the request
            nid = to.get(msg.metadata.reply_to_message_id, msg.metadata.src_node_id)
            answered.add(nid)
            if msg.has_error():
                rep.dropped[self._name(nid)] = f"Flower: {msg.error.reason}"
                continue
            dev = msg.content.config_records.get("device")
            name = str(dev["name"]) if dev is not None and "name" in dev else self._name(nid)
            self.names[nid] = name
            if dev is not None and "error" in dev:
                rep.dropped[name] = str(dev["error"])
                continue
            good.append(msg)
        for m in sent:
            if m.metadata.dst_node_id not in answered:
                rep.dropped[self._name(m.metadata.dst_node_id)] = f"no answer within {self.cfg.round_timeout:g} s"
        return good

    def run(self, grid: Any) -> FleetResult:
        """Run the rounds on grid; returns the reports. FleetError if no round could be completed."""
        flwr = require_flower()
        from flwr.app import ArrayRecord, ConfigRecord

        cfg, fm = self.cfg, self.fm
        strategy = make_strategy(cfg)
        first = resume_point(cfg) + 1 if self.resume else 1
        arrays = fm.arrays_of(cfg.output) if first > 1 else fm.layout.split(fm.layout.base)
        reports: List[RoundReport] = []
        t_start = time.monotonic()
        ids = self._wait_for_nodes(grid, cfg.n_nodes, JOIN_WAIT)
        if len(ids) < cfg.min_devices:
            raise FleetError(
                f"only {len(ids)} of {cfg.n_nodes} SuperNodes connected within {JOIN_WAIT:.0f} s "
                f"(min_devices = {cfg.min_devices}): start the nodes (mcutrain fleet node) and check their logs"
            )
        log_file = None
        if cfg.log is not None:
            cfg.log.parent.mkdir(parents=True, exist_ok=True)
            log_file = open(cfg.log, "a" if first > 1 else "w", encoding="utf-8")
        try:
            if log_file is not None:
                start = {"event": "start", "time": time.time(), "fleet": True, "flwr": flwr.__version__}
                start.update(strategy=cfg.strategy, rounds=cfg.rounds, local_steps=cfg.local_steps)
                start.update(devices=[d.name for d in cfg.devices] or cfg.n_nodes, model=str(cfg.model))
                if first > 1:
                    start["resumed_after_round"] = first - 1
                _log(log_file, start)
            if first == 1:
                zero = RoundReport(0)
                self._evaluate_into(zero, arrays)
                self._finish(zero, reports, log_file)
            for r in range(first, cfg.rounds + 1):
                rep = RoundReport(r)
                t0 = time.monotonic()
                self._wait_for_nodes(grid, cfg.n_nodes, REJOIN_WAIT)
                task = ConfigRecord(fm.task(r).to_config())
                try:
                    new = self._train_round(grid, strategy, r, ArrayRecord(arrays), task, rep)
                    if new is not None:
                        arrays = new
                except Exception as e:  # a failed round is logged, the run goes on
                    rep.failed = f"{type(e).__name__}: {e}: global model kept"
                self._evaluate_into(rep, arrays)
                fm.write_global(arrays, rep)
                if cfg.eval_samples:
                    try:
                        self._evaluate_round(grid, strategy, r, ArrayRecord(arrays), ConfigRecord(task), rep)
                    except Exception as e:
                        rep.dropped.setdefault("evaluation", f"{type(e).__name__}: {e}")
                rep.seconds = time.monotonic() - t0
                self._finish(rep, reports, log_file)
            if reports and not any(r.failed is None for r in reports if r.round > 0):
                raise FleetError(
                    f"none of the {cfg.rounds} rounds could be completed (see {cfg.log}); the global model "
                    f"{cfg.output} is the starting model"
                )
            if log_file is not None:
                _log(log_file, {"event": "end", "elapsed": round(time.monotonic() - t_start, 4)})
            return FleetResult(reports, fm.layout.join(arrays), cfg.output, cfg.log, time.monotonic() - t_start)
        except Exception as e:
            if log_file is not None:
                _log(log_file, {"event": "error", "error": f"{type(e).__name__}: {e}"})
            raise
        finally:
            if log_file is not None:
                log_file.close()

    def _train_round(
        self, grid: Any, strategy: Any, r: int, arrays: Any, task: Any, rep: RoundReport
    ) -> Optional[List[np.ndarray]]:
        cfg, fm = self.cfg, self.fm
        sent = list(strategy.configure_train(r, arrays, task, grid))
        replies = send_and_receive(grid, sent, cfg.round_timeout)
        good = []
        for msg in self._collect(replies, sent, rep):
            name = self.names[msg.metadata.src_node_id]
            try:
                fm.layout.check(msg.content.array_records["arrays"].to_numpy_ndarrays())
            except (KeyError, ValueError) as e:
                rep.dropped[name] = f"unusable parameters ({e})"
                continue
            good.append(msg)
        # the strategy adds the answers in the order of the devices' names, not of their arrival: the same
        # answers make the same global model, bit for bit, whichever engine or network carried them
        good.sort(key=lambda m: self.names[m.metadata.src_node_id])
        rep.answered = [self.names[m.metadata.src_node_id] for m in good]
        metrics = [(self.names[m.metadata.src_node_id], m.content.metric_records["metrics"]) for m in good]
        rep.bytes += int(sum(m.get("bytes", 0) for _, m in metrics))
        if metrics:
            rep.train_loss = float(np.mean([m["train-loss"] for _, m in metrics]))
            rep.local_accuracy = {n: float(m["local-accuracy"]) for n, m in metrics if "local-accuracy" in m}
        if len(good) < cfg.min_devices:
            rep.failed = (
                f"{len(good)} device(s) answered, the fleet needs {cfg.min_devices} (min_devices): global model kept"
            )
            return None
        agg, _ = strategy.aggregate_train(r, good)
        if agg is None:
            rep.failed = "no device answered: global model kept"
            return None
        new = [np.asarray(a, np.float32).reshape(-1) for a in agg.to_numpy_ndarrays()]
        fm.layout.check(new)
        return new

    def _evaluate_round(self, grid: Any, strategy: Any, r: int, arrays: Any, task: Any, rep: RoundReport) -> None:
        sent = list(strategy.configure_evaluate(r, arrays, task, grid))
        replies = send_and_receive(grid, sent, self.cfg.round_timeout)
        sub = RoundReport(r)
        good = self._collect(replies, sent, sub)
        for name, why in sub.dropped.items():
            rep.dropped.setdefault(f"{name} (evaluation)", why)
        if not good:
            return
        ms = [m.content.metric_records["metrics"] for m in good]
        rep.bytes += int(sum(m.get("bytes", 0) for m in ms))
        n = np.array([m["num-examples"] for m in ms], np.float64)
        rep.device_loss = float(np.dot(n, [m["loss"] for m in ms]) / n.sum())
        if all("accuracy" in m for m in ms):
            rep.device_accuracy = float(np.dot(n, [m["accuracy"] for m in ms]) / n.sum())

    def _evaluate_into(self, rep: RoundReport, arrays: List[np.ndarray]) -> None:
        res = self.fm.evaluate_global(arrays)
        if res is not None:
            rep.loss = float(res["loss"])
            rep.accuracy = res.get("accuracy")

    def _finish(self, rep: RoundReport, reports: List[RoundReport], log_file: Any) -> None:
        reports.append(rep)
        if log_file is not None:
            _log(log_file, rep.record(self.fm.lr()))


__all__ = ["Coordinator", "FleetModel", "FleetResult", "RoundReport", "make_strategy", "resume_point"]
