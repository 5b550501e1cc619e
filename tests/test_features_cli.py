"""Raw data through a feature pipeline on the command line: `mcutrain train --features` on a folder of WAV label
folders and on NPZ / CSV IMU windows, the model file keeping the pipeline and its normalisation, `mcutrain eval`
through the model's own front end, `mcutrain features` printing and plotting, and clear errors for bad data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from mcutrain.cli.commands import main
from mcutrain.featdata import FrontEnd
from mcutrain.features import FeatureSpec
from mcutrain.modelfile import load_model
from mcutrain.wav import load_window, write_wav

AUDIO = "mfcc:rate=8000,length=4000,frame=256,step=128,fft=256,mels=20,fmin=50,fmax=4000,coef=10"
MOTION = "motion:rate=50,length=64,axes=3,stats=mean+rms+std+min+max,bands=4,fft=64,band_lo=0.2,band_hi=20.2"


def cli(*args: str) -> Result:
    r = CliRunner().invoke(main, list(args))
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r


def word_folder(root: Path, per_label: int = 24, seed: int = 0, longest: int = 4000) -> Path:
    """Three synthetic 'words' (a rising and a falling chirp, a steady tone) of 0.7 - 1 times `longest` samples at
    8 kHz (0.35 - 0.5 s by default), with noise."""
    rng = np.random.default_rng(seed)
    for label in ("up", "down", "beep"):
        (root / label).mkdir(parents=True, exist_ok=True)
        for i in range(per_label):
            n = int(rng.integers(int(0.7 * longest), longest))
            t = np.arange(n) / 8000
            f0 = rng.uniform(300, 600)
            ph = {"up": f0 * t + 1200 * t * t, "down": (f0 + 1500) * t - 1200 * t * t, "beep": 2 * f0 * t}[label]
            x = 0.4 * np.sin(2 * np.pi * ph) * np.hanning(n) + 0.02 * rng.standard_normal(n)
            write_wav(root / label / f"{i}.wav", 8000, np.round(x * 32767).astype(np.int16))
    return root


def gestures(n: int, seed: int) -> tuple:
    """IMU windows (n, 64, 3) at 50 Hz: class c shakes axis c at 2 + 3c Hz, plus noise and gravity on z."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    t = np.arange(64) / 50
    x = 0.2 * rng.standard_normal((n, 64, 3))
    x[..., 2] += 9.81
    for i, c in enumerate(y):
        x[i, :, c] += rng.uniform(1, 2) * np.sin(2 * np.pi * (2 + 3 * c) * t + rng.uniform(0, 6.3))
    return x.astype(np.float32), y


def test_train_on_a_wav_folder_keeps_the_pipeline_and_evaluates_through_it(tmp_path: Path) -> None:
    data = word_folder(tmp_path / "words")
    model = tmp_path / "m.mct"
    net = "linear:300x16,relu,linear:16x3,softmax"
    r = cli("train", "--data", str(data), "--features", AUDIO, "--net", net, "--loss", "xent", "--steps", "300",
            "--val", "0.25", "-o", str(model))  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "validation accuracy" in r.output
    ck = load_model(model)
    fe = FrontEnd.from_dict(ck.metadata["frontend"], ck.net.n_in)
    assert fe.spec == FeatureSpec.parse(AUDIO) and fe.labels == ["beep", "down", "up"]
    assert fe.mean is not None and fe.scale is not None and fe.mean.shape == (300,)
    # the model's front end turns a raw window into what the network was trained on
    window = load_window(data / "up" / "3.wav", fe.spec)
    feats = fe.spec.compute(window).ravel()
    assert np.array_equal(fe.inputs(window)[0], ((feats - fe.mean) * fe.scale).astype(np.float32))
    assert int(np.argmax(ck.net(fe.inputs(window))[0])) == fe.labels.index("up")
    r = cli("info", str(model))
    assert r.exit_code == 0 and "front end   mfcc:rate=8000" in r.output and "labels beep, down, up" in r.output
    # eval on new recordings of the same words, through the stored pipeline (no --features needed)
    fresh = word_folder(tmp_path / "fresh", per_label=10, seed=5)
    r = cli("eval", str(model), "--data", str(fresh))
    assert r.exit_code == 0, r.output
    acc = float(r.output.split("accuracy")[1].split("%")[0].strip(" :")) / 100
    assert acc >= 0.9, r.output


def test_train_on_npz_and_csv_imu_windows(tmp_path: Path) -> None:
    x, y = gestures(150, seed=1)
    np.savez(tmp_path / "imu.npz", x=x, y=y)
    rows = np.concatenate([x.reshape(150, -1), y[:, None]], axis=1)
    np.savetxt(tmp_path / "imu.csv", rows, delimiter=",", fmt="%.6g")
    for data in ("imu.npz", "imu.csv"):
        model = tmp_path / f"{data}.mct"
        r = cli("train", "--data", str(tmp_path / data), "--features", MOTION, "--net",
                "linear:27x12,tanh,linear:12x3,softmax", "--loss", "xent", "--steps", "400", "--val", "0.2",
                "-o", str(model))  # fmt: skip
        assert r.exit_code == 0, r.output
        acc = float(r.output.split("validation accuracy")[1].split("%")[0]) / 100
        assert acc >= 0.9, r.output
        ck = load_model(model)
        assert FrontEnd.from_dict(ck.metadata["frontend"]).spec == FeatureSpec.parse(MOTION)


def test_features_command_prints_and_plots(tmp_path: Path) -> None:
    data = word_folder(tmp_path / "w", per_label=1)
    wav = data / "up" / "0.wav"
    png = tmp_path / "f.png"
    r = cli("features", str(wav), "--features", AUDIO, "--plot", str(png))
    assert r.exit_code == 0, r.output
    assert "30 frames x 10 values (300 features)" in r.output
    want = FeatureSpec.parse(AUDIO).compute(
        __import__("mcutrain.wav", fromlist=["x"]).load_window(wav, FeatureSpec.parse(AUDIO))
    )
    first = [float(v) for v in r.output.split("frame 0:")[1].splitlines()[0].split()]
    assert np.allclose(first, want[0], atol=1e-4)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    x, y = gestures(4, seed=2)
    np.savez(tmp_path / "g.npz", x=x, y=y)
    r = cli("features", str(tmp_path / "g.npz"), "--features", MOTION, "--index", "2")
    assert (
        r.exit_code == 0 and "3 axes x 9 values" in r.output and "columns: mean, rms, std, min, max, band0" in r.output
    )


@pytest.mark.parametrize(
    "setup,args,words",
    [
        ("folder", ["--net", "linear:300x3,softmax"], "is a folder: a folder of WAV label folders is raw audio"),
        ("rate", ["--features", AUDIO], "is sampled at 16000 Hz, the feature pipeline takes 8000 Hz"),
        ("empty_label", ["--features", AUDIO], "has no .wav files"),
        ("folder", ["--features", "kws:fft=100"], "fft=100 must be a power of two"),
        ("folder", ["--features", AUDIO, "--net", "linear:200x3,softmax"], "300"),
    ],
)
def test_bad_raw_data_gets_a_clear_error(tmp_path: Path, setup: str, args: list, words: str) -> None:
    data = word_folder(tmp_path / "d", per_label=2)
    if setup == "rate":
        write_wav(data / "up" / "extra.wav", 16000, np.zeros(100, np.int16))
    if setup == "empty_label":
        (data / "silence").mkdir()
    r = CliRunner().invoke(main, ["train", "--data", str(data), "--steps", "5", "-o", str(tmp_path / "m.mct"), *args])
    assert r.exit_code != 0
    assert "Traceback" not in r.output and words in r.output, r.output
    assert not (tmp_path / "m.mct").exists()


def test_a_malformed_front_end_in_a_model_file_is_refused() -> None:
    from mcutrain.errors import ModelFileError

    good = FrontEnd.fit(FeatureSpec.parse(MOTION), np.random.default_rng(0).standard_normal((10, 27))).to_dict()
    assert FrontEnd.from_dict(good).spec == FeatureSpec.parse(MOTION)
    with pytest.raises(ModelFileError, match="mean has 5 values, the inputs are 27"):
        FrontEnd.from_dict({**good, "mean": [0.0] * 5})
    with pytest.raises(ModelFileError, match="not a table"):
        FrontEnd.from_dict([1, 2])
    with pytest.raises(ModelFileError, match="malformed: unknown feature settings"):
        FrontEnd.from_dict({**good, "features": {**good["features"], "wobble": 1}})


def test_a_raw_window_too_long_for_a_frame_is_refused_at_export(tmp_path: Path) -> None:
    from mcutrain import Checkpoint, Sequential, TrainParams
    from mcutrain import layers as L
    from mcutrain.errors import McuTrainError
    from mcutrain.exporter.export import export_project

    spec = FeatureSpec.parse("motion:rate=100,length=8192,axes=3,stats=mean+std")
    net = Sequential(L.Linear(6, 2), L.Softmax()).rand_params(seed=1)
    fe = FrontEnd.fit(spec, np.random.default_rng(0).standard_normal((8, 6)), ["a", "b"])
    ck = Checkpoint(net, net.new_sgd(TrainParams()), {"loss": "cross_entropy", "frontend": fe.to_dict()})
    with pytest.raises(McuTrainError, match=r"raw window of 24576 values does not fit a protocol frame"):
        export_project(ck, "nucleo_f401re", tmp_path / "fw")
    assert not (tmp_path / "fw").exists()
