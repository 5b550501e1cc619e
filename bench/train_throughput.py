"""Host training throughput: samples/s of train_batch (forward, backward, update) against a plain
NumPy implementation of the same step and, if installed, PyTorch on the CPU, all in this process.

Network A: 20-35 sigmoid-10 softmax, logit BCE, RMSProp with momentum, batch 10 (the README network).
Network B: 64-128 ReLU-128 ReLU-10 softmax, same loss and optimizer, batch 32.

    python bench/train_throughput.py [--seconds 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
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
    step: Callable[[np.ndarray, np.ndarray], object], data: List[Tuple[np.ndarray, np.ndarray]], seconds: float
) -> float:
    """Samples per second of step over the batches, run for about `seconds` after a warm-up."""
    for x, y in data[:4]:
        step(x, y)
    n, t0 = 0, time.perf_counter()
    while True:
        for x, y in data:
            step(x, y)
        n += sum(x.shape[0] for x, _ in data)
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return n / dt


def mcutrain_step(sizes: List[int], acts: List[str], threads: int) -> Callable:
    """train_batch on the C core."""
    mods: List[L.Module] = []
    for i in range(len(sizes) - 1):
        mods.append(L.Linear(sizes[i], sizes[i + 1]))
        mods.append({"sigmoid": L.Sigmoid, "relu": L.Relu}[acts[i]]() if i < len(acts) else L.Softmax())
    net = Sequential(*mods).rand_params(seed=1)
    opt = net.new_rmsprop_with_momentum(TrainParams(lr=LR), MOMENTUM, BETA)
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
        return float(loss)

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    ap.add_argument("--json", help="also write the figures as JSON")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    results: Dict[str, Dict[str, float]] = {}
    for name, (sizes, acts, batch) in NETS.items():
        data = make_data(sizes, batch)
        row: Dict[str, float] = {"numpy": timed(NumpyNet(sizes, acts).step, data, args.seconds)}
        row["mcutrain 1 thread"] = timed(mcutrain_step(sizes, acts, 1), data, args.seconds)
        row[f"mcutrain {cores} threads"] = timed(mcutrain_step(sizes, acts, cores), data, args.seconds)
        for th in (1, cores):
            ts = torch_step(sizes, acts, th)
            if ts is not None:
                row[f"pytorch {th} thread{'s' if th > 1 else ''}"] = timed(ts, data, args.seconds)
        results[name] = row
    print(f"samples/s of one training step (forward, backward, update), {cores} cores")
    for name, row in results.items():
        sizes, acts, batch = NETS[name]
        print(f"\nnetwork {name}: {'-'.join(map(str, sizes))} ({', '.join(acts)}, softmax), batch {batch}")
        for k, v in row.items():
            print(f"  {k:22s} {v:>12,.0f}   {v / row['numpy']:6.2f}x numpy")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
