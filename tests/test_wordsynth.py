"""The synthesized spoken-word data set (mcutrain.wordsynth: espeak-ng voices, speeds and pitches, sox, background
noise) in the Speech Commands layout, and a keyword model trained on it through the command line that
recognises words said by voices it never heard (>= 90%). Needs espeak-ng and sox (scripts/setup.sh installs them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from click.testing import CliRunner

from mcutrain.cli.commands import main
from mcutrain.features import FeatureSpec
from mcutrain.wav import load_window
from mcutrain.wordsynth import synthesize_words, voices

WORDS = ["yes", "no", "up", "down"]


def test_a_model_trained_on_synthesized_words_recognises_held_out_voices(tmp_path: Path) -> None:
    v = voices(10)
    train_voices, test_voices = v[:7], v[7:]
    assert not set(train_voices) & set(test_voices)
    counts = synthesize_words(tmp_path / "train", WORDS, train_voices, seed=1)
    assert counts == {w: 7 * 4 for w in WORDS}
    synthesize_words(tmp_path / "test", WORDS, test_voices, seed=2)
    # every file is a 1 s, 16 kHz window the KWS pipeline takes, with speech in it
    spec = FeatureSpec.parse("kws")
    x = load_window(tmp_path / "train" / "yes" / f"{train_voices[0].replace('+', '_')}_140_35.wav", spec)
    assert x.shape == (16000,) and np.abs(x.astype(np.int32)).max() > 3000
    model = tmp_path / "kws.mct"
    r = CliRunner().invoke(main, ["train", "--data", str(tmp_path / "train"), "--features", "kws", "--net",
                                  "linear:490x32,relu,linear:32x4,softmax", "--loss", "xent", "--steps", "1200",
                                  "-o", str(model)])  # fmt: skip
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["eval", str(model), "--data", str(tmp_path / "test")])
    assert r.exit_code == 0, r.output
    acc = float(r.output.split("accuracy")[1].split("%")[0]) / 100
    assert acc >= 0.9, r.output


def test_the_same_seed_makes_the_same_files(tmp_path: Path) -> None:
    """The data set is reproducible: sox resamples without dither (its default dithers with random noise)."""
    v = voices(9)[7:]
    for k in (1, 2):
        synthesize_words(tmp_path / f"d{k}", ["yes"], v, speeds=(150,), pitches=(50,), seed=4)
    files = sorted(p.relative_to(tmp_path / "d1") for p in (tmp_path / "d1").rglob("*.wav"))
    assert len(files) == 2
    for f in files:
        assert (tmp_path / "d1" / f).read_bytes() == (tmp_path / "d2" / f).read_bytes(), f
