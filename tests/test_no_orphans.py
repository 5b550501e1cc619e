"""No orphaned processes (issue 25, class 5): whatever ends mcutrain (SIGKILL, SIGTERM, an error, a normal
end), every program it started (the simulated devices' firmware, simulators, builds) ends with it. All of
them start through mcutrain.processes: a process group of their own, SIGKILL as their parent-death signal,
and SIGTERM handled as Ctrl-C.

The fleet test kills `mcutrain fleet --simulate 4` mid-round with SIGKILL and with SIGTERM and then looks
for every process the fleet had (found through /proc while it ran) and for any process running from its
work folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import pytest

from mcutrain import Sequential, TrainParams, processes, save_model
from mcutrain import layers as L

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def proc_table() -> Dict[int, Tuple[int, str, str]]:
    """pid -> (parent pid, start time, state) of every process, from /proc."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        out[int(d)] = (int(rest[1]), rest[19], rest[0])
    return out


def descendants(pid: int) -> Dict[int, str]:
    """pid -> start time of every living descendant of pid."""
    table = proc_table()
    found, todo = {}, [pid]
    while todo:
        p = todo.pop()
        for child, (ppid, start, _) in table.items():
            if ppid == p and child not in found:
                found[child] = start
                todo.append(child)
    return found


def alive(procs: Dict[int, str]) -> Dict[int, str]:
    """Those of procs (pid -> start time) that still run (the same process: same start time; not a zombie)."""
    table = proc_table()
    return {p: s for p, s in procs.items() if p in table and table[p][1] == s and table[p][2] != "Z"}


def running_from(folder: Path) -> list:
    """Command lines of processes that run a program from folder or name it."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(folder) in cmd and "pytest" not in cmd:
                out.append(cmd)
    return out


def wait_until(cond, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


# ---------------------------------------------------------------- the helper itself


def script(tmp_path: Path, body: str) -> subprocess.Popen:
    """A Python process running body (with mcutrain.processes imported), stdout piped."""
    p = tmp_path / "s.py"
    p.write_text("import sys, threading, time\nfrom mcutrain import processes\n" + textwrap.dedent(body))
    return subprocess.Popen([sys.executable, str(p)], stdout=subprocess.PIPE, text=True, start_new_session=True)


def test_a_child_started_from_a_thread_that_ends_lives_until_its_parent_is_killed(tmp_path: Path) -> None:
    """A child started from a worker thread outlives that thread (the parent-death signal follows the
    spawner thread, not the worker) and dies when its parent is SIGKILLed, with its own child (same group
    ended on a normal exit; the death signal on a SIGKILL reaches the direct child)."""
    s = script(
        tmp_path,
        """
        out = []
        t = threading.Thread(target=lambda: out.append(processes.spawn(["sleep", "600"])))
        t.start(); t.join()
        print(out[0].pid, flush=True)
        time.sleep(600)
        """,
    )
    assert s.stdout is not None
    child = int(s.stdout.readline())
    start = proc_table()[child][1]
    time.sleep(0.5)
    assert alive({child: start}), "the child died with the thread that asked for it"
    s.send_signal(signal.SIGKILL)
    s.wait(timeout=30)
    wait_until(lambda: not alive({child: start}), 10, "the child outlived its SIGKILLed parent")


@pytest.mark.parametrize("how", ["exit", "sigterm", "exception", "sigkill"])
def test_every_child_group_ends_when_the_parent_ends(tmp_path: Path, how: str) -> None:
    """A parent whose child started a grandchild (`sh -c 'sleep & sleep'`): after a normal exit, a SIGTERM
    (handled as Ctrl-C), an uncaught exception or a SIGKILL (the watchdog's turn), no process of the child's
    group is left."""
    s = script(
        tmp_path,
        f"""
        processes.terminate_like_interrupt()
        p = processes.spawn(["sh", "-c", "sleep 600 & sleep 600"])
        print(p.pid, flush=True)
        how = {how!r}
        time.sleep(0.5)
        if how == "exception":
            raise RuntimeError("boom")
        if how in ("sigterm", "sigkill"):
            time.sleep(600)
        """,
    )
    assert s.stdout is not None
    child = int(s.stdout.readline())
    time.sleep(0.3)
    family = {p: st for p, st in descendants(s.pid).items() if p == child or proc_table()[p][0] == child}
    assert child in family and len(family) >= 2, family  # sh and at least one sleep (not the watchdog)
    if how in ("sigterm", "sigkill"):
        s.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
    s.wait(timeout=30)
    wait_until(lambda: not alive(family), 30, f"left behind: {alive(family)}")


def test_run_stops_the_whole_group_on_a_timeout(tmp_path: Path) -> None:
    """processes.run past its timeout: TimeoutExpired, and the command's own children are gone too."""
    marker = tmp_path / "pids"
    with pytest.raises(subprocess.TimeoutExpired):
        processes.run(["sh", "-c", f"sleep 600 & echo $! > {marker}; sleep 600"], timeout=1.0)
    grandchild = int(marker.read_text())
    wait_until(lambda: not Path(f"/proc/{grandchild}").exists() or proc_table()[grandchild][2] == "Z", 10,
               "the command's background child outlived the timeout")  # fmt: skip
    assert processes.live() == []
    with pytest.raises(FileNotFoundError):
        processes.spawn(["no-such-program-mcutrain"])


@pytest.mark.parametrize("how", ["sigkill", "exit"])
def test_a_grandchild_in_a_session_and_environment_of_its_own_ends_too(tmp_path: Path, how: str) -> None:
    """A child starts a grandchild that leaves its process group (setsid) and drops mcutrain's mark from its
    environment (env -i), as Flower's SuperExec does with the ServerApp: the watchdog knew it as a descendant
    while the parent lived, so a SIGKILL of the parent (and a normal exit, whose cleanup ends only the groups)
    ends it too."""
    marker = tmp_path / "grandchild"
    s = script(
        tmp_path,
        f"""
        p = processes.spawn(["sh", "-c", "setsid env -i sleep 600 & echo $! > {marker}; sleep 600"])
        import os
        while not (os.path.exists({str(marker)!r}) and os.path.getsize({str(marker)!r})):
            time.sleep(0.05)
        time.sleep(1.0)  # the watchdog reads /proc four times a second
        print(p.pid, flush=True)
        if {how!r} == "sigkill":
            time.sleep(600)
        """,
    )
    assert s.stdout is not None
    s.stdout.readline()
    grandchild = int(marker.read_text())
    family = {grandchild: proc_table()[grandchild][1]}
    assert proc_table()[grandchild][0] != s.pid  # not the parent's child: it is sh's (or init's)
    if how == "sigkill":
        s.send_signal(signal.SIGKILL)
    s.wait(timeout=30)
    wait_until(lambda: not alive(family), 30, f"the grandchild outlived its grandparent: {alive(family)}")


# ---------------------------------------------------------------- the fleet


@pytest.fixture(scope="module")
def fleet_inputs(tmp_path_factory: pytest.TempPathFactory, pio_core: Path) -> Path:
    """A folder with the digits (8x8, one-hot) and an untrained classifier; the fleet's work folder in it is
    built by the first test and reused by the second (the firmware is built once)."""
    from sklearn.datasets import load_digits

    d = tmp_path_factory.mktemp("fleet")
    digits = load_digits()
    np.savez(d / "d.npz", x=(digits.data / 16.0).astype(np.float32), y=np.eye(10, dtype=np.float32)[digits.target])
    net = Sequential(L.Linear(64, 16), L.Relu(), L.Linear(16, 10), L.Softmax()).rand_params(seed=3)
    save_model(d / "m.mct", net, net.new_sgd(TrainParams(lr=0.1)), {"loss": "cross_entropy"})
    return d


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killing_a_simulated_fleet_mid_round_leaves_no_process(fleet_inputs: Path, sig: int) -> None:
    """`mcutrain fleet --simulate 4` killed while round 2 runs: every process it had (four native firmware
    programs) is gone within seconds and nothing runs from its work folder. SIGTERM ends it as Ctrl-C does
    (one line, exit code 143); the global model file is the last complete round's or absent, never torn."""
    pytest.importorskip("flwr")
    d = fleet_inputs
    log, out = d / f"f-{sig}.jsonl", d / f"g-{sig}.mct"
    p = subprocess.Popen(
        ["mcutrain", "fleet", "--simulate", "4", "--board", "native", "--model", "m.mct", "--data", "d.npz",
         "--rounds", "1000", "--local-steps", "300", "-o", str(out), "--log", str(log), "--workdir", "sim",
         "--force"],
        cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip

    def rounds_done() -> int:
        if not log.is_file():
            return 0
        recs = [json.loads(x) for x in log.read_text().splitlines()[:-1] if x.strip()]
        return max([r.get("round", 0) for r in recs if r.get("event") == "step"], default=0)

    try:
        wait_until(lambda: rounds_done() >= 1 or p.poll() is not None, 600, "no round within 600 s")
        assert p.poll() is None, p.communicate()[1]
        family = descendants(p.pid)
        assert len(family) >= 4, family  # the four simulated devices
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    wait_until(lambda: not alive(family), 60, f"left behind after {signal.Signals(sig).name}: {alive(family)}")
    assert running_from(d / "sim") == []
    if sig == signal.SIGTERM:
        assert p.returncode == 143 and "interrupted" in err and "Traceback" not in err, (p.returncode, err)
    else:
        assert p.returncode == -signal.SIGKILL
    if out.exists():
        from mcutrain.modelfile import load_model

        assert load_model(out).metadata["fleet"]["round"] >= 1
