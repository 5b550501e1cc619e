"""Issue 26, "The model file remembers": the loss and data settings of an imported model, the export a model
pulled from a device came from (so `eval` reports what the device computes and a second `export` repeats it),
step counters that say whose steps they count, one --trainable default for eval and export, and an `eval` that
knows which of its samples the device trained on (the held-out split is not sent to the device)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from helpers import NativeFirmware, cli_ok
from mcutrain.datasets import split_indices
from mcutrain.modelfile import load_model


@pytest.fixture(scope="module", autouse=True)
def tool_dirs(pio_core: Path) -> Path:
    return pio_core


def write_wine(path: Path) -> tuple:
    """scikit-learn's wine set, standardised by hand (so a small network learns it in a few epochs), as a CSV with
    a header and integer labels."""
    from sklearn.datasets import load_wine

    d = load_wine()
    x = (d.data - d.data.mean(axis=0)) / d.data.std(axis=0)
    with open(path, "w") as f:
        f.write(",".join([f"f{i}" for i in range(13)] + ["label"]) + "\n")
        for row, label in zip(x, d.target):
            f.write(",".join(f"{v:.5f}" for v in row) + f",{label}\n")
    return x.astype(np.float32), d.target


def test_resume_of_an_imported_model_uses_its_loss_and_the_usual_validation_split(tmp_path: Path) -> None:
    import joblib
    from sklearn.neural_network import MLPClassifier

    x, labels = write_wine(tmp_path / "wine.csv")
    mlp = MLPClassifier(hidden_layer_sizes=(8,), max_iter=2000, random_state=0).fit(x, labels)
    joblib.dump(mlp, tmp_path / "mlp.joblib")
    cli_ok("import", str(tmp_path / "mlp.joblib"), "--trust-pickle", "-o", str(tmp_path / "m.mct"))
    assert load_model(tmp_path / "m.mct").metadata["loss"] == "cross_entropy"
    r = cli_ok(
        *f"train --resume {tmp_path}/m.mct --data {tmp_path}/wine.csv --classify --steps 30 -q".split(),
        "-o",
        str(tmp_path / "tuned.mct"),
    )
    assert "cross_entropy" in r.stdout and "mse" not in r.stdout
    assert "validation accuracy" in r.stdout
    assert "no validation split" not in r.stderr and "differ from the saved run" not in r.stderr
    run = load_model(tmp_path / "tuned.mct").metadata["train"]
    assert run["loss"] == "cross_entropy" and run["val"] == 0.1 and run["batches"] == 30
    # the imported model's record stays with it
    assert load_model(tmp_path / "tuned.mct").metadata["imported"]["format"] == "joblib"


def test_eval_and_export_default_trainable_the_same_way(tmp_path: Path) -> None:
    write_wine(tmp_path / "wine.csv")
    m = str(tmp_path / "m.mct")
    cli_ok(
        *f"train --net linear:13x8,relu,linear:8x3,softmax --data {tmp_path}/wine.csv --classify".split(),
        *f"--epochs 5 -q -o {m}".split(),
    )
    r = cli_ok("eval", m, "--quant", "int8", "--json")
    ev = json.loads(r.stdout)
    cli_ok("export", m, "--board", "native", "--quant", "int8", "-o", str(tmp_path / "fw"))
    meta = json.loads((tmp_path / "fw" / "mcutrain.json").read_text())
    assert ev["trainable"] == meta["trainable"] == "all"
    # both say that nothing was quantized, and what to add
    assert "nothing is quantized" in r.stderr and "--trainable last:1" in r.stderr


@pytest.fixture
def pulled_setup(tmp_path: Path) -> Iterator[tuple]:
    """A wine model exported for the native board with int8 weights and only the last layer trainable, built,
    running; yields (tmp_path, model, project, device)."""
    x, labels = write_wine(tmp_path / "wine.csv")
    m = tmp_path / "m.mct"
    cli_ok(
        *f"train --net linear:13x12,tanh,linear:12x3,softmax --data {tmp_path}/wine.csv --classify".split(),
        *f"--epochs 4 --lr 0.005 -q -o {m}".split(),
    )
    fw = tmp_path / "fw"
    cli_ok("export", str(m), "--board", "native", "--quant", "int8", "--trainable", "last:1", "-o", str(fw))
    cli_ok("build", str(fw))
    dev = NativeFirmware(fw, tmp_path / "store.bin")
    try:
        yield tmp_path, m, fw, dev
    finally:
        dev.close()


def test_a_pulled_model_remembers_its_export_and_what_the_device_trained_on(pulled_setup: tuple) -> None:
    tmp, m, fw, dev = pulled_setup
    data = str(tmp / "wine.csv")
    train, held = split_indices(178, 0.1, 0)
    r = cli_ok("device", "train", "--port", dev.port, "--project", str(fw), "--data", data, "--classify", "-q")
    # the 18 rows the model holds out are not sent
    assert f"trained on {len(train)} samples" in r.stdout and "left out the 10%" in r.stderr
    learned = str(tmp / "learned.mct")
    cli_ok("device", "pull", "--port", dev.port, "--project", str(fw), "-o", learned)
    ck = load_model(learned)
    assert ck.metadata["device"]["quant"] == "int8" and ck.metadata["device"]["trainable"] == "last:1"
    assert ck.metadata["device"]["trained_on"][0]["count"] == len(train)

    # eval reports what the device computes on the held-out rows: its int8 model with the trained last layer
    ev = json.loads(cli_ok("eval", learned, "--json").stdout)
    assert ev["quant"] == "int8" and ev["trainable"] == "last:1" and ev["samples"] == len(held)
    np.savetxt(tmp / "held.csv", np.loadtxt(data, delimiter=",", skiprows=1)[np.sort(held), :13], delimiter=",")
    out = cli_ok("device", "predict", "--port", dev.port, "--data", str(tmp / "held.csv"), "--argmax").stdout
    predicted = np.array([int(line.split(",")[-1]) for line in out.strip().splitlines()[1:]])
    labels = np.loadtxt(data, delimiter=",", skiprows=1)[np.sort(held), 13].astype(int)
    assert ev["accuracy"] == pytest.approx(float(np.mean(predicted == labels)))
    assert "trained_on_by_device" not in ev  # the held-out rows were not sent
    text = cli_ok("eval", learned)
    assert "as exported to native (--quant int8 --trainable last:1)" in text.stdout
    assert "device trained on" not in text.stderr

    # on the whole file, eval says how many of its samples the device trained on
    r = cli_ok("eval", learned, "--data", data, "--classify")
    assert f"the device trained on {len(train)} of these 178 samples" in r.stderr

    # step counters say whose steps they count
    info = cli_ok("info", learned).stdout
    assert f"step {len(train)} (the device's count)" in info
    assert "20 of 20 steps on the host" in info and f"then        {len(train)} steps on the device" in info

    # a second export repeats the first unless told otherwise
    r = cli_ok("export", learned, "-o", str(tmp / "fw2"))
    meta2 = json.loads((tmp / "fw2" / "mcutrain.json").read_text())
    meta1 = json.loads((fw / "mcutrain.json").read_text())
    for key in ("board", "quant", "trainable", "device_optimizer", "save"):
        assert meta2[key] == meta1[key], key
    assert "--quant int8 --trainable last:1" in r.stderr
    r = cli_ok("export", learned, "--trainable", "all", "-o", str(tmp / "fw3"))
    assert json.loads((tmp / "fw3" / "mcutrain.json").read_text())["trainable"] == "all"
