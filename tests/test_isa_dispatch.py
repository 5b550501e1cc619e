"""Runtime dispatch of the host's hot kernels (trainer/isa_dispatch.c, mcutrain.isa): the extension is built
for the baseline instruction set with the matrix kernels once more per wider one, and every variant this CPU
runs, forced through MCUTRAIN_ISA or mcutrain.isa.select, trains to the same bits (the same summation order and
-ffp-contract=off in every copy). A variant that cannot run here is refused in one line."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

from mcutrain import Sequential, TrainParams, isa, losses, train_batch
from mcutrain import layers as L

# sizes chosen so that full 4 x 16 tiles, partial column strips (n_out 35, 10) and leftover rows (batches of
# 7 and 10) all run, forward and backward, plus the GLU's two products and the bias gradients
SCRIPT = """
import hashlib, sys
import numpy as np
from mcutrain import Sequential, TrainParams, isa, losses, train_batch
from mcutrain import layers as L

net = Sequential(L.Linear(20, 35), L.Sigmoid(), L.SwiGLU(35, 33), L.Linear(33, 10), L.Softmax())
net.rand_params(seed=7, scale=1.0)
opt = net.new_adam(TrainParams(lr=1e-2), 0.9, 0.999, 1e-8)
rng = np.random.default_rng(3)
for nb in (10, 7, 1, 32, 10):
    x = rng.random((nb, 20), dtype=np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, nb)]
    train_batch(opt, net, losses.cross_entropy, x, y)
x = rng.random((64, 20), dtype=np.float32)
y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
net.fit(opt, losses.cross_entropy, x, y, epochs=2, batch=16, shuffle=5, threads=2)
h = hashlib.sha256(net.params.tobytes() + opt.state.tobytes() + net.forward(x[0]).tobytes()).hexdigest()
print(isa.active(), h)
"""


def run_variant(name: str) -> subprocess.CompletedProcess:
    """SCRIPT in a fresh interpreter with MCUTRAIN_ISA=name."""
    env = {**os.environ, "MCUTRAIN_ISA": name}
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env)


def test_every_variant_this_cpu_runs_trains_to_the_same_bits() -> None:
    """MCUTRAIN_ISA forces each runnable variant (it is the one that runs), and each ends with the same
    parameters, optimizer state and outputs, bit for bit."""
    runnable = isa.runnable()
    assert runnable[0] == "baseline" and set(runnable) <= set(isa.variants())
    if os.uname().machine == "x86_64":
        assert "avx2" in isa.variants(), "an x86-64 build carries the AVX2 kernels"
    digests = {}
    for name in runnable:
        r = run_variant(name)
        assert r.returncode == 0, r.stderr[-2000:]
        active, digest = r.stdout.split()
        assert active == name
        digests[name] = digest
    assert len(set(digests.values())) == 1, digests


def test_the_default_is_the_widest_variant_and_select_switches_in_process() -> None:
    """At import the widest runnable variant runs (unless MCUTRAIN_ISA says otherwise); select() switches
    to each variant in this process and the same training from the same start gives the same bits."""
    if not os.environ.get("MCUTRAIN_ISA"):
        assert isa.active() == isa.runnable()[-1]
    start = isa.active()
    rng = np.random.default_rng(1)
    x = rng.random((13, 24), dtype=np.float32)
    y = rng.random((13, 17), dtype=np.float32)
    got = {}
    try:
        for name in isa.runnable():
            assert isa.select(name) == name == isa.active()
            net = Sequential(L.Linear(24, 40), L.Tanh(), L.Linear(40, 17))
            net.rand_params(seed=2, scale=0.5)
            opt = net.new_momentum(TrainParams(lr=5e-2), 0.9)
            for _ in range(5):
                train_batch(opt, net, losses.mse, x, y)
            got[name] = hashlib.sha256(net.params.tobytes()).hexdigest()
    finally:
        isa.select(start)
    assert len(set(got.values())) == 1, got


def test_a_variant_that_cannot_run_is_refused_in_one_line() -> None:
    """An unknown name through select() is a ConfigError naming the choices; through MCUTRAIN_ISA the
    command line stops with exit 1 and one line before doing anything."""
    from mcutrain.errors import ConfigError

    before = isa.active()
    with pytest.raises(ConfigError, match="choose one of baseline"):
        isa.select("sse9")
    assert isa.active() == before
    r = subprocess.run(
        [sys.executable, "-c", "from mcutrain.cli import run; run(['--version'])"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MCUTRAIN_ISA": "sse9"},
    )
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "MCUTRAIN_ISA=sse9" in r.stderr and "Traceback" not in r.stderr


def test_version_says_which_variant_runs() -> None:
    """`mcutrain --version` names the variant that runs (here forced to the baseline) and the formats."""
    r = subprocess.run(
        [sys.executable, "-c", "from mcutrain.cli import run; run(['--version'])"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MCUTRAIN_ISA": "baseline"},
    )
    assert r.returncode == 0, r.stderr
    assert "kernels: baseline" in r.stdout and "protocol 2" in r.stdout, r.stdout
