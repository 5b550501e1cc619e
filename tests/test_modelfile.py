"""Model files (.mct): exact round trips (outputs, parameters, optimizer state and step, continued
training), clear ModelFileErrors for every kind of bad file, and atomic saving."""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import layer_table
import numpy as np
import pytest

from helpers import rebuild, split
from mcutrain import (
    Checkpoint,
    ModelFileError,
    Sequential,
    TrainParams,
    load_model,
    losses,
    save_model,
    train_batch,
)
from mcutrain import layers as L
from mcutrain.module import Module, as_optimizer
from mcutrain.optim import Optimizer
from mcutrain.problems import ModularAddition10

MAGIC = b"MCTRAIN\0"


def small_net() -> Sequential:
    """The README network, seeded."""
    return Sequential(L.Linear(20, 35), L.Sigmoid(), L.Linear(35, 10), L.Softmax()).rand_params(seed=456645)


def batches(n: int, seed: int = 2, nb: int = 8) -> List[Tuple[np.ndarray, np.ndarray]]:
    """n seeded ModularAddition10 batches."""
    p = ModularAddition10(seed=seed)
    return [p.sample_batch(nb) for _ in range(n)]


def assert_same_training_state(
    net_a: Module, opt_a: Optional[Optimizer], net_b: Module, opt_b: Optional[Optimizer]
) -> None:
    """Parameters, optimizer kind/config, slots, step and Adam powers are bit-for-bit equal."""
    np.testing.assert_array_equal(net_a.params, net_b.params)
    if opt_a is None or opt_b is None:
        assert opt_a is None and opt_b is None
        return
    assert opt_a.kind == opt_b.kind and opt_a.config() == opt_b.config()
    np.testing.assert_array_equal(opt_a.state, opt_b.state)
    assert opt_a.step == opt_b.step
    assert opt_a.train_state.tobytes() == opt_b.train_state.tobytes()


# ----------------------------------------------------------------------------- round trips

OPTIMIZERS: Dict[str, Callable[[Module], Optimizer]] = {
    "sgd_linear_decay": lambda n: n.new_sgd(TrainParams(lr=0.05).and_lr_decay(0.01, 8)),
    "momentum_sim_l2": lambda n: n.new_momentum(TrainParams(lr=0.05, l2=0.01), 0.8, 0.5),
    "rmsprop_clip": lambda n: n.new_rmsprop(TrainParams(lr=1e-2, clip=0.3), 0.85),
    "rmsprop_momentum": lambda n: n.new_rmsprop_with_momentum(TrainParams(lr=2e-2), 0.85, 0.8),
    "adam_everything": lambda n: n.new_adam(
        TrainParams(
            lr=1e-2,
            schedule="cosine",
            lr_final=1e-3,
            decay_steps=9,
            warmup_steps=3,
            l1=1e-3,
            l2=1e-3,
            clip=1.0,
            scale_by_loss=True,
        ),
        0.8,
        0.95,
        1e-6,
    ),
    "adam_beta1_zero": lambda n: n.new_adam(TrainParams(lr=1e-2), 0.0, 0.99),
}


def roundtrip_and_continue(
    tmp_path: Path,
    net: Module,
    opt: Optional[Any],
    data: List[Tuple[np.ndarray, np.ndarray]],
    loss: losses.Loss = losses.logit_bce,
    before: int = 5,
    after: int = 5,
) -> Checkpoint:
    """Train `before` steps, save, load, then train both copies `after` more steps: all exactly equal."""
    for x, y in data[:before]:
        train_batch(opt if opt is not None else TrainParams(), net, loss, x, y)
    path = tmp_path / "model.mct"
    meta = {"epoch": 3, "problem": "modadd10", "nested": {"curve": [0.5, 0.25]}}
    save_model(path, net, optimizer=opt, metadata=meta)
    ck = load_model(path)
    assert ck.metadata == meta
    assert ck.net.architecture() == net.architecture() and ck.net.describe() == net.describe()
    xs = np.concatenate([x for x, _ in data])
    np.testing.assert_array_equal(ck.net.forward(xs), net.forward(xs))
    opt_a = as_optimizer(opt, net) if opt is not None else None
    assert_same_training_state(net, opt_a, ck.net, ck.optimizer)
    if opt is not None:
        assert ck.optimizer is not None
        for x, y in data[before : before + after]:
            la = train_batch(opt, net, loss, x, y)
            lb = train_batch(ck.optimizer, ck.net, loss, x, y)
            assert la == lb
        assert_same_training_state(net, opt_a, ck.net, ck.optimizer)
        assert ck.optimizer.step == before + after
    return ck


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_roundtrip_continues_training_exactly(tmp_path: Path, name: str) -> None:
    """save -> load: same outputs, same optimizer state and step, and identical continued training."""
    net = small_net()
    roundtrip_and_continue(tmp_path, net, OPTIMIZERS[name](net), batches(10))


def test_roundtrip_bare_train_params(tmp_path: Path) -> None:
    """A bare TrainParams (SGD with its own step, which drives its schedule) can be saved with the model
    like any optimizer, and training resumes at the same step."""
    net = small_net()
    tp = TrainParams(lr=0.05).and_lr_decay(0.0, 8)
    roundtrip_and_continue(tmp_path, net, tp, batches(10))


def test_roundtrip_without_optimizer(tmp_path: Path) -> None:
    """A model saved without optimizer loads with optimizer None and the same outputs."""
    net = small_net()
    path = tmp_path / "m.mct"
    save_model(path, net)
    ck = load_model(str(path))
    assert ck.optimizer is None and ck.metadata == {}
    x, _ = batches(1)[0]
    np.testing.assert_array_equal(ck.net.forward(x), net.forward(x))
    loaded = load_model(path).net
    np.testing.assert_array_equal(loaded.forward(x), net.forward(x))


def test_save_with_optimizer_of_another_network(tmp_path: Path) -> None:
    """An optimizer whose size does not match the network is refused before anything is written."""
    net = small_net()
    other = Sequential(L.Linear(20, 10)).rand_params(seed=1)
    path = tmp_path / "m.mct"
    with pytest.raises(ModelFileError, match=f"{other.n_params}.*{net.n_params}"):
        save_model(path, net, optimizer=other.new_adam(TrainParams()))
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_every_layer_type_roundtrips(tmp_path: Path) -> None:
    """A model with every layer type: same spec, same compiled layer table (sizes, alphas, LR divisors),
    same outputs and identical continued training after a round trip."""
    net = layer_table.every_layer_net()
    names = {type(m).__name__ for m in net.layers()}
    assert set(L.LAYER_TYPES) - layer_table.HOST_TRAINING_ONLY <= names  # those: test_every_layer saves their rows
    # move parameters off their init values (e.g. ScalarScale's 0.7) so the file, not the spec, must carry them
    net.params = net.params + np.float32(0.01)
    opt = net.new_adam(TrainParams(lr=1e-3))
    rng = np.random.default_rng(3)
    data = [
        (
            rng.normal(0, 1, (6, net.n_in)).astype(np.float32),
            np.eye(net.n_out, dtype=np.float32)[rng.integers(0, net.n_out, 6)],
        )
        for _ in range(6)
    ]
    ck = roundtrip_and_continue(tmp_path, net, opt, data, loss=losses.cross_entropy, before=3, after=3)
    assert ck.net.program.table().tobytes() == net.program.table().tobytes()
    assert [type(m) for m in ck.net.layers()] == [type(m) for m in net.layers()]


def test_saving_twice_gives_loadable_identical_models(tmp_path: Path) -> None:
    """Overwriting a model file replaces it completely and leaves no temporary files behind."""
    net = small_net()
    path = tmp_path / "m.mct"
    save_model(path, net)
    net.params = net.params * np.float32(0.5)
    save_model(path, net)
    np.testing.assert_array_equal(load_model(path).net.params, net.params)
    assert [p.name for p in tmp_path.iterdir()] == ["m.mct"]


# ----------------------------------------------------------------------------- bad files


@pytest.fixture()
def saved(tmp_path: Path) -> Tuple[Path, bytes]:
    """A valid model file with an Adam optimizer and its bytes."""
    net = small_net()
    opt = net.new_adam(TrainParams())
    for x, y in batches(2):
        train_batch(opt, net, losses.logit_bce, x, y)
    path = tmp_path / "good.mct"
    save_model(path, net, optimizer=opt)
    return path, path.read_bytes()


def load_error(tmp_path: Path, data: bytes, name: str = "bad.mct") -> str:
    """Write data, load it, return the ModelFileError message (fails if another error or none)."""
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(ModelFileError) as e:
        load_model(p)
    msg = str(e.value)
    assert str(p) in msg, msg  # the message names the file
    return msg.replace(str(p), "<file>")  # (tmp_path holds the test's name: keep it out of keyword checks)


def test_good_file_layout(saved: Tuple[Path, bytes]) -> None:
    """The file starts with the marker and version 1 and ends with a CRC of everything before it."""
    _, data = saved
    assert data[:8] == MAGIC
    version, header, _ = split(data)
    assert version == 1 and header["format"] == 1
    assert struct.unpack("<I", data[-4:])[0] == zlib.crc32(data[:-4]) & 0xFFFFFFFF


@pytest.mark.parametrize("where", ["version", "header", "params", "opt_state", "crc"])
def test_corrupt_byte(tmp_path: Path, saved: Tuple[Path, bytes], where: str) -> None:
    """One flipped bit anywhere after the marker: ModelFileError saying the file is corrupt (or, for the
    version field, unsupported)."""
    _, data = saved
    _, header, _ = split(data)
    hlen = struct.unpack_from("<I", data, 12)[0]
    pos = {
        "version": 8,
        "header": 16 + hlen // 2,
        "crc": len(data) - 2,
        "params": 16 + hlen + header["arrays"]["params"]["offset"] + 17,
        "opt_state": 16 + hlen + header["arrays"]["opt_state"]["offset"] + 5,
    }[where]
    bad = bytearray(data)
    bad[pos] ^= 0x10
    msg = load_error(tmp_path, bytes(bad))
    assert ("corrupt" in msg) or (where == "version" and "format" in msg)


@pytest.mark.parametrize("keep", ["minus1", "half", "header", "20", "12", "9"])
def test_truncated(tmp_path: Path, saved: Tuple[Path, bytes], keep: str) -> None:
    """A file cut short anywhere after its marker: ModelFileError saying it is truncated."""
    _, data = saved
    n = {"minus1": len(data) - 1, "half": len(data) // 2, "header": 16 + 40, "20": 20, "12": 12, "9": 9}[keep]
    msg = load_error(tmp_path, data[:n])
    assert "truncated" in msg, msg


@pytest.mark.parametrize(
    "content", [b"NOTMODEL" + b"\0" * 64, b"MCTRAIM\0" + b"\0" * 64, b'{"type": "Sequential", "layers": []}', b"x"]
)
def test_wrong_magic(tmp_path: Path, content: bytes) -> None:
    """Other files: ModelFileError saying it is not an mcutrain model file."""
    msg = load_error(tmp_path, content)
    assert "not an mcutrain model file" in msg


def test_missing_file(tmp_path: Path) -> None:
    """A path that does not exist: ModelFileError naming it."""
    p = tmp_path / "nope" / "model.mct"
    with pytest.raises(ModelFileError) as e:
        load_model(p)
    assert str(p) in str(e.value) and "does not exist" in str(e.value).replace(str(p), "")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    """A folder given as the model: ModelFileError, not a raw OSError."""
    with pytest.raises(ModelFileError, match="is a folder: give the path of a model file"):
        load_model(tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    """An empty file: ModelFileError that says so or that it is not a model file."""
    msg = load_error(tmp_path, b"")
    assert "empty" in msg or "not an mcutrain model file" in msg


def test_future_format_version(tmp_path: Path, saved: Tuple[Path, bytes]) -> None:
    """A newer format version (with a correct CRC): ModelFileError naming both versions and what to do."""
    _, data = saved
    version, _, _ = split(data)
    hlen = struct.unpack_from("<I", data, 12)[0]
    bad = rebuild(version + 1, data[16 : 16 + hlen], data[16 + hlen : -4])
    msg = load_error(tmp_path, bad)
    assert f"format {version + 1}" in msg and str(version) in msg and "upgrade" in msg


CRAFTED = ["bad_json", "smaller_architecture", "unknown_layer", "array_outside", "no_architecture", "not_an_object"]


@pytest.mark.parametrize("case", CRAFTED)
def test_crafted_header_errors(tmp_path: Path, saved: Tuple[Path, bytes], case: str) -> None:
    """Files that pass the CRC but whose header is wrong: ModelFileError with a message saying what is
    wrong, never a raw KeyError/TypeError."""
    _, data = saved
    version, header, payload = split(data)
    h: Any = json.loads(json.dumps(header))
    expect = ""
    if case == "smaller_architecture":
        h["architecture"] = {"type": "Sequential", "layers": [{"type": "Linear", "n_in": 20, "n_out": 10}]}
        expect = "parameters, the file holds"
    elif case == "unknown_layer":
        h["architecture"] = {"type": "Sequential", "layers": [{"type": "Linear7", "n_in": 20, "n_out": 10}]}
        expect = "Linear7"
    elif case == "array_outside":
        h["arrays"]["params"]["offset"] = len(payload)
        expect = "arrays.params.bytes must fit"
    elif case == "no_architecture":
        del h["architecture"]
        expect = "architecture"
    elif case == "not_an_object":
        h = [1, 2, 3]
        expect = "header"
    raw = b"{not json" if case == "bad_json" else json.dumps(h).encode()
    msg = load_error(tmp_path, rebuild(version, raw, payload))
    assert (expect or "header") in msg, msg


# ----------------------------------------------------------------------------- atomic saving


@pytest.mark.parametrize("fail_in", ["replace", "fsync"])
def test_failed_save_keeps_old_file(
    tmp_path: Path, saved: Tuple[Path, bytes], monkeypatch: pytest.MonkeyPatch, fail_in: str
) -> None:
    """A save that fails while writing or renaming leaves the old file byte for byte and no temp file."""
    path, old = saved
    net = small_net()
    net.params = net.params * np.float32(2.0)

    def boom(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device (simulated)")

    monkeypatch.setattr(os, fail_in, boom)
    with pytest.raises(OSError, match="simulated"):
        save_model(path, net, optimizer=net.new_momentum(TrainParams()))
    monkeypatch.undo()
    assert path.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    # and the old model still loads
    ck = load_model(path)
    assert ck.optimizer is not None and ck.optimizer.kind == "adam" and ck.optimizer.step == 2
