"""Host training throughput: samples/s of mcutrain (train_batch per batch, and whole epochs through
net.fit) against a plain NumPy implementation of the same step and, if installed, PyTorch on the CPU, all
in this process, with 1 and 2 threads.

Network A: 20-35 sigmoid-10 softmax, logit BCE, RMSProp with momentum, batch 10 (the README network).
Network B: 64-128 ReLU-128 ReLU-10 softmax, same loss and optimizer, batch 32.

Rows (issue 11's host rows): train_batch on A and on B against NumPy's batched step; whole epochs
(shuffled each epoch) through one net.fit call against NumPy's per-batch loop over the same epochs.

CNNs (issue 20): the digits CNN (8x8x1, conv 8 and 16, max pooling, dense 10) and the MLPerf Tiny DS-CNN
(49x10x1 -> 12 with BatchNorm), Adam and cross-entropy, batch 32, against the same network in PyTorch on one
thread (NCHW, its own kernels), in the same run: train_batch per batch and whole epochs through net.fit.
NumPy's BLAS runs on one thread (threadpoolctl, when installed) so that "x numpy" compares one core with
one core. The machine may be shared: every figure is the best of --rounds interleaved measurements.

    python bench/train_throughput.py [--seconds 2] [--rounds 3] [--json out.json]

--builds compares the installed (dispatched) build with one built for this CPU only (MCUTRAIN_MARCH=native,
one copy of the core, the way the extension was built before the runtime dispatch): networks A and B and the
digits CNN, train_batch and whole epochs, each build in a child process, rounds interleaved. Each row reports
the dispatched build's samples per CPU second (the process's CPU time, which a shared machine disturbs less than
wall time) as a ratio of the native build's in the same round: the median over the rounds and their range (the
goal: within 5%). The machine may be loaded, so --count also counts the instructions of a
fixed amount of training of each row under valgrind's callgrind (load-independent); valgrind runs no AVX-512,
so there the dispatched build runs its AVX2 copy and the reference is a build for x86-64-v3 (AVX2) only.

    python bench/train_throughput.py --builds [--seconds 2] [--rounds 5] [--count]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from mcutrain import Sequential, TrainParams, losses, train_batch
from mcutrain import layers as L

LR, MOMENTUM, BETA, EPS = 2e-2, 0.85, 0.8, 1e-20

NETS = {
    "A": ([20, 35, 10], ["sigmoid"], 10),
    "B": ([64, 128, 128, 10], ["relu", "relu"], 32),
}


def make_data(sizes: List[int], batch: int, n_batches: int = 64, seed: int = 0) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Pre-drawn batches so the timed loop measures training only."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_batches):
        x = rng.random((batch, sizes[0]), dtype=np.float32)
        y = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], batch)]
        out.append((x, y))
    return out


def timed(
    step: Callable[[np.ndarray, np.ndarray], object],
    data: List[Tuple[np.ndarray, np.ndarray]],
    seconds: float,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Samples per second of step over the batches, run for about `seconds` after a warm-up (seconds of
    `clock`: wall time, or the process's CPU time, which a loaded machine disturbs less)."""
    for x, y in data[:4]:
        step(x, y)
    n, t0 = 0, clock()
    while True:
        for x, y in data:
            step(x, y)
        n += sum(x.shape[0] for x, _ in data)
        dt = clock() - t0
        if dt >= seconds:
            return n / dt


def timed_epochs(
    run_epoch: Callable[[int], object], n: int, seconds: float, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Samples per second of whole epochs (run_epoch(epoch) trains one epoch of n samples); clock as timed's."""
    run_epoch(0)
    e, t0 = 1, clock()
    while True:
        run_epoch(e)
        e += 1
        dt = clock() - t0
        if dt >= seconds:
            return (e - 1) * n / dt


def mcutrain_net(sizes: List[int], acts: List[str]) -> Tuple[Sequential, object]:
    """The benchmark's network (seed 1) and its RMSProp-with-momentum optimizer."""
    mods: List[L.Module] = []
    for i in range(len(sizes) - 1):
        mods.append(L.Linear(sizes[i], sizes[i + 1]))
        mods.append({"sigmoid": L.Sigmoid, "relu": L.Relu}[acts[i]]() if i < len(acts) else L.Softmax())
    net = Sequential(*mods).rand_params(seed=1)
    return net, net.new_rmsprop_with_momentum(TrainParams(lr=LR), MOMENTUM, BETA)


def mcutrain_epochs(sizes: List[int], acts: List[str], batch: int, threads: int, x: np.ndarray, y: np.ndarray):
    """One call of net.fit per epoch (shuffled with the epoch's seed): C runs the whole epoch."""
    net, opt = mcutrain_net(sizes, acts)
    return lambda e: net.fit(
        opt, losses.logit_bce, x, y, epochs=1, batch=batch, shuffle=e, threads=threads, callback_every=1 << 30
    )


def numpy_epochs(sizes: List[int], acts: List[str], batch: int, x: np.ndarray, y: np.ndarray):
    """NumPy's per-batch loop over a shuffled epoch."""
    net = NumpyNet(sizes, acts)

    def run(e: int) -> None:
        order = np.random.default_rng(e).permutation(x.shape[0])
        for j in range(0, x.shape[0], batch):
            idx = order[j : j + batch]
            net.step(x[idx], y[idx])

    return run


def torch_epochs(sizes: List[int], acts: List[str], batch: int, threads: int, x: np.ndarray, y: np.ndarray):
    """PyTorch's per-batch loop over a shuffled epoch (None without torch)."""
    step = torch_step(sizes, acts, threads)
    if step is None:
        return None

    def run(e: int) -> None:
        order = np.random.default_rng(e).permutation(x.shape[0])
        for j in range(0, x.shape[0], batch):
            idx = order[j : j + batch]
            step(x[idx], y[idx])

    return run


def mcutrain_step(sizes: List[int], acts: List[str], threads: int) -> Callable:
    """train_batch on the C core."""
    net, opt = mcutrain_net(sizes, acts)
    return lambda x, y: train_batch(opt, net, losses.logit_bce, x, y, threads=threads)


class NumpyNet:
    """The same step written with batched NumPy float32 operations."""

    def __init__(self, sizes: List[int], acts: List[str], seed: int = 1) -> None:
        rng = np.random.default_rng(seed)
        self.W = [(rng.normal(0, np.sqrt(2 / (a + b)), (a, b))).astype(np.float32) for a, b in zip(sizes, sizes[1:])]
        self.b = [np.zeros(b, np.float32) for b in sizes[1:]]
        self.acts = acts
        self.params = self.W + self.b
        self.a = [np.zeros_like(p) for p in self.params]
        self.v = [np.zeros_like(p) for p in self.params]

    def step(self, x: np.ndarray, t: np.ndarray) -> float:
        hs = [x]
        for i, (W, b) in enumerate(zip(self.W, self.b)):
            z = hs[-1] @ W + b
            if i < len(self.acts):
                with np.errstate(over="ignore"):  # exp(-z) = inf is fine: the sigmoid is then 0
                    z = 1 / (1 + np.exp(-z)) if self.acts[i] == "sigmoid" else np.maximum(z, 0)
            else:
                z = np.exp(z - z.max(axis=1, keepdims=True))
                z /= z.sum(axis=1, keepdims=True)
            hs.append(z)
        y = np.clip(hs[-1], 1e-7, 1 - 1e-7)
        n = y.shape[1]
        loss = float(-(t * np.log(y) + (1 - t) * np.log(1 - y)).mean())
        g = (y - t) / (y * (1 - y)) / n
        g = y * (g - (y * g).sum(axis=1, keepdims=True))  # softmax backward
        gW, gb = [], []
        for i in range(len(self.W) - 1, -1, -1):
            gW.insert(0, hs[i].T @ g / x.shape[0])
            gb.insert(0, g.mean(axis=0))
            if i:
                g = g @ self.W[i].T
                h = hs[i]
                g = g * (h * (1 - h)) if self.acts[i - 1] == "sigmoid" else g * (h > 0)
        for p, gr, a, v in zip(self.params, gW + gb, self.a, self.v):
            a *= BETA
            a += (1 - BETA) * gr * gr
            v *= MOMENTUM
            v += gr / np.sqrt(a + EPS)
            p -= LR * v
        return loss


def torch_step(sizes: List[int], acts: List[str], threads: int) -> Optional[Callable]:
    """The same step in PyTorch (CPU), or None when torch is not installed."""
    try:
        import torch
    except Exception:  # not installed, or an install that cannot load
        return None
    torch.set_num_threads(threads)
    mods: List[object] = []
    for i in range(len(sizes) - 1):
        mods.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        mods.append(
            {"sigmoid": torch.nn.Sigmoid, "relu": torch.nn.ReLU}[acts[i]]()
            if i < len(acts)
            else torch.nn.Softmax(dim=1)
        )
    net = torch.nn.Sequential(*mods)
    opt = torch.optim.RMSprop(net.parameters(), lr=LR, alpha=BETA, momentum=MOMENTUM)
    bce = torch.nn.BCELoss()

    def step(x: np.ndarray, y: np.ndarray) -> float:
        opt.zero_grad()
        loss = bce(net(torch.from_numpy(x)).clamp(1e-7, 1 - 1e-7), torch.from_numpy(y))
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


# issue 11's targets, as multiples of NumPy: (network, row) -> target
TARGETS = {("A", "mcutrain 1 thread"): 8.0, ("B", "mcutrain 1 thread"): 3.0, ("A", "mcutrain fit 1 thread"): 25.0}


def one_blas_thread():
    """A context in which NumPy's BLAS uses one thread (threadpoolctl), or a no-op without it."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(1)


def measure(sizes: List[int], acts: List[str], batch: int, seconds: float, rounds: int, threads: int):
    """{row: samples/s} for one network: the best of `rounds` interleaved measurements of every row."""
    data = make_data(sizes, batch)
    ex = np.concatenate([x for x, _ in data])
    ey = np.concatenate([y for _, y in data])
    n = ex.shape[0]
    # row -> (function, per batch or per epoch)
    rows: Dict[str, Tuple[Callable, bool]] = {
        "numpy": (NumpyNet(sizes, acts).step, False),
        "numpy epochs": (numpy_epochs(sizes, acts, batch, ex, ey), True),
    }
    for th in sorted({1, threads}):
        suffix = "1 thread" if th == 1 else f"{th} threads"
        rows[f"mcutrain {suffix}"] = (mcutrain_step(sizes, acts, th), False)
        rows[f"mcutrain fit {suffix}"] = (mcutrain_epochs(sizes, acts, batch, th, ex, ey), True)
        ts = torch_step(sizes, acts, th)
        if ts is not None:
            rows[f"pytorch {suffix}"] = (ts, False)
            rows[f"pytorch epochs {suffix}"] = (torch_epochs(sizes, acts, batch, th, ex, ey), True)
    best: Dict[str, float] = {}
    for _ in range(rounds):
        for name, (fn, epochs) in rows.items():
            if name.startswith("pytorch"):  # torch sets its own thread count per row
                import torch

                torch.set_num_threads(2 if name.endswith("threads") else 1)
            with one_blas_thread():
                v = timed_epochs(fn, n, seconds) if epochs else timed(fn, data, seconds)
            best[name] = max(best.get(name, 0.0), v)
    return best


def report(results: Dict[str, Dict[str, float]], cores: int) -> List[str]:
    """The table as lines of text: every row with its reference beside it."""
    lines = [f"samples/s of training (forward, backward, update), best of interleaved runs; {cores} cores"]
    for name, row in results.items():
        sizes, acts, batch = NETS[name]
        lines.append(f"\nnetwork {name}: {'-'.join(map(str, sizes))} ({', '.join(acts)}, softmax), batch {batch}")
        lines.append(f"  {'row':26s} {'samples/s':>12s}  {'vs reference':>14s}  target")
        for k, v in row.items():
            ref = "numpy epochs" if "epochs" in k or " fit " in k else "numpy"
            ratio = v / row[ref]
            target = TARGETS.get((name, k))
            mark = "" if target is None else f">= {target:g}x {'met' if ratio >= target else 'MISSED'}"
            lines.append(f"  {k:26s} {v:>12,.0f}  {ratio:6.2f}x {ref:7s}  {mark}")
    return lines


ROOT = Path(__file__).resolve().parent.parent


def cnn_setup(name: str, batch: int):
    """A reference CNN (seed 1), its Adam optimizer and 8 batches of random data: (net, opt, [(x, y)], x, y)."""
    from mcutrain.tiny_models import build

    net = build(name).rand_params(seed=1)
    shape, n_out = net.in_shape, net.n_out
    assert shape is not None and n_out is not None
    rng = np.random.default_rng(0)
    n = 8 * batch
    ex = rng.random((n, *shape), dtype=np.float32)
    ey = np.eye(n_out, dtype=np.float32)[rng.integers(0, n_out, n)]
    data = [(ex[i : i + batch].reshape(batch, -1), ey[i : i + batch]) for i in range(0, n, batch)]
    return net, net.new_adam(TrainParams(lr=1e-3)), data, ex, ey


def build_rows(threads: int) -> Dict[str, Tuple[Callable, List[Tuple[np.ndarray, np.ndarray]], bool]]:
    """--builds' rows: {name: (function, batches, whole epochs)} for networks A and B (1 and `threads`
    threads) and the digits CNN (1 thread); a per-batch function takes (x, y), an epoch function the epoch."""
    rows: Dict[str, Tuple[Callable, List[Tuple[np.ndarray, np.ndarray]], bool]] = {}
    for name, (sizes, acts, batch) in NETS.items():
        data = make_data(sizes, batch)
        ex, ey = np.concatenate([x for x, _ in data]), np.concatenate([y for _, y in data])
        for th in sorted({1, threads}):
            rows[f"{name} train_batch {th}t"] = (mcutrain_step(sizes, acts, th), data, False)
            rows[f"{name} fit {th}t"] = (mcutrain_epochs(sizes, acts, batch, th, ex, ey), data, True)
    net, opt, data, ex, ey = cnn_setup("digits_cnn", 32)
    rows["digits_cnn train_batch 1t"] = (lambda x, y: train_batch(opt, net, losses.cross_entropy, x, y), data, False)
    net2, opt2, _, _, _ = cnn_setup("digits_cnn", 32)
    rows["digits_cnn fit 1t"] = (
        lambda e: net2.fit(opt2, losses.cross_entropy, ex, ey, epochs=1, batch=32, shuffle=e, callback_every=1 << 30),
        data,
        True,
    )
    return rows


def timed_rows(seconds: float, threads: int) -> Dict[str, float]:
    """{row: samples per second of the process's CPU time} of build_rows in this interpreter's build (CPU time:
    a process that waits for a core on a shared machine is not charged for the wait)."""
    out: Dict[str, float] = {}
    for name, (fn, data, epochs) in build_rows(threads).items():
        n = sum(x.shape[0] for x, _ in data)
        clock = time.process_time
        out[name] = timed_epochs(fn, n, seconds, clock) if epochs else timed(fn, data, seconds, clock)
    return out


COUNT_PASSES = 4  # passes over a row's batches (or epochs) per instruction count


def counted_rows() -> Tuple[str, List[str]]:
    """Fixed work for callgrind: every 1-thread row of build_rows, COUNT_PASSES passes over its batches, after one
    warm-up pass; mcutrain.isa.active() (which calls the core's mct_isa_active) before each row and after the last,
    where callgrind dumps its counts (--dump-before=mct_isa_active), so the last len(rows) dumps hold one row's
    training each. (the variant that ran, the row names)"""
    from mcutrain import isa

    rows = {k: v for k, v in build_rows(1).items() if k.endswith(" 1t")}
    for fn, data, epochs in rows.values():
        if epochs:
            fn(0)
        else:
            for x, y in data:
                fn(x, y)
    variant = ""
    for fn, data, epochs in rows.values():
        variant = isa.active()
        for p in range(COUNT_PASSES):
            if epochs:
                fn(p + 1)
            else:
                for x, y in data:
                    fn(x, y)
    isa.active()
    return variant, list(rows)


def callgrind_counts(pkg: str, work: Path, tag: str, isa_name: Optional[str]) -> Tuple[str, Dict[str, int]]:
    """(variant, {row: instructions per sample}) of counted_rows in the build on `pkg` (a PYTHONPATH) under
    callgrind, with MCUTRAIN_ISA=isa_name when given."""
    env = {k: v for k, v in os.environ.items() if k != "MCUTRAIN_ISA"}
    env["PYTHONPATH"] = pkg
    if isa_name:
        env["MCUTRAIN_ISA"] = isa_name
    out = work / f"callgrind-{tag}"
    out.mkdir()
    r = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--dump-before=mct_isa_active",
            f"--callgrind-out-file={out}/cg.%p",
            sys.executable,
            __file__,
            "--child-count",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise SystemExit(f"callgrind run of the {tag} build failed:\n{r.stderr[-3000:]}")
    variant, names = json.loads(r.stdout.strip().splitlines()[-1])
    dumps = sorted(out.glob("cg.*.*"), key=lambda f: int(f.name.rsplit(".", 1)[1]))
    totals = []
    for f in dumps:
        for line in f.read_text().splitlines():
            if line.startswith(("totals:", "summary:")):
                totals.append(int(line.split()[1]))
                break
    per_row = totals[-len(names) :]  # the dumps before: import, set-up and warm-up
    rows = build_rows(1)
    counts = {}
    for name, ir in zip(names, per_row):
        n = sum(x.shape[0] for x, _ in rows[name][1]) * COUNT_PASSES
        counts[name] = ir // n
    return variant, counts


def built_package(work: Path, march: str) -> Path:
    """A copy of the package whose extension is built with MCUTRAIN_MARCH=march (one copy of the core, for that
    CPU only); the folder to put on PYTHONPATH."""
    env = dict(os.environ, MCUTRAIN_MARCH=march)
    build, temp = work / f"build-{march}", work / f"temp-{march}"
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(build), "--build-temp", str(temp)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    (so,) = list(build.glob("mcutrain/_core*" + sysconfig.get_config_var("EXT_SUFFIX")))
    pkg = work / f"pkg-{march}" / "mcutrain"
    shutil.copytree(ROOT / "trainer", pkg, ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    shutil.copy(so, pkg / so.name)
    return pkg.parent


def compare_builds(seconds: float, rounds: int, threads: int, count: bool) -> List[str]:
    """The dispatched (installed) build against the native one: interleaved child processes, each round's
    ratio per row, then (count) the instructions per sample under callgrind; table lines."""
    import statistics

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        builds = {"dispatched": os.environ.get("PYTHONPATH", ""), "native": str(built_package(work, "native"))}
        runs: Dict[str, List[Dict[str, float]]] = {b: [] for b in builds}
        variant: Dict[str, str] = {}
        for _ in range(rounds):
            for b, path in builds.items():
                env = {k: v for k, v in os.environ.items() if k != "MCUTRAIN_ISA"}
                env["PYTHONPATH"] = path
                r = subprocess.run(
                    [sys.executable, __file__, "--child", "--seconds", str(seconds), "--threads", str(threads)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                res = json.loads(r.stdout)
                variant[b] = res.pop("_variant")
                runs[b].append(res)
        lines = [
            f"samples per CPU second (the process's CPU time), best of {rounds} interleaved rounds: the dispatched "
            f"build (running its {variant['dispatched']} copy) against the native build (-march=native, one copy: "
            f"{variant['native']}); ratio = dispatched / native within each round, median [min - max] over the rounds",
            f"  {'row':26s} {'dispatched':>11s} {'native':>11s}  {'ratio':>6s}  {'spread':>15s}",
        ]
        medians = []
        for k in runs["dispatched"][0]:
            d = [r[k] for r in runs["dispatched"]]
            nat = [r[k] for r in runs["native"]]
            ratios = [a / b for a, b in zip(d, nat)]
            med = statistics.median(ratios)
            medians.append(med)
            lines.append(
                f"  {k:26s} {max(d):>11,.0f} {max(nat):>11,.0f}  {med:6.3f}  [{min(ratios):.3f} - {max(ratios):.3f}]"
            )
        geo = float(np.exp(np.mean(np.log(medians))))
        lines.append(f"  {'geometric mean of the medians':48s} {geo:6.3f}   (goal: >= 0.95)")
        if count:
            if shutil.which("valgrind") is None:
                lines.append("instruction counts: valgrind is not installed (apt-get install valgrind)")
                return lines
            v3 = str(built_package(work, "x86-64-v3"))
            got = {
                "dispatched": callgrind_counts(builds["dispatched"], work, "dispatched", None),
                "dispatched-baseline": callgrind_counts(builds["dispatched"], work, "baseline", "baseline"),
                "x86-64-v3": callgrind_counts(v3, work, "v3", None),
            }
            lines += [
                "",
                "instructions per sample under callgrind (load-independent; valgrind offers no AVX-512): the "
                f"dispatched build running its {got['dispatched'][0]} copy, the same build forced to its baseline "
                "copy, and a build for x86-64-v3 only (-march=x86-64-v3, one copy); ratio = reference / dispatched "
                "(>= 1: the dispatched build executes no more instructions)",
                f"  {'row':26s} {'dispatched':>11s} {'x86-64-v3':>11s} {'ratio':>6s}  "
                f"{'baseline copy':>13s} {'ratio':>6s}",
            ]
            for k, ir in got["dispatched"][1].items():
                v3ir, base = got["x86-64-v3"][1][k], got["dispatched-baseline"][1][k]
                lines.append(f"  {k:26s} {ir:>11,d} {v3ir:>11,d} {v3ir / ir:6.3f}  {base:>13,d} {base / ir:6.3f}")
    return lines


CNN_TARGETS = {("digits_cnn", "mcutrain fit 1 thread"): 5.0, ("ds_cnn", "mcutrain fit 1 thread"): 1.0}


def torch_cnn(net: Sequential):
    """The same layers in PyTorch (NCHW), from the mcutrain layers' geometry; the logits (no final softmax)."""
    import torch

    mods: List = []
    for m in net.layers():
        g = m._geometry() if hasattr(m, "_geometry") else {}
        name = type(m).__name__
        if name in ("Conv2d", "DepthwiseConv2d"):
            pb = (g["h_out"] - 1) * g["sh"] + g["kh"] - g["h_in"] - g["pt"]
            pr = (g["w_out"] - 1) * g["sw"] + g["kw"] - g["w_in"] - g["pl"]
            mods.append(torch.nn.ZeroPad2d((g["pl"], max(pr, 0), g["pt"], max(pb, 0))))
            groups = g["c_in"] if name == "DepthwiseConv2d" else 1
            conv = torch.nn.Conv2d(g["c_in"], g["c_out"], (g["kh"], g["kw"]), (g["sh"], g["sw"]), groups=groups)
            mods.append(conv)
        elif name == "BatchNorm":
            mods.append(torch.nn.BatchNorm2d(m.channels, eps=m.eps, momentum=m.momentum))
        elif name in ("MaxPool2d", "AvgPool2d"):
            cls = torch.nn.MaxPool2d if name == "MaxPool2d" else torch.nn.AvgPool2d
            mods.append(cls((g["kh"], g["kw"]), (g["sh"], g["sw"])))
        elif name == "Relu":
            mods.append(torch.nn.ReLU())
        elif name == "Flatten":
            mods.append(torch.nn.Flatten())
        elif name == "Linear":
            mods.append(torch.nn.Linear(m.n_in, m.n_out))
    return torch.nn.Sequential(*mods)


def measure_cnn(name: str, batch: int, seconds: float, rounds: int) -> Dict[str, float]:
    """{row: samples/s} of one reference CNN: mcutrain's train_batch and fit, PyTorch's per-batch loop."""
    net, opt, data, ex, ey = cnn_setup(name, batch)
    shape, n = net.in_shape, ex.shape[0]
    rows: Dict[str, Tuple[Callable, bool]] = {
        "mcutrain 1 thread": (lambda x, y: train_batch(opt, net, losses.cross_entropy, x, y), False),
        "mcutrain fit 1 thread": (
            lambda e: net.fit(opt, losses.cross_entropy, ex, ey, epochs=1, batch=batch, shuffle=e),
            True,
        ),
    }
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tnet = torch_cnn(net)
        topt = torch.optim.Adam(tnet.parameters(), lr=1e-3)
        ce = torch.nn.CrossEntropyLoss()

        def tstep(x: np.ndarray, y: np.ndarray) -> None:
            xt = torch.from_numpy(x).reshape(x.shape[0], *shape).permute(0, 3, 1, 2)
            topt.zero_grad()
            ce(tnet(xt), torch.from_numpy(y.argmax(1))).backward()
            topt.step()

        rows["pytorch 1 thread"] = (tstep, False)
    best: Dict[str, float] = {}
    for _ in range(rounds):
        for row, (fn, epochs) in rows.items():
            if torch is not None:
                torch.set_num_threads(1)
            with one_blas_thread():
                v = timed_epochs(fn, n, seconds) if epochs else timed(fn, data, seconds)
            best[row] = max(best.get(row, 0.0), v)
    return best


def report_cnn(results: Dict[str, Dict[str, float]]) -> List[str]:
    """The CNN rows with PyTorch beside each."""
    lines = []
    for name, row in results.items():
        lines.append(f"\n{name}: Adam, cross-entropy, batch 32")
        lines.append(f"  {'row':26s} {'samples/s':>12s}  {'vs pytorch':>12s}  target")
        ref = row.get("pytorch 1 thread")
        for k, v in row.items():
            ratio = f"{v / ref:6.2f}x" if ref else "   n/a"
            target = CNN_TARGETS.get((name, k))
            mark = "" if target is None or not ref else f">= {target:g}x {'met' if v / ref >= target else 'MISSED'}"
            lines.append(f"  {k:26s} {v:>12,.0f}  {ratio:>12s}  {mark}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builds", action="store_true", help="compare the dispatched build with a native one")
    ap.add_argument("--count", action="store_true", help="with --builds: also count instructions (callgrind)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-count", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved measurements per row (the best counts)")
    ap.add_argument("--threads", type=int, default=2, help="the multi-threaded rows' thread count")
    ap.add_argument("--json", help="also write the figures as JSON")
    args = ap.parse_args()
    if args.child:  # one measurement of mcutrain's rows in this interpreter's build, as JSON
        from mcutrain import isa

        with one_blas_thread():
            print(json.dumps({"_variant": isa.active(), **timed_rows(args.seconds, args.threads)}))
        return
    if args.child_count:  # fixed work under callgrind: the variant and the rows' names, as JSON
        with one_blas_thread():
            print(json.dumps(counted_rows()))
        return
    if args.builds:
        print("\n".join(compare_builds(args.seconds, max(1, args.rounds), args.threads, args.count)))
        return
    cores = os.cpu_count() or 1
    results: Dict[str, Dict[str, float]] = {}
    for name, (sizes, acts, batch) in NETS.items():
        results[name] = measure(sizes, acts, batch, args.seconds, max(1, args.rounds), args.threads)
    print("\n".join(report(results, cores)))
    cnn = {name: measure_cnn(name, 32, args.seconds, max(1, args.rounds)) for name in ("digits_cnn", "ds_cnn")}
    print("\n".join(report_cnn(cnn)))
    results.update(cnn)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
