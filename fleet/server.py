"""A fleet run: Flower's server and strategy on 127.0.0.1, one Flower client per device, R rounds.

Flower does the federated part with its own code: the gRPC server and the client loop (its legacy
grpc-bidi transport, `flwr.server.Server` with a `SimpleClientManager`, clients started with
`flwr.client.start_client`, each in a thread of this process, each driving its own device over its own
line), the sampling, the fit/evaluate rounds and the aggregation (the strategy chosen in the fleet file).
mcutrain adds what is about devices: the export the simulated boards run, the device clients
(mcutrain.fleet.client), a check of every device's answer before the strategy sees it, the global model
written as a model file after every round, the evaluation of the global model on held-out data through
the device's own C core on the host, and a JSON-lines log.

Rounds: a device that fails is dropped for the round (it answers with a failure status; the strategy
aggregates the rest) and reconnected on the next request. A device that does not answer within
`round_timeout` is dropped too (Flower ends its client's stream); its Flower client is started again for
the next round (mcutrain.fleet.client_threads). A round in which fewer devices than `min_devices` answered,
or whose aggregation failed, keeps the previous global model and is logged as failed; the run goes on. An
error that is not a device fault (a bug) ends the run with that error after the round it happened in.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from mcutrain.errors import FleetError
from mcutrain.files import atomic_write
from mcutrain.modelfile import Checkpoint, encode_model, load_model
from mcutrain.sources import load_dataset

from .baselines import evaluate_params
from .config import STRATEGIES, FleetConfig
from .link import DeviceHandle, ParamLayout

RESERVED_OPTIONS = {
    "initial_parameters",
    "evaluate_fn",
    "on_fit_config_fn",
    "on_evaluate_config_fn",
    "fit_metrics_aggregation_fn",
    "evaluate_metrics_aggregation_fn",
    "min_fit_clients",
    "min_evaluate_clients",
    "min_available_clients",
    "accept_failures",
}


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


@dataclass
class FleetResult:
    """A finished run: the round reports (round 0 is the starting model), the final global parameters (the
    device's RAM vector) and the paths written."""

    rounds: List[RoundReport]
    params: np.ndarray
    output: Path
    log: Optional[Path]
    seconds: float


class _Observed:
    """A Flower strategy with mcutrain's checks around it: every device's answer is checked (parameter
    blocks of the model's sizes, finite) before the strategy aggregates, answers and failures are noted
    for the round report, and a round with fewer than min_devices answers keeps the global model. All
    aggregation is the wrapped strategy's."""

    def __init__(self, inner: Any, layout: ParamLayout, min_devices: int, names: Dict[str, str]) -> None:
        from flwr.common import parameters_to_ndarrays

        self.inner = inner
        self.layout = layout
        self.min_devices = min_devices
        self.names = names  # Flower client id -> device name (learned from the answers)
        self.to_arrays = parameters_to_ndarrays
        self.report: Optional[RoundReport] = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _note_failures(self, failures: List[Any]) -> None:
        assert self.report is not None
        for f in failures:
            if isinstance(f, BaseException):
                self.report.dropped[f"?{len(self.report.dropped)}"] = f"{type(f).__name__}: {f}"
                continue
            proxy, res = f
            msg = res.status.message or res.status.code.name
            # Flower's legacy transport drops the metrics of a failed answer: the message starts with the name
            name = (res.metrics or {}).get("device") or self.names.get(proxy.cid) or msg.split(":", 1)[0]
            self.report.dropped[str(name)] = msg

    def aggregate_fit(self, server_round: int, results: List[Any], failures: List[Any]) -> Tuple[Any, Dict]:
        assert self.report is not None
        good, bad = [], list(failures)
        for proxy, res in results:
            name = str(res.metrics.get("device", proxy.cid))
            self.names[proxy.cid] = name
            try:
                self.layout.check(self.to_arrays(res.parameters))
            except ValueError as e:
                res.status.message = f"{name}: unusable parameters ({e})"
                bad.append((proxy, res))
                continue
            good.append((proxy, res))
        self._note_failures(bad)
        self.report.answered = sorted(str(r.metrics["device"]) for _, r in good)
        if good:
            self.report.train_loss = float(np.mean([r.metrics["train_loss"] for _, r in good]))
            self.report.local_accuracy = {
                str(r.metrics["device"]): float(r.metrics["local_accuracy"])
                for _, r in good
                if "local_accuracy" in r.metrics
            }
        if len(good) < self.min_devices:
            self.report.failed = (
                f"{len(good)} device(s) answered, the fleet needs {self.min_devices} (min_devices): global model kept"
            )
            return None, {}
        return self.inner.aggregate_fit(server_round, good, bad)

    def aggregate_evaluate(self, server_round: int, results: List[Any], failures: List[Any]) -> Tuple[Any, Dict]:
        assert self.report is not None
        if results:
            n = np.array([r.num_examples for _, r in results], np.float64)
            self.report.device_loss = float(np.dot(n, [r.loss for _, r in results]) / n.sum())
            accs = [r.metrics.get("accuracy") for _, r in results]
            if all(a is not None for a in accs):
                self.report.device_accuracy = float(np.dot(n, accs) / n.sum())
        return self.inner.aggregate_evaluate(server_round, results, failures)


def make_strategy(cfg: FleetConfig, initial: List[np.ndarray], evaluate_fn: Callable[..., Any], n: int) -> Any:
    """The fleet file's Flower strategy, with every device in every round and the starting model."""
    require_flower()
    from flwr.common import ndarrays_to_parameters
    from flwr.server import strategy as strategies

    bad = sorted(set(cfg.strategy_options) & RESERVED_OPTIONS)
    if bad:
        raise FleetError(f"strategy_options: {', '.join(bad)} are set by the fleet itself; remove them")
    cls = getattr(strategies, STRATEGIES[cfg.strategy])
    try:
        return cls(
            initial_parameters=ndarrays_to_parameters(initial),
            evaluate_fn=evaluate_fn,
            on_fit_config_fn=lambda r: {"round": r},
            on_evaluate_config_fn=lambda r: {"round": r},
            min_fit_clients=n,
            min_evaluate_clients=n,
            min_available_clients=n,
            accept_failures=True,
            **cfg.strategy_options,
        )
    except TypeError as e:
        raise FleetError(f"strategy_options do not fit Flower's {cls.__name__}: {e}") from None


class Fleet:
    """A fleet run (see the module docstring). on_round(report) is called after every round (round 0 is
    the starting model); on_step(device, round, step) after every TRAIN step of a device (from the device's
    client thread). A Fleet runs once, from one thread: it is not meant to be shared between threads."""

    def __init__(
        self,
        cfg: FleetConfig,
        on_round: Optional[Callable[[RoundReport], None]] = None,
        on_step: Optional[Callable[[str, int, int], None]] = None,
        on_status: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.cfg = cfg
        self.on_round = on_round
        self.on_step = on_step
        self.on_status = on_status or (lambda s: None)
        self.ck: Checkpoint = load_model(cfg.model)
        self.handles: List[DeviceHandle] = []
        self.clients: List[Any] = []
        self._prepared = False

    # ---- setup ----
    def _device_model(self) -> Any:
        from mcutrain.exporter.device import DeviceSpecError, build_device_model

        if self.cfg.quant == "int8-full":
            raise FleetError(
                "quant = int8-full is not supported in a fleet (it needs calibration data): use f32 or int8"
            )
        try:
            return build_device_model(self.ck, self.cfg.trainable, self.cfg.quant)
        except DeviceSpecError as e:
            raise FleetError(str(e)) from None

    def _export(self, board_name: str) -> Path:
        """The project the simulated devices of a board run: exported and built once per model."""
        import json

        from mcutrain.exporter import pio, sim
        from mcutrain.exporter.boards import get_board
        from mcutrain.exporter.export import export_project

        board = get_board(board_name)
        simulator = sim.simulator_for(board)
        sim.require_tools(*simulator.tools)
        project = self.cfg.workdir / f"fw-{board.name}"
        meta = project / "mcutrain.json"
        fw = simulator.firmware_path(project, board)
        same = meta.is_file() and json.loads(meta.read_text()).get("hash") == self.model.hash().hex()
        if not (same and fw.is_file()):
            self.on_status(f"exporting and building the firmware for {board.name} ({simulator.kind})")
            export_project(self.ck, board.name, project, self.cfg.quant, self.cfg.trainable, force=True, sim=True)
            pio.build(project, simulator.env_name(board))
        return project

    def _load(self, path: Path) -> Tuple[np.ndarray, np.ndarray]:
        from mcutrain.modelmeta import class_names

        ds = load_dataset(self.cfg.data_settings(path), class_names(self.ck.metadata))  # text labels: the model's
        n_in, n_out = self.model.program.n_in, self.model.program.n_out
        if ds.x.shape[1] != n_in or ds.y.shape[1] != n_out:
            raise FleetError(
                f"{path} has {ds.x.shape[1]} inputs and {ds.y.shape[1]} targets per sample; the model takes "
                f"{n_in} and outputs {n_out} (for integer class labels set classify = true in [data])"
            )
        return ds.x, ds.y

    def prepare(self) -> None:
        """Check the data, export and build the simulated boards' firmware, make the device clients."""
        from mcutrain.exporter.quantize import loss_of_model

        from .client import DeviceClient

        require_flower()
        cfg = self.cfg
        self.model = self._device_model()
        self.layout = ParamLayout(self.model)
        if not self.layout.blocks:
            raise FleetError(f"trainable = {cfg.trainable!r} leaves nothing to train on the devices")
        self.loss = loss_of_model(self.model.loss_kind, self.model.loss_param)
        self.test = self._load(cfg.test) if cfg.test else None
        cfg.workdir.mkdir(parents=True, exist_ok=True)
        projects = {d.board: self._export(d.board) for d in cfg.devices if d.board}
        expected = self.model.hash().hex()
        for i, spec in enumerate(cfg.devices):
            x, y = self._load(spec.data)
            ex, ey = self._load(spec.eval) if spec.eval else (x, y)
            ex, ey = ex[: cfg.eval_samples], ey[: cfg.eval_samples]
            store = cfg.workdir / f"store-{i + 1}.bin" if spec.board else None
            handle = DeviceHandle(spec, expected, cfg.timeout, projects.get(spec.board), store)
            self.handles.append(handle)
            self.clients.append(
                DeviceClient(
                    i, handle, self.layout, (x, y), (ex, ey), self.loss, cfg.local_steps, cfg.seed, self.on_step
                )
            )
        self._prepared = True

    # ---- evaluation and output ----
    def evaluate_global(self, arrays: List[np.ndarray]) -> Optional[Tuple[float, Dict[str, float]]]:
        """Loss and accuracy of global parameters on the test set, through the device's C core on the host."""
        if self.test is None:
            return None
        m = evaluate_params(self.model, self.layout.join(arrays), *self.test)
        return m["loss"], m

    def global_checkpoint(self, arrays: List[np.ndarray], report: RoundReport) -> Checkpoint:
        """The global model as a host model file: the starting network with the trainable blocks set."""
        net = self.ck.net
        net.params = self.model.to_host_params(self.layout.join(arrays), net.params)
        meta = dict(self.ck.metadata)
        meta["fleet"] = {
            "round": report.round,
            "strategy": self.cfg.strategy,
            "devices": len(self.cfg.devices),
            "answered": report.answered,
            "test_accuracy": report.accuracy,
        }
        return Checkpoint(net, self.ck.optimizer, meta)

    def _write_global(self, arrays: List[np.ndarray], report: RoundReport) -> None:
        ck = self.global_checkpoint(arrays, report)
        atomic_write(self.cfg.output, encode_model(ck.net, ck.optimizer, ck.metadata))

    # ---- the run ----
    def run(self) -> FleetResult:
        """Run the rounds; returns the reports. FleetError if no round could be completed."""
        flwr = require_flower()
        if not self._prepared:
            self.prepare()
        from flwr.common import parameters_to_ndarrays
        from flwr.server import Server
        from flwr.server.superlink.fleet.grpc_bidi.grpc_server import start_grpc_server

        from .client_threads import ClientThreads, RejoiningClientManager

        cfg = self.cfg
        log_file = None
        flower_log = logging.getLogger("flwr")
        old_level = flower_log.level
        flower_log.setLevel(logging.ERROR)
        threads = ClientThreads(self.clients)
        cm = RejoiningClientManager(threads.revive)
        names: Dict[str, str] = {}

        def evaluate_fn(server_round: int, arrays: List[np.ndarray], config: Dict) -> Any:
            return self.evaluate_global(arrays)

        initial = self.layout.split(self.layout.base)
        inner = make_strategy(cfg, initial, evaluate_fn, len(self.clients))
        strategy = _Observed(inner, self.layout, cfg.min_devices, names)
        server = Server(client_manager=cm, strategy=strategy)  # type: ignore[arg-type]
        grpc_server = start_grpc_server(client_manager=cm, server_address="127.0.0.1:0")
        reports: List[RoundReport] = []
        t_start = time.monotonic()
        try:
            threads.start(grpc_server.bound_address)
            if not cm.wait_for(len(self.clients), timeout=60):
                raise FleetError(f"only {cm.num_available()} of {len(self.clients)} Flower clients connected")
            if cfg.log is not None:
                cfg.log.parent.mkdir(parents=True, exist_ok=True)
                log_file = open(cfg.log, "w", encoding="utf-8")
                self._log(
                    log_file,
                    {
                        "event": "start",
                        "time": time.time(),
                        "fleet": True,
                        "flwr": flwr.__version__,
                        "strategy": cfg.strategy,
                        "rounds": cfg.rounds,
                        "local_steps": cfg.local_steps,
                        "devices": [d.name for d in cfg.devices],
                        "model": str(cfg.model),
                    },
                )
            server.parameters = inner.initialize_parameters(cm)
            arrays = parameters_to_ndarrays(server.parameters)
            zero = RoundReport(0)
            self._evaluate_into(zero, strategy, 0, server.parameters)
            self._finish(zero, reports, log_file)
            for r in range(1, cfg.rounds + 1):
                rep = RoundReport(r)
                strategy.report = rep
                t0 = time.monotonic()
                bytes0 = sum(h.bytes_on_line() for h in self.handles)
                try:
                    res = server.fit_round(server_round=r, timeout=cfg.round_timeout)
                    if res is not None and res[0] is not None:
                        new = parameters_to_ndarrays(res[0])
                        self.layout.check(new)
                        server.parameters, arrays = res[0], new
                    elif not rep.failed:
                        rep.failed = "no device answered: global model kept"
                except Exception as e:  # a failed round is logged, the run goes on
                    rep.failed = f"{type(e).__name__}: {e}: global model kept"
                self._evaluate_into(rep, strategy, r, server.parameters)
                self._write_global(arrays, rep)
                try:
                    if cfg.eval_samples:
                        server.evaluate_round(server_round=r, timeout=cfg.round_timeout)
                except Exception as e:
                    rep.dropped.setdefault("evaluation", f"{type(e).__name__}: {e}")
                rep.seconds = time.monotonic() - t0
                rep.bytes = sum(h.bytes_on_line() for h in self.handles) - bytes0
                self._finish(rep, reports, log_file)
                self._raise_crash()
            if not any(r.failed is None for r in reports[1:]):
                raise FleetError(
                    f"none of the {cfg.rounds} rounds could be completed (see {cfg.log}); the global model "
                    f"{cfg.output} is the starting model"
                )
            if log_file is not None:
                self._log(log_file, {"event": "end", "elapsed": round(time.monotonic() - t_start, 4)})
            return FleetResult(reports, self.layout.join(arrays), cfg.output, cfg.log, time.monotonic() - t_start)
        finally:
            try:
                server.disconnect_all_clients(timeout=5)
            finally:
                threads.join(timeout=5)
                grpc_server.stop(grace=1)
                for h in self.handles:
                    h.close()
                if log_file is not None:
                    log_file.close()
                flower_log.setLevel(old_level)

    def _raise_crash(self) -> None:
        """Raise the first error in mcutrain's own code that a device client met (DeviceClient.crash)."""
        for c in self.clients:
            if c.crash is not None:
                raise c.crash

    def _evaluate_into(self, rep: RoundReport, strategy: Any, r: int, parameters: Any) -> None:
        strategy.report = rep
        res = strategy.evaluate(r, parameters)
        if res is not None:
            rep.loss = float(res[0])
            rep.accuracy = res[1].get("accuracy")

    def _lr(self) -> Optional[float]:
        from mcutrain.corefacts import OPT_DTYPE

        return float(self.model.opt_cfg.view(OPT_DTYPE)[0]["lr"])

    def _finish(self, rep: RoundReport, reports: List[RoundReport], log_file: Any) -> None:
        reports.append(rep)
        if log_file is not None:
            self._log(log_file, rep.record(self._lr()))
        if self.on_round is not None:
            self.on_round(rep)

    @staticmethod
    def _log(f: Any, rec: Dict[str, Any]) -> None:
        import json

        f.write(json.dumps(rec, sort_keys=True) + "\n")
        f.flush()


def run_fleet(
    cfg: FleetConfig,
    on_round: Optional[Callable[[RoundReport], None]] = None,
    on_step: Optional[Callable[[str, int, int], None]] = None,
    on_status: Optional[Callable[[str], None]] = None,
) -> FleetResult:
    """Prepare and run a fleet (see Fleet)."""
    fleet = Fleet(cfg, on_round, on_step, on_status)
    fleet.prepare()
    return fleet.run()


__all__ = ["Fleet", "FleetResult", "RoundReport", "run_fleet"]
