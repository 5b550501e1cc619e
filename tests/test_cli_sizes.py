"""Sizes and options from the command line (issue 25, classes 4 and 7).

Sizes are bounded like sizes from files: what a run allocates for --batch (and --samples) is computed before it
starts and compared with what the process can take, so `--batch 100000000` is one line naming the largest
batch that fits, not a MemoryError after the start. Options that make no sense are refused: an empty output
name, more classes per simulated device than the data has, a board file whose name is not its file's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from mcutrain import ConfigError
from mcutrain.architecture import parse_inline
from mcutrain.budget import HINT_HEADROOM, check_size, step_bytes
from mcutrain.cli.commands import main

LIMIT = 700_000_000  # address-space limit of the subprocesses (bytes): the interpreter and mcutrain take ~250 MB


def limited(args: List[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """`mcutrain ARGS` under an address-space limit of LIMIT bytes."""
    code = (
        "import resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({LIMIT}, {LIMIT}))\n"
        "from mcutrain.cli import run\n"
        "sys.argv[0] = 'mcutrain'\n"
        "run()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
    )


@settings(max_examples=200, deadline=None)
@given(
    per=st.integers(1, 10**6),
    fixed=st.integers(0, 10**9),
    budget=st.integers(1, 10**12),
    value=st.integers(1, 10**9),
)
def test_the_hint_is_the_largest_value_that_fits(per: int, fixed: int, budget: int, value: int) -> None:
    """For any size whose cost grows with it, check_size passes exactly when the cost fits, and otherwise
    names the largest value that fits HINT_HEADROOM of the budget (room for the next run's budget to be a
    little smaller): its cost fits that room, the next one's does not."""
    need = lambda n: fixed + per * n  # noqa: E731
    if need(value) <= budget:
        check_size("--batch", value, need, budget)
        return
    with pytest.raises(ConfigError) as e:
        check_size("--batch", value, need, budget)
    msg = str(e.value)
    assert msg.startswith(f"--batch {value:,} needs about"), msg
    room = int(budget * HINT_HEADROOM)
    if need(1) > room:
        assert "free some memory" in msg, msg
        return
    hint = int(msg.split("use --batch ")[1].split()[0].replace(",", ""))
    assert need(hint) <= room < need(hint + 1) and hint < value, (hint, msg)


@given(width=st.integers(1, 300), batch=st.integers(1, 10**7), threads=st.integers(1, 8))
@settings(max_examples=50, deadline=None)
def test_step_bytes_grows_with_the_batch_and_counts_the_samples(width: int, batch: int, threads: int) -> None:
    """The estimate of a step grows with the batch and is at least the samples and the trace it must hold."""
    net = parse_inline(f"linear:{width}x{width},tanh,linear:{width}x3,softmax")
    a, b = step_bytes(net, batch, threads), step_bytes(net, batch + 1, threads)
    assert b >= a >= 4 * batch * (width + 3 + net._corenet().arena)


def test_a_batch_that_does_not_fit_is_refused_and_the_hint_runs(tmp_path: Path) -> None:
    """Under a 700 MB address-space limit, `train --batch 100000000` is refused at once with one line naming
    the largest batch that fits (no MemoryError, no model file); that batch then trains under the same limit."""
    net = "linear:20x35,sigmoid,linear:35x10,softmax"
    r = limited(["train", "--net", net, "--problem", "modadd10", "--batch", "100000000", "--steps", "2"], tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "MemoryError" not in r.stderr, r.stderr
    line = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(line) == 1 and "--batch 100,000,000 needs about" in line[0], r.stderr
    hint = int(line[0].split("use --batch ")[1].split()[0].replace(",", ""))
    assert not (tmp_path / "model.mct").exists()
    assert 1000 < hint < 100_000_000
    r = limited(["train", "--net", net, "--problem", "modadd10", "--batch", str(hint), "--steps", "1"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "model.mct").exists()


def test_eval_samples_are_bounded_too(tmp_path: Path) -> None:
    """`eval --samples 10^11` on a problem: one line with the largest number that fits, under the limit."""
    r = limited(["train", "--net", "linear:4x4,linear:4x2,softmax", "--problem", "parity4", "--steps", "2"], tmp_path)
    assert r.returncode == 0, r.stderr
    r = limited(["eval", "model.mct", "--samples", "100000000000"], tmp_path)
    assert r.returncode == 1 and "--samples 100,000,000,000 needs about" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


# ---------------------------------------------------------------- options that make no sense


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--steps", "2", "--log", ""],
        ["plot", "run.jsonl", "-o", ""],
        ["export-onnx", "m.mct", "-o", ""],
        ["import", "m.onnx", "-o", ""],
        ["fleet", "--simulate", "2", "--model", "m.mct", "--data", "d.npz", "--workdir", ""],
        ["fleet", "--simulate", "2", "--model", "m.mct", "--data", "d.npz", "-o", ""],
        ["fleet", "--simulate", "2", "--model", "m.mct", "--data", "d.npz", "--log", "  "],
        ["device", "pull", "--port", "/dev/null", "--project", "fw", "-o", ""],
        ["sim", "fw", "--report", ""],
    ],
)
def test_an_empty_output_name_is_refused(tmp_path: Path, args: List[str]) -> None:
    """An empty (or blank) output name is a usage error naming the option, before any work, and writes
    nothing: it used to mean the default name, or no file at all, without a word."""
    (tmp_path / "m.mct").write_bytes(b"")
    (tmp_path / "m.onnx").write_bytes(b"")
    (tmp_path / "run.jsonl").write_text("")
    (tmp_path / "fw").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        r = CliRunner().invoke(main, args)
    finally:
        os.chdir(old)
    assert r.exit_code == 2 and "is empty: give a name" in r.output, (r.exit_code, r.output)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("classes", [1, 3, 4])
def test_more_classes_per_device_than_the_data_has_is_refused(classes: int) -> None:
    """A non-IID split asking each device for more classes than the data has (3 here): FleetError naming both
    numbers; as many as there are, or fewer, splits every sample once."""
    pytest.importorskip("flwr")
    from mcutrain.errors import FleetError
    from mcutrain.fleet.split import non_iid_split

    labels = np.repeat(np.arange(3), 20)
    if classes > 3:
        with pytest.raises(FleetError, match=f"classes per device is {classes} but the data has 3 classes"):
            non_iid_split(labels, 2, classes)
        return
    parts = non_iid_split(labels, 2, classes)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(60))


def test_the_fleet_command_refuses_more_classes_than_the_data_has(tmp_path: Path) -> None:
    pytest.importorskip("flwr")
    np.savez(tmp_path / "d.npz", x=np.zeros((30, 4), np.float32), y=np.eye(3, dtype=np.float32)[np.arange(30) % 3])
    from mcutrain import Sequential, TrainParams, save_model
    from mcutrain import layers as L

    net = Sequential(L.Linear(4, 3), L.Softmax()).rand_params(seed=1)
    save_model(tmp_path / "m.mct", net, net.new_sgd(TrainParams(lr=0.1)))
    r = subprocess.run(
        ["mcutrain", "fleet", "--simulate", "2", "--model", "m.mct", "--data", "d.npz", "--classes-per-device", "5"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 1 and "--classes-per-device 3 or less" in r.stderr, r.stderr
    assert not (tmp_path / "fleet-sim" / "fleet.toml").exists()


def test_a_board_file_named_otherwise_than_its_name_is_refused(tmp_path: Path) -> None:
    """uno.toml copied to nano.toml (so `--board nano` would build for an Uno): BoardError naming both."""
    from mcutrain.exporter.boards import BoardError, load_board_file
    from mcutrain.exporter.paths import boards_dir

    (tmp_path / "nano.toml").write_bytes((boards_dir() / "uno.toml").read_bytes())
    with pytest.raises(BoardError, match="says name = 'uno' but is named nano.toml"):
        load_board_file(tmp_path / "nano.toml")
    for p in sorted(boards_dir().glob("*.toml")):  # every shipped board file agrees with its name
        assert load_board_file(p).name == p.stem
