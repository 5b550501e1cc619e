"""The signal front end (firmware/core/mct_feat.h through mcutrain.features): every pipeline against a float64
NumPy reference (tests/feat_reference.py), the MFCC and log-mel against librosa configured to the same
definition, int16 input, the sizes the core reports, the C under AddressSanitizer and UBSan, and bad specs.

Tolerances (float32 C against float64): audio |c - ref| <= 3e-5 + 3e-6 |ref| (observed about 8e-6 at
|MFCC| <= 20; the error comes from float32 rounding in the FFT and the mel sums); motion 1e-6 + 1e-5 |ref|.
librosa (0.11) computes in float32 too (its STFT in complex64): 1e-4 + 1e-5 |ref|.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import feat_reference as R
import numpy as np
import pytest

from mcutrain.errors import ConfigError, ShapeError
from mcutrain.features import FeatureSpec
from mcutrain.host_build import HOST_CORE_FLAGS

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "firmware" / "core"

AUDIO_SPECS = [
    "kws",
    "kws:coef=13,dct=ortho",
    "mfcc:fft=1024,frame=640",
    "mfcc:preemph=0.97,window=hamming,frame=512,step=160",
    "logmel:mel=slaney,melnorm=slaney,spectrum=power",
    "logmel:rate=8000,length=4000,frame=200,step=80,fft=256,mels=23,fmin=0,fmax=4000,window=none",
    "mfcc:rate=22050,length=5000,frame=256,step=100,fft=256,mels=64,fmin=50,fmax=11025,coef=20,mel=slaney",
]
MOTION_SPECS = [
    "motion:rate=100,length=100,axes=3,stats=mean+rms+std+min+max,bands=4,fft=128,band_lo=0.3,band_hi=40.3,"
    "filter=lowpass,cutoff=20,scale=1+2+0.5,window=hann",
    "motion:rate=50,length=64,axes=6,stats=std+max,filter=highpass,cutoff=2,q=1",
    "motion:rate=200,length=256,axes=1,stats=,bands=8,fft=256,band_lo=1.1,band_hi=97.1,window=hamming",
]


def audio_signal(n: int, rate: float, seed: int) -> np.ndarray:
    """A chirp, a tone, noise and a silent start (the first frames are exactly zero)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / rate
    x = 0.3 * np.sin(2 * np.pi * (100 + 1500 * t) * t) + 0.2 * np.sin(2 * np.pi * 440 * t)
    x = x + 0.05 * rng.standard_normal(n)
    x[: n // 20] = 0.0
    return x.astype(np.float32)


def windows_for(spec: FeatureSpec, count: int, seed: int) -> np.ndarray:
    if spec.kind == "motion":
        rng = np.random.default_rng(seed)
        t = np.arange(spec.n_samples)[:, None] / spec.sample_rate
        x = np.sin(2 * np.pi * 7.0 * t * (1 + np.arange(spec.channels))) + 0.3 * rng.standard_normal(
            (count, spec.n_samples, spec.channels)
        )
        return x.astype(np.float32)
    return np.stack([audio_signal(spec.n_samples, spec.sample_rate, seed + i) for i in range(count)])


@pytest.mark.parametrize("text", AUDIO_SPECS + MOTION_SPECS)
def test_pipeline_matches_the_float64_reference(text: str) -> None:
    spec = FeatureSpec.parse(text)
    x = windows_for(spec, 3, seed=1)
    got = spec.compute(x)
    assert got.dtype == np.float32 and got.shape == (3, *spec.shape)
    atol, rtol = (1e-6, 1e-5) if spec.kind == "motion" else (3e-5, 3e-6)
    for i in range(3):
        ref = R.features(spec, x[i])
        assert ref.shape == got[i].shape
        err = np.abs(got[i] - ref)
        assert np.all(err <= atol + rtol * np.abs(ref)), f"{text}: max error {err.max():.3g}"
    # one window alone gives the batch's row
    assert np.array_equal(spec.compute(x[1]), got[1])


def test_kws_preset_is_mlperf_tiny() -> None:
    """The MLPerf Tiny KWS front end: 1 s at 16 kHz gives 49 frames x 10 MFCC; a silent frame's coefficient 0 is
    log(1e-6) * 40 * sqrt(2 / 40) and the others are 0."""
    spec = FeatureSpec.parse("kws")
    assert spec.shape == (49, 10) and spec.sizes().n_in == 16000
    y = spec.compute(audio_signal(16000, 16000.0, 3))
    silent = np.log(np.float64(1e-6)) * 40 * np.sqrt(2 / 40)
    assert abs(y[0, 0] - silent) < 1e-4 and np.all(np.abs(y[0, 1:]) < 1e-4)
    assert np.abs(y[30]).max() > 1.0


def test_int16_input_gives_the_bits_of_its_floats() -> None:
    spec = FeatureSpec.parse("kws")
    x = audio_signal(16000, 16000.0, 5)
    xi = np.clip(np.round(x * 32768), -32768, 32767).astype(np.int16)
    a = spec.compute(xi)
    b = spec.compute(xi.astype(np.float32) / np.float32(32768))
    assert a.tobytes() == b.tobytes()
    m = FeatureSpec.parse(MOTION_SPECS[0] + ",in_scale=0.001")
    xm = (windows_for(m, 1, 2)[0] * 1000).astype(np.int16)
    assert m.compute(xm).tobytes() == m.compute(xm.astype(np.float32) * np.float32(0.001)).tobytes()


def test_sizes_are_what_the_core_computes() -> None:
    s = FeatureSpec.parse("kws").sizes()
    assert (s.n_in, s.n_frames, s.n_per_frame, s.n_out) == (16000, 49, 10, 490)
    assert s.scratch == 512 + 40  # the FFT buffer and the mel bands
    # tables: 2 + window 480 + twiddles 512 + 3 per bin inside 20..4000 Hz (bins 1..127) + DCT 10 x 40
    assert s.tables == 2 + 480 + 512 + 3 * 127 + 400
    assert FeatureSpec.parse("kws").tables().shape == (s.tables,)
    m = FeatureSpec.parse(MOTION_SPECS[0]).sizes()
    assert (m.n_in, m.n_frames, m.n_per_frame, m.scratch) == (300, 3, 9, 128)


# ---- librosa, configured to the same definition ----
@pytest.mark.parametrize("mel", ["htk", "slaney"])
def test_mfcc_agrees_with_librosa(mel: str) -> None:
    """librosa: frames of n_fft samples (no centring, so win_length = n_fft, as librosa centres a shorter window
    in the FFT), periodic Hann, |X| (power=1), its mel filters (htk=True with norm=None, or Slaney with
    norm='slaney'), our log(mel + 1e-6), then its DCT-II with norm='ortho'."""
    import librosa

    norm = "slaney" if mel == "slaney" else "none"
    spec = FeatureSpec.parse(f"mfcc:frame=512,step=320,fft=512,coef=13,dct=ortho,mel={mel},melnorm={norm}")
    x = audio_signal(16000, 16000.0, 9)
    ours_mel = FeatureSpec.parse(spec.text().replace("mfcc", "logmel", 1)).compute(x)
    S = librosa.feature.melspectrogram(
        y=x,
        sr=16000,
        n_fft=512,
        hop_length=320,
        win_length=512,
        window="hann",
        center=False,
        power=1.0,
        n_mels=40,
        fmin=20.0,
        fmax=4000.0,
        htk=mel == "htk",
        norm="slaney" if mel == "slaney" else None,
    )
    ref_mel = np.log(S.T.astype(np.float64) + 1e-6)
    assert ref_mel.shape == ours_mel.shape
    assert np.all(np.abs(ours_mel - ref_mel) <= 1e-4 + 1e-5 * np.abs(ref_mel))
    ref = librosa.feature.mfcc(S=ref_mel.T, n_mfcc=13, dct_type=2, norm="ortho").T
    ours = spec.compute(x)
    err = np.abs(ours - ref)
    assert np.all(err <= 1e-4 + 1e-5 * np.abs(ref)), f"max error {err.max():.3g}"


# ---- bad specs and windows ----
@pytest.mark.parametrize(
    "text,msg",
    [
        ("kws:fft=500", "power of two"),
        ("kws:frame=600", "frame=600 must be 1 .. fft=512"),
        ("kws:fmax=9000", "fmax <= rate / 2"),
        ("kws:coef=41", "coef must be 1 .. mels"),
        ("kws:length=100", "shorter than one frame"),
        ("kws:window=kaiser", "unknown window 'kaiser'; choose one of none, hann, hamming"),
        ("kws:rate=abc", "bad value in feature setting 'rate=abc'"),
        ("kws:wibble=3", "bad feature setting 'wibble=3'"),
        ("fbank", "unknown feature pipeline 'fbank'"),
        ("motion:axes=9", "axes must be 1 .. 8"),
        ("motion:bands=4,fft=64,length=128,band_hi=40", "bands need fft, a power of two >= length"),
        ("motion:filter=lowpass,cutoff=80,rate=100", "need 0 < cutoff < rate / 2"),
        ("motion:axes=2,scale=1+2+3", "3 axis scales for 2 axes"),
    ],
)
def test_bad_specs_say_what_is_wrong(text: str, msg: str) -> None:
    with pytest.raises(ConfigError) as e:
        FeatureSpec.parse(text)
    assert msg in str(e.value)


def test_a_window_of_the_wrong_length_is_refused() -> None:
    spec = FeatureSpec.parse("kws")
    with pytest.raises(ShapeError, match=r"has shape \(16000,\), got \(8000,\).*16000 samples at 16000 Hz"):
        spec.compute(np.zeros(8000, np.float32))


def test_spec_round_trips_through_text_and_dict() -> None:
    for text in AUDIO_SPECS + MOTION_SPECS:
        spec = FeatureSpec.parse(text)
        assert FeatureSpec.parse(spec.text()) == spec
        assert FeatureSpec.from_dict(spec.to_dict()) == spec


# ---- the C itself under the sanitizers ----
@pytest.fixture(scope="module")
def gcc() -> Iterator[str]:
    path = shutil.which("gcc")
    if path is None:
        pytest.fail("gcc is not installed (apt-get install gcc)")
    yield path


def test_c_pipelines_are_clean_under_asan_and_ubsan(gcc: str, tmp_path: Path) -> None:
    """tests/c/test_feat.c runs every pipeline with buffers of exactly the sizes the core reports (heap blocks,
    so a read or write past one is caught) and checks that both builds give the same bits as the host trainer's."""
    specs = [FeatureSpec.parse(t) for t in AUDIO_SPECS[:3] + MOTION_SPECS]
    header = tmp_path / "feat_case.h"
    write_case_header(header, specs, seed=4)
    sources = [str(CORE / f) for f in ("feat.c", "feat_fft.c", "feat_motion.c")]
    flags = ["-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{CORE}", f"-I{tmp_path}"]
    builds = {
        "asan": ["-O1", "-g", "-ffp-contract=off", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"],
        "host": [*HOST_CORE_FLAGS],
    }
    for name, extra in builds.items():
        exe = tmp_path / f"test_feat_{name}"
        cmd = [gcc, *flags, *extra, str(ROOT / "tests" / "c" / "test_feat.c"), *sources, "-lm", "-o", str(exe)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0 and "runtime error" not in run.stderr, run.stderr
        check_device_output(run.stdout, specs, seed=4, where=name)


# ---- helpers shared with the device tests ----
def case_inputs(spec: FeatureSpec, seed: int) -> np.ndarray:
    """One window of the spec, float32, in [-1, 1)."""
    x = windows_for(spec, 1, seed)[0]
    return np.clip(x / (np.abs(x).max() + 1e-3), -1, 0.99997).astype(np.float32)


def write_case_header(path: Path, specs: list, seed: int) -> None:
    """feat_case.h for tests/c/test_feat.c: the configs, one float and one int16 window each, and the sizes."""
    lines = ['#include "mct_feat.h"', f"#define FEAT_N_CASES {len(specs)}"]
    sizes = [s.sizes() for s in specs]
    lines.append(f"#define FEAT_MAX_IN {max(z.n_in for z in sizes)}")
    lines.append(f"#define FEAT_MAX_OUT {max(z.n_out for z in sizes)}")
    lines.append(f"#define FEAT_MAX_TABLES {max(z.tables for z in sizes)}")
    lines.append(f"#define FEAT_MAX_SCRATCH {max(z.scratch for z in sizes)}")
    lines.append("static const mct_feat_cfg feat_cfgs[FEAT_N_CASES] = {")
    lines += ["    " + s.c_initializer() + "," for s in specs]
    lines.append("};")
    for k, s in enumerate(specs):
        x = case_inputs(s, seed + k).ravel()
        xi = np.round(x * 32768).astype(np.int16)
        lines.append(f"static const float feat_x{k}[] = {{" + ",".join(float(v).hex() + "f" for v in x) + "};")
        lines.append(f"static const int16_t feat_xi{k}[] = {{" + ",".join(str(int(v)) for v in xi) + "};")
    lines.append(
        "static const float *const feat_xs[FEAT_N_CASES] = {" + ",".join(f"feat_x{k}" for k in range(len(specs))) + "};"
    )
    lines.append(
        "static const int16_t *const feat_xis[FEAT_N_CASES] = {"
        + ",".join(f"feat_xi{k}" for k in range(len(specs)))
        + "};"
    )
    path.write_text("\n".join(lines) + "\n")


def check_device_output(stdout: str, specs: list, seed: int, where: str) -> None:
    """The program's lines 'k f32|i16 HEX...' and 'k tables HASH' equal the host's C core bit for bit."""
    rows = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].isdigit():
            rows[(int(parts[0]), parts[1])] = parts[2:]
    for k, s in enumerate(specs):
        x = case_inputs(s, seed + k)
        xi = np.round(x * 32768).astype(np.int16)
        for tag, inp in (("f32", x), ("i16", xi)):
            assert (k, tag) in rows, f"{where}: no output for case {k} {tag}:\n{stdout[-2000:]}"
            got = np.array([int(h, 16) for h in rows[(k, tag)]], np.uint32).view(np.float32)
            want = s.compute(inp).ravel()
            assert got.shape == want.shape, f"{where}: case {k} {tag}"
            diff = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
            assert diff.size == 0, (
                f"{where}: case {k} ({s.text()}) {tag}: {diff.size} values differ, first at {diff[0]}: "
                f"{got[diff[0]]!r} vs host {want[diff[0]]!r}"
            )
        tab = s.tables().view(np.uint32)
        h = np.uint32(2166136261)
        for v in tab:  # FNV-1a over the words, as test_feat.c
            h = np.uint32((int(h) ^ int(v)) * 16777619 & 0xFFFFFFFF)
        assert rows.get((k, "tables")) == [f"{int(h):08x}"], f"{where}: case {k} tables differ"


# ---- WAV files ----
def test_wav_windows_and_bad_recordings(tmp_path: Path) -> None:
    from mcutrain.errors import DataError
    from mcutrain.wav import load_window, read_wav, write_wav

    spec = FeatureSpec.parse("kws")
    x = np.round(audio_signal(12000, 16000.0, 1) * 20000).astype(np.int16)
    good = tmp_path / "good.wav"
    write_wav(good, 16000, x)
    rate, back = read_wav(good)
    assert rate == 16000 and np.array_equal(back, x)
    w = load_window(good, spec)
    assert w.shape == (16000,) and np.array_equal(w[:12000], x) and not w[12000:].any()  # padded with zeros
    assert spec.compute(w).shape == (49, 10)

    def bad(name: str, make: object, msg: str) -> None:
        p = tmp_path / name
        make(p)  # type: ignore[operator]
        with pytest.raises(DataError) as e:
            load_window(p, spec)
        assert msg in str(e.value) and str(p) in str(e.value), str(e.value)

    bad("rate.wav", lambda p: write_wav(p, 8000, x), "sampled at 8000 Hz, the feature pipeline takes 16000 Hz")
    bad("stereo.wav", lambda p: write_wav(p, 16000, np.stack([x, x], 1)), "has 2 channels")
    clipped = np.clip(x.astype(np.int32) * 4, -32768, 32767).astype(np.int16)
    bad("clipped.wav", lambda p: write_wav(p, 16000, clipped), "is clipped")
    bad("empty.wav", lambda p: write_wav(p, 16000, np.zeros(0, np.int16)), "is empty")
    bad("long.wav", lambda p: write_wav(p, 16000, np.zeros(20000, np.int16)), "cut the recording")
    bad("text.wav", lambda p: p.write_text("not audio"), "is not a readable WAV file")
    bad("short.wav", lambda p: p.write_bytes(good.read_bytes()[:1000]), "is truncated")
    bad("missing.wav", lambda p: None, "no such file")
