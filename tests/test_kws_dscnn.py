"""Keyword spotting end to end on the synthesized spoken words (mcutrain.wordsynth): a small DS-CNN on the MLPerf
Tiny MFCC front end (`--features kws`, 49 x 10) trained through the command line recognises words of voices it never
heard (>= 90%, and at least as well as an MLP on the same features); exported for nucleo_f401re it classifies raw
16 kHz audio in QEMU with the host twin's bits; and a board adapts to a voice it recognises badly from windows
captured from its own sensor (CAPTURE, then TRAIN_RAW of the head), its accuracy on other recordings of that voice
measured on the device before and after. bench/kws_adapt.py prints the same figures for a longer run.

Needs espeak-ng, sox, arm-none-eabi-gcc and qemu-system-arm."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np

from helpers import assert_device_equals_twin, assert_same_bits, cli_ok, load_bench
from mcutrain.wordsynth import synthesize_words, voices

# the words, the network and the voice to adapt to: the benchmark's own (bench/kws_adapt.py), so both run one setup
KWS = load_bench("kws_adapt")
WORDS, DS_CNN, ADAPT_VOICE = KWS.WORDS, KWS.DS_CNN, KWS.ADAPT_VOICE


def _accuracy(out: str) -> float:
    m = re.search(r"accuracy\s+([\d.]+)%", out)
    assert m, out
    return float(m.group(1)) / 100


def test_ds_cnn_on_spoken_words_runs_on_raw_audio_and_adapts_on_the_device(tmp_path: Path, pio_core: Path) -> None:
    from mcutrain.exporter import sim
    from mcutrain.exporter.export import export_project
    from mcutrain.exporter.twin import DeviceTwin
    from mcutrain.features import FeatureSpec
    from mcutrain.modelfile import load_model
    from mcutrain.optim import Optimizer
    from mcutrain.wav import load_window

    v = voices(10)
    synthesize_words(tmp_path / "train", WORDS, v[:7], seed=1)
    synthesize_words(tmp_path / "test", WORDS, v[7:], seed=2)
    ds, mlp = tmp_path / "ds.mct", tmp_path / "mlp.mct"
    cli_ok("train", "--data", str(tmp_path / "train"), "--features", "kws", "--net", DS_CNN, "--input-shape",
           "49x10x1", "--loss", "xent", "--opt", "adam", "--lr", "0.005", "--batch", "16", "--steps", "800",
           "-o", str(ds))  # fmt: skip
    cli_ok("train", "--data", str(tmp_path / "train"), "--features", "kws", "--net",
           "linear:490x32,relu,linear:32x4,softmax", "--loss", "xent", "--steps", "1200", "-o", str(mlp))  # fmt: skip
    acc_ds = _accuracy(cli_ok("eval", str(ds), "--data", str(tmp_path / "test")).output)
    acc_mlp = _accuracy(cli_ok("eval", str(mlp), "--data", str(tmp_path / "test")).output)
    print(f"\nheld-out voices: DS-CNN {acc_ds:.1%}, MLP {acc_mlp:.1%}")
    assert acc_ds >= 0.9 and acc_ds >= acc_mlp

    spec = FeatureSpec.parse("kws")
    ck = load_model(ds)
    labels = ck.metadata["frontend"]["labels"]
    test_windows = [load_window(f, spec) for w in labels for f in sorted((tmp_path / "test" / w).glob("*.wav"))[:1]]
    # the f32 export on the M4F in QEMU (the head trainable): raw audio in, the twin's bits out, the host's classes
    ex = export_project(ck, "nucleo_f401re", tmp_path / "fw", trainable="last:1", sim=True)  # all: 164 KB RAM
    twin = DeviceTwin(ex.model)
    with sim.start(ex.path, ex.board) as s:
        got = np.stack([s.device.predict_raw(w) for w in test_windows])
    assert_same_bits(got, twin.predict_raw(np.stack(test_windows)), "PREDICT_RAW of the DS-CNN in QEMU")
    assert list(np.argmax(got, 1)) == list(range(len(labels)))

    # adaptation to a held-out voice: the board's sensor plays 2 of its 4 pitches, the other 2 measure it
    synthesize_words(tmp_path / "voice", WORDS, [ADAPT_VOICE], KWS.ADAPT_SPEEDS, KWS.ADAPT_PITCHES, seed=5)
    played, ya, xe, ye = tmp_path / "played", [], [], []
    for c, word in enumerate(labels):
        (played / word).mkdir(parents=True)
        for f in sorted((tmp_path / "voice" / word).glob("*.wav")):
            if int(f.stem.rsplit("_", 1)[1]) in (30, 60):
                shutil.copyfile(f, played / word / f.name)
                ya.append(c)
            else:
                xe.append(load_window(f, spec))
                ye.append(c)
    cfg = ck.optimizer.config()
    cfg["kind"], cfg["train_params"]["lr"] = "sgd", 0.1
    ck.optimizer = Optimizer.from_config(cfg, ck.optimizer.n_params)
    # the native firmware (the same C; QEMU moves 32 KB windows at about 0.1 ms a byte): the head learns
    head = export_project(ck, "native", tmp_path / "head", trainable="last:1", optimizer="sgd", sim=True)
    twin = DeviceTwin(head.model)
    eye = np.eye(len(labels), dtype=np.float32)
    with sim.start(head.path, head.board, sensor=played) as s:
        before = np.mean(np.argmax(np.stack([s.device.predict_raw(w) for w in xe]), 1) == ye)
        captured = []
        while (w := s.device.capture(spec)) is not None:
            captured.append(w)
        assert len(captured) == len(ya)
        order = np.random.default_rng(0).permutation(len(captured))
        for _ in range(3):
            for i in order:
                loss, _ = s.device.train_raw(captured[i], eye[ya[i]])
                assert_same_bits(np.float32(loss), np.float32(twin.train_raw(captured[i], eye[ya[i]])), "loss")
        after_y = np.stack([s.device.predict_raw(w) for w in xe])
        assert_device_equals_twin(s.device, twin)
    after = np.mean(np.argmax(after_y, 1) == ye)
    print(f"voice {ADAPT_VOICE} on the device: {before:.1%} before, {after:.1%} after adapting on {len(captured)}")
    assert after > before
