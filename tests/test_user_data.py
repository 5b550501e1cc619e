"""Issue 26, "Data as users have it": text class labels (their names kept in the model and shown by eval, device
predict and the C API's example), CSV files separated by semicolons, errors that name the column (counted from 1)
by its header, input standardisation (--normalize: the statistics in the model file, applied the same way on the
device, folded into a frozen first layer where that keeps the function), and scikit-learn Pipelines of a scaler
and an MLP."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers import NativeFirmware, assert_same_bits, cli, cli_ok
from mcutrain.datasets import DataError, load_csv, split_indices
from mcutrain.exporter.client import Device
from mcutrain.modelfile import load_model

NAMES = np.array(["barolo", "grignolino", "barbera"])


@pytest.fixture(scope="module", autouse=True)
def tool_dirs(pio_core: Path) -> Path:
    return pio_core


def wine_csv(path: Path, sep: str = ";", decimal: str = ".") -> tuple:
    """scikit-learn's wine set as users have it: a header, the cultivar's name as the label, `sep` between cells
    and `decimal` as the decimal mark."""
    from sklearn.datasets import load_wine

    d = load_wine()
    with open(path, "w") as f:
        f.write(sep.join(d.feature_names + ["cultivar"]) + "\n")
        for row, t in zip(d.data, d.target):
            f.write(sep.join(f"{v:g}".replace(".", decimal) for v in row) + f"{sep}{NAMES[t]}\n")
    return d.data.astype(np.float32), NAMES[d.target]


def breast_cancer_csv(path: Path) -> tuple:
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    names = np.array(["malignant", "benign"])[d.target]
    with open(path, "w") as f:
        f.write(",".join(n.replace(" ", "_") for n in d.feature_names) + ",diagnosis\n")
        for row, name in zip(d.data, names):
            f.write(",".join(f"{v:g}" for v in row) + f",{name}\n")
    return d.data.astype(np.float32), names


# ---------------------------------------------------------------- text labels, delimiters, errors


def test_text_labels_in_a_semicolon_separated_file(tmp_path: Path) -> None:
    x, labels = wine_csv(tmp_path / "wine.csv")
    d = load_csv(tmp_path / "wine.csv", classify=True)
    assert d.classes == ["barbera", "barolo", "grignolino"]  # sorted names
    assert np.array_equal(np.array(d.classes)[d.y.argmax(axis=1)], labels)
    assert np.allclose(d.x, x)
    # a decimal comma where the delimiter is a semicolon reads the same numbers
    wine_csv(tmp_path / "comma.csv", decimal=",")
    assert np.array_equal(load_csv(tmp_path / "comma.csv", classify=True).x, d.x)
    m = str(tmp_path / "wine.mct")
    cli_ok(
        *f"train --net linear:13x8,tanh,linear:8x3,softmax --data {tmp_path}/wine.csv --normalize".split(),
        *f"--classify --epochs 20 -q -o {m}".split(),
    )
    assert load_model(m).metadata["classes"] == ["barbera", "barolo", "grignolino"]
    r = cli_ok("eval", m)
    assert "true \\ predicted  barbera  barolo  grignolino" in r.stdout
    assert json.loads(cli_ok("eval", m, "--json").stdout)["classes"] == d.classes
    # the model's classes map another file's labels, whatever labels that file has
    with open(tmp_path / "two.csv", "w") as f:
        f.write("\n".join(";".join(f"{v:g}" for v in x[i]) + f";{labels[i]}" for i in (0, 100)) + "\n")
    res = json.loads(cli_ok("eval", m, "--data", str(tmp_path / "two.csv"), "--classify", "--json").stdout)
    assert res["samples"] == 2
    want = [d.classes.index(labels[0]), d.classes.index(labels[100])]
    assert np.array(res["confusion"]).sum(axis=1)[want].tolist() == [1, 1]
    # without the project, device train cannot know which output a name is: it says so before connecting
    r = cli("device", "train", "--port", str(tmp_path / "no-port"), "--data", str(tmp_path / "wine.csv"), "--classify")
    assert r.exit_code == 1 and "the labels are names" in r.stderr and "--project" in r.stderr
    (tmp_path / "merlot.csv").write_text(";".join(f"{v:g}" for v in x[0]) + ";merlot\n")
    r = cli("eval", m, "--data", str(tmp_path / "merlot.csv"), "--classify")
    assert r.exit_code == 1 and "label 'merlot' (sample 1) is not one of the model's classes" in r.stderr


def test_csv_errors_name_the_column_from_1_and_its_header(tmp_path: Path) -> None:
    wine_csv(tmp_path / "wine.csv")
    lines = (tmp_path / "wine.csv").read_text().splitlines()
    cells = lines[2].split(";")
    cells[1] = "n/a"
    lines[2] = ";".join(cells)
    (tmp_path / "bad.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"line 3, column 2 \(malic_acid\): 'n/a' is not a number"):
        load_csv(tmp_path / "bad.csv", classify=True)
    r = cli("train", "--net", "linear:13x3,softmax", "--data", str(tmp_path / "wine.csv"), "-o", str(tmp_path / "m"))
    assert r.exit_code == 1
    assert "target column 14 (cultivar) holds text such as 'barolo'" in r.stderr and "add --classify" in r.stderr


# ---------------------------------------------------------------- --normalize


def test_normalize_stores_the_statistics_and_int8_keeps_the_outputs(tmp_path: Path) -> None:
    x, _ = breast_cancer_csv(tmp_path / "bc.csv")
    net = "linear:30x16,tanh,linear:16x2,softmax"
    raw = cli_ok(*f"train --net {net} --data {tmp_path}/bc.csv --classify --epochs 20 -q -o {tmp_path}/raw.mct".split())
    assert "the inputs' scales differ" in raw.stderr and "--normalize" in raw.stderr  # a warning, with the remedy
    std = cli_ok(
        *f"train --net {net} --data {tmp_path}/bc.csv --classify --epochs 20 --normalize -q".split(),
        "-o",
        str(tmp_path / "std.mct"),
    )
    assert "scales differ" not in std.stderr
    step = load_model(tmp_path / "std.mct").metadata["input_steps"][0]
    train_rows = split_indices(len(x), 0.1, 0)[0]
    x64 = x[train_rows].astype(np.float64)
    assert np.allclose(step["mean"], x64.mean(axis=0), rtol=1e-6)
    assert np.allclose(step["scale"], 1 / x64.std(axis=0), rtol=1e-6)
    r = cli_ok("eval", str(tmp_path / "std.mct"), "--quant", "int8", "--trainable", "last:1", "--json")
    q = json.loads(r.stdout)["quantization"]
    # standardised inputs: the int8 weights move the outputs little, and the accuracy is that of the f32 model
    assert 0 < q["max_abs_diff"] < 0.05
    assert q["f32_accuracy"] >= 0.9 and abs(q["device_accuracy"] - q["f32_accuracy"]) <= 0.02


def test_the_device_model_takes_raw_inputs_folded_or_not(tmp_path: Path) -> None:
    from mcutrain.exporter.device import build_device_model
    from mcutrain.exporter.twin import DeviceTwin
    from mcutrain.inputsteps import host_forward

    x, _ = breast_cancer_csv(tmp_path / "bc.csv")
    cli_ok(
        *f"train --net linear:30x8,tanh,linear:8x2,softmax --data {tmp_path}/bc.csv --classify --epochs 3".split(),
        *f"--normalize -q -o {tmp_path}/m.mct".split(),
    )
    ck = load_model(tmp_path / "m.mct")
    want = host_forward(ck, x[:64])
    # the first layer trains on the device: the firmware standardises (2 frozen layers), bit for bit the host's
    m = build_device_model(ck, "all")
    assert "applied by the firmware" in m.input_steps and m.program.n_params == ck.net.param_count() + 60
    assert_same_bits(DeviceTwin(m).predict(x[:64]), want, "device model with the standardisation in front")
    # the first layer stays frozen in f32: the standardisation is folded into it (the same function)
    m = build_device_model(ck, "last:1")
    assert "folded" in m.input_steps and len(m.program.layers) == len(ck.net.program.layers)
    assert np.max(np.abs(DeviceTwin(m).predict(x[:64]) - want)) < 1e-5


def test_a_normalized_model_with_text_labels_on_the_device(tmp_path: Path) -> None:
    """The native firmware standardises raw inputs exactly as the host, trains, is pulled and pushed without
    losing the statistics, and `device predict --project` names the classes."""
    from mcutrain.exporter.device import build_device_model
    from mcutrain.exporter.twin import DeviceTwin
    from mcutrain.inputsteps import host_forward

    x, labels = wine_csv(tmp_path / "wine.csv")
    m = tmp_path / "m.mct"
    cli_ok(
        *f"train --net linear:13x8,tanh,linear:8x3,softmax --data {tmp_path}/wine.csv --classify --normalize".split(),
        *f"--epochs 10 -q -o {m}".split(),
    )
    fw = tmp_path / "fw"
    r = cli_ok("export", str(m), "--board", "native", "-o", str(fw))
    assert "standardisation applied by the firmware" in r.stdout
    cli_ok("build", str(fw))
    ck = load_model(m)
    dev = NativeFirmware(fw, tmp_path / "store.bin")
    try:
        with Device.open(dev.port) as d:
            assert_same_bits(d.predict(x[:20]), host_forward(ck, x[:20]), "device on raw inputs")
        np.savetxt(tmp_path / "in.csv", x[:5], delimiter=",", fmt="%g")
        args = ["--port", dev.port, "--project", str(fw), "--data", str(tmp_path / "in.csv"), "--argmax"]
        out = cli_ok("device", "predict", *args).stdout.splitlines()
        assert out[0] == "barbera,barolo,grignolino,class"
        sent = np.loadtxt(tmp_path / "in.csv", delimiter=",", dtype=np.float32)
        want = [ck.metadata["classes"][k] for k in host_forward(ck, sent).argmax(axis=1)]
        assert [line.split(",")[-1] for line in out[1:]] == want
        cli_ok(
            "device",
            "train",
            "--port",
            dev.port,
            "--project",
            str(fw),
            "--data",
            str(tmp_path / "wine.csv"),
            "--classify",
            "--samples",
            "40",
            "-q",
        )
        cli_ok("device", "pull", "--port", dev.port, "--project", str(fw), "-o", str(tmp_path / "learned.mct"))
        learned = load_model(tmp_path / "learned.mct")
        twin = DeviceTwin(build_device_model(ck, "all"))
        rows = np.sort(split_indices(178, 0.1, 0)[0])[:40]
        t = np.eye(3, dtype=np.float32)[[ck.metadata["classes"].index(v) for v in labels[rows]]]
        for xi, ti in zip(x[rows], t):
            twin.train(xi, ti)
        assert_same_bits(learned.net.params, twin.model.to_host_params(twin.params, ck.net.params), "pulled")
        # push the exported weights back: the statistics in the device's RAM stay as they were
        cli_ok("device", "push", "--port", dev.port, "--project", str(fw), "--model", str(m))
        with Device.open(dev.port) as d:
            assert_same_bits(d.predict(x[:20]), host_forward(ck, x[:20]), "device after a push")
    finally:
        dev.close()


def test_the_c_example_names_the_class(tmp_path: Path) -> None:
    wine_csv(tmp_path / "wine.csv")
    m = tmp_path / "m.mct"
    cli_ok(
        *f"train --net linear:13x8,tanh,linear:8x3,softmax --data {tmp_path}/wine.csv --classify".split(),
        *f"--epochs 2 -q -o {m}".split(),
    )
    lib = tmp_path / "lib"
    cli_ok("export", str(m), "--board", "native", "--library", "-o", str(lib))
    assert 'MCT_MODEL_CLASS_NAMES {"barbera", "barolo", "grignolino"}' in (lib / "src" / "model.h").read_text()
    src = lib / "src"
    exe = tmp_path / "example"
    sources = [*sorted(src.glob("*.c")), src / "ports" / "port_posix.c", lib / "examples" / "plain_c" / "main.c"]
    flags = ["-std=c99", "-O1", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-pedantic", "-DSTEPS=300"]
    subprocess.run(["gcc", *flags, "-DMCT_PORT_POSIX", f"-I{src}", *map(str, sources), "-o", str(exe)], check=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True, env={"MCUTRAIN_STORE": str(tmp_path / "s.bin")})
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("the last reading is ") and last[20:] in NAMES, r.stdout


# ---------------------------------------------------------------- scikit-learn Pipelines


def test_a_scikit_learn_pipeline_of_a_scaler_and_an_mlp_imports(tmp_path: Path) -> None:
    import joblib
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, StandardScaler

    from mcutrain.errors import ImportModelError
    from mcutrain.exporter import checkpoint_from_sklearn, from_sklearn
    from mcutrain.inputsteps import host_forward

    x, labels = wine_csv(tmp_path / "wine.csv")
    for scaler in (StandardScaler(), MinMaxScaler()):
        pipe = make_pipeline(scaler, MLPClassifier((10,), max_iter=2000, random_state=0)).fit(x, labels)
        joblib.dump(pipe, tmp_path / "pipe.joblib")
        r = cli_ok("import", str(tmp_path / "pipe.joblib"), "--trust-pickle", "-o", str(tmp_path / "p.mct"), "--force")
        assert type(scaler).__name__ in r.stdout
        ck = load_model(tmp_path / "p.mct")
        assert ck.metadata["classes"] == list(pipe.classes_)
        got = host_forward(ck, x)
        assert np.max(np.abs(got - pipe.predict_proba(x))) < 1e-5
        assert np.array_equal(np.array(ck.metadata["classes"])[got.argmax(axis=1)], pipe.predict(x))
        assert np.max(np.abs(host_forward(checkpoint_from_sklearn(pipe), x) - got)) == 0
        with pytest.raises(ImportModelError, match="Pipeline with a scaler"):
            from_sklearn(pipe)
    # the ONNX export takes the raw inputs too
    ort = pytest.importorskip("onnxruntime")
    cli_ok("export-onnx", str(tmp_path / "p.mct"), "-o", str(tmp_path / "p.onnx"))
    s = ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    y = s.run(None, {"x": x})[0]
    assert np.max(np.abs(y - pipe.predict_proba(x))) < 1e-5
    # and evaluating on the user's own file gives the Pipeline's accuracy
    res = json.loads(
        cli_ok("eval", str(tmp_path / "p.mct"), "--data", str(tmp_path / "wine.csv"), "--classify", "--json").stdout
    )
    assert res["accuracy"] == pytest.approx(float(np.mean(pipe.predict(x) == labels)))
