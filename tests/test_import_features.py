"""`mcutrain import --features SPEC`: a network of another framework whose inputs are features keeps the pipeline
in its model file, so `eval` takes raw data and the export computes the features on the device from raw windows.
PyTorch (through ONNX, onnxruntime-free: the module itself is the oracle) and a scikit-learn Pipeline with a
StandardScaler (the scaler becomes the front end's normalisation); the export runs on the native firmware."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from foreign_models import torch_onnx
from test_features_cli import AUDIO, word_folder

from helpers import assert_same_bits, cli, cli_ok

TOL = 1e-5  # mcutrain's summation order and exp against the source's: the last bits of float32


def _features(data: Path) -> tuple:
    """(features (n, 300) frame-major, labels, label names) of a word folder through the AUDIO pipeline."""
    from mcutrain.featdata import wav_folder
    from mcutrain.features import FeatureSpec

    spec = FeatureSpec.parse(AUDIO)
    x, y, names = wav_folder(data, spec)
    return spec.compute(x).reshape(len(x), -1), y, names, x


def test_torch_network_on_features_imports_with_its_pipeline_and_runs_on_raw_windows(
    tmp_path: Path, pio_core: Path
) -> None:
    import torch
    from torch import nn

    from mcutrain.exporter import sim
    from mcutrain.exporter.export import export_project
    from mcutrain.exporter.twin import DeviceTwin
    from mcutrain.featdata import FrontEnd
    from mcutrain.features import FeatureSpec
    from mcutrain.modelfile import load_model

    data = word_folder(tmp_path / "words", per_label=10)
    f, y, names, raw = _features(data)
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(300, 16), nn.ReLU(), nn.Linear(16, 3), nn.Softmax(dim=-1))
    opt = torch.optim.Adam(module.parameters(), lr=0.01)
    ft, yt = torch.from_numpy(f), torch.from_numpy(y)
    for _ in range(150):  # trained in PyTorch on mcutrain's features
        opt.zero_grad()
        nn.functional.nll_loss(torch.log(module(ft) + 1e-9), yt).backward()
        opt.step()
    src = torch_onnx(module, 300, tmp_path / "kws.onnx")
    out = tmp_path / "kws.mct"
    r = cli_ok("import", str(src), "--features", AUDIO, "--labels", ",".join(names), "-o", str(out))
    assert "its inputs are the features of" in r.output, r.output
    ck = load_model(out)
    fe = FrontEnd.from_dict(ck.metadata["frontend"], ck.net.n_in)
    assert fe.labels == names and fe.mean is None and fe.spec == FeatureSpec.parse(AUDIO)
    with torch.no_grad():
        want = module(ft).numpy()
    assert np.max(np.abs(ck.net.forward(fe.inputs(raw)) - want)) <= TOL
    r = cli_ok("eval", str(out), "--data", str(data))  # raw WAVs in, through the kept pipeline
    acc = float(np.mean(np.argmax(want, 1) == y))
    assert f"{acc:.1%}" in r.output or f"{100 * acc:.1f}" in r.output, r.output
    ex = export_project(ck, "native", tmp_path / "fw", sim=True)
    assert ex.model.feat is not None
    twin = DeviceTwin(ex.model)
    with sim.start(ex.path, ex.board) as s:
        got = np.stack([s.device.predict_raw(w) for w in raw[::5]])
    assert_same_bits(got, twin.predict_raw(raw[::5]), "PREDICT_RAW of the imported network")
    assert np.max(np.abs(got - want[::5])) <= TOL


def test_sklearn_scaler_becomes_the_pipelines_normalisation(tmp_path: Path) -> None:
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from mcutrain.featdata import FrontEnd
    from mcutrain.modelfile import load_model

    data = word_folder(tmp_path / "words", per_label=8)
    f, y, names, raw = _features(data)
    est = make_pipeline(StandardScaler(), MLPClassifier((12,), max_iter=300, random_state=0)).fit(f, y)
    pkl = tmp_path / "p.pkl"
    pkl.write_bytes(pickle.dumps(est))
    out = tmp_path / "p.mct"
    cli_ok("import", str(pkl), "--trust-pickle", "--features", AUDIO, "-o", str(out))
    ck = load_model(out)
    assert "input_steps" not in ck.metadata
    fe = FrontEnd.from_dict(ck.metadata["frontend"], ck.net.n_in)
    assert fe.mean is not None and fe.scale is not None
    assert np.max(np.abs(ck.net.forward(fe.inputs(raw)) - est.predict_proba(f))) <= 1e-4


def test_import_features_errors_are_clear(tmp_path: Path) -> None:
    from torch import nn

    src = torch_onnx(nn.Sequential(nn.Linear(40, 3), nn.Softmax(dim=-1)), 40, tmp_path / "m.onnx")
    r = cli("import", str(src), "--features", AUDIO, "-o", str(tmp_path / "a.mct"))
    assert r.exit_code != 0 and "makes 300 values (30 x 10), the network takes 40 inputs" in r.output, r.output
    ok = torch_onnx(nn.Sequential(nn.Linear(300, 3), nn.Softmax(dim=-1)), 300, tmp_path / "ok.onnx")
    r = cli("import", str(ok), "--features", AUDIO, "--labels", "a,b", "-o", str(tmp_path / "b.mct"))
    assert r.exit_code != 0 and "2 labels for a network with 3 outputs" in r.output, r.output
    r = cli("import", str(ok), "--labels", "a,b,c", "-o", str(tmp_path / "c.mct"))
    assert r.exit_code != 0 and "give --features too" in r.output, r.output
    assert not (tmp_path / "b.mct").exists() and not (tmp_path / "c.mct").exists()
