"""Model files whose checksum is right but whose content is wrong (issue 25, class 1). The header is checked
against one schema (mcutrain.modelschema) when the file is read, so every command that reads a model file
(`info`, `eval`, `export`, `train --resume`, `export-onnx`) answers a bad field with one line naming it, never
"unexpected ... please report it".

The mutator replaces, deletes or adds one field anywhere in a model file that records every metadata section
(a run, an import, a device pull, a fleet round), makes the checksum valid, and runs the commands in this
process through the command line's own error policy."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import rebuild, split
from mcutrain import ModelFileError, Sequential, TrainParams
from mcutrain import layers as L
from mcutrain.cli.commands import main
from mcutrain.modelfile import decode_model, encode_model, load_model
from mcutrain.modelschema import HEADER, METADATA, Field, check, schema_rows
from mcutrain.run import RunSettings
from mcutrain.sources import DataSettings


def full_model_bytes() -> bytes:
    """A valid model file with an Adam optimizer and every metadata section the project writes."""
    net = Sequential(L.Linear(4, 5), L.Tanh(), L.Linear(5, 2), L.Softmax()).rand_params(seed=2)
    opt = net.new_adam(TrainParams(lr=0.01))
    run = RunSettings(data=DataSettings(problem="parity4"), loss="cross_entropy", batch=8, steps=20, seed=3)
    meta = {
        "loss": "cross_entropy",
        "train": {**run.to_dict(), "batches": 10, "data_crc": None},
        "imported": {"from": "net.onnx", "format": "onnx"},
        "device": {"hash": "ab" * 8, "board": "native", "step": 4, "port": "/dev/ttyACM0"},
        "fleet": {"round": 2, "strategy": "fedavg", "devices": 4, "answered": 3, "test_accuracy": 0.5},
    }
    return encode_model(net, opt, meta)


GOOD = full_model_bytes()

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.sampled_from([-1, 0, 1, 2.5, "", "x", "mse", "parity4", "<f4", [1], [], {}])
    | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=8,
)


def paths(v: Any, prefix: tuple = ()) -> List[tuple]:
    """Every path (tuple of keys/indices) into a parsed JSON value, the value itself first."""
    out = [prefix]
    if isinstance(v, dict):
        for k, x in v.items():
            out += paths(x, prefix + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += paths(x, prefix + (i,))
    return out


def mutate(data: st.DataObject) -> bytes:
    """GOOD with one field of its header replaced by a random value, deleted, or a random key added to a table
    (the checksum made valid). Fields under `metadata` are drawn half of the time, since they are what the
    commands read after loading."""
    version, header, payload = split(GOOD)
    every = [p for p in paths(header) if p]
    meta = [p for p in every if p[0] == "metadata"]
    path = data.draw(st.sampled_from(meta) if data.draw(st.booleans()) else st.sampled_from(every))
    parent = header
    for k in path[:-1]:
        parent = parent[k]
    action = data.draw(st.sampled_from(["replace", "replace", "delete", "add"]))
    if action == "replace":
        parent[path[-1]] = data.draw(JSON)
    elif action == "delete" and isinstance(parent, dict):
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[data.draw(st.text(max_size=6))] = data.draw(JSON)
    return rebuild(version, json.dumps(header).encode(), payload)


def run_cli(args: List[str], cwd: Path) -> Any:
    """The command in this process, through the command line's error policy (no --debug)."""
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, args, catch_exceptions=True)
    finally:
        os.chdir(old)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_model_files_through_every_command(tmp_path_factory: pytest.TempPathFactory, data: Any) -> None:
    """info, eval, export, export-onnx and train --resume on a mutated model file: exit code 0 or a one-line
    error (exit code 1 or 3), never an exception the command line calls unexpected; a file the loader accepts
    is one whose every known field has its schema's type."""
    blob = mutate(data)
    tmp = tmp_path_factory.mktemp("m")
    model = tmp / "m.mct"
    model.write_bytes(blob)
    try:
        load_model(model)
    except ModelFileError as e:
        assert "header field" in str(e) or "architecture" in str(e) or "parameters" in str(e), str(e)
    commands = [
        ["info", str(model)],
        ["eval", str(model), "--samples", "16"],
        ["export", str(model), "--board", "native", "-o", str(tmp / "fw")],
        ["train", "--resume", str(model), "--steps", "12", "-o", str(tmp / "r.mct")],
    ]
    for args in commands:
        r = run_cli(args, tmp)
        assert r.exit_code in (0, 1, 3), (args, r.exit_code, r.output, r.exception)
        assert "please report" not in r.output and "Traceback" not in r.output, (args, r.output)
        if r.exit_code != 0:
            assert r.output.strip().count("\n") == 0 and r.output.startswith("error: "), (args, r.output)
    assert model.read_bytes() == blob  # nothing rewrote the file it read


@pytest.mark.parametrize(
    "field,value,words",
    [
        ("metadata.train", [1, 2], "metadata.train must be an object"),
        ("metadata.train.batch", -3, "metadata.train.batch must be a whole number from 1 to 2147483647, got -3"),
        ("metadata.train.batches", 2.5, "metadata.train.batches must be a whole number"),
        ("metadata.train.data", "parity4", "metadata.train.data must be an object"),
        ("metadata.train.data.classify", "yes", "metadata.train.data.classify must be true or false"),
        ("metadata.train.seed", "3", "metadata.train.seed must be a whole number"),
        ("metadata.train.val", 1.0, "metadata.train.val must be a finite number in [0, 1)"),
        ("metadata.train.data_crc", -1, "metadata.train.data_crc must be a whole number from 0 to 4294967295"),
        ("metadata.loss", 5, "metadata.loss must be a string"),
        ("metadata.loss", "x" * 5000, "metadata.loss must be a string of at most 4,096 characters"),
        ("metadata.imported", "onnx", "metadata.imported must be an object"),
        ("metadata.device.step", -1, "metadata.device.step must be a whole number"),
        ("metadata.fleet.test_accuracy", "high", "metadata.fleet.test_accuracy must be a finite number"),
        ("arrays.train_state.shape", [2], "arrays.train_state.shape must be [1] (one record), got [2]"),
        ("arrays.extra", {"offset": 0, "bytes": 0, "shape": [0], "dtype": "<f4"}, "arrays.extra is not one"),
        ("arrays.params.shape", "26", "arrays.params.shape must be a list"),
        ("arrays.params.shape", [True], "arrays.params.shape[0] must be a whole number"),
        ("n_params", -1, "n_params must be a whole number from 0"),
        ("mcutrain", 1.5, "header field mcutrain must be a string"),
    ],
)
def test_each_bad_field_is_named(field: str, value: Any, words: str) -> None:
    """A field of the wrong type, range or length in any section: ModelFileError naming it and its value."""
    version, header, payload = split(GOOD)
    *path, last = field.split(".")
    d = header
    for k in path:
        d = d[k]
    d[last] = value
    if field == "arrays.train_state.shape":  # two records where the optimizer has one, the bytes there
        payload += bytes(d["bytes"])
        d["bytes"] = 2 * d["bytes"]
    with pytest.raises(ModelFileError) as e:
        decode_model(rebuild(version, json.dumps(header).encode(), payload))
    assert words in str(e.value), str(e.value)


def test_unknown_keys_are_kept_and_missing_optional_fields_are_not_recorded() -> None:
    """A file from a newer mcutrain (an extra metadata section, an extra run setting) loads and keeps them;
    a file with no metadata at all loads with empty metadata."""
    version, header, payload = split(GOOD)
    header["metadata"]["normalization"] = {"mean": [0.0] * 4, "std": [1.0] * 4}
    header["metadata"]["train"]["future_setting"] = 7
    ck = decode_model(rebuild(version, json.dumps(header).encode(), payload))
    assert ck.metadata["normalization"]["std"] == [1.0] * 4 and ck.metadata["train"]["future_setting"] == 7
    del header["metadata"]
    assert decode_model(rebuild(version, json.dumps(header).encode(), payload)).metadata == {}


def test_the_schema_knows_every_field_the_project_writes() -> None:
    """Every field of every section of a file the project writes is listed in the schema (so a field added to
    what mcutrain writes without a line in the schema is caught here), and every listed field describes
    itself for the docs."""
    _, header, _ = split(GOOD)
    listed = {row[0] for row in schema_rows()}
    written = {".".join(str(k) for k in p) for p in paths(header) if p and not isinstance(p[-1], int)}
    written = {w for w in written if not w.startswith(("architecture.", "optimizer."))}
    assert written <= listed, sorted(written - listed)
    assert all(desc for _, desc, _, _ in schema_rows())
    assert set(METADATA) == {"loss", "train", "imported", "device", "fleet"} and "metadata" in HEADER


@settings(max_examples=300, deadline=None)
@given(value=st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(), st.lists, max_leaves=4))
def test_check_accepts_exactly_the_values_of_a_field(value: Any) -> None:
    """check() on a whole-number field from 1 to 10 and on a finite-number field: accepts a value iff it has
    the type and range (bools and NaN are refused)."""
    whole = Field("int", lo=1, hi=10)
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 10
    try:
        check(value, whole, "f")
        assert ok, value
    except ModelFileError:
        assert not ok, value
    real = Field("number", null=True)
    ok = value is None or (
        isinstance(value, (int, float)) and not isinstance(value, bool) and bool(np.isfinite(float(value)))
    )
    try:
        check(value, real, "f")
        assert ok, value
    except (ModelFileError, OverflowError):
        assert not ok, value
