"""The IDX reader (MNIST's format: mcutrain.datasets.read_idx / load_idx) on files written here with
struct and NumPy, and the ModularAddition16 problem."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Tuple

import numpy as np
import pytest

from mcutrain.datasets import DataError, load_idx, read_idx
from mcutrain.problems import ModularAddition16, by_name

# IDX type codes (the third magic byte) and the big-endian dtypes they stand for
UBYTE, SBYTE, INT32, FLOAT32 = 0x08, 0x09, 0x0C, 0x0D


def idx_bytes(values: np.ndarray, type_code: int) -> bytes:
    """An IDX file: 0, 0, the type code, the number of dimensions, each dimension as a big-endian u32, then
    the values big-endian in C order."""
    dt = {UBYTE: ">u1", SBYTE: ">i1", INT32: ">i4", FLOAT32: ">f4"}[type_code]
    head = bytes([0, 0, type_code, values.ndim]) + struct.pack(f">{values.ndim}I", *values.shape)
    return head + np.ascontiguousarray(values, dt).tobytes()


@pytest.fixture
def mnist_like(tmp_path: Path) -> Tuple[Path, Path, np.ndarray, np.ndarray]:
    """Seven 3x4 byte images (with 0 and 255 among the values) and their labels 0..9, as an images file and
    a labels file named like MNIST's; returns (images path, labels path, images, labels)."""
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (7, 3, 4), dtype=np.uint8)
    images[0, 0, 0], images[0, 0, 1] = 0, 255
    labels = np.array([3, 0, 9, 1, 3, 7, 2], np.uint8)
    img_path, lab_path = tmp_path / "train-images-idx3-ubyte", tmp_path / "train-labels-idx1-ubyte"
    img_path.write_bytes(idx_bytes(images, UBYTE))
    lab_path.write_bytes(idx_bytes(labels, UBYTE))
    return img_path, lab_path, images, labels


# ---------------------------------------------------------------- read_idx


def test_read_idx_gives_the_values_and_shape(mnist_like: Tuple[Path, Path, np.ndarray, np.ndarray]) -> None:
    img_path, lab_path, images, labels = mnist_like
    got = read_idx(img_path)
    assert got.shape == (7, 3, 4) and got.dtype == np.dtype(">u1")
    assert np.array_equal(got, images)
    assert np.array_equal(read_idx(lab_path), labels)


@pytest.mark.parametrize(
    "type_code,values",
    [
        (SBYTE, np.array([[-128, -1], [0, 127]], np.int8)),
        (INT32, np.array([-(2**31), -1, 0, 1, 2**31 - 1], np.int32)),
        (FLOAT32, np.array([[[1.5, -0.25]], [[3e38, -1e-40]]], np.float32)),
    ],
    ids=["int8", "int32", "float32"],
)
def test_read_idx_other_types_are_big_endian(tmp_path: Path, type_code: int, values: np.ndarray) -> None:
    p = tmp_path / "a.idx"
    p.write_bytes(idx_bytes(values, type_code))
    got = read_idx(p)
    assert got.shape == values.shape
    assert got.tobytes() == np.ascontiguousarray(values, got.dtype).tobytes()
    assert np.array_equal(got.astype(values.dtype), values)


def test_read_idx_unpacks_gz(tmp_path: Path, mnist_like: Tuple[Path, Path, np.ndarray, np.ndarray]) -> None:
    img_path, _, images, _ = mnist_like
    gz = tmp_path / "images.idx.gz"
    gz.write_bytes(gzip.compress(img_path.read_bytes()))
    assert np.array_equal(read_idx(gz), images)


@pytest.mark.parametrize(
    "head",
    [b"\x01\x00\x08\x01", b"\x00\x01\x08\x01", b"\x00\x00\x07\x01", b"\x00\x00\x0a\x01", b"\x00\x00", b""],
    ids=lambda h: h.hex() or "empty",
)
def test_read_idx_refuses_a_bad_magic_number(tmp_path: Path, head: bytes) -> None:
    p = tmp_path / "bad.idx"
    p.write_bytes(head + struct.pack(">I", 3) + b"\x01\x02\x03")
    with pytest.raises(DataError, match="not an IDX file \\(bad magic number\\)"):
        read_idx(p)


def test_read_idx_refuses_truncated_files(
    tmp_path: Path, mnist_like: Tuple[Path, Path, np.ndarray, np.ndarray]
) -> None:
    raw = mnist_like[0].read_bytes()  # 4 + 3 * 4 header bytes, 84 data bytes
    p = tmp_path / "cut.idx"
    p.write_bytes(raw[:10])  # inside the dimensions
    with pytest.raises(DataError, match=r"truncated \(header\)"):
        read_idx(p)
    p.write_bytes(raw[:-1])  # one data byte short
    with pytest.raises(DataError, match=r"truncated: 83 data bytes for shape \(7, 3, 4\) need 84"):
        read_idx(p)
    p.write_bytes(raw[:16])  # the header only
    with pytest.raises(DataError, match="truncated: 0 data bytes"):
        read_idx(p)
    with pytest.raises(DataError, match="missing.idx does not exist"):
        read_idx(tmp_path / "missing.idx")


# ---------------------------------------------------------------- load_idx


def test_load_idx_scales_bytes_and_one_hot_encodes(mnist_like: Tuple[Path, Path, np.ndarray, np.ndarray]) -> None:
    """Byte images become float32 rows in [0, 1] (value / 255, flattened in C order); labels become
    one-hot rows with as many classes as the largest label + 1, or as asked."""
    img_path, lab_path, images, labels = mnist_like
    ds = load_idx(img_path, lab_path)
    assert ds.x.dtype == np.float32 and ds.x.shape == (7, 12)
    assert np.array_equal(ds.x, images.reshape(7, 12).astype(np.float32) / np.float32(255))
    assert ds.x[0, 0] == 0.0 and ds.x[0, 1] == 1.0 and ds.x.min() >= 0 and ds.x.max() <= 1
    assert ds.y.dtype == np.float32 and ds.y.shape == (7, 10)
    assert np.array_equal(ds.y.argmax(axis=1), labels) and np.all(ds.y.sum(axis=1) == 1)
    assert set(np.unique(ds.y)) == {0.0, 1.0} and ds.classification
    wider = load_idx(img_path, lab_path, classes=12)
    assert wider.y.shape == (7, 12) and np.array_equal(wider.y[:, :10], ds.y) and not wider.y[:, 10:].any()
    with pytest.raises(DataError, match="label 9 does not fit 5 classes"):
        load_idx(img_path, lab_path, classes=5)


def test_load_idx_keeps_non_byte_values(tmp_path: Path) -> None:
    """Float images are taken as they are (no / 255)."""
    x = np.array([[0.5, -2.0], [300.0, 1e-3]], np.float32)
    (tmp_path / "x.idx").write_bytes(idx_bytes(x, FLOAT32))
    (tmp_path / "y.idx").write_bytes(idx_bytes(np.array([1, 0], np.uint8), UBYTE))
    ds = load_idx(tmp_path / "x.idx", tmp_path / "y.idx")
    assert np.array_equal(ds.x, x) and np.array_equal(ds.y, np.array([[0, 1], [1, 0]], np.float32))


def test_load_idx_refuses_mismatched_counts(
    tmp_path: Path, mnist_like: Tuple[Path, Path, np.ndarray, np.ndarray]
) -> None:
    img_path, _, _, labels = mnist_like
    (tmp_path / "six-labels.idx").write_bytes(idx_bytes(labels[:6], UBYTE))
    with pytest.raises(DataError, match="has 7 images but .* has 6 labels"):
        load_idx(img_path, tmp_path / "six-labels.idx")


# ---------------------------------------------------------------- ModularAddition16


def test_modular_addition16() -> None:
    """32 inputs (one-hot l, one-hot r) and 16 outputs (one-hot (l + r) mod 16), float32, seeded; every
    residue and every pair of operands' wrap-around shows up."""
    p = ModularAddition16(seed=4)
    assert (p.n_in, p.n_out, p.name, p.classification) == (32, 16, "modadd16", True)
    x, y = p.sample_batch(2000)
    assert x.dtype == np.float32 and y.dtype == np.float32 and x.shape == (2000, 32) and y.shape == (2000, 16)
    for part in (x[:, :16], x[:, 16:], y):
        assert set(np.unique(part)) == {0.0, 1.0} and np.all(part.sum(axis=1) == 1)
    left, right, total = x[:, :16].argmax(axis=1), x[:, 16:].argmax(axis=1), y.argmax(axis=1)
    assert np.array_equal(total, (left + right) % 16)
    assert set(left) == set(right) == set(total) == set(range(16))
    assert np.any(left + right >= 16) and np.any(left + right < 16)
    # the same seed gives the same samples (also as `modadd16` by name), another seed others
    x2, y2 = ModularAddition16(seed=4).sample_batch(2000)
    assert np.array_equal(x, x2) and np.array_equal(y, y2)
    x3, y3 = by_name("modadd16", seed=4).sample_batch(2000)
    assert np.array_equal(x, x3) and np.array_equal(y, y3)
    assert not np.array_equal(ModularAddition16(seed=5).sample_batch(2000)[0], x)
    # one sample: the same encoding, 1-d
    xs, ys = ModularAddition16(seed=6).sample()
    assert xs.shape == (32,) and ys.shape == (16,)
    assert ys.argmax() == (xs[:16].argmax() + xs[16:].argmax()) % 16 and xs.sum() == 2 and ys.sum() == 1
