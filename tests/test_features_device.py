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
