"""Cost of the MLPerf Tiny keyword-spotting front end on the Cortex-M4F (issue 22): the 49 x 10 MFCC of one second
of 16 kHz audio (30 ms frames every 20 ms, FFT 512, |X|, 40 HTK mel bands 20-4000 Hz, log(mel + 1e-6), DCT-II
scaled sqrt(2/40)), computed by mcutrain's C core (firmware/core/feat*.c, mct_feat_frame, its tables in flash as
the host computed them) and, in the same QEMU run (mps2-an386, counted by mcutrain's instruction plugin), by
CMSIS-DSP's arm_mfcc_f32 (arm_mfcc_init_512_f32, the same window, mel filters and DCT) built from the `cmsisdsp`
sdist, which the bench fetches with `pip download` (needs `wheel`; the CMSIS code is never kept in the repository).

Both are built alike: -mcpu=cortex-m4 -mfpu=fpv4-sp-d16 -mfloat-abi=hard, -Os (or --opt), -ffp-contract=off,
-fno-math-errno, newlib-nano. CMSIS-DSP is compiled in its host mode (__GNUC_PYTHON__), since the sdist lacks the
CMSIS Core headers: that switches off the DSP-extension intrinsics, which only its fixed-point code uses; its f32
MFCC is the same code (TOOLCHAINS.md section 8 measured 51,335 instructions per frame with the Core headers).

Reported per implementation: instructions per frame and per second of audio (49 frames; per frame: framing,
window, FFT, spectrum, mel, log, DCT; CMSIS's row includes copying the frame into its buffer), the code and
constant-table bytes it links, its working RAM, and the largest difference of its 490 outputs from a float64
NumPy computation of the same definition.

    python bench/features.py [--opt -Os] [--json features.json] [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcutrain.exporter.sim import build_host_tool, cache_dir  # noqa: E402
from mcutrain.features import FeatureSpec  # noqa: E402

CORE = ROOT / "firmware" / "core"
QEMU_ARM = ROOT / "firmware" / "platforms" / "qemu-arm"
CPU = ["-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"]
CMSIS_VERSION = "1.10.3"
CMSIS_FILES = [
    "TransformFunctions/arm_mfcc_f32.c",
    "TransformFunctions/arm_mfcc_init_f32.c",
    "TransformFunctions/arm_rfft_fast_f32.c",
    "TransformFunctions/arm_rfft_fast_init_f32.c",
    "TransformFunctions/arm_cfft_f32.c",
    "TransformFunctions/arm_cfft_init_f32.c",
    "TransformFunctions/arm_cfft_radix8_f32.c",
    "TransformFunctions/arm_bitreversal2.c",
    "ComplexMathFunctions/arm_cmplx_mag_f32.c",
    "StatisticsFunctions/arm_absmax_f32.c",
    "BasicMathFunctions/arm_scale_f32.c",
    "BasicMathFunctions/arm_mult_f32.c",
    "BasicMathFunctions/arm_dot_prod_f32.c",
    "BasicMathFunctions/arm_offset_f32.c",
    "FastMathFunctions/arm_vlog_f32.c",
    "MatrixFunctions/arm_mat_vec_mult_f32.c",
    "CommonTables/arm_common_tables.c",
    "CommonTables/arm_const_structs.c",
]


def signal() -> np.ndarray:
    """One deterministic second at 16 kHz in [-1, 1): a chirp 100 -> 3000 Hz, a 440 Hz tone, noise, amplitude
    modulation; the first 30 ms are silent (frame 0 is digital silence)."""
    t = np.arange(16000) / 16000
    rng = np.random.default_rng(7)
    x = 0.4 * np.sin(2 * np.pi * (100 * t + 1450 * t * t)) + 0.2 * np.sin(2 * np.pi * 440 * t)
    x = (x + 0.05 * rng.standard_normal(16000)) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    x[:480] = 0
    return (np.round(np.clip(x, -1, 1) * 32767) / 32768).astype(np.float32)


def reference(spec: FeatureSpec, x: np.ndarray) -> np.ndarray:
    """Float64 MFCC of the same definition (numpy's FFT, a dense mel matrix)."""
    n = spec.n_fft
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(spec.frame_len) / spec.frame_len)
    frames = np.stack([x[f * spec.frame_step : f * spec.frame_step + spec.frame_len] for f in range(49)]) * win
    mag = np.abs(np.fft.rfft(frames.astype(np.float64), n=n, axis=1))
    return np.log(mag @ mel_matrix(spec).T + spec.log_eps) @ dct_matrix(spec).T


def mel_matrix(spec: FeatureSpec) -> np.ndarray:
    """HTK triangles over the FFT bins (n_mels, n_fft/2 + 1), float64."""

    def mel(f: Any) -> Any:
        return 1127.0 * np.log1p(np.asarray(f) / 700.0)

    pts = 700.0 * (np.exp(np.linspace(mel(spec.fmin), mel(spec.fmax), spec.n_mels + 2) / 1127.0) - 1.0)
    f = np.arange(spec.n_fft // 2 + 1) * spec.sample_rate / spec.n_fft
    lo, c, hi = pts[:-2, None], pts[1:-1, None], pts[2:, None]
    return np.maximum(0, np.minimum((f - lo) / (c - lo), (hi - f) / (hi - c)))


def dct_matrix(spec: FeatureSpec) -> np.ndarray:
    i, m = np.meshgrid(np.arange(spec.n_coef), np.arange(spec.n_mels), indexing="ij")
    return np.cos(np.pi * i * (2 * m + 1) / (2 * spec.n_mels)) * np.sqrt(2.0 / spec.n_mels)


def c_floats(name: str, v: np.ndarray) -> str:
    vals = ",".join(float(x).hex() + "f" for x in np.asarray(v, np.float32).ravel())
    return f"static const float {name}[{max(v.size, 1)}] = {{{vals}}};\n"


def c_u32(name: str, v: np.ndarray) -> str:
    return f"static const uint32_t {name}[{v.size}] = {{{','.join(str(int(x)) for x in v)}}};\n"


def bench_header(spec: FeatureSpec, x: np.ndarray) -> str:
    """bench_data.h: the signal, our config and tables, CMSIS's window, packed mel filters and DCT."""
    z = spec.sizes()
    w = np.zeros(spec.n_fft)
    w[: spec.frame_len] = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(spec.frame_len) / spec.frame_len)
    mel = mel_matrix(spec)
    pos, length, coefs = [], [], []
    for row in mel:
        nz = np.flatnonzero(row)
        pos.append(nz[0])
        length.append(nz[-1] - nz[0] + 1)
        coefs.append(row[nz[0] : nz[-1] + 1])
    return (
        '#include "mct_feat.h"\n#include <stdint.h>\n'
        f"#define BENCH_FRAMES {z.n_frames}\n#define BENCH_COEF {spec.n_coef}\n#define BENCH_MELS {spec.n_mels}\n"
        f"#define BENCH_FFT {spec.n_fft}\n#define BENCH_FRAME {spec.frame_len}\n#define BENCH_STEP {spec.frame_step}\n"
        f"#define BENCH_OURS_SCRATCH {z.scratch}\n"
        f"static const mct_feat_cfg bench_cfg = {spec.c_initializer()};\n"
        + c_floats("bench_signal", x)
        + c_floats("bench_tables", spec.tables())
        + c_floats("bench_window", w)
        + c_u32("bench_fpos", np.array(pos))
        + c_u32("bench_flen", np.array(length))
        + c_floats("bench_fcoef", np.concatenate(coefs))
        + c_floats("bench_dct", dct_matrix(spec))
    )


def cmsis_sources(cache: Path) -> Path:
    """The unpacked cmsisdsp sdist (downloaded once with pip into the cache)."""
    src = cache / f"cmsisdsp-{CMSIS_VERSION}"
    if not (src / "Source").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", "cmsisdsp",
               "--no-build-isolation", f"cmsisdsp=={CMSIS_VERSION}", "-d", str(cache)]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"pip download of the cmsisdsp sdist failed (it needs numpy and wheel):\n{r.stderr[-1500:]}")
        with tarfile.open(cache / f"cmsisdsp-{CMSIS_VERSION}.tar.gz") as tar:
            tar.extractall(cache)  # noqa: S202 - a package from the index, unpacked in our own cache
    return src


def run(cmd: List[str], **kw: Any) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd[:3])} ... failed ({r.returncode}):\n{(r.stderr or r.stdout)[-3000:]}")
    return r


def symbol_sizes(elf: Path) -> Dict[str, Tuple[str, int]]:
    """{symbol: (section type letter, bytes)} from arm-none-eabi-nm -S."""
    out = {}
    for line in run(["arm-none-eabi-nm", "-S", "--size-sort", str(elf)]).stdout.splitlines():
        parts = line.split()
        if len(parts) == 4:
            out[parts[3]] = (parts[2], int(parts[1], 16))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--opt", default="-Os", help="optimisation flag of both builds [-Os]")
    ap.add_argument("--json", default=None, help="also write the results as JSON")
    ap.add_argument("--cache", default=str(cache_dir() / "cmsisdsp"), help="where the cmsisdsp sdist is kept")
    ap.add_argument("--keep", default=None, help="build in this folder and keep it (ELF, sources, counts)")
    args = ap.parse_args()
    spec = FeatureSpec.parse("kws")
    x = signal()
    src = cmsis_sources(Path(args.cache))
    with tempfile.TemporaryDirectory(prefix="mct-feat-bench-") as tmp:
        t = Path(args.keep or tmp)
        t.mkdir(parents=True, exist_ok=True)
        (t / "bench_data.h").write_text(bench_header(spec, x))
        (t / "mem.ld").write_text(
            "MEMORY\n{\n  FLASH (rx) : ORIGIN = 0x00000000, LENGTH = 4M\n  RAM (rwx) : ORIGIN = 0x20000000, "
            "LENGTH = 4M\n}\n__min_stack = 8192;\nINCLUDE sections.ld\n"
        )
        flags = [*CPU, args.opt, "-ffp-contract=off", "-fno-math-errno", "-ffunction-sections", "-fdata-sections",
                 "-std=c99", f"-I{CORE}", f"-I{t}", f"-I{src / 'Include'}", f"-I{src / 'PrivateInclude'}",
                 "-D__GNUC_PYTHON__", "-DARM_MATH_LOOPUNROLL", "-DBENCH_CMSIS=1"]  # fmt: skip
        objs = []
        for i, f in enumerate(CMSIS_FILES):
            o = t / f"cmsis{i}.o"
            run(["arm-none-eabi-gcc", *flags, "-w", "-c", str(src / "Source" / f), "-o", str(o)])
            objs.append(str(o))
        ours = [str(CORE / f) for f in ("feat.c", "feat_fft.c", "feat_motion.c")]
        elf = t / "bench.elf"
        run(["arm-none-eabi-gcc", *flags, "-Wall", "-Wextra", str(ROOT / "bench" / "feat_bench.c"), *ours,
             str(QEMU_ARM / "startup" / "startup.c"), *objs, "-nostartfiles", "--specs=nano.specs",
             "-Wl,--gc-sections", f"-L{QEMU_ARM / 'ldscripts'}", "-T", str(t / "mem.ld"), "-lm",
             "-o", str(elf)])  # fmt: skip
        syms = symbol_sizes(elf)
        plugin = build_host_tool(ROOT / "firmware" / "host_tools" / "insn_plugin.c", "insn_plugin",
                                 ["-shared", "-fPIC", "-O2"], suffix=".so")  # fmt: skip
        nm = {}  # symbol -> address (hex)
        for ln in run(["arm-none-eabi-nm", str(elf)]).stdout.splitlines():
            parts = ln.split()
            if len(parts) == 3:
                nm[parts[2]] = parts[0]
        regions = [f"region={r}:0x{nm[f'bench_{r}_begin']}:0x{nm[f'bench_{r}_end']}" for r in ("ours", "cmsis")]
        counts = t / "insn.txt"
        q = run(["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-monitor", "none", "-serial", "none",
                 "-semihosting-config", "enable=on,target=native", "-kernel", str(elf),
                 "-plugin", f"{plugin},out={counts}," + ",".join(regions)])  # fmt: skip
        out = q.stdout + q.stderr
        res: Dict[str, Dict[str, float]] = {}
        for line in counts.read_text().splitlines():
            m = re.match(r"region=(\w+) insns=(\d+) pairs=(\d+)", line)
            if m:
                res[m.group(1)] = {"insns": int(m.group(2)), "frames": int(m.group(3))}
    ref = reference(spec, x)
    vals = {}
    for tag in ("ours", "cmsis"):
        words = next(ln.split()[1:] for ln in out.splitlines() if ln.startswith(tag + " "))
        vals[tag] = np.array([int(w, 16) for w in words], np.uint32).view(np.float32).reshape(49, 10)
    host = spec.compute(x)
    fft_tables = ("twiddleCoef", "armBitRevIndexTable", "arm_cfft_sR_")  # CMSIS's constant tables (in flash)
    code = {
        "ours": sum(sz for k, (ty, sz) in syms.items() if ty in "tT" and k.startswith("mct_feat")),
        "cmsis": sum(
            sz for k, (ty, sz) in syms.items() if ty in "tT" and k.startswith("arm_") and not k.startswith(fft_tables)
        ),
    }
    tables = {
        "ours": syms["bench_tables"][1],
        "cmsis": sum(syms[k][1] for k in ("bench_window", "bench_fpos", "bench_flen", "bench_fcoef", "bench_dct"))
        + sum(sz for k, (ty, sz) in syms.items() if k.startswith(fft_tables)),
    }
    ram = {"ours": 4 * spec.sizes().scratch, "cmsis": 4 * (512 + 2 * 512) + syms["mfcc"][1]}
    rows = []
    for tag, name in (("ours", "mcutrain mct_feat_frame"), ("cmsis", f"CMSIS-DSP {CMSIS_VERSION} arm_mfcc_f32")):
        r = res[tag]
        per = r["insns"] / max(r["frames"], 1)
        rows.append({
            "implementation": name, "frames": r["frames"], "insns_per_frame": round(per),
            "insns_per_second_of_audio": r["insns"], "code_bytes": code[tag], "table_bytes": tables[tag],
            "work_ram_bytes": ram[tag], "max_abs_diff_vs_float64": float(np.abs(vals[tag] - ref).max()),
        })  # fmt: skip
    ratio = res["cmsis"]["insns"] / res["ours"]["insns"]
    print(f"MLPerf Tiny KWS MFCC (49 x 10 from 1 s at 16 kHz) on the Cortex-M4F in QEMU, {args.opt}, same run")
    hdr = ["implementation", "insns/frame", "insns/s audio", "code B", "tables B", "work RAM B", "max |d| f64"]
    print("  ".join(f"{h:>14}" if i else f"{h:<34}" for i, h in enumerate(hdr)))
    for r in rows:
        print(f"{r['implementation']:<34}  {r['insns_per_frame']:>14,}  {r['insns_per_second_of_audio']:>14,}  "
              f"{r['code_bytes']:>14,}  {r['table_bytes']:>14,}  {r['work_ram_bytes']:>14,}  "
              f"{r['max_abs_diff_vs_float64']:>14.2e}")  # fmt: skip
    print(f"CMSIS-DSP / mcutrain instructions: {ratio:.2f}")
    same = bool(np.array_equal(vals["ours"].view(np.uint32), host.view(np.uint32)))
    print(
        f"device output equals the host trainer's bit for bit: {same}; "
        f"max |mcutrain - CMSIS-DSP| = {float(np.abs(vals['ours'] - vals['cmsis']).max()):.2e}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"opt": args.opt, "rows": rows, "cmsis_over_ours": ratio,
                                               "host_bits_equal": same}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
