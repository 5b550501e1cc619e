"""Keyword spotting on synthesized spoken words, end to end (issue 22): a small DS-CNN on 49x10 MFCCs (the MLPerf Tiny
front end, `--features kws`) trained through the command line on words said by 7 espeak-ng voices, evaluated on 3
voices it never heard, next to an MLP on the same features (the reference, same run); exported for a board whose
firmware computes the MFCCs from raw audio, run in its simulator (QEMU for nucleo_f401re) bit for bit with the host
twin; then adapted on the device to a voice it recognises badly: the simulated board's sensor plays that voice back,
the host captures the windows (CAPTURE) and sends them back for training (TRAIN_RAW, the head only), and the board's
accuracy on other recordings of that voice is measured before and after.

    python bench/kws_adapt.py --work /tmp/kws [--board nucleo_f401re] [--epochs 3]

Needs espeak-ng, sox, and the board's simulator. Prints figures; asserts only that the device and the twin agree.
"""

from __future__ import annotations

import argparse
import re
import shutil
import time
from pathlib import Path
from typing import List, Tuple

import numpy as np
from click.testing import CliRunner

from mcutrain.cli.commands import main
from mcutrain.exporter import sim
from mcutrain.exporter.export import export_project
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.features import FeatureSpec
from mcutrain.modelfile import load_model
from mcutrain.optim import Optimizer
from mcutrain.wav import load_window
from mcutrain.wordsynth import synthesize_words, voices

WORDS = ["yes", "no", "up", "down"]
DS_CNN = (
    "conv2d:16/10x4/s2/same,batchnorm,relu,"
    "dwconv2d:3x3/same,batchnorm,relu,conv2d:16/1x1,batchnorm,relu,"
    "dwconv2d:3x3/same,batchnorm,relu,conv2d:16/1x1,batchnorm,relu,"
    "globalavgpool2d,linear:16x4,softmax"
)
MLP = "linear:490x32,relu,linear:32x4,softmax"
ADAPT_VOICE = "en-us+f1"  # a voice (female, American) that the model trained on male voices recognises worst
ADAPT_SPEEDS, ADAPT_PITCHES = (120, 140, 160, 175, 190), (30, 45, 60, 75)
ADAPT_ON = (30, 60)  # pitches of the recordings the device adapts on; the others (45, 75) measure it


def cli(*args: str) -> str:
    r = CliRunner().invoke(main, list(args))
    if r.exit_code != 0:
        raise SystemExit(f"mcutrain {' '.join(args[:2])} failed:\n{r.output}")
    return r.output


def accuracy(out: str) -> float:
    m = re.search(r"accuracy\s+([\d.]+)%", out)
    assert m, out
    return float(m.group(1)) / 100


def data(work: Path) -> None:
    """The data set: training voices, held-out voices, the adaptation voice (more speeds and pitches)."""
    v = voices(10)
    if not (work / "train").is_dir():
        synthesize_words(work / "train", WORDS, v[:7], seed=1)
        synthesize_words(work / "test", WORDS, v[7:10], seed=2)
    if not (work / "voice").is_dir():
        synthesize_words(work / "voice", WORDS, [ADAPT_VOICE], ADAPT_SPEEDS, ADAPT_PITCHES, seed=5)


def split(work: Path, spec: FeatureSpec, labels: List[str]) -> Tuple[Path, np.ndarray, np.ndarray, np.ndarray]:
    """(a folder of the adaptation recordings, in the order the sensor plays them, their labels, the evaluation
    windows and their labels)."""
    sensor = work / "voice_adapt"
    shutil.rmtree(sensor, ignore_errors=True)
    ya, xe, ye = [], [], []
    for c, word in enumerate(labels):
        (sensor / word).mkdir(parents=True)
        for f in sorted((work / "voice" / word).glob("*.wav")):
            if int(f.stem.rsplit("_", 1)[1]) in ADAPT_ON:
                shutil.copyfile(f, sensor / word / f.name)
                ya.append(c)
            else:
                xe.append(load_window(f, spec))
                ye.append(c)
    return sensor, np.asarray(ya), np.stack(xe), np.asarray(ye)


def main_() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--board", default="nucleo_f401re")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=0.1, help="the device's SGD learning rate for the head")
    a = ap.parse_args()
    work = a.work
    work.mkdir(parents=True, exist_ok=True)
    data(work)
    spec = FeatureSpec.parse("kws")
    ds, mlp = work / "ds_cnn.mct", work / "mlp.mct"
    t0 = time.time()
    cli("train", "--data", str(work / "train"), "--features", "kws", "--net", DS_CNN, "--input-shape", "49x10x1",
        "--loss", "xent", "--opt", "adam", "--lr", "0.005", "--batch", "16", "--steps", "800",
        "-o", str(ds), "--force")  # fmt: skip
    t_ds = time.time() - t0
    cli("train", "--data", str(work / "train"), "--features", "kws", "--net", MLP, "--loss", "xent", "--steps", "1200",
        "-o", str(mlp), "--force")  # fmt: skip
    acc_ds = accuracy(cli("eval", str(ds), "--data", str(work / "test")))
    acc_mlp = accuracy(cli("eval", str(mlp), "--data", str(work / "test")))
    print(f"held-out voices ({', '.join(voices(10)[7:])}; 48 words):")
    print(f"  DS-CNN ({DS_CNN.count('conv2d')} convolutions): {acc_ds:.1%}   (trained in {t_ds:.0f} s)")
    print(f"  MLP 490-32-4 (reference):    {acc_mlp:.1%}")
    acc_voice = accuracy(cli("eval", str(ds), "--data", str(work / "voice")))
    print(f"  voice {ADAPT_VOICE} (80 words): DS-CNN {acc_voice:.1%}")

    ck = load_model(ds)
    labels = ck.metadata["frontend"]["labels"]
    cfg = ck.optimizer.config()
    cfg["kind"] = "sgd"
    cfg["train_params"]["lr"] = a.lr
    ck.optimizer = Optimizer.from_config(cfg, ck.optimizer.n_params)
    ex = export_project(ck, a.board, work / "fw", trainable="last:1", optimizer="sgd", sim=True, force=True)
    twin = DeviceTwin(ex.model)
    sensor, ya, xe, ye = split(work, spec, labels)
    targets = np.eye(len(labels), dtype=np.float32)
    t0 = time.time()
    with sim.start(ex.path, ex.board, sensor=sensor) as s:
        dev = s.device
        print(f"{a.board} ({s.env}): the firmware computes the MFCCs from raw 16 kHz audio")
        before = np.stack([dev.predict_raw(w) for w in xe])
        assert np.array_equal(before.view(np.uint32), twin.predict_raw(xe).view(np.uint32)), "device != twin"
        print(f"  PREDICT_RAW on {len(xe)} windows: the host twin's bits exactly")
        captured = []
        while True:
            w = dev.capture(spec)
            if w is None:
                break
            captured.append(w)
        print(f"  captured {len(captured)} windows of {ADAPT_VOICE} from the board's sensor (then NO_WINDOW)")
        assert len(captured) == len(ya)
        rng = np.random.default_rng(0)
        losses = []
        for _ in range(a.epochs):
            for i in rng.permutation(len(captured)):
                loss, _ = dev.train_raw(captured[i], targets[ya[i]])
                assert np.float32(loss) == np.float32(twin.train_raw(captured[i], targets[ya[i]])), "loss != twin"
                losses.append(loss)
        after = np.stack([dev.predict_raw(w) for w in xe])
        assert np.array_equal(after.view(np.uint32), twin.predict_raw(xe).view(np.uint32)), "device != twin"
        report = s.report()
    acc_b, acc_a = np.mean(np.argmax(before, 1) == ye), np.mean(np.argmax(after, 1) == ye)
    print(f"  on-device adaptation of the head (Linear 16x4, SGD lr {a.lr:g}): {a.epochs} epochs over the "
          f"{len(captured)} captured windows, mean loss {np.mean(losses[: len(captured)]):.3f} -> "
          f"{np.mean(losses[-len(captured):]):.3f}")  # fmt: skip
    print(f"  accuracy on {len(xe)} other recordings of {ADAPT_VOICE} on the device: {acc_b:.1%} before, "
          f"{acc_a:.1%} after (the host twin: the same bits)")  # fmt: skip
    if report.get("predict"):
        print(f"  {report['unit']} per PREDICT_RAW: {report['predict']:,.0f}; per TRAIN_RAW: {report['train']:,.0f}")
    print(f"  device session: {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main_()
