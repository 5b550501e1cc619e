"""Short runs of bench/fuzz.py, so CI fuzzes too (the long runs are the benchmark's; docs/reliability.md has
their counts), and the inputs those runs found that the loaders did not handle.

- The frame parser: a few thousand libFuzzer inputs against the firmware's frame handling under ASan and
  UBSan, with the harness's checks (well-formed replies, no weight changed by a refused or cut-short frame);
  and the same harness around a planted bug, to show the checks catch one.
- The loaders: mutated model, CSV, NPZ and IDX files in a subprocess whose address space is limited to
  2 GiB: a valid result or an McuTrainError, nothing else.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from test_hostile_input import run_limited, small_model_bytes

from helpers import load_bench, rebuild, split


@pytest.fixture(scope="module")
def fuzz() -> ModuleType:
    """bench/fuzz.py imported by its path (bench/ is not a package)."""
    return load_bench("fuzz")


@pytest.fixture(scope="module")
def libfuzzer(fuzz: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> str:
    """clang, checked to link a libFuzzer program with ASan and UBSan."""
    cc = fuzz.clang()
    assert cc is not None, "clang is needed (apt: clang libclang-rt-14-dev; scripts/setup.sh installs it)"
    assert fuzz.libfuzzer_works(cc, tmp_path_factory.mktemp("probe")), "libclang-rt-14-dev is needed"
    return cc


@pytest.fixture(scope="module")
def common(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The frame fuzzer's exported project and objects, built once for this module's two builds."""
    return tmp_path_factory.mktemp("fuzz-common")


def test_malformed_frames_never_crash_the_firmware_or_change_a_weight(
    fuzz: ModuleType, libfuzzer: str, common: Path, tmp_path: Path
) -> None:
    """4,000 coverage-guided inputs (starting from one valid frame of every command) through the firmware's
    mct_app_poll under ASan and UBSan: no crash, no sanitizer report, every reply well-formed, no weight
    changed by a refused, read-only or cut-short frame; the run covers more than the seeds did."""
    r = fuzz.run_frames(4000, tmp_path, seed=5, common=common)
    assert r["failures"] == 0, r["report"]
    assert r["runs"] == 4000, r
    assert r["corpus"] > len(fuzz.seed_frames()), r
    assert r["coverage"] > 100, r


def test_the_harness_catches_a_refused_frame_that_changes_a_weight(
    fuzz: ModuleType, libfuzzer: str, common: Path, tmp_path: Path
) -> None:
    """A planted bug (WRITE to an unknown region changes a parameter before it is refused) is reported by the
    harness as a crash on the seed that exercises it: the weight check is live."""
    refusal = "if (!base || off > n || count > n - off) { reply_status(MCT_CMD_WRITE, MCT_ST_BAD_ARG); return; }"

    def plant(app: str) -> str:
        assert refusal in app, "the WRITE refusal in mct_protocol.c changed: update this test"
        return app.replace(refusal, refusal.replace("{ reply_status", "{ a->params[0] += 1.0f; reply_status"))

    r = fuzz.run_frames(200, tmp_path, seed=5, edit_app=plant, common=common)
    assert r["failures"] == 1 and "a refused or read-only frame changed the model" in r["report"], r["report"]


def test_mutated_files_into_every_loader_under_a_memory_limit(fuzz: ModuleType) -> None:
    """1,400 mutated files (model files with and without a valid checksum, CSV, NPZ with lying array headers,
    IDX plain and gzipped) in a worker limited to 2 GiB of address space and 20 s a case: every one a valid
    result or an McuTrainError; some of each kind load."""
    r = fuzz.run_loaders(1400, seed=11, memory_gib=2.0)
    assert r["failures"] == 0, json.dumps(r.get("examples") or r.get("report"), indent=1)[:3000]
    assert r["cases"] == 1400
    for kind, c in r["counts"].items():
        assert c["cases"] >= 200 and c["refused"] > 0, (kind, c)
    assert r["counts"]["model"]["ok"] > 0 and r["counts"]["idx"]["ok"] > 0, r["counts"]


# ============================================================================ what the fuzzer found


def test_small_data_files_load_under_a_memory_limit(tmp_path: Path) -> None:
    """A 20-byte IDX file, the same gzipped, and a small NPZ load in a process limited to 1 GiB of address
    space: reading a file no longer reserves the 2 GiB data-file limit up front (f.read(limit + 1) did)."""
    idx = bytes([0, 0, 8, 2]) + (2).to_bytes(4, "big") * 2 + bytes(range(4))
    (tmp_path / "a-idx2-ubyte").write_bytes(idx)
    import gzip

    (tmp_path / "a-idx2-ubyte.gz").write_bytes(gzip.compress(idx))
    np.savez(tmp_path / "d.npz", x=np.ones((3, 2), np.float32), y=np.arange(3))
    r = run_limited(
        f"""
        from mcutrain.datasets import load_npz, read_idx
        base = {str(tmp_path)!r}
        print(read_idx(base + "/a-idx2-ubyte").tolist(), read_idx(base + "/a-idx2-ubyte.gz").sum(),
              len(load_npz(base + "/d.npz")))
    """,
        limit_gib=1.0,
    )
    assert r.returncode == 0 and r.stdout.split() == ["[[0,", "1],", "[2,", "3]]", "6", "3"], r.stdout + r.stderr


def npy(shape: tuple, data: bytes, descr: str = "<f4") -> bytes:
    """A .npy member whose header declares shape, followed by data (which may be shorter)."""
    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(b, {"descr": descr, "fortran_order": False, "shape": shape})
    return b.getvalue() + data


def test_npz_array_headers_that_lie_about_their_size(tmp_path: Path) -> None:
    """An NPZ of 300 bytes whose x.npy header declares 10^10 floats (numpy would allocate 37 GiB before
    reading) or 900 million: DataError naming the shape, in a process limited to 2 GiB; arrays of 0 samples
    or 0 values per sample are refused too (a reshape error before)."""
    cases = {
        "huge.npz": ((10**10,), "declares shape (10000000000,)"),
        "big.npz": ((3 * 10**8, 3), "declares shape (300000000, 3)"),
        "empty.npz": ((0, 4), "holds no values"),
        "flat.npz": ((4, 0, 2**40), "holds no values"),
    }
    for name, (shape, _) in cases.items():
        with zipfile.ZipFile(tmp_path / name, "w") as z:
            z.writestr("x.npy", npy(shape, b"\0" * 16))
            z.writestr("y.npy", npy((4,), b"\0" * 16))
    r = run_limited(
        f"""
        from mcutrain.datasets import load_npz, DataError
        for name in {list(cases)!r}:
            try:
                load_npz({str(tmp_path)!r} + "/" + name)
                print(name, "LOADED")
            except DataError as e:
                print(name, "REFUSED", e)
    """,
        limit_gib=2.0,
    )
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    for name, (_, words) in cases.items():
        assert lines[name].startswith("REFUSED") and words in lines[name], (name, lines[name])


def test_npz_archives_zipfile_cannot_open(tmp_path: Path) -> None:
    """A member flagged as strongly encrypted, or an archive made by a zip version Python does not read:
    DataError (zipfile raised NotImplementedError through np.load)."""
    from mcutrain.datasets import DataError, load_npz

    good = io.BytesIO()
    np.savez(good, x=np.ones((2, 2)), y=np.zeros(2))
    data = bytearray(good.getvalue())
    cd = data.rfind(b"PK\x01\x02")  # the last central directory entry: y.npy
    encrypted = bytearray(data)
    encrypted[cd + 8] |= 0x41  # general purpose flags: encrypted + strong encryption
    version = bytearray(data)
    version[cd + 6] = 0xFF  # version needed to extract: 25.5
    for name, blob in (("enc.npz", encrypted), ("ver.npz", version)):
        p = tmp_path / name
        p.write_bytes(bytes(blob))
        with pytest.raises(DataError, match=name):
            load_npz(p)


def test_a_model_file_shape_too_large_for_int64_names_the_field(tmp_path: Path) -> None:
    """arrays.params.shape [10^30] (with a valid checksum): ModelFileError naming the field, not numpy's
    OverflowError."""
    from mcutrain.modelfile import ModelFileError, load_model

    version, header, payload = split(small_model_bytes())
    header["arrays"]["params"]["shape"] = [10**30]
    p = tmp_path / "m.mct"
    p.write_bytes(rebuild(version, json.dumps(header).encode(), payload))
    with pytest.raises(ModelFileError, match="arrays.params.shape"):
        load_model(p)
