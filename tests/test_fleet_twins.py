"""Fleets of host twins on Flower's Simulation Engine (issue 23, item 6), on scikit-learn's handwritten digits
split non-IID (two classes per device).

A twin device is the exported model run by the same C core on the host (mcutrain.fleet.twin_device); it
keeps what a board keeps between rounds in a state file. The tests check that a twin opened and closed
between steps computes what one device computes without a break, that a fleet of twins on Flower's
Simulation Engine (a SuperLink in simulation mode, virtual nodes in Ray) gives the same global model, bit for
bit, as the same fleet of native firmware processes on the Deployment Engine, and that the fleet file
refuses a mix of twins and boards.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers import assert_same_bits
from mcutrain import Sequential, TrainParams, save_model
from mcutrain import layers as L
from mcutrain.datasets import Dataset
from mcutrain.errors import FleetError
from mcutrain.exporter.client import REGION_PARAMS
from mcutrain.exporter.device import build_device_model
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.fleet.config import load_config, parse_config
from mcutrain.fleet.deploy import Fleet
from mcutrain.fleet.split import simulate_fleet
from mcutrain.fleet.twin_device import TwinDevice
from mcutrain.modelfile import load_model

pytest.importorskip("flwr")
pytest.importorskip("ray")  # Flower's Simulation Engine: the fleet-sim extra, installed by the test extra
sklearn_datasets = pytest.importorskip("sklearn.datasets")


@pytest.fixture(scope="module", autouse=True)
def tool_dirs(pio_core: Path) -> Path:
    return pio_core


@pytest.fixture(scope="module")
def digits() -> Dataset:
    """The 1797 8x8 digits, inputs scaled to [0, 1], one-hot targets."""
    d = sklearn_datasets.load_digits()
    return Dataset((d.data / 16.0).astype(np.float32), np.eye(10, dtype=np.float32)[d.target], "digits")


@pytest.fixture(scope="module")
def start_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained 64 -> 16 -> 10 classifier trained on the devices with Adam (slots and a step counter
    that a device keeps between rounds: a twin that lost them would not match the boards)."""
    net = Sequential(L.Linear(64, 16), L.Relu(), L.Linear(16, 10), L.Softmax()).rand_params(seed=5)
    path = tmp_path_factory.mktemp("model") / "start.mct"
    save_model(path, net, net.new_adam(TrainParams(lr=0.01)), {"loss": "cross_entropy"})
    return path


def test_a_twin_closed_and_opened_between_steps_continues_where_it_was(start_model: Path, tmp_path: Path) -> None:
    """Six steps with the twin closed (state written) and opened again after each equal six steps of one
    DeviceTwin, in every buffer: parameters, Adam's slots and the train state."""
    model = build_device_model(load_model(start_model), "all", "f32")
    rng = np.random.default_rng(0)
    xs = rng.random((6, 64), dtype=np.float32)
    ts = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 6)]
    whole = DeviceTwin(model)
    state = tmp_path / "dev.npz"
    for x, t in zip(xs, ts):
        whole.train(x, t)
        dev = TwinDevice(model, state)
        dev.check_hash(model.hash().hex())
        loss, step = dev.train(x, t)
        dev.close()
    again = TwinDevice(model, state)
    assert step == whole.step == 6
    assert_same_bits(again.twin.params, whole.params, "parameters")
    assert_same_bits(again.twin.state, whole.state, "optimizer slots")
    assert np.array_equal(again.twin.train_state, whole.train_state), "train state (step, Adam's powers)"
    # the parameter region as a fleet writes and reads it
    again.write_region(REGION_PARAMS, np.ones(3, np.float32), offset=2)
    assert_same_bits(again.read_region(REGION_PARAMS, 5, 0)[2:], np.ones(3, np.float32), "written parameters")
    with pytest.raises(Exception, match="out of the twin"):
        again.read_region(REGION_PARAMS, model.program.n_params + 1)


def test_a_state_of_another_model_is_not_taken(start_model: Path, tmp_path: Path) -> None:
    """A state file written for another model (the device was flashed since) boots from the export."""
    model = build_device_model(load_model(start_model), "all", "f32")
    other = build_device_model(load_model(start_model), "last:1", "f32")
    state = tmp_path / "dev.npz"
    dev = TwinDevice(other, state)
    dev.train(np.zeros(64, np.float32), np.eye(10, dtype=np.float32)[3])
    dev.close()
    fresh = TwinDevice(model, state)
    assert fresh.twin.step == 0
    assert_same_bits(fresh.twin.params, model.params, "parameters of the export")


def test_a_fleet_file_refuses_twins_mixed_with_boards(tmp_path: Path) -> None:
    doc = {"model": "m.mct", "device": [{"board": "twin", "data": "a.npz"}, {"board": "native", "data": "b.npz"}]}
    with pytest.raises(FleetError, match="make them all twins or none"):
        parse_config(doc, tmp_path)


def _run(fleet_file: Path, work: Path) -> np.ndarray:
    cfg = load_config(fleet_file)
    cfg.workdir = work
    cfg.eval_samples = 20
    fleet = Fleet(cfg)
    fleet.prepare()
    res = fleet.run()
    assert all(r.failed is None for r in res.rounds), [r.failed for r in res.rounds]
    assert all(not r.dropped for r in res.rounds), [r.dropped for r in res.rounds]
    return np.asarray(res.params, np.float32)


def test_twins_on_the_simulation_engine_give_the_native_fleets_global_model(
    digits: Dataset, start_model: Path, tmp_path: Path
) -> None:
    """The same fleet (16 devices, same shards, same sample order, Adam on the devices) run twice: as 16
    twins on Flower's Simulation Engine, and as 16 native firmware processes, each behind its own SuperNode,
    on the Deployment Engine. The global models after every round are the same bits."""
    n, rounds = 16, 2
    kw = dict(rounds=rounds, local_steps=15, seed=1)
    twins_file, index_t = simulate_fleet(digits, n, "twin", tmp_path / "twins", start_model, **kw)
    native_file, index_n = simulate_fleet(digits, n, "native", tmp_path / "native", start_model, **kw)
    assert all(np.array_equal(index_t[f"twin-{i}"], index_n[f"native-{i}"]) for i in range(1, n + 1))
    got = _run(twins_file, tmp_path / "twins" / "work")
    want = _run(native_file, tmp_path / "native" / "work")
    assert_same_bits(got, want, "global model of 16 twins vs 16 native firmware processes")
    start = build_device_model(load_model(start_model), "all", "f32").params
    assert not np.array_equal(got, start), "the fleet did not train"
