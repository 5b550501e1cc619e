"""Seeded toy problems (as in minidx): AxPlusB, Parity(N), ModularAddition(10, 16, ...)."""

from __future__ import annotations

from typing import Tuple

import numpy as np


class Problem:
    """A source of (input, target) samples drawn from a seeded generator."""

    n_in: int
    n_out: int
    name: str
    classification = False

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def sample(self) -> Tuple[np.ndarray, np.ndarray]:
        """One sample (x (n_in,), y (n_out,)), float32."""
        x, y = self.sample_batch(1)
        return x[0], y[0]

    def sample_batch(self, n: int) -> Tuple[np.ndarray, np.ndarray]:
        """n samples (x (n, n_in), y (n, n_out)), float32."""
        raise NotImplementedError


class AxPlusB(Problem):
    """Input [a, x, b] drawn uniformly from [low, high); target [a * x + b]."""

    n_in, n_out, name = 3, 1, "axplusb"

    def __init__(self, seed: int = 0, low: float = -1.0, high: float = 1.0) -> None:
        super().__init__(seed)
        self.low, self.high = low, high

    def sample_batch(self, n: int) -> Tuple[np.ndarray, np.ndarray]:
        x = self.rng.uniform(self.low, self.high, (n, 3)).astype(np.float32)
        y = (x[:, 0] * x[:, 1] + x[:, 2]).astype(np.float32)[:, None]
        return x, y


class Parity(Problem):
    """N random bits (0/1); target [p, 1 - p] where p is their XOR."""

    n_out = 2
    classification = True

    def __init__(self, n: int = 8, seed: int = 0) -> None:
        super().__init__(seed)
        if n < 1:
            raise ValueError("Parity needs at least one bit")
        self.n_in = n
        self.name = f"parity{n}"

    def sample_batch(self, n: int) -> Tuple[np.ndarray, np.ndarray]:
        bits = self.rng.integers(0, 2, (n, self.n_in))
        p = bits.sum(axis=1) % 2
        return bits.astype(np.float32), np.stack([p, 1 - p], axis=1).astype(np.float32)


class ModularAddition(Problem):
    """Input one-hot(l) ++ one-hot(r) (2 m values); target one-hot((l + r) mod m)."""

    classification = True

    def __init__(self, modulus: int = 10, seed: int = 0) -> None:
        super().__init__(seed)
        if modulus < 2:
            raise ValueError("the modulus must be at least 2")
        self.m = modulus
        self.n_in, self.n_out = 2 * modulus, modulus
        self.name = f"modadd{modulus}"

    def sample_batch(self, n: int) -> Tuple[np.ndarray, np.ndarray]:
        a = self.rng.integers(0, self.m, n)
        r = self.rng.integers(0, self.m, n)
        x = np.zeros((n, 2 * self.m), np.float32)
        y = np.zeros((n, self.m), np.float32)
        rows = np.arange(n)
        x[rows, a] = 1.0
        x[rows, self.m + r] = 1.0
        y[rows, (a + r) % self.m] = 1.0
        return x, y


class ModularAddition10(ModularAddition):
    """Addition mod 10: 20 inputs, 10 outputs."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(10, seed)


class ModularAddition16(ModularAddition):
    """Addition mod 16: 32 inputs, 16 outputs."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(16, seed)


def by_name(name: str, seed: int = 0) -> Problem:
    """'axplusb', 'parityN' (e.g. parity8), 'modaddN' (e.g. modadd10)."""
    key = name.strip().lower().replace("_", "").replace("-", "")
    if key == "axplusb":
        return AxPlusB(seed)
    for prefix, make in (("parity", Parity), ("modadd", ModularAddition), ("modularaddition", ModularAddition)):
        if key.startswith(prefix) and key[len(prefix) :].isdigit():
            return make(int(key[len(prefix) :]), seed=seed)
    raise ValueError(f"unknown problem {name!r}; choose axplusb, parityN (e.g. parity8) or modaddN (e.g. modadd10)")
