"""Fleet learning (issue 12): devices as Flower clients, Flower's server and FedAvg running the rounds on
127.0.0.1, on scikit-learn's handwritten digits split non-IID (two classes per device).

Every device is real firmware: the native build as a process over a pty, and a Cortex-M4F build under QEMU
(nano33ble -> mps2-an386). Faults are real too: a firmware process killed with SIGKILL, one stopped with
SIGSTOP (it times out), and a reply whose bytes are flipped on the line (bad CRC).

The comparison baselines (each device alone, centralised) train the host's twin of the device (the same C
core; tests/test_firmware_native.py and test_sim_qemu.py show it computes the device's bits) with the
same sample order a fleet device uses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from mcutrain import Sequential, TrainParams, save_model
from mcutrain import layers as L
from mcutrain.datasets import Dataset
from mcutrain.errors import FleetError
from mcutrain.exporter.device import build_device_model
from mcutrain.fleet.baselines import compare, evaluate_params
from mcutrain.fleet.config import load_config, parse_config
from mcutrain.fleet.server import Fleet, run_fleet
from mcutrain.fleet.split import non_iid_split, simulate_fleet
from mcutrain.modelfile import load_model
from mcutrain.plot import plot_log
from mcutrain.recorder import read_log

pytest.importorskip("flwr")  # the fleet extra: installed by the test extra, so this never skips there
sklearn_datasets = pytest.importorskip("sklearn.datasets")

ROUNDS = 4
STEPS = 60


@pytest.fixture(scope="module", autouse=True)
def tool_dirs(pio_core: Path) -> Path:
    """The session's own PlatformIO core, build cache and mcutrain cache (see conftest.pio_core)."""
    return pio_core


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One fleet work folder for the module: the firmware is exported and built once per board."""
    return tmp_path_factory.mktemp("fleet-work")


@pytest.fixture(scope="module")
def digits() -> Dataset:
    """The 1797 8x8 digits, inputs scaled to [0, 1], one-hot targets."""
    d = sklearn_datasets.load_digits()
    return Dataset((d.data / 16.0).astype(np.float32), np.eye(10, dtype=np.float32)[d.target], "digits")


@pytest.fixture(scope="module")
def start_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained 64 -> 16 -> 10 classifier with plain SGD, the fleet's starting model."""
    net = Sequential(L.Linear(64, 16), L.Relu(), L.Linear(16, 10), L.Softmax()).rand_params(seed=3)
    path = tmp_path_factory.mktemp("model") / "start.mct"
    save_model(path, net, net.new_sgd(TrainParams(lr=0.1)), {"loss": "cross_entropy"})
    return path


def test_non_iid_split_gives_each_device_few_classes(digits: Dataset) -> None:
    labels = digits.y.argmax(axis=1)
    parts = non_iid_split(labels, 5, classes_per_device=2, seed=1)
    together = np.sort(np.concatenate(parts))
    assert np.array_equal(together, np.arange(len(labels)))  # every sample once
    for p in parts:  # two shards of sorted labels: mostly two classes (a shard's edges may cross a class boundary)
        counts = np.sort(np.bincount(labels[p], minlength=10))[::-1]
        assert counts[:2].sum() >= 0.85 * p.size, counts
    with pytest.raises(FleetError, match="cannot be split"):
        non_iid_split(labels[:5], 4, 2)


def test_four_native_devices_and_a_qemu_board_beat_every_device_alone(
    digits: Dataset, start_model: Path, work: Path, tmp_path: Path
) -> None:
    fleet_file, index = simulate_fleet(
        digits, 4, "native", tmp_path, start_model, rounds=ROUNDS, local_steps=STEPS, extra_boards=["nano33ble"], seed=0
    )
    cfg = load_config(fleet_file)
    cfg.workdir = work
    cfg.eval_samples = 16  # the QEMU board's UART takes ~0.1 ms per byte: keep PREDICT traffic small
    reports: List[Any] = []
    res = run_fleet(cfg, on_round=reports.append)
    names = [d.name for d in cfg.devices]
    assert names[-1] == "nano33ble-5" and len(names) == 5
    assert [r.round for r in res.rounds] == list(range(ROUNDS + 1))
    for r in res.rounds[1:]:
        assert r.failed is None and r.answered == sorted(names) and not r.dropped, r
        assert r.bytes > 0 and r.device_accuracy is not None
    # the global model file is the final global model: the device model rebuilt from it predicts the
    # accuracy the last round reported
    ck = load_model(cfg.output)
    assert ck.metadata["fleet"]["round"] == ROUNDS and ck.metadata["fleet"]["test_accuracy"] == res.rounds[-1].accuracy
    model = build_device_model(ck)
    test = (digits.x[index["test"]], digits.y[index["test"]])
    final = evaluate_params(model, model.params, *test)
    assert final["accuracy"] == res.rounds[-1].accuracy
    assert np.array_equal(model.params, res.params)
    # baselines from the starting model, with the same steps and sample order
    start = build_device_model(load_model(start_model))
    shards = [(digits.x[index[n]], digits.y[index[n]]) for n in names]
    base = compare(start, shards, test, ROUNDS, STEPS, seed=0)
    alone = [m["accuracy"] for m in base["alone"]]
    rows = [("federated (FedAvg, 5 devices)", final["accuracy"]), ("centralised", base["centralised"]["accuracy"])]
    rows += [(f"{n} alone", a) for n, a in zip(names, alone)]
    print(f"\naccuracy on the held-out digits ({len(index['test'])} samples):")
    for what, acc in rows:
        print(f"  {what:32s} {acc:.3f}")
    print("  per round:", [round(r.accuracy, 3) for r in res.rounds])
    assert final["accuracy"] > max(alone) + 0.15, rows
    assert res.rounds[-1].accuracy > res.rounds[0].accuracy + 0.3
    # the log is one JSON line per round that `mcutrain plot` draws
    records = read_log(cfg.log)
    steps = [r for r in records if r.get("event") == "step"]
    assert [r["round"] for r in steps] == list(range(ROUNDS + 1))
    assert [r["val_accuracy"] for r in steps] == [r.accuracy for r in res.rounds]
    assert plot_log(records).startswith(b"\x89PNG")


class GarbleOnce:
    """A device line that flips one bit of the next reply it reads (noise on a serial line): the client
    sees a bad CRC."""

    def __init__(self, link: Any) -> None:
        self._link = link
        self.armed = True

    def read(self, n: int) -> bytes:
        b = self._link.read(n)
        if self.armed and len(b) >= 2:
            self.armed = False
            b = bytes([b[0] ^ 0x10]) + b[1:]
        return b

    def __getattr__(self, name: str) -> Any:
        return getattr(self._link, name)


def test_killed_stopped_and_garbled_devices_are_dropped_and_rejoin(
    digits: Dataset, start_model: Path, work: Path, tmp_path: Path
) -> None:
    fleet_file, index = simulate_fleet(digits, 4, "native", tmp_path, start_model, rounds=3, local_steps=40, seed=2)
    cfg = load_config(fleet_file)
    cfg.workdir = work
    cfg.timeout = 1.0  # seconds a device may take to answer a frame (the stopped one never does)
    cfg.eval_samples = 20
    fleet = Fleet(cfg)
    handles: Dict[str, Any] = {}
    files: Dict[int, Any] = {}
    stopped: List[int] = []

    def on_step(name: str, rnd: int, step: int) -> None:
        if rnd != 2 or step != 10:
            return
        h = handles[name]
        if name == "native-1":
            h.process.kill()  # the firmware dies mid-round
        elif name == "native-2":
            h.device.link._link = GarbleOnce(h.device.link._link)  # the next reply fails its CRC
        elif name == "native-3":
            os.kill(h.process.pid, signal.SIGSTOP)  # the firmware hangs: the client times out
            stopped.append(h.process.pid)

    def on_round(rep: Any) -> None:
        ck = load_model(cfg.output) if rep.round else None  # the file written this round must be valid
        files[rep.round] = (rep, None if ck is None else ck.net.params.copy())

    fleet.on_step, fleet.on_round = on_step, on_round
    fleet.prepare()
    handles.update({h.spec.name: h for h in fleet.handles})
    try:
        res = fleet.run()
    finally:
        for pid in stopped:  # a stopped process that survived the run (it should not) is ended here
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    r1, r2, r3 = res.rounds[1:]
    assert r1.answered == ["native-1", "native-2", "native-3", "native-4"] and r1.failed is None
    # round 2: three devices failed mid-round, the fourth carried the round
    assert r2.failed is None and r2.answered == ["native-4"], r2
    assert set(r2.dropped) == {"native-1", "native-2", "native-3"}, r2.dropped
    assert "ended" in r2.dropped["native-1"]  # SimError: the process ended
    assert "CRC" in r2.dropped["native-2"]
    assert "timeout" in r2.dropped["native-3"]
    # the global model file after round 2 is a valid model with finite parameters that moved
    p1, p2 = files[1][1], files[2][1]
    assert np.all(np.isfinite(p2)) and not np.array_equal(p1, p2)
    # round 3: everyone is back (the dead and the hung firmware were started again, the garbled line resynced)
    assert r3.failed is None and r3.answered == ["native-1", "native-2", "native-3", "native-4"], r3
    assert [handles[n].connects for n in ("native-1", "native-2", "native-3", "native-4")] == [2, 2, 2, 1]
    assert r3.accuracy is not None and r3.accuracy > res.rounds[0].accuracy


def test_a_round_without_enough_devices_keeps_the_global_model(
    digits: Dataset, start_model: Path, work: Path, tmp_path: Path
) -> None:
    fleet_file, _ = simulate_fleet(digits, 2, "native", tmp_path, start_model, rounds=2, local_steps=20, seed=4)
    cfg = load_config(fleet_file)
    cfg.workdir = work
    cfg.min_devices = 2
    fleet = Fleet(cfg)

    def on_step(name: str, rnd: int, step: int) -> None:
        if name == "native-1" and rnd == 1 and step == 5:
            next(h for h in fleet.handles if h.spec.name == name).process.kill()

    fleet.on_step = on_step
    res = fleet.run()
    r1, r2 = res.rounds[1:]
    assert r1.answered == ["native-2"] and "min_devices" in (r1.failed or "")
    assert r1.accuracy == res.rounds[0].accuracy  # round 1 kept the starting model
    assert r2.failed is None and r2.answered == ["native-1", "native-2"]
    assert json.loads(Path(cfg.log).read_text().splitlines()[2])["failed"] == r1.failed


def test_fleet_file_errors_name_the_key(tmp_path: Path) -> None:
    base = {"model": "m.mct", "device": [{"board": "native", "data": "a.npz"}]}
    cfg = parse_config(base, tmp_path)
    assert cfg.model == tmp_path / "m.mct" and cfg.devices[0].simulated and cfg.strategy == "fedavg"
    bad = [
        ({**base, "rounds": 0}, "rounds"),
        ({**base, "strategy": "fedprox"}, "proximal"),
        ({**base, "colour": 1}, "unknown key"),
        ({"model": "m.mct", "device": [{"port": "/dev/x", "board": "native", "data": "a"}]}, "either port"),
        ({"model": "m.mct", "device": [{"port": "/dev/x"}]}, "training data"),
        ({"model": "m.mct", "device": []}, r"\[\[device\]\]"),
        ({"device": base["device"]}, "starting model"),
        ({**base, "device": [{"name": "a", "board": "native", "data": "a.npz"}] * 2}, "appear more than once"),
    ]
    for doc, msg in bad:
        with pytest.raises(FleetError, match=msg):
            parse_config(doc, tmp_path)
    (tmp_path / "f.toml").write_text("rounds = [")
    with pytest.raises(FleetError, match="not a valid TOML"):
        load_config(tmp_path / "f.toml")


def test_cli_simulates_a_fleet_end_to_end(digits: Dataset, start_model: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from mcutrain.cli.commands import main

    np.savez(tmp_path / "digits.npz", x=digits.x, y=digits.y)
    out, log = tmp_path / "global.mct", tmp_path / "fleet.jsonl"
    args = ["fleet", "--simulate", "3", "--board", "native", "--model", str(start_model)]
    args += ["--data", str(tmp_path / "digits.npz"), "--rounds", "2", "--local-steps", "30"]
    args += ["-o", str(out), "--log", str(log), "--workdir", str(tmp_path / "sim")]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "round 2/2" in r.output and "devices 3/3" in r.output and "2 of 2 rounds completed" in r.output
    ck = load_model(out)
    assert ck.metadata["fleet"]["round"] == 2 and ck.metadata["fleet"]["answered"] == [
        "native-1",
        "native-2",
        "native-3",
    ]
    png = tmp_path / "rounds.png"
    r = CliRunner().invoke(main, ["plot", str(log), "-o", str(png)])
    assert r.exit_code == 0, r.output
    assert png.read_bytes().startswith(b"\x89PNG")
    # the same run again does not replace the global model without --force
    before = out.read_bytes()
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1 and "--force" in r.output
    assert out.read_bytes() == before
    # the fleet file it wrote runs on its own
    r = CliRunner().invoke(main, ["fleet", str(tmp_path / "sim" / "fleet.toml"), "--rounds", "1", "--force", "-q"])
    assert r.exit_code == 0, r.output
    assert "1 of 1 rounds completed" in r.output
    r = CliRunner().invoke(main, ["fleet", str(tmp_path / "nope.toml")])
    assert r.exit_code == 1 and "does not exist" in r.output


def test_a_device_on_a_port_joins_the_fleet_and_is_reopened_after_noise(
    digits: Dataset, start_model: Path, work: Path, tmp_path: Path
) -> None:
    """A device given by its serial port (here the pty of a native firmware the test starts itself, as a
    board on /dev/ttyACM0 would be) next to a simulated one; its line garbles a reply in round 1, the fleet
    opens the port again for round 2."""
    from mcutrain.exporter import sim
    from mcutrain.exporter.boards import get_board

    fleet_file, _ = simulate_fleet(digits, 2, "native", tmp_path, start_model, rounds=2, local_steps=20, seed=5)
    cfg = load_config(fleet_file)
    cfg.workdir = work
    cfg.eval_samples = 10
    fleet = Fleet(cfg)
    fleet.prepare()  # exports and builds the native firmware into work/fw-native
    board = get_board("native")
    board_session = sim.start(work / "fw-native", board, store=tmp_path / "board.bin", build=False)
    try:
        port = board_session.extra["port"]
        board_session.device.link.close()  # the fleet opens the port itself, as it would a board's
        cfg.devices[0] = dataclasses.replace(cfg.devices[0], name="board", port=port, board=None)

        def on_step(name: str, rnd: int, step: int) -> None:
            if name == "board" and rnd == 1 and step == 3:
                h = next(h for h in fleet.handles if h.spec.name == "board")
                h.device.link._link = GarbleOnce(h.device.link._link)

        fleet = Fleet(cfg, on_step=on_step)
        res = fleet.run()
        assert board_session.device.process.poll() is None  # the board was never restarted: only its port
    finally:
        board_session.device.process.kill()
        board_session.device.process.wait()
    r1, r2 = res.rounds[1:]
    assert r1.answered == ["native-2"] and "CRC" in r1.dropped.get("board", ""), r1
    assert r2.answered == ["board", "native-2"] and r2.failed is None, r2
    assert fleet.handles[0].connects >= 2


def _run_bounded(fleet: Fleet, seconds: float) -> Any:
    """fleet.run() in a thread: its result, or the error it raised; fails the test if the run has not ended
    after `seconds` (a fleet that waits for a Flower client that is gone must not wait for a day)."""
    import threading

    out: Dict[str, Any] = {}

    def go() -> None:
        try:
            out["result"] = fleet.run()
        except BaseException as e:  # handed to the test
            out["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"the fleet run had not ended after {seconds:.0f} s"
    return out


def test_an_error_in_mcutrain_stops_the_fleet_with_that_error(
    digits: Dataset, start_model: Path, work: Path, tmp_path: Path
) -> None:
    """An exception that is not a device fault (a bug; here raised from the step hook in a device's client
    thread) ends the run with that exception, after the round it happened in; the fleet does not hang
    waiting for the Flower client the exception ended."""
    fleet_file, _ = simulate_fleet(digits, 2, "native", tmp_path, start_model, rounds=3, local_steps=5, seed=6)
    cfg = load_config(fleet_file)
    cfg.workdir = work
    cfg.eval_samples = 10

    def on_step(name: str, rnd: int, step: int) -> None:
        if name == "native-2" and rnd == 1 and step == 2:
            raise KeyError("a bug in the client")

    out = _run_bounded(Fleet(cfg, on_step=on_step), 120)
    assert isinstance(out.get("error"), KeyError) and "a bug in the client" in str(out["error"]), out
    # round 1 (native-1 answered) was finished and logged; round 2 never started
    assert load_model(cfg.output).metadata["fleet"]["round"] == 1
    assert [r["round"] for r in read_log(cfg.log) if r.get("event") == "step"] == [0, 1]


def test_a_device_slower_than_the_round_timeout_is_dropped_and_answers_the_next_round(
    digits: Dataset, start_model: Path, work: Path, tmp_path: Path
) -> None:
    """A device whose round takes longer than round_timeout: Flower ends its client's stream and the round
    goes on without it; the fleet starts the device's Flower client again and it answers the next round."""
    import time

    fleet_file, _ = simulate_fleet(digits, 2, "native", tmp_path, start_model, rounds=2, local_steps=5, seed=7)
    cfg = load_config(fleet_file)
    cfg.workdir = work
    cfg.eval_samples = 0
    cfg.round_timeout = 5.0  # native-2 needs well under a second for its round; native-1 sleeps longer

    def on_step(name: str, rnd: int, step: int) -> None:
        if name == "native-1" and rnd == 1 and step == 1:
            time.sleep(cfg.round_timeout + 1.0)

    out = _run_bounded(Fleet(cfg, on_step=on_step), 120)
    assert "result" in out, out
    r1, r2 = out["result"].rounds[1:]
    assert r1.answered == ["native-2"] and len(r1.dropped) == 1, r1  # Flower's timeout does not name it
    assert r2.answered == ["native-1", "native-2"] and r2.failed is None, r2
