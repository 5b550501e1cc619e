"""Runtime dispatch of the host's C core (trainer/isa_dispatch.c, mcutrain.isa): the extension is built for the
baseline instruction set with the whole core once more per wider one, and every variant this CPU runs, forced
through MCUTRAIN_ISA or mcutrain.isa.select, trains MLPs and CNNs and computes features to the same bits (the
same summation order and -ffp-contract=off in every copy). Every function of the core has a copy per variant,
the extension's calls go to the chosen copy, and a switch while another thread trains changes no bit. A variant
that cannot run here is refused in one line."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

from mcutrain import Sequential, TrainParams, _core, isa, losses, train_batch
from mcutrain import layers as L

# sizes chosen so that full 4 x 16 tiles, partial column strips (n_out 35, 10) and leftover rows (batches of
# 7 and 10) all run, forward and backward, plus the GLU's two products and the bias gradients; then the two
# reference CNNs (convolution, depthwise convolution, BatchNorm, max and average pooling; Adam) through
# train_batch and fit, and an MFCC and a motion feature pipeline
SCRIPT = """
import hashlib, sys
import numpy as np
from mcutrain import Sequential, TrainParams, isa, losses, train_batch
from mcutrain import layers as L
from mcutrain.features import FeatureSpec
from mcutrain.tiny_models import build

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
h = hashlib.sha256(net.params.tobytes() + opt.state.tobytes() + net.forward(x[0]).tobytes())
for name, nb in (("digits_cnn", 9), ("ds_cnn", 3)):
    cnn = build(name).rand_params(seed=5)
    copt = cnn.new_adam(TrainParams(lr=1e-3))
    shape = cnn.in_shape
    x = rng.random((2 * nb, int(np.prod(shape))), dtype=np.float32)
    y = np.eye(cnn.n_out, dtype=np.float32)[rng.integers(0, cnn.n_out, 2 * nb)]
    train_batch(copt, cnn, losses.cross_entropy, x[:nb], y[:nb])
    cnn.fit(copt, losses.cross_entropy, x, y, epochs=2, batch=nb, shuffle=1)
    h.update(cnn.params.tobytes() + copt.state.tobytes() + cnn.forward(x[0]).tobytes())
audio = (rng.standard_normal(16000) * 3000).astype(np.int16)
h.update(FeatureSpec.parse("kws").compute(audio).tobytes())
h.update(FeatureSpec.parse("motion:axes=3").compute(rng.standard_normal((128, 3)).astype(np.float32)).tobytes())
print(isa.active(), h.hexdigest())
"""


def run_variant(name: str) -> subprocess.CompletedProcess:
    """SCRIPT in a fresh interpreter with MCUTRAIN_ISA=name."""
    env = {**os.environ, "MCUTRAIN_ISA": name}
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, env=env)


def test_every_variant_this_cpu_runs_trains_to_the_same_bits() -> None:
    """MCUTRAIN_ISA forces each runnable variant (it is the one that runs), and each ends with the same
    parameters, optimizer state and outputs of the MLP and both CNNs, and the same features, bit for bit."""
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


def core_functions(so: str) -> dict:
    """{name: kind} of the global functions the extension defines (nm), from its dynamic symbol table."""
    r = subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True, text=True, check=True)
    return {p[-1]: p[-2] for p in (line.split() for line in r.stdout.splitlines()) if len(p) == 3 and p[-2] == "T"}


def test_the_whole_core_has_a_copy_per_variant_and_calls_reach_the_chosen_one() -> None:
    """Every function of the C core (the baseline copy keeps the core's names) is in the extension once more per
    wider variant, with the variant's suffix; and for each runnable variant the entry the extension calls
    (mct_forward, mct_train_step, a layer's, the optimizer's, the features') is that variant's copy."""
    assert shutil.which("nm"), "nm (binutils) is needed to read the extension's symbols"
    names = core_functions(_core.__file__)
    variants = list(isa.variants())
    wider = variants[1:]
    base = sorted(
        n
        for n in names
        if n.startswith("mct_") and not n.startswith("mct_isa_") and not n.endswith(tuple("_" + v for v in wider))
    )
    assert {"mct_forward", "mct_train_step", "mct_conv2d_backward", "mct_update", "mct_feat_run"} <= set(base)
    for v in wider:
        missing = [n for n in base if n + "_" + v not in names]
        assert not missing, f"the {v} copy lacks {missing[:10]}"
    lib = ctypes.CDLL(_core.__file__)
    start = isa.active()
    try:
        for v in isa.runnable():
            isa.select(v)
            for f in ("mct_forward", "mct_train_step", "mct_conv2d_backward", "mct_update", "mct_feat_run"):
                copy = f if v == variants[0] else f + "_" + v
                want = ctypes.cast(getattr(lib, copy), ctypes.c_void_p).value
                assert _core.isa_entry(f) == want, (v, f)
        assert _core.isa_entry("mct_no_such_function") == 0
    finally:
        isa.select(start)


def test_switching_variants_while_another_thread_trains_changes_no_bit() -> None:
    """One thread trains (two OpenMP threads inside) while this one switches among the runnable variants as fast
    as it can: every call of the core runs wholly in one copy, so the result is the bits of a run without
    switches."""

    def train() -> bytes:
        rng = np.random.default_rng(4)
        net = Sequential(L.Linear(30, 48), L.Relu(), L.Linear(48, 48), L.Tanh(), L.Linear(48, 5))
        net.rand_params(seed=9, scale=0.5)
        opt = net.new_rmsprop_with_momentum(TrainParams(lr=1e-2), 0.9, 0.9)
        x = rng.random((256, 30), dtype=np.float32)
        y = rng.random((256, 5), dtype=np.float32)
        for e in range(4):  # between calls the GIL passes to the switching thread, and within them it is free
            net.fit(opt, losses.mse, x, y, epochs=10, batch=8, shuffle=2 + e, threads=2)
        return net.params.tobytes() + opt.state.tobytes()

    start = isa.active()
    want = train()
    got: list = []
    worker = threading.Thread(target=lambda: got.append(train()))
    switches = 0
    try:
        worker.start()
        names = isa.runnable()
        while worker.is_alive():
            isa.select(names[switches % len(names)])
            switches += 1
        worker.join()
    finally:
        isa.select(start)
    assert got == [want]
    assert switches > 10 * len(isa.runnable()), f"the training ended after {switches} switches"


def test_the_build_lists_the_core_functions_and_refuses_global_mutable_state(tmp_path) -> None:
    """setup.py's reading of the core's symbol table (mcutrain.host_build.core_symbols over nm's output of real
    objects): functions and constant tables are listed for the per-variant copies (static ones are not), and a
    writable global stops the build naming it, since each copy would have its own."""
    from mcutrain.host_build import core_symbols, rename_header

    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed: apt-get install gcc"

    def symbols(code: str) -> tuple:
        src, obj = tmp_path / "x.c", tmp_path / "x.o"
        src.write_text(code)
        subprocess.run([gcc, "-std=c99", "-O2", "-c", str(src), "-o", str(obj)], check=True)
        return core_symbols(subprocess.run(["nm", "-g", str(obj)], capture_output=True, text=True).stdout)

    clean = "const int mct_t[2] = {1, 2};\nstatic int h(int x) { return x + mct_t[1]; }\n"
    clean += "int mct_f(int x) { return h(x); }\n"
    assert symbols(clean) == (["mct_f"], ["mct_t"])
    assert "#define mct_f mct_f_avx2\n#define mct_t mct_t_avx2" in rename_header(["mct_f", "mct_t"], "avx2")
    for state in ("int mct_count;", "int mct_count = 3;"):
        with pytest.raises(ValueError, match=r"writable global data \(mct_count\)"):
            symbols(clean + state + "\nint mct_g(void) { return mct_count++; }\n")
