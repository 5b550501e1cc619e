"""Exports never lose or mix a project: the output folder is checked before any work, `--force` replaces only
a folder mcutrain exported, two exports to one folder take turns, and a real SIGKILL at any moment of an
export leaves the complete old project or the complete new one, whose model.mct is the model its model.c was
generated from.

The kill tests fork this test process (mcutrain already imported) and run `mcutrain export` in the child
with an audit hook (sys.addaudithook) that counts its file-system operations (open, mkdir, rename, unlink,
the renameat2 call, ...) and sends the child SIGKILL just before the N-th: a real kill at an exact point,
with no hook in mcutrain itself. A first run without a kill lists the operations; the kill points are
spread over all of them and dense around every rename of the project folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import pytest

import mcutrain.cli.commands  # noqa: F401 - loaded here once, so the forked children all start alike
import mcutrain.cli.export  # noqa: F401
import mcutrain.exporter.export  # noqa: F401
from mcutrain import Sequential, TrainParams
from mcutrain import layers as L
from mcutrain.errors import McuTrainError
from mcutrain.modelfile import load_model, save_model

# the audit events of operations that change or read the file system (os.open and open() both raise "open")
FS_EVENTS = {
    "open",
    "os.mkdir",
    "os.rename",
    "os.replace",
    "os.remove",
    "os.rmdir",
    "os.chmod",
    "os.symlink",
    "shutil.copyfile",
    "shutil.copytree",
    "shutil.rmtree",
    "os.listdir",
    "os.scandir",
    "ctypes.call_function",
}


Work = Union[List[str], Callable[[], Any]]


def make_model(path: Path, seed: int, hidden: int) -> Path:
    """A small model file with an Adam optimizer."""
    net = Sequential(L.Linear(3, hidden), L.Tanh(), L.Linear(hidden, 2)).rand_params(seed=seed)
    save_model(path, net, net.new_adam(TrainParams(lr=0.01)), {"loss": "mse"})
    return path


def files_of(root: Path) -> Dict[str, bytes]:
    """Every file under root: relative path -> bytes (folders are implied by the paths)."""
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


class Child:
    """`mcutrain ARGS` (or a function, called without arguments) in a forked child of this process. kill_at:
    SIGKILL it just before its kill_at-th file-system operation (1-based). fallback: the child cannot
    exchange folders (as on a system without renameat2), so it swaps with two renames. hold: the child waits
    until go() before it starts."""

    def __init__(self, args: Work, kill_at: Optional[int] = None, fallback: bool = False, hold: bool = False):
        rfd, wfd = os.pipe()
        gr, gw = os.pipe() if hold else (-1, -1)
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            os.close(rfd)
            if hold:
                os.close(gw)
                os.read(gr, 1)
            _child(args, kill_at, fallback, wfd)
        os.close(wfd)
        if hold:
            os.close(gr)
        self.pid, self.rfd, self.gw = pid, rfd, gw

    def go(self) -> None:
        """Let a held child start."""
        os.write(self.gw, b"g")
        os.close(self.gw)

    def wait(self) -> Tuple[int, List[str]]:
        """(exit status or -signal, the child's operations as 'event args')."""
        with os.fdopen(self.rfd) as r:
            ops = r.read().splitlines()
        _, status = os.waitpid(self.pid, 0)
        return (os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)), ops


def run_cli(args: Work, kill_at: Optional[int] = None, fallback: bool = False) -> Tuple[int, List[str]]:
    """Run `mcutrain ARGS` in a forked child (see Child) and wait for it."""
    return Child(args, kill_at, fallback).wait()


def _child(args: Work, kill_at: Optional[int], fallback: bool, wfd: int) -> None:
    """The forked child's whole life: ends with os._exit, whatever happens."""
    code = 70
    try:
        log = os.fdopen(wfd, "w", buffering=1)
        if fallback:
            from mcutrain.exporter import folders

            folders._renameat2 = None
        count = 0

        def hook(event: str, hargs: tuple) -> None:
            nonlocal count
            if event in FS_EVENTS:
                count += 1
                log.write(f"{event} {str(hargs)[:300]!r}\n")
                if count == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)

        sys.addaudithook(hook)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        from mcutrain.cli import run

        try:
            args() if callable(args) else run(args)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        try:
            os.write(wfd, traceback.format_exc().encode())
        except OSError:
            pass
    finally:
        os._exit(code)


def export_args(model: Path, out: Path, *extra: str) -> List[str]:
    return ["export", str(model), "--board", "native", "-o", str(out), *extra]


@pytest.fixture(scope="module")
def two_projects(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, Path, Dict[str, bytes], Dict[str, bytes]]:
    """Two different models (a.mct, b.mct) and their exported projects as references (exported once, with
    no kill): the model file in each is the model its model.c holds (the device model rebuilt from model.mct
    has the hash in mcutrain.json and in model.c)."""
    from mcutrain.cli.export import project_device_model
    from mcutrain.exporter.boards import get_board

    base = tmp_path_factory.mktemp("two")
    a, b = make_model(base / "a.mct", 1, 4), make_model(base / "b.mct", 2, 5)
    refs = []
    for m in (a, b):
        out = base / f"ref-{m.stem}"
        code, _ = run_cli(export_args(m, out))
        assert code == 0
        meta = json.loads((out / "mcutrain.json").read_text())
        assert (out / "model.mct").read_bytes() == m.read_bytes()
        h = project_device_model(str(out), meta, load_model(out / "model.mct"), get_board("native"), "m").hash()
        assert h.hex() == meta["hash"] and meta["kind"] == "project"
        assert "{" + ", ".join(f"0x{v:02x}" for v in h) + "}" in (out / "src" / "model.c").read_text()
        refs.append(files_of(out))
    assert refs[0]["src/model.c"] != refs[1]["src/model.c"]
    return a, b, refs[0], refs[1]


def kill_points(ops: List[str], target: Path, spread: int) -> List[int]:
    """1-based operation numbers to kill at: `spread` points over the whole run, and every operation from
    three before to three after each one that renames or removes a folder of the target's (the renameat2
    call raises no audit event: it sits between the last flush of the new folder and the removal of the
    folder it swapped out)."""
    n = len(ops)
    points = {1 + (k * (n - 1)) // max(1, spread - 1) for k in range(spread)}
    for i, op in enumerate(ops, start=1):
        if op.startswith(("os.rename", "os.replace", "shutil.rmtree", "ctypes")) and target.name in op:
            points.update(range(max(1, i - 3), min(n, i + 3) + 1))
    return sorted(points)


def leftovers(parent: Path, target: Path) -> List[str]:
    """Entries in parent that belong to an export of target but are not target itself."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{target.name}."))


@pytest.mark.parametrize("fallback", [False, True], ids=["exchange", "two-renames"])
def test_a_kill_at_any_moment_leaves_the_old_project_or_the_new_one(
    tmp_path: Path, two_projects: Tuple[Path, Path, Dict[str, bytes], Dict[str, bytes]], fallback: bool
) -> None:
    """Replace project A by project B with `export --force`, SIGKILLed before each of many operations (all
    of the swap's): afterwards the folder holds exactly A's files or exactly B's (so model.mct always matches
    model.c), never no project, half of one or a mix. With the two-rename fallback a kill between the renames
    leaves the old project beside its place, and the next export puts it back first (here recover(), which
    the next export calls first, also clears what the killed export left, so every kill run starts alike).
    A final export to the folder succeeds and leaves nothing else in the parent folder."""
    from mcutrain.exporter.folders import folder_lock, recover

    a, b, ref_a, ref_b = two_projects
    target = tmp_path / "fw"

    def reset_to_a() -> None:
        shutil.rmtree(target, ignore_errors=True)
        code, _ = run_cli(export_args(a, target))
        assert code == 0 and files_of(target) == ref_a

    reset_to_a()
    code, ops = run_cli(export_args(b, target, "--force"), fallback=fallback)
    assert code == 0 and files_of(target) == ref_b, ops[-5:]
    reset_to_a()
    points = kill_points(ops, target, spread=40)
    assert len(points) >= 20, points
    seen = {"old": 0, "new": 0, "recovered": 0}
    for k in points:
        code, done = run_cli(export_args(b, target, "--force"), kill_at=k, fallback=fallback)
        assert code == -signal.SIGKILL and len(done) == k, (k, code, done[-3:])
        if not target.exists():
            assert fallback, f"killed before {done[-1]}: no project at all"
            with folder_lock(target):
                recover(target)
            seen["recovered"] += 1
        got = files_of(target)
        assert got in (ref_a, ref_b), (
            f"killed before operation {k} ({done[-1]}): the project is neither A nor B "
            f"(differs in {sorted(n for n in set(got) | set(ref_a) if got.get(n) != ref_a.get(n))[:5]})"
        )
        seen["old" if got == ref_a else "new"] += 1
        with folder_lock(target):  # what the next export does first: the next kill run starts as the first
            recover(target)
        assert leftovers(tmp_path, target) == []
        if got == ref_b:
            reset_to_a()
    assert seen["old"] and seen["new"], seen
    if fallback:
        assert seen["recovered"], seen
    code, _ = run_cli(export_args(b, target, "--force"))
    assert code == 0 and files_of(target) == ref_b and leftovers(tmp_path, target) == []


def test_a_kill_at_any_moment_of_a_model_save_leaves_the_old_file_or_the_new_one(tmp_path: Path) -> None:
    """save_model over an existing model file, SIGKILLed before each of its file-system operations in turn:
    the file always loads, as the old model or the new one bit for bit, never missing, empty or mixed."""
    from helpers import same_bits

    old_bytes = make_model(tmp_path / "old.mct", 1, 4).read_bytes()
    new = load_model(make_model(tmp_path / "new.mct", 2, 4))
    old_params = load_model(tmp_path / "old.mct").net.params.copy()
    target = tmp_path / "m.mct"

    def save() -> None:
        save_model(target, new.net, new.optimizer, new.metadata)

    target.write_bytes(old_bytes)
    code, ops = run_cli(save)
    assert code == 0 and same_bits(load_model(target).net.params, new.net.params)
    assert 3 <= len(ops) < 100, ops
    seen = set()
    for k in range(1, len(ops) + 1):
        target.write_bytes(old_bytes)
        code, done = run_cli(save, kill_at=k)
        assert code == -signal.SIGKILL and len(done) == k, (k, code, done[-3:])
        params = load_model(target).net.params
        assert same_bits(params, old_params) or same_bits(params, new.net.params), f"killed before {done[-1]}"
        seen.add("old" if same_bits(params, old_params) else "new")
    assert seen == {"old", "new"}, seen


def test_the_next_export_puts_back_a_project_left_aside_by_a_crash(
    tmp_path: Path, two_projects: Tuple[Path, Path, Dict[str, bytes], Dict[str, bytes]]
) -> None:
    """The state a crash between the fallback's two renames leaves (the old project in .fw.mcutrain-old, a
    complete new one in .fw.mcutrain-new, nothing at fw): an export without --force puts the old project
    back and then refuses to replace it; with --force it replaces it. Nothing is left beside it."""
    a, b, ref_a, ref_b = two_projects
    target = tmp_path / "fw"
    assert run_cli(export_args(a, target))[0] == 0
    shutil.copytree(target, tmp_path / ".fw.mcutrain-new")
    target.rename(tmp_path / ".fw.mcutrain-old")
    assert run_cli(export_args(b, target))[0] == 1
    assert files_of(target) == ref_a and leftovers(tmp_path, target) == []
    target.rename(tmp_path / ".fw.mcutrain-old")
    assert run_cli(export_args(b, target, "--force"))[0] == 0
    assert files_of(target) == ref_b and leftovers(tmp_path, target) == []


def test_concurrent_exports_to_one_folder_take_turns(
    tmp_path: Path, two_projects: Tuple[Path, Path, Dict[str, bytes], Dict[str, bytes]]
) -> None:
    """Two processes export two models to one folder at the same moment, eight times: both succeed (the
    second waits for the first's lock), and the folder holds one whole project, never files of both (such
    as A's model.c with B's model.mct)."""
    a, b, ref_a, ref_b = two_projects
    target = tmp_path / "fw"
    finals = []
    for round_ in range(8):
        children = [Child(export_args(m, target, "--force"), hold=True) for m in ((a, b) if round_ % 2 else (b, a))]
        for c in children:
            c.go()
        results = [c.wait()[0] for c in children]
        assert results == [0, 0], (round_, results)
        got = files_of(target)
        assert got in (ref_a, ref_b), f"round {round_}: a mix of two projects"
        finals.append("a" if got == ref_a else "b")
        assert leftovers(tmp_path, target) == []
    assert set(finals) <= {"a", "b"}


def test_an_export_waits_for_the_lock_or_fails_clearly(tmp_path: Path) -> None:
    """While another writer holds the folder's lock, export_project waits up to lock_wait and then raises
    FolderBusyError naming the folder, having written nothing; once the lock is free it exports. Threads of
    one process take turns too."""
    from mcutrain.exporter.export import export_project
    from mcutrain.exporter.folders import FolderBusyError, folder_lock, lock_path

    model = make_model(tmp_path / "m.mct", 3, 4)
    target = tmp_path / "fw"
    with folder_lock(target):
        assert lock_path(target).exists()
        with pytest.raises(FolderBusyError, match=f"another mcutrain process is writing {target}"):
            export_project(model, "native", target, lock_wait=0.3)
        assert not target.exists()
    assert not lock_path(target).exists()
    errors: List[BaseException] = []

    def one() -> None:
        try:
            export_project(model, "native", target, force=True)
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and (target / "model.mct").read_bytes() == model.read_bytes()
    assert leftovers(tmp_path, target) == []


# ============================================================================ --force and the marker


@pytest.mark.parametrize(
    "content",
    [
        {"notes.txt": b"my notes"},
        {"notes.txt": b"my notes", "mcutrain.json": b"not json"},
        {"mcutrain.json": b'{"kind": "library", "name": "x"}'},
        {"mcutrain.json": b"[1, 2]", "src/main.c": b"int main(void) { return 0; }\n"},
    ],
    ids=["user-notes", "bad-marker", "other-kind", "marker-not-object"],
)
def test_force_never_replaces_a_folder_mcutrain_did_not_export(tmp_path: Path, content: Dict[str, bytes]) -> None:
    """`export --force` into a user's folder (notes, a marker that is not JSON, a marker of another kind, a
    marker that is not an object): exit code 1 and a message saying why, and the folder and its parent are
    exactly as they were."""
    model = make_model(tmp_path / "m.mct", 3, 4)
    user = tmp_path / "mine"
    for name, data in content.items():
        (user / name).parent.mkdir(parents=True, exist_ok=True)
        (user / name).write_bytes(data)
    before, parent_before = files_of(user), sorted(os.listdir(tmp_path))
    code, _ = run_cli(export_args(model, user, "--force"))
    assert code == 1
    assert files_of(user) == before and sorted(os.listdir(tmp_path)) == parent_before
    from mcutrain.exporter.export import export_project
    from mcutrain.exporter.folders import NotOurFolderError

    with pytest.raises(NotOurFolderError, match="so --force will not replace it") as e:
        export_project(model, "native", user, force=True)
    assert isinstance(e.value, McuTrainError) and str(user) in str(e.value)
    assert files_of(user) == before and sorted(os.listdir(tmp_path)) == parent_before


def test_force_replaces_projects_including_ones_exported_before_the_marker(tmp_path: Path) -> None:
    """A project's marker says kind 'project'; one exported by an older mcutrain (board and hash, no kind)
    is a project too; --force replaces both, and an empty folder needs no --force."""
    from mcutrain.exporter.folders import folder_kind

    model = make_model(tmp_path / "m.mct", 3, 4)
    out = tmp_path / "fw"
    assert run_cli(export_args(model, out))[0] == 0
    assert folder_kind(out) == "project"
    meta = json.loads((out / "mcutrain.json").read_text())
    del meta["kind"]
    (out / "mcutrain.json").write_text(json.dumps(meta))
    (out / "stale.txt").write_text("from the old export")
    assert folder_kind(out) == "project"
    assert run_cli(export_args(model, out, "--force"))[0] == 0
    assert not (out / "stale.txt").exists() and folder_kind(out) == "project"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli(export_args(model, empty))[0] == 0 and folder_kind(empty) == "project"


# ============================================================================ the output path, before any work


def test_the_output_folder_is_checked_before_any_work(tmp_path: Path) -> None:
    """A model too big for an Arduino Uno exported to a folder that cannot be made (below a file), to '' or
    to the current folder: the output error comes first (exit 1, not the memory plan's exit 3), and nothing
    is written; export_project checks the same way."""
    from mcutrain.exporter.export import export_project
    from mcutrain.exporter.folders import FolderError

    big = tmp_path / "big.mct"
    net = Sequential(L.Linear(100, 100), L.Tanh(), L.Linear(100, 10)).rand_params(seed=1)
    save_model(big, net, net.new_adam(TrainParams(lr=0.01)), {"loss": "mse"})
    (tmp_path / "notes.txt").write_text("mine")
    before = sorted(os.listdir(tmp_path))
    for out, words in [
        (str(tmp_path / "notes.txt" / "fw"), "is a file"),
        ("", "give the project a folder name"),
    ]:
        code, _ = run_cli(["export", str(big), "--board", "uno", "-o", out])
        assert code == 1, (out, code)
        with pytest.raises(FolderError, match=words):
            export_project(big, "uno", out)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        code, _ = run_cli(["export", str(big), "--board", "uno", "-o", "..", "--force"])
        assert code == 1
        with pytest.raises(FolderError, match="give the project a folder name"):
            export_project(big, "uno", "..", force=True)
        with pytest.raises(FolderError, match="is the current folder or holds it"):
            export_project(big, "uno", str(tmp_path.parent), force=True)
    finally:
        os.chdir(cwd)
    assert sorted(os.listdir(tmp_path)) == before and (tmp_path / "notes.txt").read_text() == "mine"
    # the same model to a good folder: the memory plan's error (exit 3), so the output check did not hide it
    assert run_cli(["export", str(big), "--board", "uno", "-o", str(tmp_path / "fw")])[0] == 3
