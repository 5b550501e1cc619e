"""Concurrent use of one network from several Python threads (issue 9, class 1).

The C core runs without the GIL, so nothing but the network's lock keeps two calls on one network apart.
These tests hammer one network from several threads with varying batch sizes and thread counts (the
`threads` argument: 1 and 2) and check that

- nothing crashes (before the lock, the shared work buffer was reallocated under a running call:
  `malloc(): mismatching next->prev_size`, SIGSEGV);
- no update is lost: the step count is exactly the number of calls;
- the result is that of some serial order of the calls, bit for bit: with identical batches the final
  parameters equal N serial calls; with varying batches, the order is recovered from the losses the calls
  returned (each loss is a function of the parameters the call saw) and replayed serially;
- a model saved while other threads train holds the state between two whole updates.

The last test runs the varying-batch hammer in a child process against the extension built with
AddressSanitizer, where the compiler and its runtime are available.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

import mcutrain as mct
from mcutrain import layers as L
from mcutrain import losses

ROOT = Path(__file__).resolve().parents[1]
PY_THREADS = 4


def make_net() -> Tuple[mct.Module, mct.Optimizer]:
    net = mct.Sequential(L.Linear(12, 24), L.Sigmoid(), L.Linear(24, 5), L.Softmax()).rand_params(seed=3)
    opt = net.new_rmsprop_with_momentum(mct.TrainParams(lr=0.01), 0.8, 0.9)
    return net, opt


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def run_threads(work, n: int = PY_THREADS) -> None:
    """Run work(k) on n threads started together; re-raise the first failure."""
    errors: List[BaseException] = []
    barrier = threading.Barrier(n)

    def body(k: int) -> None:
        try:
            barrier.wait()
            work(k)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            errors.append(e)

    ts = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


@pytest.mark.parametrize("threads", [1, 2])
def test_identical_batches_from_many_threads_equal_serial_calls(tmp_path: Path, threads: int) -> None:
    """4 threads x 500 calls with one batch, plus a thread that predicts and saves meanwhile: 2000 steps, the
    parameters of 2000 serial calls, and every saved file equal to the serial state at its own step."""
    calls = 500
    rng = np.random.default_rng(1)
    x = rng.random((8, 12), dtype=np.float32)
    y = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 8)]

    ref, ref_opt = make_net()
    states = [ref.params.copy()]
    for _ in range(PY_THREADS * calls):
        mct.train_batch(ref_opt, ref, losses.logit_bce, x, y, threads=threads)
        states.append(ref.params.copy())

    net, opt = make_net()
    saved: List[Tuple[int, np.ndarray]] = []
    done = threading.Event()

    def trainer(k: int) -> None:
        for _ in range(calls):
            mct.train_batch(opt, net, losses.logit_bce, x, y, threads=threads)

    def watcher() -> None:
        path = tmp_path / "during.mct"
        while not done.is_set():
            out = net.forward(x)
            assert out.shape == (8, 5) and np.isfinite(out).all()
            mct.save_model(path, net, opt)
            ck = mct.load_model(path)
            assert ck.optimizer is not None
            saved.append((ck.optimizer.step, ck.net.params.copy()))

    w = threading.Thread(target=watcher)
    w.start()
    try:
        run_threads(trainer)
    finally:
        done.set()
        w.join()
    assert opt.step == PY_THREADS * calls, "updates were lost"
    assert np.array_equal(bits(net.params), bits(states[-1])), "not the result of the serial calls"
    assert saved, "the watcher never saved"
    for step, params in saved:
        assert np.array_equal(bits(params), bits(states[step])), f"a save caught step {step} half done"


def hammer(net: mct.Module, opt: mct.Optimizer, threads: int, calls: int) -> Dict[int, List[Tuple[int, float]]]:
    """Each Python thread k trains on its own samples, with batch sizes that change from call to call
    (1 to 17, in a different cycle per thread); returns {k: [(batch size, returned loss), ...]} in call order."""
    record: Dict[int, List[Tuple[int, float]]] = {k: [] for k in range(PY_THREADS)}

    def trainer(k: int) -> None:
        for c in range(calls):
            nb = [1, 17, 3, 9, 2, 13][(c + k) % 6]
            x, y = batch_of(k, c, nb)
            record[k].append((nb, mct.train_batch(opt, net, losses.logit_bce, x, y, threads=threads)))

    run_threads(trainer)
    return record


def batch_of(k: int, c: int, nb: int) -> Tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([k, c])
    return rng.random((nb, 12), dtype=np.float32), np.eye(5, dtype=np.float32)[rng.integers(0, 5, nb)]


def replay(record: Dict[int, List[Tuple[int, float]]], threads: int) -> Tuple[mct.Module, List[int]]:
    """A serial order of the recorded calls that reproduces every returned loss bit for bit (each thread's
    calls in its own order; at each step the one call whose loss matches), applied to a fresh network."""
    net, opt = make_net()
    nxt = {k: 0 for k in record}
    order: List[int] = []
    total = sum(len(v) for v in record.values())
    for _ in range(total):
        snap = (net.params.copy(), opt.state.copy(), opt.train_state.copy())
        for k in record:
            if nxt[k] == len(record[k]):
                continue
            nb, want = record[k][nxt[k]]
            got = mct.train_batch(opt, net, losses.logit_bce, *batch_of(k, nxt[k], nb), threads=threads)
            if np.float32(got).view(np.uint32) == np.float32(want).view(np.uint32):
                nxt[k] += 1
                order.append(k)
                break
            net.params, opt.state[...], opt.train_state[...] = snap
        else:
            raise AssertionError(f"after {len(order)} calls no pending call's loss matches a serial order")
    return net, order


@pytest.mark.parametrize("threads", [1, 2])
def test_varying_batch_sizes_from_many_threads_are_a_serial_order(threads: int) -> None:
    calls = 120
    net, opt = make_net()
    record = hammer(net, opt, threads, calls)
    assert opt.step == PY_THREADS * calls, "updates were lost"
    serial, order = replay(record, threads)
    assert np.array_equal(bits(net.params), bits(serial.params))
    assert sorted(order) == sorted(k for k in record for _ in record[k])


def test_fit_and_train_batch_from_threads_keep_every_step() -> None:
    """fit in one thread (its chunks hold the lock) while others call train_batch: every step counted."""
    net, opt = make_net()
    rng = np.random.default_rng(5)
    x = rng.random((64, 12), dtype=np.float32)
    y = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 64)]

    def work(k: int) -> None:
        if k == 0:
            net.fit(opt, losses.logit_bce, x, y, epochs=20, batch=8, shuffle=1, callback_every=3)
        else:
            for c in range(100):
                mct.train_batch(opt, net, losses.logit_bce, *batch_of(k, c, 1 + c % 7))

    run_threads(work)
    assert opt.step == 20 * 8 + (PY_THREADS - 1) * 100


def test_a_copied_network_has_its_own_lock() -> None:
    import copy

    net, opt = make_net()
    twin, twin_opt = copy.deepcopy((net, opt))
    assert twin.lock is not net.lock and twin_opt._lock is not opt._lock
    assert all(m.lock is twin.lock for m in twin.layers())
    assert all(m.lock is net.lock for m in net.layers())


ASAN_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
import test_threads as T
for threads in (1, 2):
    net, opt = T.make_net()
    record = T.hammer(net, opt, threads, 40)
    assert opt.step == T.PY_THREADS * 40, opt.step
print("hammer ok")
"""


def _asan_runtime() -> str:
    cc = os.environ.get("CC", "gcc")
    if not shutil.which(cc):
        return ""
    out = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return out if out and os.path.isabs(out) and os.path.exists(out) else ""


def test_hammer_under_address_sanitizer(tmp_path: Path) -> None:
    """The varying-batch hammer against the extension built with -fsanitize=address (the interpreter loads
    the ASan runtime first): no report, no crash."""
    libasan = _asan_runtime()
    if not libasan:
        pytest.skip("no AddressSanitizer runtime for the C compiler (gcc -print-file-name=libasan.so)")
    build = tmp_path / "build"
    env = dict(os.environ, CFLAGS="-fsanitize=address -fno-omit-frame-pointer -g", LDFLAGS="-fsanitize=address")
    env["MCUTRAIN_MARCH"] = ""
    b = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(build), "--build-temp", str(tmp_path / "t")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert b.returncode == 0, b.stderr[-3000:]
    (so,) = list(build.glob("mcutrain/_core*" + sysconfig.get_config_var("EXT_SUFFIX")))
    # the package from the source tree, with the sanitized extension in place of the installed one
    pkg = tmp_path / "pkg" / "mcutrain"
    shutil.copytree(ROOT / "trainer", pkg, ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    shutil.copy(so, pkg / so.name)
    run_env = dict(os.environ, LD_PRELOAD=libasan, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0")
    run_env["PYTHONPATH"] = str(tmp_path / "pkg")
    r = subprocess.run(
        [sys.executable, "-c", ASAN_SCRIPT, str(Path(__file__).parent)],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert "ERROR: AddressSanitizer" not in r.stderr, r.stderr[-4000:]
    assert r.returncode == 0 and "hammer ok" in r.stdout, r.stderr[-4000:]
