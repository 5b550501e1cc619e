"""The exported firmware as a program on this computer (issue 3): strict C, bit-for-bit parity with the
host for every optimizer on a network of every layer type, the host <-> device round trip, protocol
robustness under AddressSanitizer/UBSan, double-buffered saves with power cuts, export determinism and
`pio project config` on every board.

Everything runs against the real native firmware over a pty (no mocks). The projects of the parity tests
and the sanitizer build are compiled here with gcc directly (every translation unit of src/, src/ports/ and
lib/mcutrain_core/src/ with -std=c99 -Wall -Wextra -Werror -pedantic and the project's model flags from
platformio.ini); the round-trip project is built with PlatformIO offline (`pio run -e native`).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import layer_table
import numpy as np
import pytest

from helpers import assert_same_bits, model_flags, onehot_samples, same_bits
from mcutrain import Checkpoint, Sequential, TrainParams, corefacts, losses, save_model, train_batch, train_step
from mcutrain import layers as L
from mcutrain.exporter import pio, sim
from mcutrain.exporter.boards import Board, all_boards, get_board
from mcutrain.exporter.client import FRAME_OVERHEAD, Device, DeviceError
from mcutrain.exporter.export import ExportResult, export_project
from mcutrain.exporter.protocol import (
    BLOB_VERSION,
    PROTOCOL_VERSION,
    Cmd,
    ProtocolError,
    Reply,
    Status,
    VersionError,
    crc16,
    encode,
    read_reply,
)
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.losses import Loss
from mcutrain.module import Module
from mcutrain.optim import TRAIN_STATE_DTYPE, Optimizer

OPTIMIZERS = ["sgd", "momentum", "rmsprop", "rmsprop_momentum", "adam"]
STEPS = 100
N_IN, N_OUT = 6, 4
NET_SEED = 11
# -std=c99 strictness of the issue plus -pedantic, the float flags of every generated env, the native port
STRICT_FLAGS = [
    "-std=c99",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-pedantic",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-DMCT_PORT_POSIX",
    "-DMCT_ALLOW_QUIT",
]
SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g"]
TRAIN_STATE_BYTES = TRAIN_STATE_DTYPE.itemsize  # u32 step and the two Adam powers
SAVE_HEADER = corefacts.SAVE_HEADER  # docs/protocol.md: magic, seq, size, CRC-32, hash, blob version


# ============================================================================ networks and optimizers


def every_layer_net(seed: int = NET_SEED) -> Module:
    """A 6 -> 4 network with every row of the layer table (tests/layer_table.py): every layer type, every
    activation and GLU gate, Residual and LR."""
    return layer_table.every_layer_net(N_IN, N_OUT, seed=seed)


def make_optimizer(net: Module, kind: str) -> Tuple[Optimizer, Loss]:
    """A fresh optimizer of the kind (schedules, warm-up, L1, L2, clipping and loss scaling spread over the
    kinds) and the loss it trains with; every kind gets another loss."""
    if kind == "sgd":
        tp = TrainParams(lr=0.05, schedule="linear", lr_final=0.005, decay_steps=60, l2=1e-3, scale_by_loss=True)
        return net.new_sgd(tp), losses.mse
    if kind == "momentum":
        tp = TrainParams(
            lr=0.02, schedule="cosine", lr_final=1e-3, decay_steps=80, warmup_steps=10, l1=1e-4, l2=1e-3, clip=2.0
        )
        return net.new_momentum(tp, 0.9), losses.huber(0.5)
    if kind == "rmsprop":
        return net.new_rmsprop(TrainParams(lr=5e-3, l1=1e-4, clip=1.0), 0.9), losses.cross_entropy
    if kind == "rmsprop_momentum":
        tp = TrainParams(lr=5e-3, schedule="cosine", lr_final=1e-4, decay_steps=100, warmup_steps=5)
        return net.new_rmsprop_with_momentum(tp, 0.8, 0.9), losses.logit_bce
    if kind == "adam":
        tp = TrainParams(
            lr=1e-2, schedule="linear", lr_final=1e-3, decay_steps=150, warmup_steps=10, l1=1e-5, l2=1e-4, clip=5.0
        )
        return net.new_adam(tp, 0.9, 0.999, 1e-8), losses.cosine
    raise ValueError(kind)


def samples(seed: int, n: int) -> Tuple[np.ndarray, np.ndarray]:
    """n inputs (standard normal, float32) with one-hot targets, from a generator seeded with seed."""
    return onehot_samples(np.random.default_rng(seed), n, N_IN, N_OUT)


# ============================================================================ small helpers


def c_sources(project: Path) -> List[Path]:
    """The project's C translation units: src/*.c, src/ports/*.c, lib/mcutrain_core/src/*.c."""
    return (
        sorted((project / "src").glob("*.c"))
        + sorted((project / "src" / "ports").glob("*.c"))
        + sorted((project / "lib" / "mcutrain_core" / "src").glob("*.c"))
    )


@dataclass
class GccBuild:
    """A project compiled with gcc: the program and the translation units that failed the strict flags
    (their diagnostics), which were then compiled without -pedantic so the program could still be made."""

    program: Path
    strict_failures: Dict[str, str] = field(default_factory=dict)


def gcc_build_all(jobs: Sequence[Tuple[Path, Path, List[str]]]) -> List[GccBuild]:
    """Compile each (project, program, extra flags) job: every translation unit separately (in parallel) with
    STRICT_FLAGS, the project's model flags and the extra flags, then link. A unit that fails the strict
    flags is recorded and compiled again without -pedantic (the strictness test reports it; the behaviour
    tests still get a program); any other compiler error fails here."""
    tasks: List[Tuple[int, Path, Path, List[str]]] = []
    for j, (project, program, extra) in enumerate(jobs):
        objdir = program.parent / (program.name + ".obj")
        objdir.mkdir(parents=True, exist_ok=True)
        flags = (
            STRICT_FLAGS
            + model_flags(project)
            + [f"-I{project / d}" for d in ("include", "src", "lib/mcutrain_core/src")]
            + list(extra)
        )
        for src in c_sources(project):
            rel = src.relative_to(project)
            tasks.append((j, src, objdir / (str(rel).replace("/", "__") + ".o"), flags))

    def compile_one(task: Tuple[int, Path, Path, List[str]]) -> Tuple[int, Path, Optional[str]]:
        j, src, obj, flags = task
        r = subprocess.run(["gcc", *flags, "-c", str(src), "-o", str(obj)], capture_output=True, text=True)
        if r.returncode == 0 and not r.stderr.strip():
            return j, obj, None
        strict_msg = (r.stderr or r.stdout).strip() or f"exit {r.returncode}"
        r2 = subprocess.run(
            ["gcc", *[f for f in flags if f != "-pedantic"], "-c", str(src), "-o", str(obj)],
            capture_output=True,
            text=True,
        )
        assert r2.returncode == 0, f"gcc failed on {src}:\n{r2.stderr}"
        return j, obj, f"{src.relative_to(jobs[j][0])}: {strict_msg}"

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = list(pool.map(compile_one, tasks))
    out = []
    for j, (_project, program, extra) in enumerate(jobs):
        objs = [str(o) for jj, o, _ in results if jj == j]
        fails = {msg.split(":", 1)[0]: msg for jj, _, msg in results if jj == j and msg}
        link = [f for f in extra if f.startswith("-fsanitize") or f == "-g"]
        r = subprocess.run(["gcc", *link, *objs, "-o", str(program)], capture_output=True, text=True)
        assert r.returncode == 0, f"linking {program} failed:\n{r.stderr}"
        out.append(GccBuild(program, fails))
    return out


@contextmanager
def firmware(program: Path, store: Path, **env: str) -> Iterator[Device]:
    """The native program serving a pty (saves in `store`), a Device connected to it; ended on exit."""
    dev = Device.spawn([str(program), "--pty"], env={**os.environ, "MCUTRAIN_STORE": str(store), **env})
    try:
        yield dev
    finally:
        dev.close()


def quit_and_stderr(dev: Device) -> Tuple[int, str]:
    """QUIT the program; (exit status, everything it wrote to stderr)."""
    assert dev.process is not None
    dev.quit()
    rc = dev.process.wait(timeout=10)
    err = dev.process.stderr.read().decode(errors="replace") if dev.process.stderr else ""
    return rc, err


def exchange(dev: Device, frame: bytes) -> Reply:
    """Send raw bytes (one frame) and read the one reply."""
    dev.link.write(frame)
    return read_reply(dev.link.read)


def frame(cmd: int, payload: bytes = b"", bad_crc: bool = False, version: int = PROTOCOL_VERSION) -> bytes:
    """A request frame; bad_crc flips two bits of its CRC."""
    body = struct.pack("<BBH", version, cmd & 0xFF, len(payload)) + payload
    crc = crc16(body) ^ (0x8001 if bad_crc else 0)
    return b"\xa5" + body + struct.pack("<H", crc)


# ============================================================================ fixtures


@pytest.fixture(scope="module", autouse=True)
def tool_dirs(pio_core: Path) -> Path:
    """The session's own PlatformIO core folder (conftest.pio_core); the native firmware needs gcc."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is not installed: the native firmware needs it (apt-get install gcc)")
    return pio_core


@dataclass
class Project:
    """An exported every-layer project and its gcc-built program."""

    kind: str
    result: ExportResult
    loss: Loss
    build: GccBuild


@dataclass
class Builds:
    """The gcc builds of the module: one project per optimizer and a sanitizer build of the adam one."""

    projects: Dict[str, Project]
    asan: GccBuild


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Builds:
    """Export the every-layer network once per optimizer and compile every project (and an ASan/UBSan build
    of the adam project) with gcc, all in parallel."""
    base = tmp_path_factory.mktemp("native-builds")
    exports = {}
    for kind in OPTIMIZERS:
        net = every_layer_net()
        opt, loss = make_optimizer(net, kind)
        exports[kind] = (export_project(Checkpoint(net, opt), "native", base / kind, loss=loss), loss)
    jobs = [(exports[k][0].path, base / f"{k}-program", ["-O2"]) for k in OPTIMIZERS]
    jobs.append((exports["adam"][0].path, base / "adam-asan-program", ["-O1"] + SANITIZE_FLAGS))
    built = gcc_build_all(jobs)
    projects = {k: Project(k, exports[k][0], exports[k][1], b) for k, b in zip(OPTIMIZERS, built)}
    return Builds(projects, built[-1])


@dataclass
class RoundTrip:
    """The every-layer network pre-trained on the host (adam, train_batch), exported with its optimizer and
    built with PlatformIO; the host's parameters, optimizer slots and train state after the pre-training."""

    result: ExportResult
    params: np.ndarray
    state: np.ndarray
    train_state: np.ndarray
    loss: Loss
    program: Path

    def host(self) -> Tuple[Module, Optimizer]:
        """A fresh host network and optimizer holding the pre-trained state."""
        net = every_layer_net()
        opt, _ = make_optimizer(net, "adam")
        net.params = self.params
        opt.state[...] = self.state
        opt.train_state[...] = self.train_state
        return net, opt


PRETRAIN_STEPS, PRETRAIN_BATCH = 20, 4


@pytest.fixture(scope="module")
def roundtrip(tmp_path_factory: pytest.TempPathFactory) -> RoundTrip:
    """Host training (train_batch) first, then the export of the trained network and its optimizer, built
    by `pio run -e native` offline."""
    net = every_layer_net()
    opt, loss = make_optimizer(net, "adam")
    x, t = samples(99, PRETRAIN_STEPS * PRETRAIN_BATCH)
    for k in range(PRETRAIN_STEPS):
        sl = slice(k * PRETRAIN_BATCH, (k + 1) * PRETRAIN_BATCH)
        train_batch(opt, net, loss, x[sl], t[sl])
    r = export_project(Checkpoint(net, opt), "native", tmp_path_factory.mktemp("roundtrip") / "p", loss=loss)
    pio.build(r.path, "native")
    program = r.path / ".pio" / "build" / "native" / "program"
    assert program.is_file()
    return RoundTrip(r, net.params.copy(), opt.state.copy(), opt.train_state.copy(), loss, program)


# ============================================================================ 1. strict C


def test_generated_c_compiles_strictly_and_runs(builds: Builds, tmp_path: Path) -> None:
    """Every translation unit of every project (one per optimizer, all layer types, its model flags from
    platformio.ini) compiles with -std=c99 -Wall -Wextra -Werror -pedantic without a diagnostic, and the
    program runs: INFO reports the export and PREDICT is the host's output."""
    failures = {k: p.build.strict_failures for k, p in builds.projects.items() if p.build.strict_failures}
    for kind, p in builds.projects.items():
        m = p.result.model
        assert model_flags(p.result.path) == m.build_flags()
        assert any(f.startswith("-DMCT_OPT_ONLY=") for f in m.build_flags())
        twin = DeviceTwin(m)
        x = samples(1, 3)[0]
        with firmware(p.build.program, tmp_path / f"{kind}.bin") as dev:
            info = dev.info()
            assert (info.hash, info.n_in, info.n_out, info.n_params, info.step) == (
                p.result.hash,
                N_IN,
                N_OUT,
                m.program.n_params,
                0,
            )
            assert_same_bits(dev.predict(x), twin.predict(x), f"{kind}: PREDICT")
            rc, err = quit_and_stderr(dev)
            assert rc == 0 and not err.strip()
    units = sorted({unit for f in failures.values() for unit in f})
    first = next((msg for f in failures.values() for msg in f.values()), "")
    assert not failures, (
        f"{units} fail -std=c99 -Wall -Wextra -Werror -pedantic in the projects of {sorted(failures)}; e.g.\n{first}"
    )


# ============================================================================ 2. parity for every optimizer


@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_native_predict_and_train_equal_the_host_bit_for_bit(builds: Builds, kind: str, tmp_path: Path) -> None:
    """PREDICT equals DeviceModel.core().forward; after 100 TRAIN steps (each loss and step checked) the
    pulled parameters, optimizer slots and train state equal core.train_fused on the same samples, and the
    parameters and optimizer state equal the host Python API (train_step on the host network)."""
    p = builds.projects[kind]
    m = p.result.model
    twin = DeviceTwin(m)
    host_net = every_layer_net()
    host_opt, host_loss = make_optimizer(host_net, kind)
    assert same_bits(m.from_host_params(host_net.params), m.params)
    x_eval = samples(2, 8)[0]
    x_eval[7] *= np.float32(1e-39)  # subnormal inputs
    xs, ts = samples(3, STEPS)
    with firmware(p.build.program, tmp_path / "store.bin") as dev:
        info = dev.info()
        assert info.hash == p.result.hash and info.slots == m.opt_slots and info.loss_kind == p.loss.kind
        assert_same_bits(dev.predict(x_eval), twin.predict(x_eval), "PREDICT before training")
        for k in range(STEPS):
            loss_dev, step = dev.train(xs[k], ts[k])
            loss_twin = twin.train(xs[k], ts[k])
            loss_api = train_step(host_opt, host_net, host_loss, xs[k], ts[k])
            assert step == k + 1
            assert same_bits(loss_dev, loss_twin), f"step {k}: loss {loss_dev!r} != {loss_twin!r} (train_fused)"
            assert same_bits(loss_dev, loss_api), f"step {k}: loss {loss_dev!r} != {loss_api!r} (train_step)"
        params, state, tsd = dev.pull()
        assert_same_bits(params, twin.params, "parameters vs core.train_fused")
        assert_same_bits(state, twin.state, "optimizer slots vs core.train_fused")
        assert bytes(tsd) == twin.train_state.tobytes(), "train state vs core.train_fused"
        assert not same_bits(params, m.params), "training changed nothing"
        # the host Python API on the host network (trainable all: the device's RAM is the whole network)
        assert_same_bits(m.to_host_params(params, host_net.params), host_net.params, "parameters vs train_step")
        assert_same_bits(state, host_opt.state, "optimizer slots vs train_step")
        assert bytes(tsd) == host_opt.train_state.tobytes() and host_opt.step == STEPS
        assert_same_bits(dev.predict(x_eval), host_net.forward(x_eval), "PREDICT after training vs the host net")
        assert quit_and_stderr(dev)[0] == 0


# ============================================================================ 3. round trip


def test_round_trip_host_device_host_equals_host_only(roundtrip: RoundTrip, tmp_path: Path) -> None:
    """Host trains (train_batch), exports; the device continues 50 TRAIN steps from the host's optimizer
    state; the host pulls params, optimizer state and train state back into its network and optimizer and
    does 50 train_step steps: the same bits (params, state, step) as a host that did all 100 steps itself."""
    rt = roundtrip
    m = rt.result.model
    xs, ts = samples(7, 100)
    ref_net, ref_opt = rt.host()  # never leaves the host
    assert ref_opt.step == PRETRAIN_STEPS
    for k in range(100):
        train_step(ref_opt, ref_net, rt.loss, xs[k], ts[k])

    net, opt = rt.host()
    assert same_bits(m.from_host_params(net.params), m.params), "the export holds the trained parameters"
    with sim.start(rt.result.path, get_board("native"), store=tmp_path / "store.bin", build=False) as s:
        dev = s.device
        assert dev.info().hash == rt.result.hash and dev.info().step == 0
        slots = [m.from_host_params(opt.state[i]) for i in range(m.opt_slots)]
        dev.push(m.from_host_params(net.params), np.concatenate(slots), opt.train_state.view(np.uint8))
        assert dev.info().step == PRETRAIN_STEPS
        for k in range(50):
            _, step = dev.train(xs[k], ts[k])
            assert step == PRETRAIN_STEPS + k + 1
        p, st, tsd = dev.pull()
    net.params = m.to_host_params(p, net.params)
    st = st.reshape(m.opt_slots, m.program.n_params)
    for i in range(m.opt_slots):
        opt.state[i] = m.to_host_params(st[i], opt.state[i])
    opt.train_state[...] = np.frombuffer(bytes(tsd), TRAIN_STATE_DTYPE)
    assert opt.step == PRETRAIN_STEPS + 50
    for k in range(50, 100):
        train_step(opt, net, rt.loss, xs[k], ts[k])
    assert_same_bits(net.params, ref_net.params, "parameters after host -> device -> host")
    assert_same_bits(opt.state, ref_opt.state, "optimizer state after host -> device -> host")
    assert opt.train_state.tobytes() == ref_opt.train_state.tobytes()
    assert opt.step == ref_opt.step == PRETRAIN_STEPS + 100
    assert not same_bits(net.params, rt.params), "training changed nothing"


# ============================================================================ 4. protocol robustness (ASan/UBSan)


@contextmanager
def sanitized(builds: Builds, store: Path) -> Iterator[Device]:
    """The ASan/UBSan build over a pty; on a clean exit of the block it must QUIT with status 0 and have
    printed nothing on stderr."""
    with firmware(builds.asan.program, store, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0") as dev:
        try:
            yield dev
        except BaseException:
            assert dev.process is not None
            if dev.process.poll() is not None and dev.process.stderr is not None:
                print(dev.process.stderr.read().decode(errors="replace"))
            raise
        assert dev.process is not None and dev.process.poll() is None, "the sanitized firmware ended"
        rc, err = quit_and_stderr(dev)
        assert rc == 0 and not err.strip(), f"exit {rc}, sanitizer output:\n{err}"


def resync_then_info(dev: Device, timeout: float = 5.0) -> bool:
    """The documented resync (max_payload + 7 zero bytes, what comes back discarded), then INFO: True when
    the device answers that INFO (replies to the cut frame are skipped), False when nothing comes back."""
    dev.link.write(bytes(dev.cached_info.max_payload + FRAME_OVERHEAD) + encode(Cmd.INFO))
    old = dev.link.timeout
    dev.link.timeout = timeout
    try:
        while True:
            r = read_reply(dev.link.read)
            if r.cmd == Cmd.INFO and r.status == Status.OK:
                return r.data[1:9].hex() == dev.cached_info.hash
    except ProtocolError:
        return False
    finally:
        dev.link.timeout = old


@dataclass
class Snapshot:
    """Everything a bad frame must not change."""

    params: np.ndarray
    state: np.ndarray
    ts: bytes
    outputs: np.ndarray


def snapshot(dev: Device, x: np.ndarray) -> Snapshot:
    """Pull the device's state and its outputs on x."""
    p, s, ts = dev.pull()
    return Snapshot(p, s, bytes(ts), dev.predict(x))


def assert_unchanged(dev: Device, before: Snapshot, x: np.ndarray, hash_: str) -> None:
    """INFO still answers with the same model and step; state and outputs are bit-identical."""
    info = dev.info()
    assert info.hash == hash_
    now = snapshot(dev, x)
    assert_same_bits(now.params, before.params, "parameters")
    assert_same_bits(now.state, before.state, "optimizer slots")
    assert now.ts == before.ts, "train state"
    assert_same_bits(now.outputs, before.outputs, "PREDICT")
    assert info.step == struct.unpack_from("<I", before.ts)[0]


def trained_device(dev: Device, steps: int = 3) -> None:
    """A few deliberate TRAIN steps, so that a RESET or LOAD would show."""
    xs, ts = samples(5, steps)
    for x, t in zip(xs, ts):
        dev.train(x, t)


def test_malformed_frames_get_errors_and_change_nothing(builds: Builds, tmp_path: Path) -> None:
    """Bad CRC (every command, also state-changing ones), wrong PREDICT/TRAIN lengths, oversize payloads,
    unknown commands and READ/WRITE with out-of-range region/offset/count each get the documented error
    status, echo the command, and leave parameters, optimizer state, train state and saves untouched."""
    p = builds.projects["adam"]
    store = tmp_path / "store.bin"
    x = samples(6, 2)[0]
    with sanitized(builds, store) as dev:
        info = dev.info()
        trained_device(dev)
        before = snapshot(dev, x)
        n, mp = info.n_params, info.max_payload
        max_floats = (mp - 5) // 4
        sizes = {0: n, 1: n * info.slots, 2: 3}
        good_train = np.zeros(N_IN + N_OUT, "<f4").tobytes()
        cases: List[Tuple[str, bytes, Tuple[int, ...]]] = []
        # bad CRC on every command, with payloads that would be valid
        valid = {
            Cmd.INFO: b"",
            Cmd.PREDICT: x[0].astype("<f4").tobytes(),
            Cmd.TRAIN: good_train,
            Cmd.READ: struct.pack("<BIH", 0, 0, 4),
            Cmd.WRITE: struct.pack("<BI", 0, 0) + b"\0" * 8,
            Cmd.SAVE: b"",
            Cmd.LOAD: b"",
            Cmd.STATS: b"",
            Cmd.RESET: b"",
            Cmd.QUIT: b"",
        }
        for cmd, payload in valid.items():
            cases.append((f"bad CRC {cmd.name}", frame(cmd, payload, bad_crc=True), (Status.BAD_CRC,)))
        cases.append(("bad CRC, unknown command", frame(0x42, b"xyz", bad_crc=True), (Status.BAD_CRC,)))
        # wrong lengths for PREDICT and TRAIN, oversize payloads
        for k in (0, 1, 4 * N_IN - 1, 4 * N_IN + 1, 4 * N_IN + 4, 4 * (N_IN + N_OUT), mp, mp + 10):
            cases.append(
                (
                    f"PREDICT of {k} bytes",
                    frame(Cmd.PREDICT, bytes((7 * i) & 0xFF for i in range(k))),
                    (Status.BAD_LENGTH,),
                )
            )
        for k in (0, 4 * N_IN, 4 * (N_IN + N_OUT) - 1, 4 * (N_IN + N_OUT) + 1, 4 * (N_IN + N_OUT) + 4, mp + 10):
            cases.append((f"TRAIN of {k} bytes", frame(Cmd.TRAIN, bytes(k)), (Status.BAD_LENGTH,)))
        for cmd in (Cmd.INFO, Cmd.READ, Cmd.WRITE, Cmd.SAVE, Cmd.LOAD, Cmd.STATS, Cmd.RESET, Cmd.QUIT):
            cases.append((f"{cmd.name} of {mp + 1} bytes", frame(cmd, bytes(mp + 1)), (Status.BAD_LENGTH,)))
        # unknown commands
        for cmd in (0x00, 0x0B, 0x10, 0x5A, 0x7E, 0x80, 0x81, 0x83, 0xA5, 0xFF):
            cases.append((f"unknown command {cmd:#x}", frame(cmd, b"\x01\x02"), (Status.UNKNOWN,)))
        # READ out of range
        for region, off, count in [
            (3, 0, 1),
            (255, 0, 1),
            (0, n, 1),
            (0, n + 1, 0),
            (0, n - 1, 2),
            (0, 0, max_floats + 1),
            (0, 0xFFFFFFFF, 1),
            (0, 0xFFFFFFF0, 0x20),
            (1, sizes[1], 1),
            (1, sizes[1] - 1, 2),
            (2, 3, 1),
            (2, 0, 4),
            (2, 2, 2),
            (0, 0, 0xFFFF),
        ]:
            cases.append(
                (
                    f"READ region {region} offset {off} count {count}",
                    frame(Cmd.READ, struct.pack("<BIH", region, off, count)),
                    (Status.BAD_ARG,),
                )
            )
        for k in (0, 6, 8):
            cases.append((f"READ payload of {k} bytes", frame(Cmd.READ, bytes(k)), (Status.BAD_ARG, Status.BAD_LENGTH)))
        # WRITE out of range (values 1e30 would show if anything were written)
        big = np.float32(1e30).tobytes()
        for region, off, count in [
            (3, 0, 1),
            (200, 0, 1),
            (0, n, 1),
            (0, n + 5, 1),
            (0, n - 1, 2),
            (0, 0xFFFFFFFF, 1),
            (0, 0xFFFFFFFE, 4),
            (1, sizes[1], 1),
            (1, sizes[1] - 2, 3),
            (2, 3, 1),
            (2, 1, 3),
            (2, 0, 4),
        ]:
            cases.append(
                (
                    f"WRITE region {region} offset {off} count {count}",
                    frame(Cmd.WRITE, struct.pack("<BI", region, off) + big * count),
                    (Status.BAD_ARG,),
                )
            )
        for k in (0, 4, 6, 8, 11):
            cases.append(
                (
                    f"WRITE payload of {k} bytes",
                    frame(Cmd.WRITE, (b"\0" * 5 + big * 2)[:k]),
                    (Status.BAD_ARG, Status.BAD_LENGTH),
                )
            )
        longest = max(mp, 4 * (N_IN + N_OUT))
        for name, raw, allowed in cases:
            r = exchange(dev, raw)
            assert r.cmd == raw[2] & 0x7F, name
            assert r.status in allowed, f"{name}: status {r.status}, expected one of {allowed}"
            assert r.data == b"", f"{name}: an error reply carries no data"
            if len(raw) - FRAME_OVERHEAD > longest:
                # answered from the header alone: the rest of the frame reaches the device as noise, which
                # the documented resync (zeros, replies dropped) clears
                dev.resync()
        assert_unchanged(dev, before, x, p.result.hash)
        assert dev.stats()[2] == 0 and not store.exists(), "a bad SAVE frame wrote to the storage"
        assert dev.process is not None and dev.process.poll() is None, "a bad QUIT frame ended the program"


def test_commands_without_payload_reject_a_payload(builds: Builds, tmp_path: Path) -> None:
    """docs/protocol.md: INFO, SAVE, LOAD, STATS, RESET and QUIT take no payload, and a frame of the wrong
    length is a bad frame that gets an error status and never changes the model. A RESET, LOAD or QUIT
    that carries bytes must therefore not reset, load or end anything."""
    p = builds.projects["adam"]
    store = tmp_path / "store.bin"
    x = samples(6, 2)[0]
    with sanitized(builds, store) as dev:
        dev.info()
        dev.save()
        trained_device(dev)
        before = snapshot(dev, x)
        results = {}
        for cmd in (Cmd.INFO, Cmd.STATS, Cmd.LOAD, Cmd.SAVE, Cmd.RESET, Cmd.QUIT):
            r = exchange(dev, frame(cmd, b"\x01\x02\x03"))
            assert r.cmd == cmd
            results[cmd.name] = r.status
            if dev.process is not None and dev.process.poll() is not None:
                break
        wrong = {k: v for k, v in results.items() if v != Status.BAD_LENGTH}
        assert not wrong, f"commands that accepted a payload they do not take (status 0 = OK): {wrong}"
        assert_unchanged(dev, before, x, p.result.hash)


def test_truncated_frames_are_completed_by_the_resync_procedure(builds: Builds, tmp_path: Path) -> None:
    """A frame cut off anywhere (after the sync byte, inside the header, inside the payload, inside the CRC,
    also the longest frame) is completed by the documented resync (max_payload + 7 zero bytes, replies
    discarded); the device then answers normally and nothing changed (the completed frames fail their CRC)."""
    p = builds.projects["adam"]
    x = samples(6, 2)[0]
    with sanitized(builds, tmp_path / "store.bin") as dev:
        info = dev.info()
        trained_device(dev)
        before = snapshot(dev, x)
        target = np.eye(N_OUT, dtype=np.float32)[1]
        full = [
            frame(Cmd.PREDICT, x[0].astype("<f4").tobytes()),
            frame(Cmd.TRAIN, np.concatenate([x[0], target]).astype("<f4").tobytes()),
            frame(Cmd.WRITE, struct.pack("<BI", 0, 0) + np.float32(1e30).tobytes() * ((info.max_payload - 5) // 4)),
            frame(Cmd.RESET),
            frame(Cmd.READ, struct.pack("<BIH", 0, 0, 3)),
        ]
        assert len(full[2]) == info.max_payload + FRAME_OVERHEAD  # the longest frame there is
        for raw in full:
            assert raw[-1] != 0, "a zero CRC byte would make the completed frame valid: pick other values"
            for cut in sorted({1, 2, 3, 4, 5, len(raw) // 2, len(raw) - 2, len(raw) - 1}):
                dev.link.write(raw[:cut])
                assert resync_then_info(dev), f"command {raw[2]} cut after {cut} bytes"
        assert_unchanged(dev, before, x, p.result.hash)


def test_noise_between_frames_is_skipped(builds: Builds, tmp_path: Path) -> None:
    """Random bytes outside a frame (without the sync byte) get no reply and are skipped: the next frame is
    answered at once and nothing changed."""
    p = builds.projects["adam"]
    x = samples(6, 2)[0]
    rng = np.random.default_rng(12)
    with sanitized(builds, tmp_path / "store.bin") as dev:
        dev.info()
        trained_device(dev)
        before = snapshot(dev, x)
        old = dev.link.timeout
        for k in range(30):
            noise = rng.integers(0, 256, int(rng.integers(1, 600)), dtype=np.uint8)
            noise = noise[noise != 0xA5].tobytes()
            dev.link.write(noise)
            if k % 10 == 0:  # nothing comes back for noise
                dev.link.timeout = 0.2
                assert dev.link.read(1) == b""
                dev.link.timeout = old
            assert dev.info().hash == p.result.hash
        assert_unchanged(dev, before, x, p.result.hash)


def test_a_lost_byte_is_recovered_by_the_resync_procedure(builds: Builds, tmp_path: Path) -> None:
    """docs/protocol.md: 'To resynchronise after a lost byte, a host sends max_payload + 7 zero bytes and
    discards what comes back.' Drop each single byte of a PREDICT frame and of a (rejected) WRITE frame in
    turn and resync as documented: the device must answer the next INFO, and nothing may change."""
    p = builds.projects["adam"]
    x = samples(6, 2)[0]
    xin = np.array([1.2345, -0.5, 2.0, 0.1, -3.25, 0.75], np.float32)
    frames = {
        "PREDICT": frame(Cmd.PREDICT, xin.tobytes()),
        "WRITE": frame(Cmd.WRITE, struct.pack("<BI", 5, 0) + xin[:2].tobytes()),
    }  # region 5: rejected
    stuck = []
    with sanitized(builds, tmp_path / "store.bin") as dev:
        info = dev.info()
        trained_device(dev)
        before = snapshot(dev, x)
        for name, raw in frames.items():
            for i in range(len(raw)):
                dev.link.write(raw[:i] + raw[i + 1 :])
                if not resync_then_info(dev):
                    stuck.append(f"{name} without byte {i}")
                    # get the device back: complete any length it may wait for, then resync again
                    dev.link.write(bytes(0x10000 + 2))
                    assert resync_then_info(dev)
        assert_unchanged(dev, before, x, p.result.hash)
    assert not stuck, (
        f"after these lost bytes the documented resync ({info.max_payload + FRAME_OVERHEAD} zero bytes) did "
        f"not bring the device back (it waited for a longer payload): {stuck}"
    )


def fuzz_frames(
    rng: np.random.Generator, n: int, n_params: int, slots: int, max_payload: int
) -> Iterator[Tuple[bytes, Callable[[Reply], bool]]]:
    """n random frames (random command or a known one, random length up to max_payload + 10, random or
    structured payload, valid or invalid CRC) with a check of the reply each must get (from
    docs/protocol.md). Valid-CRC frames that would change the state (TRAIN of the right length, WRITE, SAVE,
    LOAD, RESET, QUIT) are sent with a bad CRC instead."""
    # the raw-window commands exist only in the firmware of a model with a feature pipeline (not this one's)
    known = [int(c) for c in Cmd if c not in (Cmd.PREDICT_RAW, Cmd.TRAIN_RAW, Cmd.FEATURES)]
    sizes = {0: n_params, 1: n_params * slots, 2: 3}
    max_floats = (max_payload - 5) // 4
    for _ in range(n):
        cmd = int(rng.choice(known)) if rng.random() < 0.6 else int(rng.integers(0, 256))
        if cmd == Cmd.READ and rng.random() < 0.6:
            region = int(rng.integers(0, 4))
            off = int(rng.integers(0, sizes.get(region, 8) + 3))
            payload = struct.pack("<BIH", region, off, int(rng.integers(0, max_floats + 3)))
        elif cmd in (Cmd.PREDICT, Cmd.TRAIN) and rng.random() < 0.3:
            payload = rng.integers(0, 256, 4 * (N_IN if cmd == Cmd.PREDICT else N_IN + N_OUT), np.uint8).tobytes()
        else:
            payload = rng.integers(0, 256, int(rng.integers(0, max_payload + 11)), np.uint8).tobytes()
        k = len(payload)
        good = bool(rng.random() < 0.5)
        changes = cmd in (Cmd.WRITE, Cmd.SAVE, Cmd.LOAD, Cmd.RESET, Cmd.QUIT) or (
            cmd == Cmd.TRAIN and k == 4 * (N_IN + N_OUT)
        )
        if changes:
            good = False
        raw = frame(cmd, payload, bad_crc=not good)
        echo = cmd & 0x7F

        def check(
            r: Reply, cmd: int = cmd, k: int = k, good: bool = good, payload: bytes = payload, echo: int = echo
        ) -> bool:
            if r.cmd != echo:
                return False
            if k > max(max_payload, 4 * (N_IN + N_OUT)):  # longer than any frame: answered from the header
                return r.status == Status.BAD_LENGTH and r.data == b""
            if not good:
                return r.status == Status.BAD_CRC and r.data == b""
            if cmd not in known:
                return r.status == Status.UNKNOWN
            if cmd == Cmd.PREDICT:
                return (r.status, len(r.data)) == ((Status.OK, 4 * N_OUT) if k == 4 * N_IN else (Status.BAD_LENGTH, 0))
            if cmd == Cmd.TRAIN or k > max_payload:
                return r.status == Status.BAD_LENGTH
            if cmd == Cmd.BLOB:
                if k != 6:
                    return r.status == Status.BAD_LENGTH
                if payload[0] != BLOB_VERSION:
                    return (r.status, r.data) == (Status.VERSION, bytes([BLOB_VERSION]))
                return r.status in (Status.OK, Status.BAD_ARG)
            if cmd == Cmd.READ:
                if k != 7:
                    return r.status in (Status.BAD_ARG, Status.BAD_LENGTH)
                region, off, count = struct.unpack("<BIH", payload)
                ok = region in sizes and off + count <= sizes[region] and count <= max_floats
                return (r.status, len(r.data)) == ((Status.OK, 4 * count) if ok else (Status.BAD_ARG, 0))
            # INFO / STATS take no payload: OK without one, BAD_LENGTH with one (docs/protocol.md)
            return r.status == (Status.OK if k == 0 else Status.BAD_LENGTH)

        yield raw, check


def test_frames_blobs_and_saves_of_another_version_are_refused(builds: Builds, tmp_path: Path) -> None:
    """A frame of another protocol version gets status VERSION with the device's version at once; a push of a
    blob of another version is refused before any byte of it is written (one-line VersionError naming both
    versions) and the device keeps its parameters, optimizer state and step; a save whose header says another
    blob version is not loaded at boot (nor by LOAD); a reply of protocol version 1 (an older firmware) is a
    VersionError on the host."""
    p = builds.projects["adam"]
    x = samples(6, 2)[0]
    store = tmp_path / "store.bin"
    with sanitized(builds, store) as dev:
        info = dev.info()
        trained_device(dev)
        before = snapshot(dev, x)
        for v in (1, PROTOCOL_VERSION + 1, 0x7F, 0xFF):
            r = exchange(dev, frame(Cmd.RESET, version=v))
            assert (r.cmd, r.status, r.data) == (0, Status.VERSION, bytes([PROTOCOL_VERSION])), v
            dev.resync()
        other = np.full(info.n_params, 7.0, np.float32)
        for version in (BLOB_VERSION + 1, 0, 255):
            with pytest.raises(VersionError) as e:
                dev.push(other, np.zeros(info.n_params * info.slots, np.float32), None, blob_version=version)
            msg = str(e.value)
            assert "\n" not in msg and f"blob format {BLOB_VERSION}, this mcutrain uses {version}" in msg, msg
        assert_unchanged(dev, before, x, p.result.hash)
        assert dev.save() == 1
    saved = store.read_bytes()
    assert struct.unpack_from("<I", saved, 24)[0] == BLOB_VERSION  # the save header carries the blob version
    with firmware(builds.asan.program, store) as dev:
        assert dev.info().loaded_save
        dev.quit()
    store.write_bytes(saved[:24] + struct.pack("<I", BLOB_VERSION + 1) + saved[28:])
    with firmware(builds.asan.program, store) as dev:
        assert not dev.info().loaded_save and dev.info().step == 0, "a save of another blob version was loaded"
        with pytest.raises(DeviceError, match="no saved state"):
            dev.load()
        dev.quit()
    old_reply = b"\x5a" + bytes([Cmd.INFO | 0x80]) + struct.pack("<H", 1) + b"\x00"
    old_reply += struct.pack("<H", crc16(old_reply[1:]))
    with pytest.raises(VersionError, match=f"uses protocol format 1, this mcutrain uses {PROTOCOL_VERSION}"):
        read_reply(io.BytesIO(old_reply).read)


def test_fuzzed_frames_never_crash_or_change_the_model(builds: Builds, tmp_path: Path) -> None:
    """3000 seeded random frames against the ASan/UBSan build: each gets the documented reply, the program
    never crashes and the sanitizers print nothing; afterwards INFO answers and the state is unchanged."""
    p = builds.projects["adam"]
    x = samples(6, 2)[0]
    program = builds.asan.program.read_bytes()
    assert b"__asan_init" in program and b"__ubsan_handle" in program, "not a sanitizer build"
    with sanitized(builds, tmp_path / "store.bin") as dev:
        info = dev.info()
        trained_device(dev)
        before = snapshot(dev, x)
        rng = np.random.default_rng(2024)
        wrong = []
        longest = max(info.max_payload, 4 * (N_IN + N_OUT))
        for i, (raw, check) in enumerate(fuzz_frames(rng, 3000, info.n_params, info.slots, info.max_payload)):
            r = exchange(dev, raw)
            if not check(r):
                wrong.append((i, raw[:8].hex(), len(raw) - FRAME_OVERHEAD, r.status, len(r.data)))
            if len(raw) - FRAME_OVERHEAD > longest:  # answered from its header: resync past the rest of it
                dev.resync()
        assert not wrong, f"{len(wrong)} fuzz frames got an unexpected reply, e.g. {wrong[:5]}"
        assert_unchanged(dev, before, x, p.result.hash)
        assert not (tmp_path / "store.bin").exists()


# ============================================================================ 5. saves


def save_blob_bytes(info: Any) -> int:
    """Bytes of a save's data (docs/protocol.md: params, optimizer slots, train state)."""
    return 4 * info.n_params * (1 + info.slots) + TRAIN_STATE_BYTES


def test_save_train_load_and_restart(roundtrip: RoundTrip, builds: Builds, tmp_path: Path) -> None:
    """LOAD without a save answers 'nothing saved'; SAVE, more training, LOAD restores the saved state
    exactly; the save survives a restart (INFO flag, step, pulled state); a program of another model (same
    sizes, other hash) does not load it."""
    rt = roundtrip
    store = tmp_path / "store.bin"
    xs, ts = samples(8, 20)
    with firmware(rt.program, store) as dev:
        info = dev.info()
        assert info.can_save and not info.loaded_save
        with pytest.raises(DeviceError) as e:
            dev.load()
        assert e.value.status == Status.NO_SAVE and "no saved state" in str(e.value)
        for k in range(10):
            dev.train(xs[k], ts[k])
        saved = dev.pull()
        out_saved = dev.predict(xs[:4])
        assert dev.save() == 1
        assert store.stat().st_size == SAVE_HEADER + save_blob_bytes(info)
        for k in range(10, 15):
            dev.train(xs[k], ts[k])
        assert dev.info().step == 15 and not same_bits(dev.pull()[0], saved[0])
        assert dev.load() == 1
        for got, want in zip(dev.pull(), saved):
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
        assert dev.info().step == 10
        assert_same_bits(dev.predict(xs[:4]), out_saved, "PREDICT after LOAD")
        assert quit_and_stderr(dev)[0] == 0
    with firmware(rt.program, store) as dev:
        info = dev.info()
        assert info.loaded_save and info.step == 10
        for got, want in zip(dev.pull(), saved):
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
        # training continues from the loaded state exactly as before the restart
        twin = DeviceTwin(rt.result.model)
        twin.load(*saved)
        loss, step = dev.train(xs[10], ts[10])
        assert same_bits(loss, twin.train(xs[10], ts[10])) and step == 11
        assert dev.load() == 1
    # another model with the same sizes: its program must not take this save
    other = builds.projects["adam"]
    assert other.result.hash != rt.result.hash
    with firmware(other.build.program, store) as dev:
        info2 = dev.info()
        assert (info2.n_params, info2.slots) == (info.n_params, info.slots)
        assert not info2.loaded_save and info2.step == 0
        assert_same_bits(dev.pull()[0], other.result.model.params, "parameters of the other model")
        with pytest.raises(DeviceError) as e:
            dev.load()
        assert e.value.status == Status.NO_SAVE


def test_power_cut_during_a_save_loses_nothing(roundtrip: RoundTrip, tmp_path: Path) -> None:
    """MCUTRAIN_STORE_FAIL_AFTER=N ends the program after N bytes of a save: in the data (parameters,
    optimizer slots, train state) or in the header. On restart the previous save is loaded (INFO flag, same
    state, same sequence number). A save with enough bytes to finish completes (the cut positions really are
    inside this save)."""
    rt = roundtrip
    xs, ts = samples(9, 40)
    base = tmp_path / "base.bin"
    saves = []
    with firmware(rt.program, base) as dev:
        info = dev.info()
        for s in range(2):
            for k in range(5):
                dev.train(xs[5 * s + k], ts[5 * s + k])
            assert dev.save() == s + 1
            saves.append((dev.pull(), base.read_bytes()))
    blob = save_blob_bytes(info)
    assert base.stat().st_size == 2 * (SAVE_HEADER + blob)
    n = info.n_params
    cuts = [
        0,
        1,
        2 * n,
        4 * n + 3,
        4 * n * (1 + info.slots) + 5,
        blob - 1,  # in the data
        blob,
        blob + 1,
        blob + 6,
        blob + 13,
    ]  # in the header
    # baseline: two saves (the cut hits the older slot, #1) or one save (the cut hits the empty slot)
    cases = [(c, 1, 2) for c in cuts] + [(c, 0, 1) for c in (0, blob // 2, blob + 5)]
    for cut, prev_index, prev_seq in cases:
        store = tmp_path / f"cut-{cut}-{prev_seq}.bin"
        prev_state, prev_file = saves[prev_index]
        store.write_bytes(prev_file)
        with firmware(rt.program, store, MCUTRAIN_STORE_FAIL_AFTER=str(cut)) as dev:
            assert dev.info().loaded_save
            for k in range(3):
                dev.train(xs[20 + k], ts[20 + k])
            with pytest.raises((ProtocolError, OSError)):
                dev.save()
            assert dev.process is not None and dev.process.wait(timeout=10) == 86, "no power cut happened"
        with firmware(rt.program, store) as dev:
            info2 = dev.info()
            assert info2.loaded_save, f"cut after {cut} bytes: the previous save was not loaded"
            for got, want in zip(dev.pull(), prev_state):
                assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), f"cut after {cut} bytes"
            assert dev.load() == prev_seq
    # control: enough bytes for the whole save
    store = tmp_path / "complete.bin"
    store.write_bytes(saves[1][1])
    with firmware(rt.program, store, MCUTRAIN_STORE_FAIL_AFTER=str(blob + SAVE_HEADER)) as dev:
        for k in range(3):
            dev.train(xs[20 + k], ts[20 + k])
        assert dev.save() == 3
        new_state = dev.pull()
        assert quit_and_stderr(dev)[0] == 0
    with firmware(rt.program, store) as dev:
        assert dev.info().loaded_save and dev.load() == 3
        for got, want in zip(dev.pull(), new_state):
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


# ============================================================================ 6. export determinism


def tree(root: Path) -> Dict[str, int]:
    """Every file under root (relative path -> size)."""
    return {str(f.relative_to(root)): f.stat().st_size for f in sorted(root.rglob("*")) if f.is_file()}


def test_export_is_deterministic(tmp_path: Path) -> None:
    """The same model exported twice (also from a model file loaded twice) gives byte-identical model.c,
    model.h, platformio.ini, mcutrain.json and hash (which model.c and mcutrain.json embed) and the same project
    files (the rest is copied from firmware/; it is compared by name only, as others may edit it meanwhile); other
    parameters, another optimizer setting or another loss give another hash."""
    net = every_layer_net()
    opt, loss = make_optimizer(net, "momentum")
    a = export_project(Checkpoint(net, opt), "nucleo_f401re", tmp_path / "a", loss=loss)
    b = export_project(
        Checkpoint(every_layer_net(), make_optimizer(every_layer_net(), "momentum")[0]),
        "nucleo_f401re",
        tmp_path / "b",
        loss=loss,
    )
    save_model(tmp_path / "m.mct", net, opt)
    c = export_project(tmp_path / "m.mct", "nucleo_f401re", tmp_path / "c", loss=loss)
    d = export_project(tmp_path / "m.mct", "nucleo_f401re", tmp_path / "d", loss=loss)
    for name in ("src/model.c", "src/model.h", "platformio.ini"):
        assert (a.path / name).read_bytes() == (b.path / name).read_bytes(), name
        assert (c.path / name).read_bytes() == (d.path / name).read_bytes(), name
    assert a.hash == b.hash == c.hash == d.hash
    # the rest is copied verbatim (firmware/, boards/): the same files, and the generated metadata is identical
    assert tree(a.path).keys() == tree(b.path).keys() == tree(c.path).keys()
    for name in ("mcutrain.json", "lib/mcutrain_core/library.json", ".gitignore"):
        assert (a.path / name).read_bytes() == (b.path / name).read_bytes(), name
        assert (c.path / name).read_bytes() == (d.path / name).read_bytes(), name
    hash_c = ", ".join(f"0x{v:02x}" for v in bytes.fromhex(a.hash))
    assert f"mct_model_hash[8] = {{{hash_c}}}" in (a.path / "src" / "model.c").read_text()
    assert json.loads((a.path / "mcutrain.json").read_text())["hash"] == a.hash
    others = [
        export_project(Checkpoint(every_layer_net(seed=12), opt), "nucleo_f401re", tmp_path / "e", loss=loss),
        export_project(
            Checkpoint(net, net.new_momentum(TrainParams(lr=0.03), 0.9)), "nucleo_f401re", tmp_path / "f", loss=loss
        ),
        export_project(Checkpoint(net, opt), "nucleo_f401re", tmp_path / "g", loss=losses.mse),
    ]
    hashes = {a.hash} | {o.hash for o in others}
    assert len(hashes) == 4
    for o in others:
        assert (o.path / "src" / "model.c").read_bytes() != (a.path / "src" / "model.c").read_bytes()


# ============================================================================ 7. pio project config


def small_net() -> Module:
    """A model small enough to train on every board (also in the Uno's 2 KB)."""
    return Sequential(L.Linear(4, 3), L.Tanh(), L.Linear(3, 2), L.Softmax()).rand_params(seed=3)


def test_pio_project_config_accepts_every_board(tmp_path: Path) -> None:
    """`pio project config --json-output` accepts the generated platformio.ini of every board in boards/;
    it lists the board's env (official platform), sim-BOARD where a simulator stands in, and native, each
    with -ffp-contract=off and the model flags."""
    boards: List[Board] = all_boards()
    assert {"uno", "native", "nano33ble", "bluepill", "nucleo_f401re", "pico", "teensy41", "esp32dev", "esp32c3"} <= {
        b.name for b in boards
    }
    net = small_net()
    ck = Checkpoint(net, net.new_momentum(TrainParams(lr=0.05), 0.9))
    for board in boards:
        r = export_project(ck, board.name, tmp_path / board.name, loss=losses.cross_entropy)
        res = pio.run(["project", "config", "--json-output"], r.path)
        assert res.returncode == 0, f"{board.name}: {res.stderr or res.stdout}"
        sections = {name: dict(items) for name, items in json.loads(res.stdout)}
        envs = {s[4:] for s in sections if s.startswith("env:")}
        want = {"native"}
        if board.name != "native":
            want.add(board.name)
            if board.sim_kind not in (None, "native"):
                want.add(f"sim-{board.name}")
        assert envs == want, board.name
        if board.name != "native":
            assert sections[f"env:{board.name}"]["platform"] == board.platformio["platform"]
            assert sections[f"env:{board.name}"]["board"] == board.platformio["board"]
        for env in envs:
            flags = sections[f"env:{env}"]["build_flags"]
            flags = flags if isinstance(flags, list) else str(flags).split()
            assert "-ffp-contract=off" in flags, (board.name, env)
            assert set(r.model.build_flags()) <= set(flags), (board.name, env)


# ============================================================================ 8. only the ops the model uses


def defined_functions(program: Path) -> Set[str]:
    """The names of the functions defined in a program (`nm --defined-only`, text symbols)."""
    r = subprocess.run(["nm", "--defined-only", str(program)], capture_output=True, text=True, check=True)
    return {
        parts[2]
        for parts in (line.split() for line in r.stdout.splitlines())
        if len(parts) == 3 and parts[1] in ("T", "t")
    }


def test_firmware_links_only_the_ops_the_model_uses(roundtrip: RoundTrip, tmp_path: Path) -> None:
    """MCT_OPS_MASK leaves the kernels of unused layer types out of the firmware: the native build of a
    Linear/Tanh/Softmax model (`pio run -e native`) defines mct_dense_forward but neither mct_glu_forward nor
    mct_rmsnorm_forward, while the every-layer model's build (the round-trip project) defines all three."""
    if shutil.which("nm") is None:
        pytest.fail("nm is not installed: apt-get install binutils")
    net = small_net()
    r = export_project(
        Checkpoint(net, net.new_momentum(TrainParams(lr=0.05), 0.9)),
        "native",
        tmp_path / "p",
        loss=losses.cross_entropy,
    )
    assert {d.op.name for d in r.model.program.layers}.isdisjoint({"GLU", "RMSNORM"})
    pio.build(r.path, "native")
    small = defined_functions(r.path / ".pio" / "build" / "native" / "program")
    assert "mct_dense_forward" in small and "mct_dense_backward" in small
    assert "mct_glu_forward" not in small and "mct_glu_backward" not in small
    assert "mct_rmsnorm_forward" not in small and "mct_rmsnorm_backward" not in small
    every = defined_functions(roundtrip.program)
    assert {"mct_dense_forward", "mct_glu_forward", "mct_rmsnorm_forward"} <= every


def test_model_flags_guard_the_core(tmp_path: Path) -> None:
    """The flags an export sets leave out what the model cannot reach and guard what they assume (mct.h):
    tests/c/model_flags.c trains one step of an exported Linear/Tanh/Linear/Softmax model (cross-entropy, SGD with
    L2) through the core, built with gcc, -ffunction-sections and --gc-sections. With the export's flags the step
    trains and the program has no mct_loss_batch (MCT_LAST_OP: the loss is Softmax's fused one) and none of the
    host's buffered update (mct_batch_grads, mct_update); without MCT_LAST_OP mct_loss_batch is back; a table that
    does not end in the op MCT_LAST_OP names fails mct_net_check (E_NET); MCT_REGULARIZE=0 under an optimizer that
    asks for L2 makes mct_train_step refuse (E_UNSUPPORTED) and leave the parameters alone."""
    from mcutrain.corefacts import Op
    from mcutrain.corefacts import Status as CoreStatus

    if shutil.which("nm") is None:
        pytest.fail("nm is not installed: apt-get install binutils")
    net = small_net()
    r = export_project(
        Checkpoint(net, net.new_sgd(TrainParams(lr=0.05, l2=1e-3))), "native", tmp_path / "p", loss=losses.cross_entropy
    )
    assert "-DMCT_REGULARIZE=1" in model_flags(r.path) and f"-DMCT_LAST_OP={int(Op.SOFTMAX)}" in model_flags(r.path)
    core = r.path / "lib" / "mcutrain_core" / "src"
    sources = [str(r.path / "src" / "model.c"), str(Path(__file__).parent / "c" / "model_flags.c")]
    sources += [str(f) for f in sorted(core.glob("*.c"))]

    def run(name: str, extra: List[str]) -> Tuple[Dict[str, int], Set[str]]:
        exe = tmp_path / name
        cmd = ["gcc", *STRICT_FLAGS, "-O2", "-ffunction-sections", "-Wl,--gc-sections", *model_flags(r.path)]
        cmd += [*extra, f"-I{core}", f"-I{r.path / 'src'}", *sources, "-o", str(exe)]
        built = subprocess.run(cmd, capture_output=True, text=True)
        assert built.returncode == 0, f"{' '.join(cmd)}\n{built.stderr}"
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
        return dict(zip(out[::2], map(int, out[1::2]))), defined_functions(exe)

    as_exported, functions = run("as_exported", [])
    assert as_exported == {"net_check": CoreStatus.OK, "train_step": CoreStatus.OK, "changed": 1}
    assert "mct_train_step" in functions and "mct_softmax_xent" in functions
    assert {"mct_loss_batch", "mct_batch_grads", "mct_update"}.isdisjoint(functions)
    _, unflagged = run("no_last_op", ["-UMCT_LAST_OP"])
    assert "mct_loss_batch" in unflagged
    wrong_last, _ = run("wrong_last_op", ["-UMCT_LAST_OP", f"-DMCT_LAST_OP={int(Op.DENSE)}"])
    assert wrong_last["net_check"] == CoreStatus.E_NET
    no_reg, _ = run("no_regularize", ["-UMCT_REGULARIZE", "-DMCT_REGULARIZE=0"])
    assert no_reg == {"net_check": CoreStatus.OK, "train_step": CoreStatus.E_UNSUPPORTED, "changed": 0}


# ============================================================================ fused softmax cross-entropy


def test_native_firmware_trains_a_confident_wrong_answer_like_pytorch(tmp_path: Path) -> None:
    """The exported firmware fuses Softmax(T) and cross-entropy too (issue 9): on a sample it gets wrong with
    a logit gap far beyond 69 T, one TRAIN step moves the weights as float64 PyTorch's cross_entropy(z / T)
    does (through the clamped outputs the step was ~0), bit for bit as the host's twin."""
    import torch

    temperature, lr = 0.1, 0.01
    net = Sequential(L.Linear(3, 4), L.Softmax(temperature)).rand_params(seed=5)
    p = net.params.copy()
    p[12] = 12.0  # the bias of output 0: class 0 wins every input by far
    net.params = p
    x = np.array([1.0, 0.5, -0.5], np.float32)
    t = np.array([0.0, 1.0, 0.0, 0.0], np.float32)
    assert net.forward(x)[1] < 1e-30
    opt = net.new_sgd(TrainParams(lr=lr))
    r = export_project(Checkpoint(net, opt), "native", tmp_path / "p", loss=losses.cross_entropy)
    (build,) = gcc_build_all([(r.path, tmp_path / "program", ["-O2"])])
    w = torch.tensor(p[:12].astype(np.float64).reshape(3, 4), requires_grad=True)
    b = torch.tensor(p[12:].astype(np.float64), requires_grad=True)
    z = torch.tensor(x.astype(np.float64)).reshape(1, 3) @ w + b
    want_loss = torch.nn.functional.cross_entropy(z / temperature, torch.tensor(t.astype(np.float64)).reshape(1, 4))
    want_loss.backward()
    assert w.grad is not None and b.grad is not None
    want = np.concatenate([(w - lr * w.grad).detach().numpy().ravel(), (b - lr * b.grad).detach().numpy()])
    twin = DeviceTwin(r.model)
    with firmware(build.program, tmp_path / "store.bin") as dev:
        loss, step = dev.train(x, t)
        assert step == 1 and same_bits(loss, twin.train(x, t))
        params, _, _ = dev.pull()
        assert_same_bits(params, twin.params, "parameters vs the twin")
        assert quit_and_stderr(dev)[0] == 0
    assert loss == pytest.approx(want_loss.item(), rel=1e-5)
    np.testing.assert_allclose(params, want, rtol=1e-5, atol=1e-5)
    assert params[12] < 12.0 - 0.5 * lr / temperature  # the wrong class's bias fell by about lr / T
