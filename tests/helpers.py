"""Helpers shared by the test modules: float32 bit comparisons, one-hot samples, the README network, training
a device and its host twin in lockstep, and the model flags of an exported project.

The tests import this module as `helpers` (tests/ has no __init__.py, so pytest's default import mode puts
tests/ on sys.path)."""

from __future__ import annotations

import configparser
import importlib.util
import json
import struct
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Tuple

import numpy as np

from mcutrain import Sequential, TrainParams
from mcutrain import layers as L
from mcutrain.modelfile import MAGIC

# ---------------------------------------------------------------- bits


def _f32(values: Any) -> np.ndarray:
    """values as a C-ordered float32 array. Python and NumPy scalars are converted; an array must already
    be float32 (a float64 array would be rounded silently, which would hide a wrong dtype)."""
    if isinstance(values, np.ndarray):
        assert values.dtype == np.float32, f"expected a float32 array, got {values.dtype}"
        return np.ascontiguousarray(values)
    return np.asarray(values, dtype=np.float32, order="C")


def bits(values: Any) -> np.ndarray:
    """The float32 bit patterns (uint32, same shape) of a value or a float32 array."""
    return _f32(values).view(np.uint32)


def same_bits(a: Any, b: Any) -> bool:
    """True when a and b are float32 numbers of the same shape and identical bit for bit (so -0.0 differs
    from 0.0 and NaNs compare by their payload)."""
    fa, fb = _f32(a), _f32(b)
    return fa.shape == fb.shape and fa.tobytes() == fb.tobytes()


def assert_same_bits(got: Any, want: Any, what: str) -> None:
    """got and want hold the same float32 values bit for bit, in the same order (compared flat, so a
    (slots, n) optimizer state matches the device's flat region); the message names the first difference."""
    g, w = _f32(got).ravel(), _f32(want).ravel()
    assert g.shape == w.shape, f"{what}: {g.size} values, expected {w.size}"
    bad = np.flatnonzero(g.view(np.uint32) != w.view(np.uint32))
    assert bad.size == 0, (
        f"{what}: {bad.size} of {g.size} differ; first at {bad[0]}: {g[bad[0]]!r} "
        f"({g.view(np.uint32)[bad[0]]:08x}) != {w[bad[0]]!r} ({w.view(np.uint32)[bad[0]]:08x})"
    )


# ---------------------------------------------------------------- data and networks


def onehot_samples(
    rng: np.random.Generator, n: int, n_in: int, n_out: int, inputs: str = "normal"
) -> Tuple[np.ndarray, np.ndarray]:
    """n float32 inputs (n, n_in) and one-hot float32 targets (n, n_out) of uniformly drawn classes; the
    inputs are drawn first. inputs='normal': standard normal; 'uniform': uniform in [-1, 1), drawn as
    float32."""
    if inputs == "normal":
        x = rng.standard_normal((n, n_in)).astype(np.float32)
    elif inputs == "uniform":
        x = (rng.random((n, n_in), dtype=np.float32) * 2.0 - 1.0).astype(np.float32)
    else:
        raise ValueError(f"inputs must be 'normal' or 'uniform', got {inputs!r}")
    t = np.eye(n_out, dtype=np.float32)[rng.integers(0, n_out, n)]
    return x, t


def readme_net(*, seed: int, scale: float) -> Sequential:
    """The README network, Linear(20, 35), Sigmoid, Linear(35, 10), Softmax, with seeded parameters
    (rand_params(seed, scale))."""
    return Sequential(L.Linear(20, 35), L.Sigmoid(), L.Linear(35, 10), L.Softmax()).rand_params(seed=seed, scale=scale)


# ---------------------------------------------------------------- a device and its host twin


def train_lockstep(device: Any, twin: Any, xs: np.ndarray, ts: np.ndarray) -> List[float]:
    """TRAIN the device (an mcutrain.exporter.client.Device) and its host twin (mcutrain.exporter.twin.DeviceTwin)
    on the same samples, one at a time: every step's loss must be the same bits and the device's step count must be
    the twin's, one more per sample. Returns the device's losses."""
    out: List[float] = []
    start = twin.step
    for k, (x, t) in enumerate(zip(xs, ts)):
        loss_dev, step = device.train(x, t)
        loss_host = twin.train(x, t)
        assert same_bits(loss_dev, loss_host), f"step {k}: loss {loss_dev!r} on the device, {loss_host!r} on the host"
        assert step == twin.step == start + k + 1, f"step {k}: the device says step {step}, the twin {twin.step}"
        out.append(loss_dev)
    return out


def assert_device_equals_twin(device: Any, twin: Any) -> None:
    """The device's pulled parameters, optimizer state (all slots: the twin's whole state) and train state
    equal the twin's, bit for bit."""
    params, state, train_state = device.pull()
    assert_same_bits(params, twin.params, "parameters")
    assert_same_bits(state, twin.state, "optimizer state")
    assert bytes(train_state) == twin.train_state.tobytes(), "train state (step, Adam powers)"


# ---------------------------------------------------------------- exported projects


def model_flags(project: Path) -> List[str]:
    """The -DMCT_* model flags of an exported project's platformio.ini ([env] build_flags, which every env
    shares); there must be some."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(project / "platformio.ini")
    assert "env" in ini, f"{project / 'platformio.ini'} has no [env] section"
    flags = [f for f in ini["env"].get("build_flags", "").split() if f.startswith("-DMCT_")]
    assert flags, f"{project / 'platformio.ini'} has no -DMCT_ model flags in [env] build_flags"
    return flags


# ---------------------------------------------------------------- model files, crafted


def with_crc(body: bytes) -> bytes:
    """body plus its correct CRC-32 trailer (to craft model files that pass the checksum)."""
    return body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


def split(data: bytes) -> Tuple[int, Dict[str, Any], bytes]:
    """(format version, header, payload) of a model file's bytes (the layout documented in modelfile.py)."""
    version, hlen = struct.unpack_from("<II", data, 8)
    return version, json.loads(data[16 : 16 + hlen]), data[16 + hlen : -4]


def rebuild(version: int, header_bytes: bytes, payload: bytes) -> bytes:
    """A model file with the given version and raw header (padded to 4 bytes) and a correct CRC."""
    header_bytes += b" " * (-len(header_bytes) % 4)
    return with_crc(MAGIC + struct.pack("<II", version, len(header_bytes)) + header_bytes + payload)


def own_pio_env(core: Path) -> Dict[str, str]:
    """Environment for a PlatformIO build that runs in parallel with others: its own core folder and its own
    build cache beside it (SCons keeps its .sconsign database in the build cache, and parallel builds that
    share one race on replacing that file)."""
    return {
        "PLATFORMIO_CORE_DIR": str(core),
        "PLATFORMIO_BUILD_CACHE_DIR": str(core.parent / f"{core.name}-build-cache"),
    }


OPTIMIZER_KINDS = ["sgd", "momentum", "rmsprop", "rmsprop_momentum", "adam"]


def optimizer_of_kind(net: Any, kind: str, tp: TrainParams) -> Any:
    """A fresh optimizer of one of OPTIMIZER_KINDS for net (momentum and RMSProp's beta 0.9, Adam's defaults)."""
    return {
        "sgd": lambda: net.new_sgd(tp),
        "momentum": lambda: net.new_momentum(tp, 0.9),
        "rmsprop": lambda: net.new_rmsprop(tp, 0.9),
        "rmsprop_momentum": lambda: net.new_rmsprop_with_momentum(tp, 0.9, 0.9),
        "adam": lambda: net.new_adam(tp),
    }[kind]()


def first_step_by_hand(kind: str, p0: np.ndarray, g: np.ndarray, lr: float) -> np.ndarray:
    """The parameters after an optimizer_of_kind's first step from p0 with gradient g: SGD and momentum take
    lr g (the velocity starts at g), RMSProp (with or without momentum) lr g / sqrt(0.1 g^2), Adam lr g / |g|."""
    if kind in ("sgd", "momentum"):
        return p0 - lr * g
    if kind in ("rmsprop", "rmsprop_momentum"):
        return p0 - lr * g / np.sqrt(0.1 * g * g + 1e-20)
    return p0 - lr * g / (np.abs(g) + 1e-8)


def assert_first_step(params: np.ndarray, want: np.ndarray, g: np.ndarray, kind: str, left_out: float = 0.3) -> None:
    """params after a first step agree with want (first_step_by_hand), except where the exact gradient is 0 (a bias
    before a BatchNorm, running statistics): float32 leaves ~1e-9 there, which RMSProp and Adam scale to a full
    step, so those parameters are left out for them (fewer than the fraction left_out of all)."""
    ill = (np.abs(g) < 1e-6) & (kind in ("rmsprop", "rmsprop_momentum", "adam"))
    np.testing.assert_allclose(params[~ill], want[~ill], rtol=2e-4, atol=2e-5)
    assert ill.sum() < left_out * ill.size


def load_bench(name: str) -> ModuleType:
    """bench/NAME.py imported by its path (bench/ is not a package), for the tests of a benchmark script."""
    path = Path(__file__).resolve().parent.parent / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- int8-full on the devices


def int8_full_net() -> Sequential:
    """13 -> 7 (ReLU) -> 6 (tanh) -> 5: widths that leave remainders in every device kernel of the full-integer
    ops (4-byte loads, four QDENSE rows at a time)."""
    return Sequential(L.Linear(13, 7), L.Relu(), L.Linear(7, 6), L.Tanh(), L.Linear(6, 5)).rand_params(seed=9)


def export_int8_full(board: str, out: Path, seed: int = 4) -> Tuple[Any, Sequential, np.ndarray]:
    """int8_full_net exported in full-integer int8 for a board's simulated stand-in (calibrated on 200 standard
    normal inputs): (the ExportResult, the f32 network, probe inputs). The probes also go 4x beyond the
    calibrated range (saturated codes) and include an all-zero sample."""
    from mcutrain import Checkpoint, TrainParams
    from mcutrain.exporter.export import export_project

    net = int8_full_net()
    rng = np.random.default_rng(seed)
    cal = rng.standard_normal((200, 13)).astype(np.float32)
    probe = rng.standard_normal((8, 13)).astype(np.float32)
    probe[1] *= np.float32(4.0)
    probe[2] = 0.0
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.01)))
    r = export_project(ck, board, out, quant="int8-full", trainable="none", calibration=cal, sim=True)
    return r, net, probe


def write_model_project(out: Path, board: Any, m: Any, source: str, extra_flags: Tuple[str, ...] = ()) -> Path:
    """A project for a DeviceModel m (its generated model.h and model.c, its build flags plus extra_flags), as
    an export writes it: for variants of an export (changed constants, other flags)."""
    from mcutrain.exporter.cgen import model_c, model_h
    from mcutrain.exporter.project import write_project

    files = {"src/model.h": model_h(m), "src/model.c": model_c(m)}
    write_project(out, board, files, source, m.build_flags() + list(extra_flags))
    return out


def with_extreme_qdense_constants(m: Any) -> Any:
    """A copy of an int8-full DeviceModel whose QDENSE constants (MCT_OP_QDENSE in mct.h) reach the limits the
    kernels of every target must handle alike, on outputs 0-4 of each QDENSE: biases 2^31 - 1 and -2^31, a
    negative multiplier, a multiplier of -2^31, shifts 0 (clamped to 1), 20, 32, 33 and 63 (clamped to 62); the
    other outputs keep the exporter's constants."""
    from dataclasses import replace

    from mcutrain.corefacts import Op

    blob = bytearray(m.program.cdata)
    for d in m.program.layers:
        if d.op != Op.QDENSE:
            continue
        n = d.n_out
        assert n >= 5, "the extreme constants take five outputs"
        base = d.p_off + 8
        c = np.frombuffer(bytes(blob[base : base + 12 * n]), "<i4").astype(np.int64).reshape(3, n)
        bias, mult, shift = c
        bias[0], mult[0], shift[0] = 2**31 - 1, mult[0], 33
        bias[1], mult[1], shift[1] = -(2**31), -mult[1], 63
        mult[2], shift[2] = -(2**31), 0
        mult[3], shift[3] = 1 << 20, 32
        mult[4], shift[4] = 12345, 20
        blob[base : base + 12 * n] = c.astype("<i4").tobytes()
    return replace(m, program=replace(m.program, cdata=bytes(blob)))


def quant_tie_inputs(m: Any) -> np.ndarray:
    """Inputs for an int8-full DeviceModel whose product with its first QUANT's inv_scale is exactly a tie k + 1/2
    (k from -140 to 139, so past the int8 range too), with the floats just above and below each, as rows of the
    network's input width: QUANT's rounding at and next to every tie, on the device."""
    from mcutrain.corefacts import Op

    d = next(d for d in m.program.layers if d.op == Op.QUANT)
    inv = np.frombuffer(bytes(m.program.cdata), "<f4", count=1, offset=d.p_off)[0]
    vals: List[np.float32] = []
    for k in range(-140, 140):
        tie = np.float32(k + 0.5)
        x = np.float32(tie / inv)
        for _ in range(8):  # a few ulps around the quotient: the first whose f32 product is the tie
            if np.float32(x * inv) == tie:
                vals += [x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))]
                break
            x = np.nextafter(x, np.float32(np.inf) if np.float32(x * inv) < tie else np.float32(-np.inf))
    assert len(vals) >= 300, "too few exact ties found"
    n = m.program.n_in
    out = np.zeros(-(-len(vals) // n) * n, np.float32)
    out[: len(vals)] = vals
    return out.reshape(-1, n)


# ---------------------------------------------------------------- the native firmware on a pty


class NativeFirmware:
    """A native project's firmware serving a pty, with its flash store in `store`. The test holds the pty open,
    so the program keeps running between the commands that connect to it; close() lets go and ends it."""

    def __init__(self, project: Path, store: Path) -> None:
        import os
        import subprocess

        from mcutrain.exporter.client import read_pty_line

        self.store = store
        self.proc = subprocess.Popen(
            [str(project / ".pio" / "build" / "native" / "program"), "--pty"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "MCUTRAIN_STORE": str(store)},
        )
        assert self.proc.stdout is not None
        port = read_pty_line(self.proc.stdout.fileno(), 60)
        if port is None:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the native firmware offered no pty within 60 s (exit status {self.proc.returncode})")
        self.port = port
        self.hold = os.open(port, os.O_RDWR | os.O_NOCTTY)

    def regions(self) -> tuple:
        """(RAM parameters, optimizer slots, train state) as the device holds them now."""
        from mcutrain.exporter.client import Device

        with Device.open(self.port) as dev:
            return dev.pull()

    def close(self) -> None:
        """Let go of the pty; the firmware then ends (killed if it has not within 5 s)."""
        import os
        import subprocess

        os.close(self.hold)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------- the command line in this process


def cli(*args: str) -> Any:
    """Run mcutrain's command line in this process (click's runner) and return click's Result; an unexpected
    exception propagates, so a crash is never mistaken for an error exit."""
    from click.testing import CliRunner

    from mcutrain.cli import main

    r = CliRunner().invoke(main, list(args))
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r


def cli_ok(*args: str) -> Any:
    """cli(*args), asserting that it exited 0 (the output is in the assertion's message)."""
    r = cli(*args)
    assert r.exit_code == 0, (args, r.output)
    return r
