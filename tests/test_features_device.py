"""The feature pipelines on the simulated cores give the host trainer's bits: tests/c/test_feat.c, built with
the flags the firmware builds use (-ffp-contract=off -fno-math-errno; -O2 on Cortex-M, -Os on AVR), runs in
QEMU on a Cortex-M4F (mps2-an386, hard float), a Cortex-M3 (mps2-an385) and a Cortex-M0 (micro:bit), both soft
float, and on an ATmega2560 in simavr (mcutrain's harness), and prints every feature's bits; they must equal
what mcutrain.features (the host build of the same C) computes, for float and int16 windows, and the constant
tables the device computed must hash to the host's.

Needs gcc-arm-none-eabi, libnewlib-arm-none-eabi, qemu-system-arm, gcc-avr, avr-libc, simavr, libsimavr-dev."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import List

import numpy as np
import pytest
from test_features import check_device_output, write_case_header

from mcutrain.exporter.sim_avr import build_harness
from mcutrain.features import FeatureSpec

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "firmware" / "core"
QEMU_ARM = ROOT / "firmware" / "platforms" / "qemu-arm"
SOURCES = [ROOT / "tests" / "c" / "test_feat.c"] + [CORE / f for f in ("feat.c", "feat_fft.c", "feat_motion.c")]
FLOAT_FLAGS = ["-ffp-contract=off", "-fno-math-errno"]

# small pipelines of every kind (they fit the micro:bit's 16 KB and, one at a time, the ATmega2560's 8 KB)
DEVICE_SPECS = [
    "mfcc:rate=8000,length=400,frame=128,step=96,fft=128,mels=12,fmin=60,fmax=3800,coef=8,preemph=0.9",
    "logmel:rate=8000,length=256,frame=60,step=64,fft=64,mels=8,fmin=0,fmax=4000,mel=slaney,melnorm=slaney,"
    "spectrum=power,window=hamming",
    "motion:rate=100,length=64,axes=3,stats=mean+rms+std+min+max,bands=3,fft=64,band_lo=0.3,band_hi=30.3,"
    "filter=lowpass,cutoff=15,scale=1+2+0.5,window=hann",
    "motion:rate=50,length=40,axes=2,stats=std+max,filter=highpass,cutoff=2,q=1",
]
ARM = {
    "m4f": ("mps2-an386", "-mcpu=cortex-m4 -mthumb -mfpu=fpv4-sp-d16 -mfloat-abi=hard", 4 << 20),
    "m3": ("mps2-an385", "-mcpu=cortex-m3 -mthumb -mfloat-abi=soft", 4 << 20),
    "m0": ("microbit", "-mcpu=cortex-m0 -mthumb -mfloat-abi=soft", 16 << 10),
}


def need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: install them (see scripts/setup.sh)")


def run(cmd: List[str], **kw: object) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd[:4]))} ... failed ({proc.returncode}):\n{proc.stderr}"
    return proc


@pytest.mark.parametrize("core", sorted(ARM))
def test_features_on_cortex_m_match_the_host_bit_for_bit(core: str, tmp_path: Path) -> None:
    need("arm-none-eabi-gcc", "qemu-system-arm")
    machine, cpu, ram = ARM[core]
    specs = [FeatureSpec.parse(t) for t in DEVICE_SPECS]
    write_case_header(tmp_path / "feat_case.h", specs, seed=11)
    mem = tmp_path / "mem.ld"
    mem.write_text(
        f"MEMORY\n{{\n  FLASH (rx) : ORIGIN = 0x00000000, LENGTH = 256K\n"
        f"  RAM (rwx) : ORIGIN = 0x20000000, LENGTH = {ram}\n}}\n__min_stack = 2048;\nINCLUDE sections.ld\n"
    )
    elf = tmp_path / "feat.elf"
    run(
        ["arm-none-eabi-gcc", *cpu.split(), "-O2", *FLOAT_FLAGS, "-std=c99", "-Wall", "-Wextra", "-Werror",
         "-ffunction-sections", "-fdata-sections", "-DFEAT_SEMIHOST", f"-I{CORE}", f"-I{tmp_path}",
         *map(str, SOURCES), str(QEMU_ARM / "startup" / "startup.c"), "-nostartfiles", "--specs=nano.specs",
         "-Wl,--gc-sections", f"-L{QEMU_ARM / 'ldscripts'}", "-T", str(mem), "-o", str(elf)]
    )  # fmt: skip
    proc = run(
        ["qemu-system-arm", "-M", machine, "-nographic", "-monitor", "none", "-serial", "none",
         "-semihosting-config", "enable=on,target=native", "-kernel", str(elf)]
    )  # fmt: skip
    out = proc.stdout + proc.stderr  # QEMU prints semihosting output on its stderr
    assert out.rstrip().endswith("done"), out[-500:]
    check_device_output(out, specs, seed=11, where=f"QEMU {core}")


@pytest.mark.parametrize("case", range(len(DEVICE_SPECS)))
def test_features_on_avr_match_the_host_bit_for_bit(case: int, tmp_path: Path) -> None:
    need("avr-gcc")
    spec = FeatureSpec.parse(DEVICE_SPECS[case])
    write_case_header(tmp_path / "feat_case.h", [spec], seed=20 + case)
    elf = tmp_path / "feat.elf"
    run(
        ["avr-gcc", "-mmcu=atmega2560", "-Os", *FLOAT_FLAGS, "-std=c99", "-Wall", "-Wextra", "-Werror",
         "-ffunction-sections", "-fdata-sections", "-DFEAT_AVR", f"-I{CORE}", f"-I{tmp_path}", *map(str, SOURCES),
         "-Wl,--gc-sections", "-o", str(elf)]
    )  # fmt: skip
    harness = build_harness()
    args = [str(harness), str(elf), "mcu=atmega2560", "serial=stdio", "max_cycles=2000000000"]
    proc = run(args, stdin=subprocess.DEVNULL)
    assert proc.stdout.rstrip().endswith("done"), proc.stdout[-500:]
    check_device_output(proc.stdout, [spec], seed=20 + case, where="simavr atmega2560")


# ---- an exported model computes its own features: raw windows in, over the protocol ----
SMALL_AUDIO = "mfcc:rate=8000,length=2000,frame=128,step=128,fft=128,mels=12,fmin=50,fmax=4000,coef=8"


@pytest.mark.parametrize("board", ["nucleo_f401re", "pico"])
def test_exported_model_takes_raw_windows_like_the_host(board: str, tmp_path: Path, pio_core: Path) -> None:
    """A model trained with --features on raw audio, exported for a board's QEMU stand-in (the M4F; the M0 with
    soft float and a smaller pipeline, as its stand-in has 16 KB): FEATURES, PREDICT_RAW and TRAIN_RAW on int16
    windows give the host twin's bits (the features, the outputs, the losses, and the parameters after
    training), and the memory plan counts the front end."""
    from click.testing import CliRunner
    from test_features_cli import AUDIO, word_folder

    from helpers import assert_device_equals_twin, assert_same_bits
    from mcutrain.cli.commands import main
    from mcutrain.exporter import sim
    from mcutrain.exporter.export import export_project
    from mcutrain.exporter.memplan import plan
    from mcutrain.exporter.twin import DeviceTwin
    from mcutrain.modelfile import load_model
    from mcutrain.wav import load_window

    small = board == "pico"
    data = word_folder(tmp_path / "words", per_label=8, longest=2000 if small else 4000)
    model = tmp_path / "m.mct"
    net = "linear:120x8,relu,linear:8x3,softmax" if small else "linear:300x8,relu,linear:8x3,softmax"
    r = CliRunner().invoke(main, ["train", "--data", str(data), "--features", SMALL_AUDIO if small else AUDIO,
                                  "--net", net, "--loss", "xent", "--opt", "sgd",
                                  "--lr", "0.05", "--steps", "60", "-o", str(model)])  # fmt: skip
    assert r.exit_code == 0, r.output
    ck = load_model(model)
    ex = export_project(ck, board, tmp_path / "fw", sim=True)
    assert ex.model.feat is not None
    rows = dict((name, ram) for name, ram, _ in plan(ex.model, ex.board, sim=True).rows)
    spec = ex.model.feat.spec
    z = spec.sizes()
    assert rows["front end: raw window + tables + scratch"] == 2 * z.n_in + 4 * (z.tables + z.scratch)
    twin = DeviceTwin(ex.model)
    spec = ex.model.feat.spec
    windows = [load_window(data / lab / f"{i}.wav", spec) for lab in ("up", "down", "beep") for i in range(3)]
    targets = np.eye(3, dtype=np.float32)[[2, 2, 2, 1, 1, 1, 0, 0, 0]]
    with sim.start(ex.path, ex.board) as s:
        assert s.device.info().hash == ex.hash
        for w in windows[:3]:
            assert_same_bits(s.device.features(w), twin.features(w), "FEATURES")
        assert_same_bits(np.stack([s.device.predict_raw(w) for w in windows]), twin.predict_raw(np.stack(windows)),
                         "PREDICT_RAW")  # fmt: skip
        for w, t in zip(windows, targets):
            loss, _ = s.device.train_raw(w, t)
            assert_same_bits(np.float32(loss), np.float32(twin.train_raw(w, t)), "TRAIN_RAW loss")
        assert_device_equals_twin(s.device, twin)
        assert_same_bits(s.device.predict_raw(windows[0]), twin.predict_raw(windows[0]), "PREDICT_RAW after training")
        with pytest.raises(Exception, match="BAD_LENGTH|frame length"):
            s.device.predict_raw(windows[0][:100])


def test_exported_motion_model_takes_float_windows_like_the_host(tmp_path: Path, pio_core: Path) -> None:
    """The IMU path: a gesture model trained with --features motion on NPZ windows, exported for the Cortex-M3
    stand-in (soft float): PREDICT_RAW and TRAIN_RAW on float windows give the twin's bits, and the device
    classifies held-out windows as well as the host."""
    from click.testing import CliRunner
    from test_features_cli import MOTION, gestures

    from helpers import assert_device_equals_twin, assert_same_bits
    from mcutrain.cli.commands import main
    from mcutrain.exporter import sim
    from mcutrain.exporter.export import export_project
    from mcutrain.exporter.twin import DeviceTwin
    from mcutrain.modelfile import load_model

    x, y = gestures(120, seed=3)
    np.savez(tmp_path / "imu.npz", x=x, y=y)
    model = tmp_path / "g.mct"
    r = CliRunner().invoke(main, ["train", "--data", str(tmp_path / "imu.npz"), "--features", MOTION, "--net",
                                  "linear:27x12,tanh,linear:12x3,softmax", "--loss", "xent", "--steps", "300",
                                  "-o", str(model)])  # fmt: skip
    assert r.exit_code == 0, r.output
    ex = export_project(load_model(model), "bluepill", tmp_path / "fw", sim=True)
    twin = DeviceTwin(ex.model)
    xt, yt = gestures(12, seed=9)
    with sim.start(ex.path, ex.board) as s:
        got = np.stack([s.device.predict_raw(w) for w in xt])
        assert_same_bits(got, twin.predict_raw(xt), "PREDICT_RAW (motion)")
        assert np.mean(np.argmax(got, 1) == yt) >= 0.9
        for w, c in zip(xt[:4], yt[:4]):
            loss, _ = s.device.train_raw(w, np.eye(3, dtype=np.float32)[c])
            assert_same_bits(np.float32(loss), np.float32(twin.train_raw(w, np.eye(3, dtype=np.float32)[c])), "loss")
        assert_device_equals_twin(s.device, twin)
