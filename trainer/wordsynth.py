"""A spoken-word data set made by a speech synthesizer (no speech data set can be downloaded here): each word said
by several voices (espeak-ng accents and voice variants) at several speeds and pitches, resampled by sox to a
16-bit mono rate, centred in a window of fixed length, with background noise, written in the Speech Commands
layout (OUT/<word>/<voice>_<speed>_<pitch>.wav) that `mcutrain train --features` reads.

Needs espeak-ng and sox (Debian/Ubuntu: apt-get install espeak-ng sox)."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Sequence, Union

import numpy as np

from .errors import McuTrainError
from .wav import read_wav, write_wav

ACCENTS = ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029"]
VARIANTS = ["m1", "m3", "f1", "f3", "m5", "f4"]


class SynthError(McuTrainError, RuntimeError):
    """The synthesizer or sox is missing or failed."""


def voices(n: int) -> List[str]:
    """n espeak-ng voices 'accent+variant', spread over the accents first."""
    out = [f"{a}+{v}" for v in VARIANTS for a in ACCENTS]
    if n > len(out):
        raise SynthError(f"at most {len(out)} voices are available")
    return out[:n]


def _need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise SynthError(f"{tool} not found: install it (Debian/Ubuntu: sudo apt-get install {package})")
    return path


def say(word: str, voice: str, speed: int, pitch: int, rate: int, tmp: Path) -> np.ndarray:
    """int16 samples of one word at `rate` Hz."""
    raw, out = tmp / "say.wav", tmp / "say16.wav"
    espeak, sox = _need("espeak-ng", "espeak-ng"), _need("sox", "sox")
    r = subprocess.run([espeak, "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", str(raw), word],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    if r.returncode != 0 or not raw.is_file():
        raise SynthError(f"espeak-ng failed for {word!r} with voice {voice}: {r.stderr.strip()[-300:]}")
    # -D: no dither (sox dithers a resampled signal with random noise by default, so the same seed would not give
    # the same data set)
    r = subprocess.run([sox, "-D", str(raw), "-r", str(rate), "-c", "1", "-b", "16", str(out)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    if r.returncode != 0:
        raise SynthError(f"sox failed: {r.stderr.strip()[-300:]}")
    return read_wav(out)[1]


def fit(x: np.ndarray, n: int, offset: int) -> np.ndarray:
    """x trimmed of its silent ends and placed in n samples, shifted by offset from the centre."""
    loud = np.flatnonzero(np.abs(x.astype(np.int32)) > 300)
    if loud.size:
        x = x[loud[0] : loud[-1] + 1]
    x = x[:n]
    out = np.zeros(n, np.int16)
    start = min(max((n - x.size) // 2 + offset, 0), n - x.size)
    out[start : start + x.size] = x
    return out


def synthesize_words(
    out: Union[str, Path],
    words: Sequence[str],
    voice_list: Sequence[str],
    speeds: Sequence[int] = (140, 175),
    pitches: Sequence[int] = (35, 60),
    rate: int = 16000,
    seconds: float = 1.0,
    noise: float = 0.01,
    seed: int = 0,
) -> Dict[str, int]:
    """Write the data set; returns the number of files per word. noise: the background's standard deviation
    relative to full scale (white noise plus a low hum); each file gets a random shift of up to 0.1 s."""
    root = Path(out)
    rng = np.random.default_rng(seed)
    n = int(round(rate * seconds))
    counts: Dict[str, int] = {}
    tt = np.arange(n) / rate
    with tempfile.TemporaryDirectory(prefix="mct-words-") as t:
        for word in words:
            d = root / word
            d.mkdir(parents=True, exist_ok=True)
            for voice, speed, pitch in itertools.product(voice_list, speeds, pitches):
                shift = int(rng.integers(-rate // 10, rate // 10))
                x = fit(say(word, voice, speed, pitch, rate, Path(t)), n, shift)
                hum = 0.5 * np.sin(2 * np.pi * rng.uniform(50, 120) * tt)
                bg = noise * 32767 * (rng.standard_normal(n) + hum)
                y = np.clip(x.astype(np.float64) + bg, -32768, 32767).astype(np.int16)
                write_wav(d / f"{voice.replace('+', '_')}_{speed}_{pitch}.wav", rate, y)
                counts[word] = counts.get(word, 0) + 1
    return counts


__all__ = ["SynthError", "voices", "say", "fit", "synthesize_words", "ACCENTS", "VARIANTS"]
