"""A data set split across simulated devices the way a real fleet sees it: not IID. Each device gets the
samples of only a few classes (label skew: the classic 'shards' split of the FedAvg paper), so a device
alone can only learn its own classes and the fleet has to pool what the devices learn.

simulate_fleet() writes the shards as NPZ files and a fleet file that lists them, so `mcutrain fleet
--simulate N` runs the very path a fleet file of real boards runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from mcutrain.datasets import Dataset
from mcutrain.errors import FleetError
from mcutrain.files import atomic_write


def non_iid_split(labels: np.ndarray, n_devices: int, classes_per_device: int = 2, seed: int = 0) -> List[np.ndarray]:
    """Sample indices per device: the samples, sorted by class, are cut into n_devices * classes_per_device
    shards of equal size and every device gets classes_per_device shards drawn at random (so mostly that
    many classes). Every sample goes to exactly one device."""
    labels = np.asarray(labels).ravel()
    if n_devices < 1:
        raise FleetError(f"a fleet needs at least one device, not {n_devices}")
    if classes_per_device < 1:
        raise FleetError(f"classes per device must be at least 1, not {classes_per_device}")
    n_classes = int(np.unique(labels).size)
    if classes_per_device > n_classes:
        raise FleetError(
            f"classes per device is {classes_per_device} but the data has {n_classes} classes: give "
            f"--classes-per-device {n_classes} or less"
        )
    n_shards = n_devices * classes_per_device
    if labels.size < n_shards:
        raise FleetError(
            f"{labels.size} samples cannot be split into {n_shards} shards ({n_devices} devices x "
            f"{classes_per_device} classes): use fewer devices or more data"
        )
    rng = np.random.default_rng(seed)
    order = np.argsort(labels, kind="stable")
    shards = np.array_split(order, n_shards)
    pick = rng.permutation(n_shards)
    return [np.sort(np.concatenate([shards[s] for s in pick[d::n_devices]])) for d in range(n_devices)]


def class_labels(ds: Dataset) -> np.ndarray:
    """The class of every sample of a data set with one-hot (or score) targets."""
    if ds.y.shape[1] < 2:
        raise FleetError(
            f"{ds.name} has one target value per sample: a non-IID split by class needs class targets "
            "(one-hot, or integer labels read with --classify)"
        )
    return ds.y.argmax(axis=1)


def save_npz(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    """An NPZ file with arrays x and y, written atomically."""
    import io

    buf = io.BytesIO()
    np.savez(buf, x=x.astype(np.float32), y=y.astype(np.float32))
    atomic_write(path, buf.getvalue())


def simulate_fleet(
    ds: Dataset,
    n_devices: int,
    board: str,
    workdir: Path,
    model: Path,
    *,
    rounds: int = 10,
    local_steps: int = 100,
    strategy: str = "fedavg",
    classes_per_device: int = 2,
    test_fraction: float = 0.2,
    eval_fraction: float = 0.2,
    seed: int = 0,
    extra_boards: Optional[List[str]] = None,
    output: Optional[Path] = None,
    log: Optional[Path] = None,
) -> Tuple[Path, Dict[str, np.ndarray]]:
    """Split a data set for a simulated fleet and write workdir/fleet.toml: a held-out test set (test.npz,
    test_fraction of the samples, for the global model's accuracy), then a non-IID split of the rest over
    n_devices devices of `board` (plus one device per entry of extra_boards, e.g. a QEMU board), each with
    a training shard and an evaluation part (eval_fraction of its shard). Returns (fleet file, the index
    arrays: 'test' and one per device name, into ds)."""
    extra_boards = list(extra_boards or [])
    total = n_devices + len(extra_boards)
    if not 0.0 < test_fraction < 1.0:
        raise FleetError(f"the test fraction must be between 0 and 1, not {test_fraction}")
    labels = class_labels(ds)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(ds))
    n_test = max(1, int(round(test_fraction * len(ds))))
    test_idx, rest = np.sort(perm[:n_test]), perm[n_test:]
    parts = non_iid_split(labels[rest], total, classes_per_device, seed)
    workdir.mkdir(parents=True, exist_ok=True)
    shards = workdir / "shards"
    shards.mkdir(exist_ok=True)
    save_npz(workdir / "test.npz", ds.x[test_idx], ds.y[test_idx])
    index: Dict[str, np.ndarray] = {"test": test_idx}
    lines = [
        f"# a simulated fleet: {total} devices, a non-IID split of {ds.name} ({classes_per_device} classes per device)",
        f"model = {json.dumps(str(Path(model).resolve()))}",
        f"rounds = {rounds}",
        f"strategy = {json.dumps(strategy)}",
        f"local_steps = {local_steps}",
        f"seed = {seed}",
        'test = "test.npz"',
        f"output = {json.dumps(str(Path(output).resolve()) if output else 'global.mct')}",
        f"log = {json.dumps(str(Path(log).resolve()) if log else 'fleet.jsonl')}",
        'workdir = "work"',
        "",
    ]
    boards = [board] * n_devices + extra_boards
    for i, (part, b) in enumerate(zip(parts, boards)):
        idx = rest[part]
        idx = idx[rng.permutation(idx.size)]
        n_eval = int(round(eval_fraction * idx.size)) if idx.size > 1 else 0
        ev, tr = idx[:n_eval], idx[n_eval:]
        name = f"{b}-{i + 1}"
        save_npz(shards / f"{name}.npz", ds.x[tr], ds.y[tr])
        index[name] = tr
        lines += ["[[device]]", f"name = {json.dumps(name)}", f"board = {json.dumps(b)}", f'data = "shards/{name}.npz"']
        if n_eval:
            save_npz(shards / f"{name}-eval.npz", ds.x[ev], ds.y[ev])
            lines.append(f'eval = "shards/{name}-eval.npz"')
        lines.append("")
    fleet_file = workdir / "fleet.toml"
    atomic_write(fleet_file, "\n".join(lines).encode())
    return fleet_file, index
