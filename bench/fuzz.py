"""Fuzzing what reads untrusted bytes (issue 9), for longer than the test suite does:

1. frames: the firmware's frame handling (firmware/app/mct_protocol.c over mct_app.c, unchanged) under
   a coverage-guided libFuzzer run, built with clang -fsanitize=fuzzer,address,undefined around
   bench/fuzz_frames.c (which stands in for a target port and checks every reply frame and that no refused,
   read-only or cut-short frame changes a weight). The model is exported for the native board; the corpus
   starts from one valid frame of every command.
2. loaders: random mutations of valid model files (raw bytes; header fields and payload bytes with the
   checksum made valid, so the mutation reaches the parser) and of CSV, NPZ and IDX (plain and .gz) data
   files, fed to mcutrain's loaders in a subprocess whose address space is limited (RLIMIT_AS) and with a
   time limit per case. Every case must end in a valid result (a model that runs forward, a data set) or the
   package's error (an McuTrainError subclass): another exception, a MemoryError, a hang or a dead worker is
   a failure.

    python bench/fuzz.py [--runs 300000] [--cases 20000] [--seed 1] [--memory-gib 2] [--json fuzz.json]

Prints cases run and failures for each part (libFuzzer's execs, coverage and corpus); exits 1 on any failure.
Needs clang with libFuzzer and the sanitizer runtimes (Debian: clang, libclang-rt-14-dev).
"""

from __future__ import annotations

import argparse
import configparser
import gzip
import io
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "fuzz_frames.c"
CLANG_FLAGS = ["-g", "-O1", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fno-sanitize-recover=all"]
SANITIZERS = "-fsanitize=fuzzer,address,undefined"

# ============================================================================ 1. frames (libFuzzer)


def clang() -> Optional[str]:
    """The clang to build the fuzzer with (CLANG in the environment, else clang, clang-14 on PATH)."""
    for name in filter(None, [os.environ.get("CLANG"), "clang", "clang-14"]):
        path = shutil.which(name)
        if path:
            return path
    return None


def libfuzzer_works(cc: str, workdir: Path) -> bool:
    """Whether cc links a libFuzzer program with ASan and UBSan (the runtimes are a separate package)."""
    src = workdir / "probe.c"
    src.write_text(
        "#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)"
        " { (void)d; (void)n; return 0; }\n"
    )
    r = subprocess.run([cc, SANITIZERS, str(src), "-o", str(workdir / "probe")], capture_output=True, text=True)
    return r.returncode == 0


def export_fuzz_model(out: Path) -> Path:
    """A small model with every part the protocol reaches (Adam state, softmax and cross-entropy, three
    layers) exported for the native board into out; returns the project folder."""
    from mcutrain import Checkpoint, Sequential, TrainParams, losses
    from mcutrain import layers as L
    from mcutrain.exporter.export import export_project

    net = Sequential(L.Linear(4, 6), L.Tanh(), L.Linear(6, 3), L.Softmax()).rand_params(seed=7)
    ck = Checkpoint(net, net.new_adam(TrainParams(lr=0.01)), {"loss": "cross_entropy"})
    return export_project(ck, "native", out, loss=losses.cross_entropy, force=True).path


def model_flags(project: Path) -> List[str]:
    """The [env] build_flags of the project's platformio.ini (the float semantics and the -DMCT_ model flags
    every env shares), without PlatformIO's own -I."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(project / "platformio.ini")
    return [f for f in ini["env"]["build_flags"].split() if not f.startswith("-I")]


def _compile(cmds: List[List[str]]) -> None:
    """Run compiler commands two at a time; RuntimeError with the output of the first that fails."""
    for i in range(0, len(cmds), 2):
        procs = [
            (c, subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            for c in cmds[i : i + 2]
        ]
        for c, proc in procs:
            out, _ = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"building the frame fuzzer failed:\n{' '.join(c)}\n{out[-4000:]}")


def build_frame_fuzzer(
    workdir: Path, cc: str, edit_app: Optional[Callable[[str], str]] = None, common: Optional[Path] = None
) -> Path:
    """Export the fuzz model and build the harness with the project's app sources and core; returns the
    fuzzer program. edit_app changes a copy of mct_protocol.c (the frame handling) first (the tests
    plant a bug with it to see the harness catch it). common: a folder where the exported project and every
    object but mct_protocol.c's are kept, to be reused by the next build given the same folder."""
    common = common or workdir / "common"
    project = common / "project"
    src, core = project / "src", project / "lib" / "mcutrain_core" / "src"
    flags = [SANITIZERS, *CLANG_FLAGS]
    if not (common / "objects.done").exists():
        export_fuzz_model(project)
        (common / "obj").mkdir(parents=True, exist_ok=True)
        sources = [HARNESS, src / "mct_crc.c", src / "mct_app.c", src / "model.c"] + sorted(core.glob("*.c"))
        inc = [*model_flags(project), f"-I{src}", f"-I{core}", f"-I{project / 'include'}"]
        _compile([[cc, *flags, *inc, "-c", str(f), "-o", str(common / "obj" / f"{f.stem}.o")] for f in sources])
        (common / "objects.done").write_text("")
    app = workdir / "mct_protocol.c"
    text = (src / "mct_protocol.c").read_text()
    app.write_text(edit_app(text) if edit_app else text)
    inc = [*model_flags(project), f"-I{src}", f"-I{core}", f"-I{project / 'include'}"]
    exe = workdir / "fuzz_frames"
    objs = sorted(str(o) for o in (common / "obj").glob("*.o"))
    _compile([[cc, *flags, *inc, str(app), *objs, "-lm", "-o", str(exe)]])
    return exe


def seed_frames(n_in: int = 4, n_out: int = 3) -> List[bytes]:
    """One valid request of every command (and a few sequences of them): the fuzzer's starting corpus."""
    from mcutrain.exporter.protocol import Cmd, encode

    x = struct.pack(f"<{n_in}f", *[0.5] * n_in)
    t = struct.pack(f"<{n_out}f", *([1.0] + [0.0] * (n_out - 1)))
    frames = [
        encode(Cmd.INFO),
        encode(Cmd.PREDICT, x),
        encode(Cmd.TRAIN, x + t),
        encode(Cmd.READ, struct.pack("<BIH", 0, 0, 4)),
        encode(Cmd.READ, struct.pack("<BIH", 2, 0, 3)),
        encode(Cmd.WRITE, struct.pack("<BI", 0, 1) + struct.pack("<2f", 0.25, -0.25)),
        encode(Cmd.WRITE, struct.pack("<BI", 3, 0) + struct.pack("<f", 0.25)),  # no region 3: refused
        encode(Cmd.SAVE),
        encode(Cmd.LOAD),
        encode(Cmd.STATS),
        encode(Cmd.RESET),
        encode(0x42, b"??"),
    ]
    seqs = [
        encode(Cmd.TRAIN, x + t) + encode(Cmd.SAVE) + encode(Cmd.RESET) + encode(Cmd.LOAD) + encode(Cmd.PREDICT, x),
        encode(Cmd.WRITE, struct.pack("<BI", 1, 0) + struct.pack("<f", 1e30)) + encode(Cmd.TRAIN, x + t),
    ]
    return frames + seqs


def run_frames(
    runs: int,
    workdir: Path,
    seed: int = 1,
    max_len: int = 512,
    edit_app: Optional[Callable[[str], str]] = None,
    common: Optional[Path] = None,
) -> Dict[str, Any]:
    """Build the frame fuzzer and run it for `runs` inputs; returns what libFuzzer reported: execs, coverage,
    corpus, whether it found a crash (with its output). common: see build_frame_fuzzer."""
    cc = clang()
    if cc is None or not libfuzzer_works(cc, workdir):
        raise RuntimeError("clang with libFuzzer and the sanitizer runtimes is needed (apt: clang libclang-rt-14-dev)")
    exe = build_frame_fuzzer(workdir, cc, edit_app, common)
    corpus = workdir / "corpus"
    corpus.mkdir(exist_ok=True)
    for i, f in enumerate(seed_frames()):
        (corpus / f"seed{i:02d}").write_bytes(f)
    t = time.monotonic()
    r = subprocess.run(
        [
            str(exe),
            f"-runs={runs}",
            f"-seed={seed}",
            f"-max_len={max_len}",
            "-use_value_profile=1",
            "-timeout=10",
            "-rss_limit_mb=2048",
            "-print_final_stats=1",
            f"-artifact_prefix={workdir}/",
            str(corpus),
        ],
        capture_output=True,
        text=True,
        cwd=str(workdir),
    )
    out = r.stderr
    stats = dict(re.findall(r"^stat::(\w+):\s*(\d+)$", out, re.M))
    cov = re.findall(r"\bcov: (\d+) ft: (\d+) corp: (\d+)", out)
    crashed = r.returncode != 0 or "ERROR: libFuzzer" in out or "==ERROR:" in out or "fuzz_frames:" in out
    return {
        "runs": int(stats.get("number_of_executed_units", 0)),
        "seconds": round(time.monotonic() - t, 1),
        "execs_per_second": int(int(stats.get("number_of_executed_units", 0)) / max(time.monotonic() - t, 1e-3)),
        "coverage": int(cov[-1][0]) if cov else 0,
        "features": int(cov[-1][1]) if cov else 0,
        "corpus": len(list(corpus.iterdir())),
        "failures": 1 if crashed else 0,
        "report": "\n".join(out.splitlines()[-40:]) if crashed else "",
    }


# ============================================================================ 2. loaders (random mutation)


class Hang(Exception):
    """A case ran past its time limit."""


def mutate(data: bytes, rng: random.Random) -> bytes:
    """A few random edits: bit flips, interesting byte values, inserted, removed or repeated chunks, a cut."""
    b = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 3, 8])):
        op = rng.randrange(6)
        pos = rng.randrange(len(b) + 1)
        if op == 0 and b:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            b[rng.randrange(len(b))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, ord(","), ord("\n"), ord('"')])
        elif op == 2:
            b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.choice([1, 4, 16, 300])))
        elif op == 3 and b:
            del b[pos : pos + rng.choice([1, 4, 64, len(b)])]
        elif op == 4 and b:
            n = rng.choice([4, 64, 1024])
            b[pos:pos] = bytes(b[pos : pos + n]) * rng.choice([2, 50])
        elif op == 5:
            del b[pos:]
    return bytes(b)


def _with_crc(body: bytes) -> bytes:
    """A model file's body followed by its CRC-32 (the layout of mcutrain.modelfile)."""
    return body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


def _model_parts(data: bytes) -> Tuple[bytes, Any, bytes]:
    """(first 12 bytes: magic and version, header as parsed JSON, payload) of a valid model file."""
    hlen = struct.unpack_from("<I", data, 12)[0]
    return data[:12], json.loads(data[16 : 16 + hlen]), data[16 + hlen : -4]


def _json_paths(v: Any, prefix: Tuple[Any, ...] = ()) -> List[Tuple[Any, ...]]:
    out = [prefix]
    if isinstance(v, dict):
        for k, x in v.items():
            out += _json_paths(x, prefix + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += _json_paths(x, prefix + (i,))
    return out


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    choices: List[Callable[[], Any]] = [
        lambda: None,
        lambda: rng.choice([True, False]),
        lambda: rng.choice([0, 1, -1, 2, 3, 7, 2**16 - 1, 2**31 - 1, 2**32, 2**53, -(2**63), 10**30]),
        lambda: rng.choice([0.5, -0.0, 1e-45, 1e300, float("inf"), float("nan")]),
        lambda: rng.choice(["", "<f4", ">f4", "<f8", "train_state", "Linear", "adam", "x" * 1000]),
    ]
    if depth < 3:
        choices += [
            lambda: [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))],
            lambda: {rng.choice(["type", "n", "n_in", "layers", "k"]): _random_json(rng, depth + 1)},
        ]
    return rng.choice(choices)()


def mutate_model(data: bytes, rng: random.Random) -> bytes:
    """A mutated model file: raw bytes (the checksum catches them), or with the checksum made valid after a
    header field was replaced by a random value, a header byte or a payload byte was changed, or the header
    was edited as text."""
    kind = rng.randrange(4)
    if kind == 0:
        return mutate(data, rng)
    start, header, payload = _model_parts(data)
    if kind == 1:
        paths = [p for p in _json_paths(header) if p]
        path = rng.choice(paths)
        d = header
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = _random_json(rng)
        raw = json.dumps(header).encode()
    else:
        raw = json.dumps(header, sort_keys=True).encode()
        if kind == 2:
            raw = mutate(raw, rng)
        else:
            payload = mutate(payload, rng)
    raw += b" " * (-len(raw) % 4 if rng.random() < 0.8 else 0)
    return _with_crc(start + struct.pack("<I", len(raw)) + raw + payload)


def mutate_npz(data: bytes, rng: random.Random) -> bytes:
    """A mutated NPZ archive: raw bytes, or a well-formed archive whose array headers lie (a random shape, up
    to 2^62 elements, and a random dtype over the original data, maybe cut short)."""
    import zipfile

    import numpy as np

    if rng.random() < 0.5:
        return mutate(data, rng)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as zin, zipfile.ZipFile(out, "w") as zout:
        for name in zin.namelist():
            raw = zin.read(name)
            buf = io.BytesIO(raw)
            np.lib.format.read_magic(buf)
            np.lib.format.read_array_header_1_0(buf)
            body = raw[buf.tell() :]
            if rng.random() < 0.7:
                dims = rng.choice([0, 1, 1, 2, 3, 5])
                shape = tuple(rng.choice([0, 1, 3, 6, 2**20, 2**31 - 1, 2**40, 2**62]) for _ in range(dims))
                descr = rng.choice(["<f4", "<f8", "|u1", "<i8", ">f4", "<U3", "|b1", "<c8"])
                head = io.BytesIO()
                np.lib.format.write_array_header_1_0(head, {"descr": descr, "fortran_order": False, "shape": shape})
                body = body[: rng.choice([len(body), len(body) // 2, 0])]
                raw = head.getvalue() + body
            zout.writestr(name, raw)
    return out.getvalue()


def seed_models() -> List[bytes]:
    """Valid model files of a few kinds: optimizers (Adam, momentum, none), nesting, conv and norm layers."""
    from mcutrain import Sequential, TrainParams
    from mcutrain import layers as L
    from mcutrain.compose import LR, Residual
    from mcutrain.modelfile import encode_model

    a = Sequential(L.Linear(3, 4), L.Tanh(), L.Linear(4, 2), L.Softmax()).rand_params(seed=1)
    b = Sequential(L.SingleChannelConv1d(8, 6, 3), L.Relu(), L.RMSNorm(6), L.Linear(6, 2)).rand_params(seed=2)
    c = Sequential(Residual(Sequential(L.Linear(4, 4), L.Swish(4))), LR(L.Diag(4), 10), L.DyT(4)).rand_params(seed=3)
    run = {"loss": "cross_entropy", "train": {"batch": 4, "data": {"problem": "parity2"}}}
    return [
        encode_model(a, a.new_adam(TrainParams(lr=0.01)), run),
        encode_model(b, b.new_momentum(TrainParams(lr=0.1), 0.9), {"loss": "mse"}),
        encode_model(c),
    ]


def _npz(**arrays: Any) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def seed_data() -> Dict[str, List[bytes]]:
    """Valid data files of each kind the loaders read."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 3)).astype(np.float32)
    idx3 = bytes([0, 0, 8, 3]) + struct.pack(">3I", 5, 2, 2) + bytes(range(20))
    idx1 = bytes([0, 0, 8, 1]) + struct.pack(">I", 5) + bytes([0, 1, 2, 1, 0])
    idxf = bytes([0, 0, 0x0D, 2]) + struct.pack(">2I", 2, 2) + struct.pack(">4f", 1, 2, 3, 4)
    return {
        "csv": [b"a,b,label\n1,2,0\n3.5,-4,1\n0,0,2\n", b'"x","y"\n1e3,2\n-0.5,3\n', b"\xef\xbb\xbf1;2;3\n4;5;6\n"],
        "npz": [_npz(x=x, y=np.arange(6) % 3), _npz(x=x, y=x[:, :2])],
        "idx": [idx3, idx1, idxf],
        "idx.gz": [gzip.compress(idx3), gzip.compress(idx1)],
    }


def loader_case(kind: str, data: bytes, path: Path) -> str:
    """Run one loader on data: 'ok' (a valid result) or 'refused' (an McuTrainError); anything else raises."""
    import numpy as np

    from mcutrain.datasets import load_csv, load_npz, read_idx
    from mcutrain.errors import McuTrainError
    from mcutrain.modelfile import decode_model

    try:
        if kind == "model":
            ck = decode_model(data)
            y = ck.net.forward(np.zeros((1, ck.net.n_in), np.float32))
            assert y.shape == (1, ck.net.n_out), f"forward gave {y.shape}"
            return "ok"
        path.write_bytes(data)
        if kind == "csv":
            d = load_csv(path)
            assert len(d.x) == len(d.y) > 0, "an empty data set"
        elif kind == "npz":
            d = load_npz(path, classify=bool(data[-1:] and data[-1] & 1))
            assert len(d.x) == len(d.y) > 0, "an empty data set"
        else:
            a = read_idx(path)
            assert a.size > 0, "an empty array"
        return "ok"
    except McuTrainError:
        return "refused"


def loader_worker(cases: int, seed: int, memory_gib: float, case_seconds: float) -> Dict[str, Any]:
    """The loop of the loader part, run in the subprocess (address space and time limited). Returns counts
    and the first failures (kind, case, exception)."""
    import resource
    import signal

    limit = int(memory_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"ran past {case_seconds} s")

    signal.signal(signal.SIGALRM, on_alarm)
    rng = random.Random(seed)
    seeds: Dict[str, List[bytes]] = {"model": seed_models(), **seed_data()}
    kinds = ["model", "model", "model", "csv", "npz", "idx", "idx.gz"]
    counts: Dict[str, Dict[str, int]] = {k: {"cases": 0, "ok": 0, "refused": 0, "failures": 0} for k in seeds}
    failures: List[Dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="mcutrain-fuzz-"))
    try:
        for case in range(cases):
            kind = kinds[case % len(kinds)]
            base = rng.choice(seeds[kind])
            if kind == "model":
                data = mutate_model(base, rng)
            elif kind == "npz":
                data = mutate_npz(base, rng)
            elif kind == "idx.gz" and rng.random() < 0.5:
                data = gzip.compress(mutate(gzip.decompress(base), rng))
            else:
                data = mutate(base, rng)
            suffix = {"npz": ".npz", "idx.gz": ".gz"}.get(kind, "")
            c = counts[kind]
            c["cases"] += 1
            signal.setitimer(signal.ITIMER_REAL, case_seconds)
            try:
                c[loader_case(kind, data, tmp / f"case{suffix}")] += 1
            except BaseException as e:  # noqa: B902 - every other outcome is a failure, reported
                if isinstance(e, KeyboardInterrupt):
                    raise
                c["failures"] += 1
                if len(failures) < 20:
                    import traceback

                    where = traceback.extract_tb(e.__traceback__)[-1]
                    failures.append(
                        {
                            "kind": kind,
                            "case": case,
                            "error": f"{type(e).__name__}: {e}"[:400],
                            "where": f"{Path(where.filename).name}:{where.lineno} {where.name}",
                            "input_hex": data[: 1 << 16].hex(),
                        }
                    )
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"counts": counts, "failures": failures}


def run_loaders(cases: int, seed: int = 1, memory_gib: float = 2.0, case_seconds: float = 20.0) -> Dict[str, Any]:
    """The loader part in a subprocess (see loader_worker); a worker that dies or hangs is a failure too."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--cases",
        str(cases),
        "--seed",
        str(seed),
        "--memory-gib",
        str(memory_gib),
        "--case-seconds",
        str(case_seconds),
    ]
    t = time.monotonic()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60 + cases * case_seconds, env=env)
    except subprocess.TimeoutExpired:
        return {"cases": cases, "failures": 1, "report": "the worker hung", "counts": {}}
    if r.returncode != 0 or not r.stdout.strip():
        return {
            "cases": cases,
            "failures": 1,
            "counts": {},
            "report": f"the worker ended with {r.returncode}: {r.stderr[-3000:]}",
        }
    res = json.loads(r.stdout.strip().splitlines()[-1])
    counts = res["counts"]
    return {
        "cases": sum(c["cases"] for c in counts.values()),
        "failures": sum(c["failures"] for c in counts.values()),
        "seconds": round(time.monotonic() - t, 1),
        "memory_limit_gib": memory_gib,
        "counts": counts,
        "examples": res["failures"],
    }


# ============================================================================ main


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=300_000, help="libFuzzer inputs for the frame parser")
    ap.add_argument("--cases", type=int, default=20_000, help="mutated files for the Python loaders")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--memory-gib", type=float, default=2.0, help="address-space limit of the loader worker")
    ap.add_argument("--case-seconds", type=float, default=20.0, help="time limit of one loader case")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(loader_worker(a.cases, a.seed, a.memory_gib, a.case_seconds)))
        return 0
    results: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mcutrain-fuzz-") as d:
        if a.runs:
            f = results["frames"] = run_frames(a.runs, Path(d), a.seed)
            print(
                f"frames (libFuzzer, ASan+UBSan): {f['runs']:,} inputs in {f['seconds']} s "
                f"({f['execs_per_second']:,}/s), coverage {f['coverage']} edges, {f['features']} features, "
                f"corpus {f['corpus']}; failures: {f['failures']}"
            )
            if f["report"]:
                print(f["report"])
    if a.cases:
        lo = results["loaders"] = run_loaders(a.cases, a.seed, a.memory_gib, a.case_seconds)
        print(
            f"loaders (random mutation, RLIMIT_AS {a.memory_gib} GiB): {lo['cases']:,} cases in "
            f"{lo.get('seconds', '?')} s; failures: {lo['failures']}"
        )
        for kind, c in lo.get("counts", {}).items():
            print(
                f"  {kind:7s} {c['cases']:7,} cases  {c['ok']:6,} valid  {c['refused']:7,} refused  "
                f"{c['failures']} failures"
            )
        for ex in lo.get("examples", [])[:10]:
            print(f"  FAIL {ex['kind']} case {ex['case']}: {ex['error']} (at {ex['where']})")
        if lo.get("report"):
            print(lo["report"])
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2) + "\n")
    return 1 if any(r.get("failures") for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
