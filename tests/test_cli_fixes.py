"""Regression tests for the bugs fixed after the review of the command line and the trainer: CSV column
numbers that wrapped round, malformed CSV files, resuming with only a data option (and the note that
blamed the wrong thing), the training log's step cadence and its 'end' record, NaN/inf table cells,
the loss mean of the core, calibration files with target columns, and the device commands that mixed
up models or optimizer states (against the native firmware over a pty)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pytest
from click.testing import Result

from helpers import NativeFirmware, cli
from mcutrain import Sequential, TrainParams, losses, train_batch
from mcutrain import layers as L
from mcutrain.cli.common import table
from mcutrain.datasets import DataError, load_csv
from mcutrain.modelfile import load_model
from mcutrain.optim import ConfigError
from mcutrain.recorder import Recorder, read_log
from mcutrain.sources import load_inputs

EXIT_ERROR, EXIT_INTERRUPTED = 1, 130
SMALL = "linear:3x8,tanh,linear:8x3,softmax"


# ---------------------------------------------------------------- helpers


def assert_error(r: Result, *words: str) -> None:
    """Exit code 1 with one 'error: ...' line on stderr that contains every word, and no traceback."""
    assert r.exit_code == EXIT_ERROR, (r.exit_code, r.output)
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Identical float32 arrays, bit for bit."""
    a, b = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def write_csv(path: Path, rows: Sequence[Sequence[object]]) -> Path:
    """Write rows as they are (so malformed files can be written too)."""
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    return path


def write_blobs(path: Path, n: int = 200, seed: int = 7) -> np.ndarray:
    """A CSV with a header, 3 features and a class label (the largest feature's index); returns the
    features as float32 (n, 3), as the file holds them."""
    x = np.round(np.random.default_rng(seed).uniform(-1, 1, (n, 3)), 6)
    write_csv(path, [["f0", "f1", "f2", "label"]] + [[*(f"{v:.6f}" for v in row), int(np.argmax(row))] for row in x])
    return x.astype(np.float32)


def compare_checkpoints(a: Path, b: Path) -> None:
    """Two model files hold the same parameters and optimizer state, bit for bit."""
    ca, cb = load_model(a), load_model(b)
    assert same_bits(ca.net.params, cb.net.params)
    assert same_bits(ca.optimizer.state, cb.optimizer.state)
    assert ca.optimizer.step == cb.optimizer.step


def modadd_samples(n: int, seed: int) -> tuple:
    """n samples of addition mod 10 (two one-hot digits in, the sum's digit out): x (n, 20), labels (n,)."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 10, n), rng.integers(0, 10, n)
    x = np.zeros((n, 20), np.float32)
    x[np.arange(n), a] = 1
    x[np.arange(n), 10 + b] = 1
    return x, (a + b) % 10


# ---------------------------------------------------------------- CSV columns and malformed files


def test_column_numbers_past_the_end_are_rejected_not_wrapped(tmp_path: Path) -> None:
    f = write_csv(tmp_path / "five.csv", [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    with pytest.raises(DataError, match="target column 7 does not exist"):
        load_csv(f, targets="7")
    with pytest.raises(DataError, match="column -6 does not exist"):
        load_csv(f, targets="-6")
    with pytest.raises(DataError, match="input column 5 does not exist"):
        load_csv(f, inputs="0,5", targets="4")
    # negative numbers still count from the end
    d = load_csv(f, targets="-5")
    assert np.array_equal(d.y[:, 0], [1, 6]) and np.array_equal(d.x, [[2, 3, 4, 5], [7, 8, 9, 10]])
    assert np.array_equal(load_csv(f).y[:, 0], [5, 10])
    with pytest.raises(DataError, match="input column 9 does not exist"):
        load_inputs(str(f), 2, inputs="0,9")
    r = cli("train", "--net", "linear:4x1", "--data", str(f), "--targets", "7", "--steps", "1")
    assert_error(r, "target column 7 does not exist", "5 columns")


def test_malformed_csv_files_say_what_is_wrong(tmp_path: Path) -> None:
    ragged = write_csv(tmp_path / "ragged.csv", [["a", "b", "c"], [1, 2, 3], [4, 5], [6, 7, 8]])
    with pytest.raises(DataError, match=r"line 3 has 2 columns, line 2 has 3"):
        load_csv(ragged)
    header_only = write_csv(tmp_path / "header.csv", [["a", "b", "c"]])
    with pytest.raises(DataError, match="header row but no samples"):
        load_csv(header_only)
    words = write_csv(tmp_path / "words.csv", [[1, 2, 3], [4, "five", 6]])
    with pytest.raises(DataError, match=r"line 2, column 2: 'five' is not a number"):
        load_csv(words)
    empty = tmp_path / "empty.csv"
    empty.write_text("\n\n")
    with pytest.raises(DataError, match="is empty"):
        load_csv(empty)
    # the inputs-only reader (device predict, calibration) gives the same messages
    with pytest.raises(DataError, match="line 3 has 2 columns"):
        load_inputs(str(ragged), 3)
    with pytest.raises(DataError, match="no samples"):
        load_inputs(str(header_only), 3)
    r = cli("train", "--net", "linear:2x1", "--data", str(ragged), "--steps", "1")
    assert_error(r, "line 3 has 2 columns")
    assert "setting an array element" not in r.stderr


def test_table_cells_with_nan_and_inf() -> None:
    text = table(["value"], [[float("nan")], [float("inf")], [float("-inf")], [2.0], [0.125]])
    assert text.splitlines()[2:] == ["  nan", "  inf", " -inf", "    2", "0.125"]


# ---------------------------------------------------------------- losses


def test_loss_mean_is_the_cores_float32_batch_mean() -> None:
    rng = np.random.default_rng(3)
    net = Sequential(L.Linear(5, 4), L.Softmax())
    net.rand_params(2)
    x = rng.normal(size=(37, 5)).astype(np.float32)
    t = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 37)]
    y = net.forward(x)
    value, _ = losses.cross_entropy(y, t)
    total = np.float32(0)
    for i in range(len(x)):  # each sample's loss from the core, summed in float32 in sample order
        total = np.float32(total + np.float32(losses.cross_entropy(y[i], t[i])[0]))
    assert value == float(total / np.float32(len(x)))
    # and the very value a training step reports for the same batch
    assert train_batch(TrainParams(lr=0.01), net, losses.cross_entropy, x, t) == value


def test_unknown_loss_names_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown loss"):
        losses.by_name("nope")
    with pytest.raises(ConfigError, match="huber:BETA"):
        losses.by_name("huber:-1")
    assert_error(cli("train", "--loss", "nope", "--steps", "1", "-o", str(tmp_path / "m.mct")), "unknown loss 'nope'")
    assert not (tmp_path / "m.mct").exists()


# ---------------------------------------------------------------- resuming


def test_resume_with_only_a_data_option(tmp_path: Path) -> None:
    data = tmp_path / "blobs.csv"
    write_blobs(data)
    common = ["--net", SMALL, "--data", str(data), "--classify", "--steps", "40", "--batch", "16", "--seed", "2"]
    assert cli("train", *common, "-o", str(tmp_path / "a.mct"), "-q").exit_code == 0
    assert cli("train", *common, "-o", str(tmp_path / "b.mct"), "--stop-after", "15").exit_code == EXIT_INTERRUPTED
    # --classify alone keeps the stored file: the run continues exactly, without a note
    r = cli("train", "--resume", str(tmp_path / "b.mct"), "--classify", "-q")
    assert r.exit_code == 0, r.output
    assert "note" not in r.stderr
    compare_checkpoints(tmp_path / "a.mct", tmp_path / "b.mct")
    # another setting of the stored source is named in the note (and only it)
    assert cli("train", *common, "-o", str(tmp_path / "c.mct"), "--stop-after", "15").exit_code == EXIT_INTERRUPTED
    r = cli("train", "--resume", str(tmp_path / "c.mct"), "--targets", "label", "-q")
    assert r.exit_code == 0, r.output
    assert "--targets differ from the saved run" in r.stderr and "--data" not in r.stderr
    assert load_model(tmp_path / "c.mct").metadata["train"]["data"]["path"] == str(data.resolve())


def test_resume_note_names_the_data_change_not_the_new_file(tmp_path: Path) -> None:
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    write_blobs(first, seed=1)
    write_blobs(second, seed=2)
    common = ["--net", SMALL, "--data", str(first), "--classify", "--steps", "30", "--batch", "16"]
    for name in ("m1.mct", "m2.mct"):
        assert cli("train", *common, "-o", str(tmp_path / name), "--stop-after", "5").exit_code == EXIT_INTERRUPTED
    r = cli("train", "--resume", str(tmp_path / "m1.mct"), "--data", str(second), "--classify", "-q")
    assert r.exit_code == 0, r.output
    assert "--data/--problem differ from the saved run" in r.stderr
    assert "the contents of" not in r.stderr
    # the same file with other contents: that is what the note names
    write_blobs(first, seed=3)
    r = cli("train", "--resume", str(tmp_path / "m2.mct"), "-q")
    assert r.exit_code == 0, r.output
    assert f"the contents of {first.resolve()} differ" in r.stderr and "--data" not in r.stderr


# ---------------------------------------------------------------- the training log


def test_recorder_every_and_end(tmp_path: Path) -> None:
    log = tmp_path / "r.jsonl"
    rec = Recorder(log, every=3)
    rec.start(note="x")
    for step in range(1, 8):
        rec.step(step, 0.5, 0.1, force=step == 7)
    rec.end(step=7)
    assert rec._f is None  # end() closes the file
    events = [(r["event"], r.get("step")) for r in read_log(log)]
    assert events == [("start", None), ("step", 3), ("step", 6), ("step", 7), ("end", 7)]


def test_training_log_cadence_and_end_record(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    base = [
        "--net",
        "linear:8x4,tanh,linear:4x2,softmax",
        "--problem",
        "parity8",
        "--steps",
        "30",
        "--log-every",
        "7",
        "--eval-every",
        "10",
    ]
    assert (
        cli("train", *base, "-o", str(tmp_path / "m.mct"), "--log", str(log), "--stop-after", "12").exit_code
        == EXIT_INTERRUPTED
    )
    recs = read_log(log)
    assert recs[-1]["event"] == "end" and recs[-1]["step"] == 12 and recs[-1]["interrupted"] is True
    assert cli("train", "--resume", str(tmp_path / "m.mct"), "--log", str(log), "-q").exit_code == 0
    recs = read_log(log)
    assert [r["event"] for r in recs if r["event"] != "step"] == ["start", "end", "start", "end"]
    steps = [r["step"] for r in recs if r["event"] == "step"]
    # every 7th step, plus the steps that validated (every 10th) and the last one
    assert steps == [7, 10, 14, 20, 21, 28, 30]
    assert all("val_accuracy" in r for r in recs if r["event"] == "step" and r["step"] % 10 == 0)
    end = recs[-1]
    assert end["step"] == 30 and end["interrupted"] is False and "val_accuracy" in end


# ---------------------------------------------------------------- calibration files


def test_calibration_csv_laid_out_like_the_training_data(tmp_path: Path) -> None:
    data = tmp_path / "blobs.csv"
    x = write_blobs(data, n=120)
    m = tmp_path / "m.mct"
    assert (
        cli("train", "--net", SMALL, "--data", str(data), "--classify", "--steps", "60", "-o", str(m), "-q").exit_code
        == 0
    )
    proj = tmp_path / "p"
    r = cli(
        "export",
        str(m),
        "--board",
        "native",
        "--quant",
        "int8-full",
        "--trainable",
        "last:1",
        "--calibration",
        str(data),
        "-o",
        str(proj),
    )
    assert r.exit_code == 0, r.output
    with np.load(proj / "calibration.npz") as z:
        assert same_bits(z["x"], x)  # the inputs, without the label column
    r = cli("eval", str(m), "--quant", "int8-full", "--trainable", "last:1", "--calibration", str(data), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["quantization"]["quant"] == "int8-full"
    # a file that fits neither layout: the message does not point to --inputs, which export does not have
    wide = write_csv(tmp_path / "wide.csv", [[1, 2, 3, 4, 5]] * 4)
    r = cli(
        "export",
        str(m),
        "--board",
        "native",
        "--quant",
        "int8-full",
        "--trainable",
        "last:1",
        "--calibration",
        str(wide),
        "-o",
        str(tmp_path / "q"),
    )
    assert_error(r, "wide.csv has 4 input values per sample, the model takes 3")
    assert "--inputs" not in r.stderr


# ---------------------------------------------------------------- device commands over a pty


@pytest.fixture(scope="module", autouse=True)
def tool_dirs(pio_core: Path) -> Path:
    """The session's own PlatformIO core folder (conftest.pio_core)."""
    return pio_core


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A modadd10 model (Adam) exported for the native board and built; the project folder."""
    work = tmp_path_factory.mktemp("fixes")
    model = work / "model.mct"
    assert cli("train", "--steps", "200", "-o", str(model), "-q").exit_code == 0
    proj = work / "fw"
    r = cli("export", str(model), "--board", "native", "-o", str(proj))
    assert r.exit_code == 0, r.output
    r = cli("build", str(proj))
    assert r.exit_code == 0, r.output
    return proj


@pytest.fixture
def device(exported: Path, tmp_path: Path) -> Iterator[NativeFirmware]:
    d = NativeFirmware(exported, tmp_path / "store.bin")
    yield d
    d.close()


def train_model(out: Path, *args: str) -> Path:
    """A model trained briefly on modadd10 with the given options."""
    r = cli("train", "--problem", "modadd10", "--steps", "20", "--seed", "5", "-o", str(out), "-q", *args)
    assert r.exit_code == 0, r.output
    return out


def test_pull_checks_the_model(device: NativeFirmware, exported: Path, tmp_path: Path) -> None:
    other = train_model(tmp_path / "other.mct", "--net", "linear:20x12,sigmoid,linear:12x10,softmax")
    out = tmp_path / "pulled.mct"
    r = cli("device", "pull", "--port", device.port, "--project", str(exported), "--model", str(other), "-o", str(out))
    assert_error(r, "not the one exported to")
    assert not out.exists()
    r = cli("device", "push", "--port", device.port, "--project", str(exported), "--model", str(other))
    assert_error(r, "not the one exported to")


def test_optimizer_state_of_another_kind_is_neither_pulled_nor_pushed(
    device: NativeFirmware, exported: Path, tmp_path: Path
) -> None:
    # rmsprop_momentum keeps two slots per parameter, as the device's Adam does
    other = train_model(tmp_path / "rmsm.mct", "--opt", "rmsprop_momentum")
    x, labels = modadd_samples(6, seed=1)
    write_csv(tmp_path / "train.csv", [[*row, lab] for row, lab in zip(x.astype(int), labels)])
    assert (
        cli(
            "device", "train", "--port", device.port, "--data", str(tmp_path / "train.csv"), "--classify", "-q"
        ).exit_code
        == 0
    )
    params, state, ts = device.regions()
    out = tmp_path / "pulled.mct"
    r = cli("device", "pull", "--port", device.port, "--project", str(exported), "--model", str(other), "-o", str(out))
    assert r.exit_code == 0, r.output
    assert "optimizer state was not pulled" in r.stdout
    pulled, before = load_model(out), load_model(other)
    assert same_bits(pulled.net.params, params)  # every parameter lives in RAM (trainable all)
    assert pulled.optimizer.kind == "rmsprop_momentum"
    assert same_bits(pulled.optimizer.state, before.optimizer.state)
    assert pulled.optimizer.step == before.optimizer.step
    r = cli("device", "push", "--port", device.port, "--project", str(exported), "--model", str(other), "--with-state")
    assert r.exit_code == 0, r.output
    assert "optimizer state was not sent" in r.stderr
    p2, s2, ts2 = device.regions()
    assert same_bits(p2, before.net.params)  # the parameters were sent
    assert same_bits(s2, state) and np.array_equal(ts2, ts)  # the device's Adam state was left alone


def test_device_train_width_messages(device: NativeFirmware, tmp_path: Path) -> None:
    x, labels = modadd_samples(4, seed=2)
    f = write_csv(tmp_path / "labels.csv", [[*row, lab] for row, lab in zip(x.astype(int), labels)])
    r = cli("device", "train", "--port", device.port, "--data", str(f))
    assert_error(r, "the device's model outputs 10 values", "use data that fits the exported model", "add --classify")
    r = cli("device", "train", "--port", device.port, "--problem", "parity8")
    assert_error(r, "the device's model takes 20 inputs but", "use data that fits the exported model")


def test_device_predict_sends_a_batch(device: NativeFirmware, exported: Path, tmp_path: Path) -> None:
    x, _ = modadd_samples(9, seed=4)
    write_csv(tmp_path / "in.csv", x.astype(int).tolist())
    r = cli("device", "predict", "--port", device.port, "--data", str(tmp_path / "in.csv"))
    assert r.exit_code == 0, r.output
    got = np.array([line.split(",") for line in r.stdout.strip().splitlines()[1:]], np.float64).astype(np.float32)
    assert same_bits(got, load_model(exported / "model.mct").net.forward(x))


def test_sim_refuses_another_model_and_an_existing_report(exported: Path, tmp_path: Path) -> None:
    other = train_model(tmp_path / "other.mct")
    r = cli("sim", str(exported), "--model", str(other), "--no-build")
    assert_error(r, "is not the model exported to", "--model")
    report = tmp_path / "report.json"
    report.write_text("keep")
    r = cli("sim", str(exported), "--no-build", "--report", str(report))
    assert_error(r, "--force")
    assert report.read_text() == "keep"
