"""The signal front end: MFCC, log-mel and motion features computed by the C core (firmware/core/mct_feat.h),
the same code the firmware runs, so host and device see the same bits.

    from mcutrain.features import FeatureSpec
    spec = FeatureSpec.parse("kws")                 # the MLPerf Tiny keyword-spotting front end: 49 x 10 MFCC
    feats = spec.compute(audio)                     # (n, 49, 10) float32 from (n, 16000) float32 or int16
    spec = FeatureSpec.parse("motion:rate=100,length=128,axes=3,stats=mean+rms+std,bands=4,fft=128")

A spec is a pipeline kind (mfcc, logmel, motion) or a preset (kws) with optional `key=value` settings after a
colon (see SETTINGS). Its enums and the config's byte layout come from the core (mct_feat_facts.h); its
sizes and constant tables from the core's own code (mct_feat_size, mct_feat_tables).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Dict, List, Tuple, Type, Union

import numpy as np

from . import _core
from .errors import ConfigError, ShapeError

_LISTS: Dict[str, List[Tuple[str, str, int]]] = _core.feat_lists()


def _enum(cls_name: str, list_name: str, doc: str) -> Type[IntEnum]:
    e = IntEnum(cls_name, [(r[0], r[2]) for r in _LISTS[list_name]], module=__name__)  # type: ignore[misc]
    e.__doc__ = doc
    return e


FeatKind = _enum("FeatKind", "feat_kind", "Feature pipelines (enum mct_feat_kind).")
Window = _enum("Window", "feat_window", "Windows (enum mct_feat_window), periodic.")
MelScale = _enum("MelScale", "feat_mel", "Mel scales (enum mct_feat_mel).")
MelNorm = _enum("MelNorm", "feat_melnorm", "Mel filter normalisations (enum mct_feat_melnorm).")
DctNorm = _enum("DctNorm", "feat_dct", "DCT scalings (enum mct_feat_dct).")
Spectrum = _enum("Spectrum", "feat_spectrum", "Spectra (enum mct_feat_spectrum): magnitude or power.")
Filter = _enum("Filter", "feat_filter", "Motion filters (enum mct_feat_filter).")
Stat = _enum("Stat", "feat_stat", "Motion statistics (bits of mct_feat_cfg.stats), in output order.")


def _cfg_dtype() -> np.dtype:
    size, fields = _core.feat_struct()
    formats: List[Any] = []
    for _, _, nbytes, kind in fields:
        width = 4 if kind == "f" else None
        if width is not None and nbytes > width:
            formats.append((f"<f{width}", (nbytes // width,)))
        else:
            formats.append(f"<{kind}{nbytes}")
    return np.dtype(
        {"names": [f[0] for f in fields], "formats": formats, "offsets": [f[1] for f in fields], "itemsize": size}
    )


FEAT_CFG_DTYPE = _cfg_dtype()  # struct mct_feat_cfg
MAX_AXES = int(FEAT_CFG_DTYPE["axis_scale"].shape[0])


@dataclass(frozen=True)
class FeatureSizes:
    """What a pipeline needs and makes, as the core computes it (mct_feat_size)."""

    n_in: int  # input values per window (samples x axes)
    n_frames: int  # output rows (audio frames, or the motion axes)
    n_per_frame: int  # output values per row
    n_out: int  # output values per window
    tables: int  # floats of constant tables
    scratch: int  # floats of scratch for one window


# key in a spec string -> (field of FeatureSpec, parser)
def _choice(enum: Type[IntEnum]) -> Any:
    def parse(v: str) -> str:
        name = v.strip().upper()
        if name not in enum.__members__:
            choices = ", ".join(m.lower() for m in enum.__members__)
            raise ConfigError(f"unknown {enum.__name__.lower()} {v!r}; choose one of {choices}")
        return name.lower()

    return parse


def _stats(v: str) -> Tuple[str, ...]:
    names = [s for s in v.replace("+", " ").split() if s]
    return tuple(_choice(Stat)(s) for s in names)


def _floats(v: str) -> Tuple[float, ...]:
    return tuple(float(s) for s in v.replace("+", " ").split())


SETTINGS: Dict[str, Tuple[str, Any]] = {
    "rate": ("sample_rate", float),
    "length": ("n_samples", int),
    "axes": ("channels", int),
    "frame": ("frame_len", int),
    "step": ("frame_step", int),
    "fft": ("n_fft", int),
    "mels": ("n_mels", int),
    "coef": ("n_coef", int),
    "fmin": ("fmin", float),
    "fmax": ("fmax", float),
    "window": ("window", _choice(Window)),
    "mel": ("mel_scale", _choice(MelScale)),
    "melnorm": ("mel_norm", _choice(MelNorm)),
    "dct": ("dct_norm", _choice(DctNorm)),
    "spectrum": ("spectrum", _choice(Spectrum)),
    "preemph": ("pre_emph", float),
    "log_eps": ("log_eps", float),
    "in_scale": ("in_scale", float),
    "filter": ("filter", _choice(Filter)),
    "cutoff": ("cutoff", float),
    "q": ("q", float),
    "stats": ("stats", _stats),
    "bands": ("n_bands", int),
    "band_lo": ("band_lo", float),
    "band_hi": ("band_hi", float),
    "scale": ("axis_scale", _floats),
}


@dataclass(frozen=True)
class FeatureSpec:
    """One feature pipeline (the fields of struct mct_feat_cfg; what each computes: firmware/core/mct_feat.h)."""

    kind: str = "mfcc"  # mfcc | logmel | motion
    sample_rate: float = 16000.0
    n_samples: int = 16000  # samples per window (per axis)
    channels: int = 1
    frame_len: int = 480
    frame_step: int = 320
    n_fft: int = 512
    n_mels: int = 40
    n_coef: int = 10
    fmin: float = 20.0
    fmax: float = 4000.0
    window: str = "hann"
    mel_scale: str = "htk"
    mel_norm: str = "none"
    dct_norm: str = "sqrt2n"
    spectrum: str = "magnitude"
    pre_emph: float = 0.0
    log_eps: float = 1e-6
    in_scale: float = 1.0 / 32768.0  # int16 samples -> floats
    filter: str = "none"
    cutoff: float = 0.0
    q: float = 0.70710678
    stats: Tuple[str, ...] = ()
    n_bands: int = 0
    band_lo: float = 0.0
    band_hi: float = 0.0
    axis_scale: Tuple[float, ...] = field(default_factory=tuple)

    # ---- construction ----
    @classmethod
    def parse(cls, text: str) -> FeatureSpec:
        """A spec from its text: 'kws', 'mfcc:rate=8000,length=8000,...', 'motion:axes=3,...' (SETTINGS keys)."""
        head, _, rest = text.strip().partition(":")
        head = head.strip().lower()
        if head in PRESETS:
            base = PRESETS[head]
        elif head in ("mfcc", "logmel"):
            base = cls(kind=head)
        elif head == "motion":
            base = cls(
                kind="motion",
                sample_rate=100.0,
                n_samples=128,
                channels=3,
                n_fft=0,
                window="none",
                stats=("mean", "rms", "std", "min", "max"),
            )
        else:
            raise ConfigError(
                f"unknown feature pipeline {head!r}; use one of {', '.join(['mfcc', 'logmel', 'motion', *PRESETS])}"
                " followed by optional settings, e.g. 'mfcc:rate=16000,mels=40'"
            )
        changes: Dict[str, Any] = {}
        for item in filter(None, (s.strip() for s in rest.split(","))):
            key, eq, value = item.partition("=")
            key = key.strip().lower()
            if not eq or key not in SETTINGS:
                raise ConfigError(
                    f"bad feature setting {item!r}: write key=value with a key among {', '.join(SETTINGS)}"
                )
            name, conv = SETTINGS[key]
            try:
                changes[name] = conv(value.strip())
            except ValueError as e:
                if isinstance(e, ConfigError):
                    raise
                raise ConfigError(f"bad value in feature setting {item!r}: {e}") from None
        spec = dataclasses.replace(base, **changes)
        spec.sizes()  # validate now
        return spec

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> FeatureSpec:
        """A spec from to_dict's plain data (a model file's)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ConfigError(f"unknown feature settings {sorted(unknown)}; this mcutrain knows {sorted(names)}")
        d = dict(d)
        for k in ("stats", "axis_scale"):
            if k in d:
                d[k] = tuple(d[k])
        spec = cls(**d)
        spec.sizes()
        return spec

    def to_dict(self) -> Dict[str, Any]:
        """Plain data (JSON-able) for a model file."""
        d = dataclasses.asdict(self)
        d["stats"], d["axis_scale"] = list(self.stats), list(self.axis_scale)
        return d

    def text(self) -> str:
        """The spec as text that parse reads back (the settings that differ from the kind's defaults)."""
        base = FeatureSpec.parse(self.kind) if self.kind != "motion" else FeatureSpec.parse("motion")
        parts = []
        for key, (name, _) in SETTINGS.items():
            v, b = getattr(self, name), getattr(base, name)
            if v != b:
                parts.append(f"{key}={'+'.join(str(x) for x in v) if isinstance(v, tuple) else v}")
        return self.kind + (":" + ",".join(parts) if parts else "")

    # ---- the core's view ----
    def cfg(self) -> np.ndarray:
        """One FEAT_CFG_DTYPE record: the bytes of struct mct_feat_cfg."""
        r = np.zeros(1, FEAT_CFG_DTYPE)
        r["kind"] = FeatKind[self.kind.upper()]
        r["window"] = Window[self.window.upper()]
        r["mel_scale"] = MelScale[self.mel_scale.upper()]
        r["mel_norm"] = MelNorm[self.mel_norm.upper()]
        r["dct_norm"] = DctNorm[self.dct_norm.upper()]
        r["spectrum"] = Spectrum[self.spectrum.upper()]
        r["filter"] = Filter[self.filter.upper()]
        r["stats"] = sum(1 << int(Stat[s.upper()]) for s in set(self.stats))
        ints = ("channels", "frame_len", "frame_step", "n_fft", "n_mels", "n_coef", "n_bands", "n_samples")
        for name in ints:
            v = int(getattr(self, name))
            if not 0 <= v <= np.iinfo(FEAT_CFG_DTYPE[name]).max:
                raise ConfigError(f"feature setting {name}={v} is out of range")
            r[name] = v
        for name in (
            "sample_rate",
            "fmin",
            "fmax",
            "pre_emph",
            "log_eps",
            "in_scale",
            "cutoff",
            "q",
            "band_lo",
            "band_hi",
        ):
            r[name] = getattr(self, name)
        if len(self.axis_scale) > MAX_AXES:
            raise ConfigError(f"{len(self.axis_scale)} axis scales given; a window has at most {MAX_AXES} axes")
        scales = list(self.axis_scale) + [1.0] * (MAX_AXES - len(self.axis_scale))
        if self.kind == "motion" and self.axis_scale and len(self.axis_scale) != self.channels:
            raise ConfigError(f"{len(self.axis_scale)} axis scales for {self.channels} axes: give one per axis")
        r["axis_scale"] = scales
        return r

    def cfg_bytes(self) -> bytes:
        """struct mct_feat_cfg as bytes."""
        return self.cfg().tobytes()

    def sizes(self) -> FeatureSizes:
        """Sizes from the core; ConfigError saying what is wrong when the core rejects the pipeline."""
        ok, *vals = _core.feat_size(np.frombuffer(self.cfg_bytes(), np.uint8))
        if not ok:
            raise ConfigError(f"feature pipeline {self.text_unchecked()!r} is not valid: {self._why()}")
        return FeatureSizes(*(int(v) for v in vals))

    def text_unchecked(self) -> str:
        """A short description that needs no validation."""
        return f"{self.kind} ({self.n_samples} samples x {self.channels} at {self.sample_rate:g} Hz)"

    def _why(self) -> str:
        """The first rule of mct_feat.h the spec breaks (for the error message)."""
        pow2 = self.n_fft >= 4 and self.n_fft & (self.n_fft - 1) == 0
        if self.kind in ("mfcc", "logmel"):
            rules = [
                (self.channels == 1, "audio has one channel (axes=1)"),
                (pow2, f"fft={self.n_fft} must be a power of two >= 4"),
                (0 < self.frame_len <= self.n_fft, f"frame={self.frame_len} must be 1 .. fft={self.n_fft}"),
                (self.frame_step > 0, "step must be at least 1"),
                (self.n_samples >= self.frame_len, f"length={self.n_samples} is shorter than one frame"),
                (self.n_mels > 0, "mels must be at least 1"),
                (self.sample_rate > 0, "rate must be positive"),
                (0 <= self.fmin < self.fmax <= self.sample_rate / 2, "need 0 <= fmin < fmax <= rate / 2"),
                (self.kind != "mfcc" or 0 < self.n_coef <= self.n_mels, "coef must be 1 .. mels"),
                (self.log_eps >= 0, "log_eps must be >= 0"),
            ]
        else:
            rules = [
                (0 < self.channels <= MAX_AXES, f"axes must be 1 .. {MAX_AXES}"),
                (self.n_samples > 0, "length must be at least 1"),
                (len(self.stats) + self.n_bands > 0, "ask for stats or bands"),
                (self.filter == "none" or 0 < self.cutoff < self.sample_rate / 2, "need 0 < cutoff < rate / 2"),
                (self.filter == "none" or self.q > 0, "q must be positive"),
                (
                    self.n_bands == 0 or (pow2 and self.n_fft >= self.n_samples),
                    "bands need fft, a power of two >= length",
                ),
                (self.n_bands > 0 or self.n_fft == 0, "fft is only used with bands (set bands or fft=0)"),
                (
                    self.n_bands == 0 or 0 <= self.band_lo < self.band_hi <= self.sample_rate / 2,
                    "need 0 <= band_lo < band_hi <= rate / 2",
                ),
            ]
        for ok, msg in rules:
            if not ok:
                return msg
        return "a setting is out of range (see firmware/core/mct_feat.h)"

    def tables(self) -> np.ndarray:
        """The constant tables (float32) the core computes for this pipeline."""
        self.sizes()
        return _core.feat_tables(np.frombuffer(self.cfg_bytes(), np.uint8))

    @property
    def shape(self) -> Tuple[int, int]:
        """(rows, values per row) of one window's features."""
        s = self.sizes()
        return s.n_frames, s.n_per_frame

    @property
    def window_shape(self) -> Tuple[int, ...]:
        """Shape of one raw window: (n_samples,) for audio, (n_samples, channels) for motion."""
        return (self.n_samples,) if self.kind != "motion" else (self.n_samples, self.channels)

    @property
    def raw_dtype(self) -> np.dtype:
        """How a device holds a raw window: int16 samples (audio, times in_scale) or float32 values (motion)."""
        return np.dtype(np.float32) if self.kind == "motion" else np.dtype(np.int16)

    def compute(self, x: Union[np.ndarray, List[Any]], tables: Union[np.ndarray, None] = None) -> np.ndarray:
        """Features of one window or a batch: x is window_shape or (n, *window_shape), float32 (or anything
        numeric, converted) or int16 (times in_scale); returns (rows, per row) or (n, rows, per row) float32."""
        s = self.sizes()
        a = np.asarray(x)
        one = a.ndim == len(self.window_shape)
        if one:
            a = a[None]
        if a.shape[1:] != self.window_shape:
            raise ShapeError(
                f"a window of this {self.kind} pipeline has shape {self.window_shape}, got {a.shape[1:]}"
                f" ({self.n_samples} samples at {self.sample_rate:g} Hz); cut or pad the recording to that length"
            )
        if a.dtype != np.int16:
            a = a.astype(np.float32)
        a = np.ascontiguousarray(a.reshape(a.shape[0], s.n_in))
        t = self.tables() if tables is None else np.ascontiguousarray(tables, np.float32)
        y = _core.feat_run(np.frombuffer(self.cfg_bytes(), np.uint8), t, a)
        y = y.reshape(a.shape[0], s.n_frames, s.n_per_frame)
        return y[0] if one else y

    def c_initializer(self) -> str:
        """struct mct_feat_cfg as a C99 initializer with designated fields (for firmware sources)."""
        r = self.cfg()[0]
        parts = []
        for name in FEAT_CFG_DTYPE.names:
            v = r[name]
            if FEAT_CFG_DTYPE[name].base.kind == "f":
                vals = np.atleast_1d(np.asarray(v, np.float32))
                lits = [float(f).hex() + "f" for f in vals]
                parts.append(f".{name} = " + ("{" + ", ".join(lits) + "}" if vals.size > 1 else lits[0]))
            else:
                parts.append(f".{name} = {int(v)}u")
        return "{" + ", ".join(parts) + "}"

    def names(self) -> List[str]:
        """A name per output value of one window (for plots and printouts)."""
        s = self.sizes()
        if self.kind == "motion":
            per = [f"{st}" for st in Stat.__members__ if st.lower() in self.stats] + [
                f"band{b}" for b in range(self.n_bands)
            ]
            return [f"axis{a}.{p.lower()}" for a in range(self.channels) for p in per]
        what = "mfcc" if self.kind == "mfcc" else "mel"
        return [f"frame{f}.{what}{i}" for f in range(s.n_frames) for i in range(s.n_per_frame)]


# The MLPerf Tiny keyword-spotting front end: 16 kHz, 1 s, 30 ms frames every 20 ms (49), FFT 512, |X|, 40 HTK mel
# bands 20-4000 Hz, log(mel + 1e-6), 10 MFCC (DCT-II scaled sqrt(2/40), as TensorFlow's).
PRESETS: Dict[str, FeatureSpec] = {"kws": FeatureSpec()}

__all__ = [
    "FeatKind",
    "Window",
    "MelScale",
    "MelNorm",
    "DctNorm",
    "Spectrum",
    "Filter",
    "Stat",
    "FEAT_CFG_DTYPE",
    "MAX_AXES",
    "FeatureSizes",
    "FeatureSpec",
    "PRESETS",
    "SETTINGS",
]
