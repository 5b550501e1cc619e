"""Hostile and careless input to the host side: model files, data files, numbers given to the API, output
paths, Ctrl-C. Every case ends in the one documented error (McuTrainError subclasses naming what is wrong) or
a valid result: never a traceback of another type, a hang, or an allocation the input did not pay for.

The property-based tests (hypothesis) feed random bytes and random header fields to the loaders; the
memory-bound cases run in a subprocess whose address space is limited (RLIMIT_AS), so an allocation of the
size a tiny file declares fails the test instead of passing slowly.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import rebuild, split
from mcutrain import (
    ArchitectureError,
    ConfigError,
    DataError,
    ModelFileError,
    Sequential,
    ShapeError,
    TrainParams,
    losses,
    train_batch,
)
from mcutrain import layers as L
from mcutrain.architecture import MAX_NESTING, from_architecture
from mcutrain.datasets import MAX_CLASSES, load_csv, load_idx, load_npz, one_hot, read_idx
from mcutrain.modelfile import decode_model, encode_model, load_model
from mcutrain.run import RunSettings

ROOT = Path(__file__).resolve().parent.parent
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def small_model_bytes() -> bytes:
    """A valid model file: a small network with an Adam optimizer and run metadata."""
    net = Sequential(L.Linear(3, 4), L.Tanh(), L.Linear(4, 2), L.Softmax()).rand_params(seed=1)
    opt = net.new_adam(TrainParams(lr=0.01))
    return encode_model(net, opt, {"loss": "cross_entropy", "train": {"batch": 4, "data": {"problem": "parity2"}}})


def run_limited(code: str, limit_gib: float = 3.0, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run Python code in a subprocess whose address space is limited to limit_gib (numpy and the C core
    load in well under that; a 16 GB allocation cannot happen)."""
    prelude = (
        f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({int(limit_gib * 2**30)}, "
        f"{int(limit_gib * 2**30)}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
    )


# ============================================================================ model files


def test_a_tiny_file_declaring_a_huge_network_allocates_nothing_large(tmp_path: Path) -> None:
    """A 1 KB file with a valid checksum whose architecture is Linear(65535, 65535) (16 GiB of parameters)
    is refused from the header's sizes, under a 3 GiB address-space limit, in well under a second."""
    version, header, payload = split(small_model_bytes())
    header["architecture"] = {"type": "Sequential", "layers": [{"type": "Linear", "n_in": 65535, "n_out": 65535}]}
    path = tmp_path / "huge.mct"
    path.write_bytes(rebuild(version, json.dumps(header).encode(), payload))
    r = run_limited(f"""
        import time
        from mcutrain.modelfile import load_model, ModelFileError
        t = time.monotonic()
        try:
            load_model({str(path)!r})
        except ModelFileError as e:
            print("REFUSED", round(time.monotonic() - t, 3), e)
    """)
    assert r.returncode == 0 and r.stdout.startswith("REFUSED"), r.stdout + r.stderr
    assert f"{65535 * 65535 + 65535} parameters, the file holds 26" in r.stdout, r.stdout
    assert float(r.stdout.split()[1]) < 1.0, r.stdout


@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "folder"])
def test_files_that_are_not_regular_files_are_refused_at_once(tmp_path: Path, kind: str) -> None:
    """/dev/zero (which never ends), a FIFO nobody writes to (which would block) and a folder: a
    ModelFileError naming the kind, in a subprocess that would otherwise hang or exhaust its memory."""
    path = {"dev_zero": Path("/dev/zero"), "fifo": tmp_path / "pipe.mct", "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    r = run_limited(
        f"""
        from mcutrain.modelfile import load_model, ModelFileError
        try:
            load_model({str(path)!r})
        except ModelFileError as e:
            print("REFUSED", e)
    """,
        timeout=30,
    )
    assert r.returncode == 0 and r.stdout.startswith("REFUSED"), r.stdout + r.stderr
    assert ("a folder" if kind == "folder" else "not a regular file") in r.stdout


def crafted(tmp_path: Path, change: Callable[[Any], Any], payload: Any = None) -> str:
    """The ModelFileError message of the small model file with its header changed (CRC made valid)."""
    version, header, pl = split(small_model_bytes())
    header = change(header) or header
    p = tmp_path / "crafted.mct"
    p.write_bytes(rebuild(version, json.dumps(header).encode(), pl if payload is None else payload))
    with pytest.raises(ModelFileError) as e:
        load_model(p)
    return str(e.value)


@pytest.mark.parametrize(
    "field,value,words",
    [
        ("arrays.params.dtype", ">f4", "arrays.params.dtype must be '<f4'"),  # byte-swapped
        ("arrays.params.dtype", "<f8", "arrays.params.dtype must be '<f4'"),
        ("arrays.params.shape", [3, 9], "does not hold"),
        ("arrays.params.offset", 2, "multiple of 4"),
        ("arrays.params.offset", -4, "arrays.params.offset"),
        ("arrays.params.bytes", 1 << 40, "arrays.params.bytes must fit"),
        ("arrays.opt_state.dtype", "object", "arrays.opt_state.dtype"),
        ("n_params", "26", "n_params must be a whole number"),
        ("n_params", 1 << 40, "n_params must be a whole number"),
        ("metadata", [1, 2], "metadata must be an object"),
        ("optimizer", "adam", "optimizer must be an object or null"),
        ("optimizer.kind", "lion", "unknown optimizer 'lion'"),
        ("optimizer.kind", 7, "unknown optimizer 7"),
        ("optimizer.eps", "small", "eps must be a number"),
        ("optimizer.train_params", [], "train_params must be a mapping"),
        ("optimizer.train_params.lr", float("1e300") * 10, "lr must be a finite number"),
        ("optimizer.train_params.warmup_steps", 1.5, "warmup_steps must be a whole number"),
        ("optimizer.train_params.momentum_typo", 1, "unknown settings momentum_typo"),
        ("architecture", "Linear", "architecture must be an object"),
        ("architecture.layers", [{"type": 5}], "the layer type must be a name"),
        ("architecture.layers", [{"type": "Linear", "n_in": 3.5, "n_out": 2}], "whole number"),
        ("architecture.layers", [{"type": "LeakyRelu", "alpha": "x", "n": 3}], "alpha must be a number"),
    ],
)
def test_bad_header_fields_name_the_field(tmp_path: Path, field: str, value: Any, words: str) -> None:
    """A header with a valid checksum but a field of the wrong type, range or dtype: ModelFileError whose
    message names the field (never a ValueError, TypeError or ZeroDivisionError from deeper down)."""

    def change(h: Any) -> None:
        *path, last = field.split(".")
        d = h
        for k in path:
            d = d[k]
        d[last] = value

    msg = crafted(tmp_path, change)
    assert words in msg, msg


def test_deeply_nested_headers_are_refused(tmp_path: Path) -> None:
    """JSON nested 100,000 deep (RecursionError in the parser) and an architecture nested past MAX_NESTING:
    ModelFileError, as is an architecture built directly from such data (ArchitectureError)."""
    version, _, payload = split(small_model_bytes())
    deep = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    p = tmp_path / "deep.mct"
    p.write_bytes(rebuild(version, deep, payload))
    with pytest.raises(ModelFileError, match="unreadable header"):
        load_model(p)
    arch: Any = {"type": "Relu", "n": 3}
    for _ in range(MAX_NESTING + 5):
        arch = {"type": "Residual", "inner": arch}
    msg = crafted(tmp_path, lambda h: h.update(architecture=arch))
    assert "nests deeper" in msg, msg
    with pytest.raises(ArchitectureError, match="nest deeper"):
        from_architecture(arch)


def test_run_metadata_of_the_wrong_types_is_a_model_file_error() -> None:
    """The training run's settings stored in a model file (what --resume reads): wrong types or ranges name
    the field."""
    for bad, words in [
        ({"batch": "x"}, "train.batch must be int"),
        ({"batch": 0}, "train.batch must be from 1"),
        ({"threads": 10**6}, "train.threads"),
        ({"val": 1.5}, "train.val must be in [0, 1)"),
        ({"data": {"path": 3}}, "train.data.path must be null or str"),
        ("run", "must be a mapping"),
        ({"init_scale": float("nan")}, "must be finite"),
    ]:
        with pytest.raises(ModelFileError) as e:
            RunSettings.from_dict(bad)
        assert words in str(e.value), (bad, str(e.value))


@FUZZ
@given(data=st.binary(max_size=600))
def test_random_bytes_are_refused_cleanly(data: bytes) -> None:
    """Random bytes, with and without the marker: ModelFileError, nothing else."""
    for blob in (data, b"MCTRAIN\0" + data):
        with pytest.raises(ModelFileError):
            decode_model(blob)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=12,
)


def header_paths(h: Any, prefix: tuple = ()) -> list:
    """Every path (tuple of keys/indices) into a parsed JSON value."""
    out = [prefix]
    if isinstance(h, dict):
        for k, v in h.items():
            out += header_paths(v, prefix + (k,))
    elif isinstance(h, list):
        for i, v in enumerate(h):
            out += header_paths(v, prefix + (i,))
    return out


@FUZZ
@given(data=st.data())
def test_random_header_fields_load_or_fail_cleanly(data: st.DataObject) -> None:
    """Replace one field anywhere in a valid header by a random JSON value (the checksum made valid): the
    result is a Checkpoint or a ModelFileError, never another exception."""
    version, header, payload = split(small_model_bytes())
    paths = [p for p in header_paths(header) if p]
    path = data.draw(st.sampled_from(paths))
    d = header
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = data.draw(JSON)
    blob = rebuild(version, json.dumps(header).encode(), payload)
    try:
        decode_model(blob)
    except ModelFileError:
        pass


@FUZZ
@given(pos=st.integers(0, 10**6), value=st.integers(0, 255))
def test_single_byte_changes_are_refused_by_the_checksum(pos: int, value: int) -> None:
    """Any byte of a valid file changed (without fixing the CRC): refused, or identical when unchanged."""
    good = small_model_bytes()
    pos %= len(good)
    bad = good[:pos] + bytes([value]) + good[pos + 1 :]
    if bad == good:
        return
    with pytest.raises(ModelFileError):
        decode_model(bad)


# ============================================================================ data files


def test_a_csv_with_a_byte_order_mark_keeps_its_first_row(tmp_path: Path) -> None:
    """Excel's UTF-8 CSV starts with a byte-order mark: the header is still recognised as a header, and
    without a header the first sample is kept."""
    p = tmp_path / "bom.csv"
    p.write_bytes("\ufeffa,b,label\n1,2,0\n3,4,1\n".encode())
    assert len(load_csv(p)) == 2
    p.write_bytes("\ufeff1,2,0\n3,4,1\n".encode())
    d = load_csv(p)
    assert len(d) == 2 and d.x[0].tolist() == [1.0, 2.0]


@pytest.mark.parametrize(
    "content,words",
    [
        ("caf\xe9,b,label\n1,2,0\n".encode("latin-1"), "line 1, column 4: byte 0xe9 is not UTF-8"),
        (b"a,b\n1," + b"9" * ((128 << 10) + 5) + b"\n", "line 2: a cell longer than 131,072 characters"),
        (b"a,b,c\n1,2,3\n4,5\n", "line 3 has 2 columns"),
        (b"a,b,c\n1,x,3\n", "line 2, column 2 (b): 'x' is not a number"),
        (b"a,b,c\n1,2,x\n", "target column 3 (c) holds text such as 'x': if these are class labels, add --classify"),
        (b"", "is empty"),
    ],
)
def test_malformed_csv_files_name_line_and_column(tmp_path: Path, content: bytes, words: str) -> None:
    """Encoding, oversized cells, ragged rows, text, emptiness, an unclosed quote: one DataError naming the
    file and where."""
    p = tmp_path / "bad.csv"
    p.write_bytes(content)
    with pytest.raises(DataError) as e:
        load_csv(p)
    assert words in str(e.value) and str(p) in str(e.value), str(e.value)


def test_zero_input_columns_are_refused(tmp_path: Path) -> None:
    """A CSV whose only column is the target leaves no inputs: DataError, not a network of width 0."""
    p = tmp_path / "one.csv"
    p.write_text("y\n1\n2\n")
    with pytest.raises(DataError, match="0 input values per sample"):
        load_csv(p)


def npz_bytes(**arrays: Any) -> bytes:
    """An .npz file's bytes."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


@pytest.mark.parametrize(
    "make,words",
    [
        (lambda: npz_bytes(x=np.zeros((4, 3)), y=np.zeros(4))[:60], "cannot read"),  # truncated
        (lambda: b"PK\x03\x04" + bytes(100), "cannot read"),  # corrupt zip
        (lambda: npz_bytes(x=np.full((4, 3), "a"), y=np.zeros(4)), "holds <U1, not numbers"),
        (lambda: npz_bytes(x=np.float32(3), y=np.zeros(1)), "not single numbers"),
        (lambda: npz_bytes(x=np.zeros((4, 3)), y=np.zeros((4, 2, 2))), "targets are (n,) labels"),
        (lambda: npz_bytes(x=np.zeros((2, 3)), y=np.array([0, 2**31 - 1])), "whole numbers from 0 to 65534"),
        (lambda: npz_bytes(a=np.zeros(3)), "has no array 'x'"),
    ],
)
def test_bad_npz_files(tmp_path: Path, make: Callable[[], bytes], words: str) -> None:
    """Truncated and corrupt archives, text inputs, scalars, 3-D targets, a label of 2^31 - 1 (which would
    ask for a 16 GiB one-hot array), a missing array: DataError saying so."""
    p = tmp_path / "bad.npz"
    p.write_bytes(make())
    with pytest.raises(DataError) as e:
        load_npz(p, classify=True)
    assert words in str(e.value), str(e.value)


def idx_bytes(dims: tuple, dtype: int = 0x08, data: bytes = b"") -> bytes:
    """An IDX file's bytes with the given dimensions."""
    return bytes([0, 0, dtype, len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + data


@pytest.mark.parametrize(
    "content,words",
    [
        (idx_bytes(()), "declares 0 dimensions"),
        (bytes([0, 0, 8, 255]) + bytes(1020), "declares 255 dimensions"),
        (idx_bytes((2**31, 2**31, 2**31)), "truncated"),
        (idx_bytes((0, 28, 28)), "holds no values"),
    ],
)
def test_bad_idx_files(tmp_path: Path, content: bytes, words: str) -> None:
    """IDX headers with 0 or 255 dimensions, sizes far past the data, no values: DataError."""
    p = tmp_path / "bad-idx3-ubyte"
    p.write_bytes(content)
    with pytest.raises(DataError, match=words):
        read_idx(p)


def test_a_truncated_gzip_idx_file(tmp_path: Path) -> None:
    """A .gz cut short: DataError, not EOFError."""
    p = tmp_path / "labels-idx1-ubyte.gz"
    p.write_bytes(gzip.compress(idx_bytes((100,), data=bytes(100)))[:-9])
    with pytest.raises(DataError, match="not a complete gzip file"):
        read_idx(p)
    good = tmp_path / "images-idx3-ubyte"
    good.write_bytes(idx_bytes((100, 2, 2), data=bytes(400)))
    with pytest.raises(DataError, match="not a complete gzip file"):
        load_idx(good, p)


def test_one_hot_refuses_labels_it_cannot_hold() -> None:
    """Negative, fractional, NaN, huge and text labels: DataError naming the first bad label."""
    for labels, words in [
        ([0, -1], "label 1 is -1"),
        ([0.5], "label 0 is 0.5"),
        ([np.nan], "label 0 is nan"),
        ([MAX_CLASSES], f"label 0 is {MAX_CLASSES}"),
        (["cat"], "must be numbers"),
    ]:
        with pytest.raises(DataError, match=words):
            one_hot(np.array(labels))


@FUZZ
@given(data=st.binary(max_size=400), kind=st.sampled_from(["csv", "npz", "idx", "idx.gz"]))
def test_random_bytes_into_every_loader(tmp_path: Path, data: bytes, kind: str) -> None:
    """Random bytes as a CSV, NPZ or IDX file: a Dataset/array or a DataError, never another exception."""
    p = tmp_path / f"fuzz-{kind}"
    if kind == "npz":
        p = p.with_suffix(".npz")
        data = b"PK\x03\x04" + data if data[:1] == b"P" else data
    if kind == "idx.gz":
        p = p.with_suffix(".gz")
        data = gzip.compress(data)[: max(10, len(data))]
    if kind == "idx":
        data = bytes([0, 0, 8, data[0] % 4]) + data[1:] if data else data
    p.write_bytes(data)
    try:
        {"csv": load_csv, "npz": load_npz, "idx": read_idx, "idx.gz": read_idx}[kind](p)
    except DataError:
        pass


# ============================================================================ numbers given to the API


@pytest.mark.parametrize(
    "make,error,words",
    [
        (lambda: L.LeakyRelu(alpha=float("nan"), n=3), ShapeError, "LeakyRelu alpha must be a finite number"),
        (lambda: L.Softmax(float("inf"), 3), ShapeError, "Softmax temperature"),
        (lambda: L.Softmax(0.0, 3), ShapeError, "Softmax temperature must be a finite number in (0"),
        (lambda: L.RMSNorm(3, eps=-1.0), ShapeError, "RMSNorm eps"),
        (lambda: L.ScalarScale(3, init="1"), ShapeError, "ScalarScale init must be a number"),
        (lambda: L.GLU(3, 3, "leaky_relu", alpha=float("inf")), ShapeError, "GLU alpha"),
        (lambda: L.Linear(3, 2).rand_params(seed=1, scale=float("nan")), ShapeError, "scale must be a finite number"),
        (lambda: L.Linear(3, 2).rand_params(seed=-1), ShapeError, "seed must be a whole number"),
        (lambda: TrainParams(lr=float("nan")), ConfigError, "lr must be a finite number"),
        (lambda: TrainParams(warmup_steps=2.5), ConfigError, "warmup_steps must be a whole number"),
        (lambda: TrainParams(scale_by_loss="yes"), ConfigError, "scale_by_loss must be True or False"),
    ],
)
def test_bad_numbers_are_refused_with_their_value(make: Callable[[], Any], error: type, words: str) -> None:
    """NaN, infinities, wrong types and out-of-range values in layer and optimizer arguments: the
    documented error with the argument's name."""
    with pytest.raises(error) as e:
        make()
    assert words in str(e.value), str(e.value)


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2", 10**6])
def test_bad_thread_counts_are_refused(threads: Any) -> None:
    """threads must be a whole number from 1 to MAX_THREADS: 0, -1, 1.5, True, '2' and a million are
    ConfigErrors naming the value, and nothing trains."""
    net = Sequential(L.Linear(3, 2)).rand_params(seed=1)
    before = net.params.copy()
    opt = net.new_sgd(TrainParams(lr=0.1))
    with pytest.raises(ConfigError, match="threads must be a whole number"):
        train_batch(opt, net, losses.mse, np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32), threads=threads)
    assert np.array_equal(net.params, before) and opt.step == 0


# ============================================================================ the command line


def mcutrain(*args: str, cwd: Path, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """The installed `mcutrain` command."""
    return subprocess.run(["mcutrain", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


@pytest.mark.parametrize(
    "output,code,words",
    [
        ("notes.txt/model.mct", 1, "notes.txt is a file, not a folder"),
        ("", 1, "give the model file a file name"),
        (".", 2, "is a directory"),  # click's own check of the option (a usage error)
        ("sub", 2, "is a directory"),
    ],
)
def test_train_checks_its_output_before_training(tmp_path: Path, output: str, code: int, words: str) -> None:
    """`train -o PATH` with a path that cannot be written fails at once (well before 20,000 steps) and
    leaves the files around it as they were."""
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "sub").mkdir()
    t = time.monotonic()
    r = mcutrain("train", "--steps", "20000", "-o", output, cwd=tmp_path)
    assert r.returncode == code and words in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert time.monotonic() - t < 20
    assert (tmp_path / "notes.txt").read_text() == "mine" and not any((tmp_path / "sub").iterdir())


@pytest.mark.parametrize("delay", [0.15, 0.3, 0.6, 1.2])
def test_ctrl_c_at_any_moment_exits_130_without_a_traceback(tmp_path: Path, delay: float) -> None:
    """SIGINT while the command starts (mcutrain, numpy and the core loading, the first steps): exit code
    130 and a one-line message, never a traceback or a death by the signal. (Before 0.15 s the signal may
    reach the Python interpreter itself while it starts, which no program can answer.)"""
    p = subprocess.Popen(
        ["mcutrain", "train", "--steps", "200000", "-o", "m.mct"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # a first Ctrl-C asks training to stop after the step
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    assert p.returncode == 130, (p.returncode, err)
    assert "Traceback" not in err and "interrupted" in err, err
