"""WAV files for the feature pipelines (stdlib `wave`): 16-bit PCM read into int16 windows, with clear errors for
what a pipeline cannot use (not a WAV, empty, another sample rate, several channels, clipped, too long)."""

from __future__ import annotations

import wave
from pathlib import Path
from typing import TYPE_CHECKING, Tuple, Union

import numpy as np

from .errors import DataError

if TYPE_CHECKING:
    from .features import FeatureSpec

MAX_SECONDS = 600  # a longer file is refused before it is read (a window is seconds at most)
CLIP_FRACTION = 0.01  # more samples than this at full scale: the recording is clipped


def read_wav(path: Union[str, Path], max_seconds: float = MAX_SECONDS) -> Tuple[int, np.ndarray]:
    """(sample rate, samples) of a 16-bit PCM WAV: int16 (n,) for mono, (n, channels) otherwise. DataError saying
    what is wrong (and how to convert it) for anything else."""
    p = Path(path)
    try:
        with wave.open(str(p), "rb") as w:
            rate, ch, width, n = w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()
            if width != 2:
                raise DataError(
                    f"{p}: {8 * width}-bit samples; mcutrain reads 16-bit PCM WAV (convert: sox IN -b 16 OUT.wav)"
                )
            if rate <= 0 or ch <= 0:
                raise DataError(f"{p}: a WAV header with {rate} Hz and {ch} channels is corrupt")
            if n > max_seconds * rate:
                raise DataError(
                    f"{p}: {n / rate:.1f} s of audio, more than the {max_seconds:g} s mcutrain reads at once"
                )
            raw = w.readframes(n)
    except FileNotFoundError:
        raise DataError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{p} is a folder, not a WAV file") from None
    except (wave.Error, EOFError) as e:
        raise DataError(f"{p} is not a readable WAV file ({e}); give a 16-bit PCM WAV") from None
    if len(raw) < n * ch * 2:
        raise DataError(f"{p} is truncated: its header says {n} frames, the file holds {len(raw) // (2 * ch)}")
    if n == 0:
        raise DataError(f"{p} is empty: it has no samples")
    x = np.frombuffer(raw, "<i2").astype(np.int16)
    return rate, (x if ch == 1 else x.reshape(n, ch))


def write_wav(path: Union[str, Path], rate: int, samples: np.ndarray) -> None:
    """Write int16 samples ((n,) or (n, channels)) as a 16-bit PCM WAV."""
    x = np.asarray(samples)
    if x.dtype != np.int16:
        raise DataError("write_wav takes int16 samples")
    ch = 1 if x.ndim == 1 else x.shape[1]
    with wave.open(str(path), "wb") as w:
        w.setnchannels(ch)
        w.setsampwidth(2)
        w.setframerate(int(rate))
        w.writeframes(x.astype("<i2").tobytes())


def clipped_fraction(x: np.ndarray) -> float:
    """The fraction of samples at int16 full scale (-32768 or 32767)."""
    x = np.asarray(x)
    return float(np.mean((x == 32767) | (x == -32768))) if x.size else 0.0


def wav_window(
    path: Union[str, Path], rate: int, n_samples: int, allow_clipped: bool = False, pad: bool = True
) -> np.ndarray:
    """One mono window of n_samples int16 samples at `rate` Hz from a WAV: a shorter recording is padded with
    zeros at the end (pad=True), a longer one is refused. DataError for another sample rate, several channels, a
    clipped recording (more than CLIP_FRACTION of its samples at full scale, unless allow_clipped) or an empty file."""
    got_rate, x = read_wav(path)
    p = Path(path)
    if got_rate != rate:
        raise DataError(
            f"{p} is sampled at {got_rate} Hz, the feature pipeline takes {rate} Hz: resample it "
            f"(sox IN -r {rate} OUT.wav) or change rate= in --features"
        )
    if x.ndim != 1:
        raise DataError(f"{p} has {x.shape[1]} channels, the feature pipeline takes mono (sox IN -c 1 OUT.wav)")
    frac = clipped_fraction(x)
    if frac > CLIP_FRACTION and not allow_clipped:
        raise DataError(
            f"{p} is clipped: {frac:.1%} of its samples sit at full scale (more than {CLIP_FRACTION:.0%}); "
            "record it again with less gain"
        )
    if x.size > n_samples:
        raise DataError(
            f"{p} has {x.size} samples ({x.size / rate:.3g} s), the feature window {n_samples} "
            f"({n_samples / rate:.3g} s): cut the recording, or set length= in --features"
        )
    if x.size < n_samples:
        if not pad:
            raise DataError(f"{p} has {x.size} samples, the feature window needs {n_samples}")
        x = np.concatenate([x, np.zeros(n_samples - x.size, np.int16)])
    return x


def load_window(path: Union[str, Path], spec: FeatureSpec, allow_clipped: bool = False) -> np.ndarray:
    """wav_window for a feature spec (its sample rate and window length)."""
    if spec.kind == "motion":
        raise DataError(f"{path}: a WAV is audio, the feature pipeline is {spec.kind}; give CSV or NPZ windows")
    return wav_window(path, int(round(spec.sample_rate)), spec.n_samples, allow_clipped=allow_clipped)


__all__ = ["read_wav", "write_wav", "wav_window", "load_window", "clipped_fraction", "MAX_SECONDS", "CLIP_FRACTION"]
