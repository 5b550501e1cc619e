"""Device cost on the Cortex-M4F (issue 4): guest instructions per inference and per SGD training step
(one sample, f32), code size and RAM, for the exported firmware running in QEMU mps2-an386, counted by
mcutrain's TCG plugin between the firmware's marker functions. Built with -Os (like the peer figures) and
-O2 (custom_opt_level of env:sim-BOARD).

N1 = 20-35 (sigmoid)-10 (softmax), N2 = 64-32 (ReLU)-10 (softmax); cross-entropy loss, plain SGD, every
layer trainable. Instructions per call are the mean over the calls made (inputs drawn at random); they
include one empty marker pair ('marker' column, a few instructions).

    python bench/device_cost.py [--board nano33ble] [--calls 20] [--json device_cost.json]

Needs qemu-system-arm, gcc-arm-none-eabi, libnewlib-arm-none-eabi, gcc and PlatformIO (offline is fine).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcutrain import Checkpoint, Sequential, TrainParams, losses  # noqa: E402
from mcutrain import layers as L  # noqa: E402
from mcutrain.exporter import sim  # noqa: E402
from mcutrain.exporter.export import export_project  # noqa: E402
from mcutrain.exporter.sim_qemu import set_env_option  # noqa: E402
from mcutrain.module import Module  # noqa: E402

NETS = {
    "N1": lambda: Sequential(L.Linear(20, 35), L.Sigmoid(), L.Linear(35, 10), L.Softmax()),
    "N2": lambda: Sequential(L.Linear(64, 32), L.Relu(), L.Linear(32, 10), L.Softmax()),
}
# Published figures, QEMU mps2-an386, -Os, per call (issue 4); None: not published.
PEERS = {
    "AIfES": {"N1": {"predict": 15837, "train": 202819}, "N2": {"predict": 25595, "train": 424916}},
    "emlearn": {"N1": {"predict": None, "train": None}, "N2": {"predict": 19480, "train": None}},
}
TARGETS = {"N1": {"predict": 5000, "train": 15000}, "N2": {"predict": 8000, "train": 30000}}
OPT_LEVELS = ["Os", "O2"]


def measure(net_name: str, level: str, board: str, calls: int, workdir: Path) -> Dict[str, Any]:
    """Export, build with -<level> and run one network in the board's simulator; returns the report."""
    net: Module = NETS[net_name]().rand_params(seed=1)
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.01)))
    r = export_project(ck, board, workdir / f"{net_name}-{level}", loss=losses.cross_entropy, sim=True, force=True)
    set_env_option(r.path, f"sim-{board}", "custom_opt_level", level)
    rng = np.random.default_rng(0)
    n_in, n_out = r.model.program.n_in, r.model.program.n_out
    with sim.start(r.path, r.board, measure=True) as s:
        for _ in range(calls):
            s.device.predict(rng.random(n_in, dtype=np.float32))
        for k in range(calls):
            s.device.train(rng.random(n_in, dtype=np.float32), np.eye(n_out, dtype=np.float32)[k % n_out])
        rep = s.report()
    rep.update(net=net_name, opt_level=level, n_params=r.model.program.n_params)
    return rep


def fmt(v: Optional[float]) -> str:
    """A count with thousands separators, or '-'."""
    return "-" if v is None else f"{v:,.0f}"


def table(results: List[Dict[str, Any]]) -> str:
    """The results next to the peers' figures and the targets."""
    head = (
        f"{'net':3} {'build':5} {'predict':>9} {'train step':>11} {'marker':>6} {'text B':>8} {'RAM B':>7} "
        f"{'stack B':>7} | {'AIfES inf':>9} {'AIfES SGD':>9} {'emlearn inf':>11} | {'target inf':>10} "
        f"{'target SGD':>10}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        n = r["net"]
        lines.append(
            f"{n:3} -{r['opt_level']:4} {fmt(r['predict']):>9} {fmt(r['train']):>11} {fmt(r['marker_overhead']):>6} "
            f"{fmt(r['text']):>8} {fmt(r['ram_static']):>7} {fmt(r['stack_peak']):>7} | "
            f"{fmt(PEERS['AIfES'][n]['predict']):>9} {fmt(PEERS['AIfES'][n]['train']):>9} "
            f"{fmt(PEERS['emlearn'][n]['predict']):>11} | {fmt(TARGETS[n]['predict']):>10} "
            f"{fmt(TARGETS[n]['train']):>10}"
        )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", default="nano33ble", help="a board whose stand-in is the Cortex-M4F (default nano33ble)")
    ap.add_argument("--calls", type=int, default=20, help="PREDICT and TRAIN calls measured per build")
    ap.add_argument("--json", default="device_cost.json", help="where to write the results")
    ap.add_argument("--workdir", default=None, help="folder for the exported projects (default: a temporary one)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mcutrain-device-cost-") as tmp:
        work = Path(args.workdir or tmp)
        if "PLATFORMIO_CORE_DIR" not in os.environ:
            os.environ["PLATFORMIO_CORE_DIR"] = str(work / "pio-core")  # its own, so platform names cannot clash
        results = [measure(n, lv, args.board, args.calls, work) for n in NETS for lv in OPT_LEVELS]
    print(
        f"Cortex-M4F (QEMU mps2-an386, {args.board}): instructions per call, one sample, f32; "
        f"static RAM = .data + .bss; stack = peak measured (STATS)"
    )
    print(table(results))
    out = {
        "board": args.board,
        "machine": results[0]["machine"],
        "unit": "instructions",
        "results": results,
        "peers": PEERS,
        "targets": TARGETS,
    }
    Path(args.json).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(f"written {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
