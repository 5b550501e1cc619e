"""Float64 NumPy references of the feature pipelines (firmware/core/mct_feat.h), written from the definitions,
independently of the C: numpy's FFT, dense mel matrices, scipy's biquad filter."""

from __future__ import annotations

import numpy as np
from scipy.signal import lfilter

from mcutrain.features import FeatureSpec


def window(kind: str, n: int) -> np.ndarray:
    """Periodic Hann / Hamming (or ones) of n points."""
    t = np.arange(n) / n
    if kind == "hann":
        return 0.5 - 0.5 * np.cos(2 * np.pi * t)
    if kind == "hamming":
        return 0.54 - 0.46 * np.cos(2 * np.pi * t)
    return np.ones(n)


def hz_to_mel(f: np.ndarray, scale: str) -> np.ndarray:
    f = np.asarray(f, np.float64)
    if scale == "htk":
        return 1127.0 * np.log1p(f / 700.0)
    logstep = np.log(6.4) / 27.0
    return np.where(f < 1000, 3 * f / 200, 15 + np.log(np.maximum(f, 1e-300) / 1000) / logstep)


def mel_to_hz(m: np.ndarray, scale: str) -> np.ndarray:
    m = np.asarray(m, np.float64)
    if scale == "htk":
        return 700.0 * (np.exp(m / 1127.0) - 1.0)
    logstep = np.log(6.4) / 27.0
    return np.where(m < 15, 200 * m / 3, 1000 * np.exp(logstep * (m - 15)))


def mel_matrix(spec: FeatureSpec) -> np.ndarray:
    """(n_mels, n_fft/2 + 1) triangular filters on the FFT bins."""
    pts = mel_to_hz(
        np.linspace(hz_to_mel(spec.fmin, spec.mel_scale), hz_to_mel(spec.fmax, spec.mel_scale), spec.n_mels + 2),
        spec.mel_scale,
    )
    pts[0] = spec.fmin
    f = np.arange(spec.n_fft // 2 + 1) * spec.sample_rate / spec.n_fft
    w = np.zeros((spec.n_mels, f.size))
    for m in range(spec.n_mels):
        lo, c, hi = pts[m], pts[m + 1], pts[m + 2]
        w[m] = np.maximum(0, np.minimum((f - lo) / (c - lo), (hi - f) / (hi - c)))
        if spec.mel_norm == "slaney":
            w[m] *= 2.0 / (hi - lo)
    return w


def dct_matrix(spec: FeatureSpec) -> np.ndarray:
    """(n_coef, n_mels) DCT-II."""
    M = spec.n_mels
    i, m = np.meshgrid(np.arange(spec.n_coef), np.arange(M), indexing="ij")
    d = np.cos(np.pi * i * (2 * m + 1) / (2 * M)) * np.sqrt(2.0 / M)
    if spec.dct_norm == "ortho":
        d[0] *= np.sqrt(0.5)
    return d


def audio(spec: FeatureSpec, x: np.ndarray) -> np.ndarray:
    """(n_frames, n_coef or n_mels) of one window of floats."""
    x = np.asarray(x, np.float64)
    if spec.pre_emph:
        x = np.concatenate([x[:1], x[1:] - spec.pre_emph * x[:-1]])
    n_frames = 1 + (spec.n_samples - spec.frame_len) // spec.frame_step
    idx = np.arange(n_frames)[:, None] * spec.frame_step + np.arange(spec.frame_len)[None]
    frames = x[idx] * window(spec.window, spec.frame_len)
    X = np.fft.rfft(frames, n=spec.n_fft, axis=1)
    P = np.abs(X) if spec.spectrum == "magnitude" else np.abs(X) ** 2
    logmel = np.log(P @ mel_matrix(spec).T + spec.log_eps)
    return logmel if spec.kind == "logmel" else logmel @ dct_matrix(spec).T


def motion(spec: FeatureSpec, x: np.ndarray) -> np.ndarray:
    """(axes, stats + bands) of one window [n_samples][axes]."""
    x = np.asarray(x, np.float64)
    scale = np.asarray(spec.axis_scale or [1.0] * spec.channels)
    out = []
    for a in range(spec.channels):
        s = x[:, a] * scale[a]
        if spec.filter != "none":
            w0 = 2 * np.pi * spec.cutoff / spec.sample_rate
            alpha = np.sin(w0) / (2 * spec.q)
            g = 1 - np.cos(w0) if spec.filter == "lowpass" else 1 + np.cos(w0)
            sign = 1 if spec.filter == "lowpass" else -1
            b = np.array([g / 2, sign * g, g / 2])
            den = np.array([1 + alpha, -2 * np.cos(w0), 1 - alpha])
            s = lfilter(b, den, s)
        row = []
        vals = {"mean": s.mean(), "rms": np.sqrt(np.mean(s**2)), "std": s.std(), "min": s.min(), "max": s.max()}
        for name in ("mean", "rms", "std", "min", "max"):
            if name in spec.stats:
                row.append(vals[name])
        if spec.n_bands:
            X = np.fft.rfft(s * window(spec.window, spec.n_samples), n=spec.n_fft)
            P = np.abs(X) ** 2 / spec.n_fft**2
            f = np.arange(P.size) * spec.sample_rate / spec.n_fft
            edges = np.linspace(spec.band_lo, spec.band_hi, spec.n_bands + 1)
            for b in range(spec.n_bands):
                row.append(P[(f >= edges[b]) & (f < edges[b + 1])].sum())
        out.append(row)
    return np.asarray(out)


def features(spec: FeatureSpec, x: np.ndarray) -> np.ndarray:
    """The reference features of one window."""
    return motion(spec, x) if spec.kind == "motion" else audio(spec, x)
