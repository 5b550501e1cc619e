"""Fleet rounds at scale (issues 12 and 23): 4, 16 and 64 native firmware processes, each held by its own
node (a device keeper and a Flower SuperNode, processes on 127.0.0.1), a Flower SuperLink and the fleet's
ServerApp running FedAvg, on scikit-learn's digits split non-IID (two classes per device); then (--twins N)
a fleet of N host twins on Flower's Simulation Engine (virtual nodes in Ray, the same ServerApp and
ClientApp), on the digits made ten times larger (each copy shifted by up to a pixel, with a little noise:
a thousand devices need more than 1,797 samples to split two classes each). Beside each figure: the old
in-process fleet's (Flower's legacy transport, every client a thread of one process), measured on this
machine before issue 23 (REFERENCE). Reported per fleet size:

- seconds per round (mean over the rounds after the first, which also starts the processes) and rounds/s;
- growth: time per round against the 4-device fleet's, beside N/4 (what a fleet that runs its devices
  one after the other would take); below N/4 means the devices do work side by side;
- bytes on the serial links per round (sent and received, all devices), per device, and the reference:
  what docs/protocol.md's frame sizes say one device's round takes (WRITE the trainable parameters, the
  TRAIN frames, READ them back, PREDICT the local evaluation data, WRITE and PREDICT again to evaluate).

A twin has no serial line: its bytes are the expected figure only.

    python bench/fleet.py [--sizes 4 16 64] [--twins 1000] [--rounds 3] [--steps 50] [--json fleet.json]

Needs gcc and PlatformIO (offline is fine), flwr (with its simulation extra, Ray, for --twins) and
scikit-learn.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcutrain import Sequential, TrainParams, save_model  # noqa: E402
from mcutrain import layers as L  # noqa: E402
from mcutrain.datasets import Dataset  # noqa: E402
from mcutrain.fleet.config import load_config  # noqa: E402
from mcutrain.fleet.deploy import Fleet  # noqa: E402
from mcutrain.fleet.split import simulate_fleet  # noqa: E402
from mcutrain.sources import load_dataset  # noqa: E402

# the in-process fleet (before issue 23) on this machine: devices -> rounds/s
REFERENCE = {4: 4.13, 16: 1.35, 64: 0.39}


def expected_bytes(n_in: int, n_out: int, blocks: List[int], max_payload: int, steps: int, n_eval: int) -> int:
    """One device's bytes in one round (after the first), from the frame sizes of docs/protocol.md: a request
    is 7 bytes + payload, a reply 8 bytes + data."""
    per = max(1, (max_payload - 5) // 4)  # floats per READ/WRITE frame
    write = sum(-(-n // per) * (7 + 5 + 8) + 4 * n for n in blocks)  # WRITE: u8 region, u32 offset, floats
    read = sum(-(-n // per) * (7 + 7 + 8) + 4 * n for n in blocks)  # READ: u8, u32, u16 count
    train = steps * (7 + 4 * (n_in + n_out) + 8 + 8)
    predict = n_eval * (7 + 4 * n_in + 8 + 4 * n_out)
    return write + train + read + predict + write + predict  # fit, then evaluate


def larger_digits(ds: Dataset, copies: int, seed: int = 0) -> Dataset:
    """ds (8x8 digits) and copies-1 more copies, each shifted by up to one pixel and with noise (sd 0.05)."""
    rng = np.random.default_rng(seed)
    xs, ys = [ds.x], [ds.y]
    for _ in range(copies - 1):
        dx, dy = rng.integers(-1, 2, 2)
        img = np.roll(np.roll(ds.x.reshape(-1, 8, 8), dx, axis=1), dy, axis=2).reshape(-1, 64)
        xs.append(np.clip(img + rng.normal(0.0, 0.05, img.shape), 0.0, 1.0).astype(np.float32))
        ys.append(ds.y)
    return Dataset(np.concatenate(xs), np.concatenate(ys), f"{ds.name} x{copies}")


def run_size(
    n: int, ds: Dataset, model: Path, work: Path, rounds: int, steps: int, n_eval: int, board: str = "native"
) -> Dict[str, Any]:
    """One fleet of n devices of board (native, or twin: Flower's Simulation Engine): its timings and bytes."""
    folder = work / f"{board}{n}"
    fleet_file, _ = simulate_fleet(ds, n, board, folder, model, rounds=rounds, local_steps=steps, seed=0)
    cfg = load_config(fleet_file)
    cfg.workdir = work / "shared"  # the firmware is built once for all sizes
    cfg.eval_samples = n_eval
    fleet = Fleet(cfg)
    fleet.prepare()
    res = fleet.run()
    later = res.rounds[2:]
    assert all(not r.failed and len(r.answered) == n for r in res.rounds[1:]), [r.dropped for r in res.rounds]
    fm = fleet.fm
    assert fm is not None
    blocks = [c for _, c in fm.layout.blocks]
    n_evals = [min(n_eval, len(load_dataset(cfg.data_settings(d.eval or d.data)).x)) for d in cfg.devices]
    prog = fm.model.program
    max_payload = fm.model.rx_max
    expect = float(np.mean([expected_bytes(prog.n_in, prog.n_out, blocks, max_payload, steps, e) for e in n_evals]))
    sec = float(np.mean([r.seconds for r in later]))
    return {
        "devices": n,
        "engine": "simulation (twins)" if board == "twin" else "deployment (native)",
        "seconds_per_round": sec,
        "rounds_per_s": 1.0 / sec,
        "first_round_seconds": res.rounds[1].seconds,
        "bytes_per_round": float(np.mean([r.bytes for r in later])),
        "bytes_per_device": float(np.mean([r.bytes for r in later])) / n,
        "expected_bytes_per_device": expect,
        "accuracy": res.rounds[-1].accuracy,
        "reference_rounds_per_s": REFERENCE.get(n),
    }


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 16, 64], help="fleet sizes (first: the reference)")
    ap.add_argument("--twins", type=int, nargs="*", default=[1000], help="fleets of host twins (Simulation Engine)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per fleet (at least 2)")
    ap.add_argument("--steps", type=int, default=50, help="TRAIN steps per device and round")
    ap.add_argument("--eval", type=int, default=20, help="PREDICT samples per device for evaluation")
    ap.add_argument("--json", default="fleet.json", help="where to write the results")
    ap.add_argument("--workdir", default=None, help="folder for shards and firmware (default: a temporary one)")
    a = ap.parse_args(argv)
    from sklearn.datasets import load_digits

    d = load_digits()
    ds = Dataset((d.data / 16.0).astype(np.float32), np.eye(10, dtype=np.float32)[d.target], "digits")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(a.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        net = Sequential(L.Linear(64, 16), L.Relu(), L.Linear(16, 10), L.Softmax()).rand_params(seed=3)
        model = work / "start.mct"
        save_model(model, net, net.new_sgd(TrainParams(lr=0.1)), {"loss": "cross_entropy"})
        for n in a.sizes:
            rows.append(run_size(n, ds, model, work, max(2, a.rounds), a.steps, a.eval))
            print(f"  {n} devices done: {rows[-1]['seconds_per_round']:.2f} s per round", flush=True)
        for n in a.twins:
            big = larger_digits(ds, 10)
            rows.append(run_size(n, big, model, work, max(2, a.rounds), a.steps, a.eval, board="twin"))
            print(f"  {n} twins done: {rows[-1]['seconds_per_round']:.2f} s per round", flush=True)
    ref = rows[0]
    print(
        f"\nfleet rounds, native firmware over ptys, SuperLink + SuperNodes (Flower Deployment Engine), and host "
        f"twins on Flower's Simulation Engine; FedAvg, {a.steps} TRAIN steps per device and round; 'in-process' = "
        "rounds/s of the old in-process fleet"
    )
    head = (
        f"{'engine':>19} {'devices':>7} {'s/round':>8} {'rounds/s':>8} {'in-process':>10} {'growth':>7} {'N/N0':>5} "
        f"{'KiB/round':>9} {'B/device':>9} {'expected':>9} {'accuracy':>8}"
    )
    print(head)
    for r in rows:
        r["growth"] = r["seconds_per_round"] / ref["seconds_per_round"]
        r["linear_growth"] = r["devices"] / ref["devices"]
        print(
            f"{r['engine']:>19} {r['devices']:>7} {r['seconds_per_round']:>8.3f} {r['rounds_per_s']:>8.3f} "
            f"{r['reference_rounds_per_s'] or float('nan'):>10.2f} {r['growth']:>7.2f} "
            f"{r['linear_growth']:>5.0f} {r['bytes_per_round'] / 1024:>9.1f} {r['bytes_per_device']:>9.0f} "
            f"{r['expected_bytes_per_device']:>9.0f} {r['accuracy']:>8.3f}"
        )
    Path(a.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
