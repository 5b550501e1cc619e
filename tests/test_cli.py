"""The `mcutrain` command line, through click's test runner and through real subprocesses of the
installed entry point: every command, its --help, the errors users meet (with their exit codes and
without tracebacks), resuming an interrupted run bit for bit, the end-to-end path on the native
board, and the device commands against the native firmware over a pty."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import numpy as np
import pytest

from helpers import NativeFirmware, assert_same_bits, cli, same_bits
from mcutrain.modelfile import load_model

NET = "linear:20x35,sigmoid,linear:35x10,softmax"
SMALL = "linear:3x8,tanh,linear:8x3,softmax"
EXIT_ERROR, EXIT_USAGE, EXIT_NO_FIT, EXIT_MISSING_TOOL, EXIT_INTERRUPTED = 1, 2, 3, 4, 130

COMMANDS = [
    [],
    ["train"],
    ["eval"],
    ["info"],
    ["plot"],
    ["boards"],
    ["export"],
    ["build"],
    ["flash"],
    ["sim"],
    ["serve"],
    ["device"],
    ["device", "info"],
    ["device", "predict"],
    ["device", "train"],
    ["device", "pull"],
    ["device", "push"],
    ["device", "save"],
]


# ---------------------------------------------------------------- helpers


def entry_point() -> str:
    """The installed `mcutrain` script of this Python (else the one on PATH)."""
    exe = Path(sys.executable).parent / "mcutrain"
    if exe.is_file():
        return str(exe)
    found = shutil.which("mcutrain")
    if not found:
        pytest.fail("the mcutrain entry point is not installed: run `pip install -e .`")
    return found


def sub(
    *args: str, cwd: Path, env: Optional[Dict[str, str]] = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    """Run the installed entry point in a subprocess (stdin closed)."""
    return subprocess.run(
        [entry_point(), *args],
        cwd=str(cwd),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def assert_clean_error(code: int, expected_code: int, stderr: str, *words: str) -> None:
    """A non-zero exit with one 'error: ...' message containing words, and no traceback."""
    assert code == expected_code, stderr
    assert "Traceback" not in stderr
    assert stderr.startswith("error: "), stderr
    for w in words:
        assert w in stderr, (w, stderr)


def modadd_all() -> tuple:
    """Every (left, right) pair of addition mod 10: inputs (100, 20), integer labels (100,)."""
    left, r = np.divmod(np.arange(100), 10)
    x = np.zeros((100, 20), np.float32)
    x[np.arange(100), left] = 1
    x[np.arange(100), 10 + r] = 1
    return x, (left + r) % 10


def write_blobs_csv(path: Path, n: int = 300, features: int = 3, seed: int = 7) -> None:
    """A CSV with a header: `features` numbers and a class label (the largest feature's index)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, features))
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([f"f{i}" for i in range(features)] + ["label"])
        for row in x:
            w.writerow([f"{v:.6f}" for v in row] + [int(np.argmax(row[:3]))])


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module", autouse=True)
def tool_dirs(pio_core: Path) -> Path:
    """The session's own PlatformIO core folder and caches (conftest.pio_core), which the subprocesses
    inherit."""
    return pio_core


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="module")
def model(workdir: Path) -> Path:
    """The built-in example, trained for 1500 steps."""
    out = workdir / "model.mct"
    r = cli("train", "--steps", "1500", "-o", str(out), "--log", str(workdir / "model.jsonl"))
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def native_project(workdir: Path, model: Path) -> Path:
    """The model exported for the native board and built, through the entry point."""
    proj = workdir / "fw"
    r = sub("export", str(model), "--board", "native", "-o", str(proj), cwd=workdir)
    assert r.returncode == 0, r.stderr
    r = sub("build", str(proj), cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert (proj / ".pio" / "build" / "native" / "program").is_file()
    return proj


@pytest.fixture
def firmware(native_project: Path, tmp_path: Path) -> Iterator[NativeFirmware]:
    fw = NativeFirmware(native_project, tmp_path / "store.bin")
    yield fw
    fw.close()


# ---------------------------------------------------------------- --help

# the heading of the examples in a command's --help; the top-level group shows the whole path instead
EXAMPLE_HEADING = "Example:"
GROUP_EXAMPLE_HEADING = "The whole path on the built-in example"


def example_lines(help_text: str, top_level: bool) -> List[str]:
    """The lines of the example section of a --help text: the lines after the heading ('Example:', or for
    the top-level group 'The whole path on the built-in example...:') up to the first blank line, stripped;
    [] when there is no such section."""
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        text = line.strip()
        if (text.startswith(GROUP_EXAMPLE_HEADING) and text.endswith(":")) if top_level else text == EXAMPLE_HEADING:
            section = []
            for body in lines[i + 1 :]:
                if not body.strip():
                    break
                section.append(body.strip())
            return section
    return []


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "mcutrain")
def test_help_shows_an_example(cmd: List[str]) -> None:
    """Every command's --help has an example section whose lines are command lines of that command
    (`mcutrain <cmd> ...`); the top-level group's shows the whole path (train, export, sim)."""
    r = cli(*cmd, "--help")
    assert r.exit_code == 0
    examples = example_lines(r.output, top_level=not cmd)
    assert examples, f"no example section in the help of {' '.join(['mcutrain', *cmd])}:\n{r.output}"
    prefix = " ".join(["mcutrain", *cmd])
    wrong = [e for e in examples if not (e == prefix or e.startswith(prefix + " "))]
    assert not wrong, f"example lines that do not start with {prefix!r}: {wrong}"
    if not cmd:
        assert [e.split()[1] for e in examples] == ["train", "export", "sim"], examples


def test_help_through_the_entry_point(tmp_path: Path) -> None:
    for cmd in COMMANDS:
        r = sub(*cmd, "--help", cwd=tmp_path)
        assert r.returncode == 0, (cmd, r.stderr)
        assert "Usage: mcutrain" in r.stdout
        assert f"mcutrain {' '.join(cmd)}".strip() in r.stdout.split("Options:")[0] or not cmd
    top = sub("--help", cwd=tmp_path).stdout
    for code in ("130", "fit", "missing"):
        assert code in top


# ---------------------------------------------------------------- train


def test_train_without_arguments_trains_the_builtin_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = cli("train")
    assert r.exit_code == 0, r.output
    assert "built-in example" in r.stderr
    ck = load_model(tmp_path / "model.mct")
    x, labels = modadd_all()
    assert np.mean(ck.net.forward(x).argmax(axis=1) == labels) >= 0.95
    assert ck.optimizer is not None and ck.optimizer.step == 3000
    again = cli("train")
    assert again.exit_code == EXIT_ERROR and "--force" in again.stderr
    assert same_bits(load_model(tmp_path / "model.mct").net.params, ck.net.params)  # untouched
    assert cli("train", "--force", "--steps", "10").exit_code == 0
    assert load_model(tmp_path / "model.mct").optimizer.step == 10


def test_train_csv_with_epochs_validation_and_log(tmp_path: Path) -> None:
    data = tmp_path / "blobs.csv"
    write_blobs_csv(data)
    out, log = tmp_path / "b.mct", tmp_path / "b.jsonl"
    r = cli(
        "train",
        "--net",
        SMALL,
        "--data",
        str(data),
        "--classify",
        "--epochs",
        "30",
        "--batch",
        "16",
        "--val",
        "0.2",
        "--lr",
        "0.05",
        "--opt",
        "momentum",
        "--l2",
        "1e-4",
        "--clip",
        "5",
        "--log",
        str(log),
        "--log-every",
        "5",
        "-o",
        str(out),
    )
    assert r.exit_code == 0, r.output
    steps = 30 * -(-240 // 16)
    ck = load_model(out)
    assert ck.optimizer.step == steps and ck.optimizer.kind == "momentum"
    assert ck.optimizer.params.l2 == pytest.approx(1e-4) and ck.optimizer.params.clip == 5
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert recs[0]["event"] == "start" and recs[0]["settings"]["batch"] == 16
    step_recs = [r for r in recs if r["event"] == "step"]
    assert step_recs[-1]["step"] == steps
    assert all(r["lr"] == pytest.approx(0.05) for r in step_recs)
    assert step_recs[-1]["val_accuracy"] > 0.8
    # the validation accuracy in the log is the model's on the held-out 20% (any split): check on all rows
    rows = np.loadtxt(data, delimiter=",", skiprows=1)
    acc = np.mean(ck.net.forward(rows[:, :3].astype(np.float32)).argmax(axis=1) == rows[:, 3])
    assert acc > 0.8


def test_train_net_files(tmp_path: Path) -> None:
    toml = tmp_path / "net.toml"
    toml.write_text(
        'layers = [\n {type = "Linear", n_in = 8, n_out = 12},\n {type = "Tanh"},\n'
        ' {type = "Linear", n_in = 12, n_out = 2},\n {type = "Softmax"},\n]\n'
    )
    r = cli("train", "--net-file", str(toml), "--problem", "parity8", "--steps", "50", "-o", str(tmp_path / "p.mct"))
    assert r.exit_code == 0, r.output
    assert load_model(tmp_path / "p.mct").net.param_count() == 8 * 12 + 12 + 12 * 2 + 2
    js = tmp_path / "net.json"
    js.write_text(json.dumps({"layers": [{"type": "Linear", "n_in": 3, "n_out": 1}]}))
    r = cli(
        "train",
        "--net-file",
        str(js),
        "--problem",
        "axplusb",
        "--steps",
        "20",
        "--loss",
        "huber:0.5",
        "--opt",
        "rmsprop",
        "-o",
        str(tmp_path / "a.mct"),
    )
    assert r.exit_code == 0, r.output
    assert load_model(tmp_path / "a.mct").metadata["loss"] == "huber:0.5"


@pytest.mark.parametrize(
    "args, words",
    [
        (["--net", "linear:20x35,sigmoid,linear:36x10,softmax", "--problem", "modadd10"], ["35", "36"]),
        (["--net", "linear:8x4,softmax", "--problem", "modadd10"], ["takes 8 inputs", "20"]),
        (["--net", "linear:20x4,softmax", "--problem", "modadd10"], ["outputs 4", "10 targets"]),
        (["--net", "linear:20x10", "--problem", "nosuch"], ["unknown problem"]),
        (["--net", "linear:20x10", "--problem", "modadd10", "--loss", "nope"], ["unknown loss"]),
        (["--net", "linear:20x10", "--problem", "modadd10", "--epochs", "2"], ["--epochs needs a data file"]),
        (["--net", "linear:20x10", "--problem", "modadd10", "--lr", "-1"], ["lr must be"]),
        (["--net", "bogus:3"], ["unknown layer"]),
        (["--net", "linear:3x1", "--data", "missing.csv"], ["does not exist"]),
    ],
)
def test_train_errors_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: List[str], words: List[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    r = cli("train", *args)
    assert_clean_error(r.exit_code, EXIT_ERROR, r.stderr, *words)
    assert not (tmp_path / "model.mct").exists()


def test_train_usage_errors_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli("train", "--opt", "nadam").exit_code == EXIT_USAGE
    assert cli("train", "--batch", "0").exit_code == EXIT_USAGE
    assert cli("nosuchcommand").exit_code == EXIT_USAGE


def test_train_errors_through_the_entry_point(tmp_path: Path) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_text('layers = [{type = "Linear", n_in = 20, n_out = 35}, {type = "Linear", n_in = 36, n_out = 10}]\n')
    r = sub("train", "--net-file", str(toml), "--problem", "modadd10", cwd=tmp_path)
    assert_clean_error(r.returncode, EXIT_ERROR, r.stderr, "35", "36")
    data = tmp_path / "wide.csv"
    write_blobs_csv(data, features=4)
    r = sub("train", "--net", SMALL, "--data", str(data), "--classify", cwd=tmp_path)
    assert_clean_error(r.returncode, EXIT_ERROR, r.stderr, "takes 3 inputs", "has 4")
    r = sub("--debug", "train", "--net", SMALL, "--data", str(data), "--classify", cwd=tmp_path)
    assert r.returncode == EXIT_ERROR and "Traceback" in r.stderr and "DataError" in r.stderr
    assert not (tmp_path / "model.mct").exists()


# ---------------------------------------------------------------- resume


def _compare_checkpoints(a: Path, b: Path) -> None:
    ca, cb = load_model(a), load_model(b)
    assert_same_bits(ca.net.params, cb.net.params, "parameters")
    assert_same_bits(ca.optimizer.state, cb.optimizer.state, "optimizer state")
    assert ca.optimizer.train_state.dtype == cb.optimizer.train_state.dtype
    assert ca.optimizer.train_state.tobytes() == cb.optimizer.train_state.tobytes(), "train state"


def test_resume_after_an_interruption_is_bit_identical(tmp_path: Path) -> None:
    data = tmp_path / "blobs.csv"
    write_blobs_csv(data)
    common = [
        "--net",
        SMALL,
        "--data",
        str(data),
        "--classify",
        "--epochs",
        "7",
        "--batch",
        "24",
        "--val",
        "0.2",
        "--opt",
        "adam",
        "--schedule",
        "cosine",
        "--warmup",
        "5",
        "--seed",
        "3",
        "--lr",
        "0.03",
    ]
    assert cli("train", *common, "-o", str(tmp_path / "a.mct"), "-q").exit_code == 0
    r = cli("train", *common, "-o", str(tmp_path / "b.mct"), "--stop-after", "37", "--log", str(tmp_path / "b.jsonl"))
    assert r.exit_code == EXIT_INTERRUPTED
    assert "interrupted at step 37" in r.stderr and "--resume" in r.stderr
    assert load_model(tmp_path / "b.mct").optimizer.step == 37
    r = cli("train", "--resume", str(tmp_path / "b.mct"), "--log", str(tmp_path / "b.jsonl"))
    assert r.exit_code == 0, r.output
    assert "note" not in r.stderr
    _compare_checkpoints(tmp_path / "a.mct", tmp_path / "b.mct")
    steps = [
        rec["step"]
        for rec in map(json.loads, (tmp_path / "b.jsonl").read_text().splitlines())
        if rec["event"] == "step"
    ]
    assert steps == sorted(steps) and steps[-1] == 7 * 10
    # a completed run has nothing left to do; a larger --steps continues it
    assert "nothing to do" in cli("train", "--resume", str(tmp_path / "b.mct")).stderr
    assert cli("train", "--resume", str(tmp_path / "b.mct"), "--steps", "80").exit_code == 0
    assert load_model(tmp_path / "b.mct").optimizer.step == 80


def test_resume_rules(tmp_path: Path) -> None:
    m = tmp_path / "m.mct"
    base = ["--net", "linear:8x4,tanh,linear:4x2,softmax", "--problem", "parity8", "--steps", "100", "--opt", "rmsprop"]
    assert cli("train", *base, "-o", str(m), "--stop-after", "10").exit_code == EXIT_INTERRUPTED
    r = cli("train", "--resume", str(m), "--net", "linear:8x2")
    assert_clean_error(r.exit_code, EXIT_ERROR, r.stderr, "--net cannot be used with --resume")
    r = cli("train", "--resume", str(m), "--opt", "adam")
    assert_clean_error(r.exit_code, EXIT_ERROR, r.stderr, "rmsprop")
    other = tmp_path / "other.mct"
    other.write_bytes(b"keep me")
    r = cli("train", "--resume", str(m), "-o", str(other))
    assert r.exit_code == EXIT_ERROR and other.read_bytes() == b"keep me"
    r = cli("train", "--resume", str(m), "--lr", "0.001", "-o", str(tmp_path / "lower.mct"))
    assert r.exit_code == 0 and "--lr" in r.stderr and "not exactly" in r.stderr
    ck = load_model(tmp_path / "lower.mct")
    assert ck.optimizer.params.lr == pytest.approx(0.001) and ck.optimizer.step == 100
    assert load_model(m).optimizer.step == 10  # the checkpoint itself was left alone


def test_ctrl_c_saves_a_checkpoint_and_resume_matches(tmp_path: Path) -> None:
    """A real SIGINT to the entry point mid-run, then --resume: the same bits as a run never stopped."""
    args = [
        "--net",
        "linear:8x16,tanh,linear:16x2,softmax",
        "--problem",
        "parity8",
        "--opt",
        "momentum",
        "--batch",
        "8",
    ]
    proc = subprocess.Popen(
        [entry_point(), "train", *args, "--steps", "100000000", "--checkpoint-every", "200", "-o", "run.mct"],
        cwd=str(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "run.mct").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    if not (tmp_path / "run.mct").exists():
        status = proc.poll()
        proc.kill()
        _, err = proc.communicate(timeout=60)
        pytest.fail(f"no checkpoint within 60 s of training (exit status {status}):\n{err}")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "saved a checkpoint" in err
    k = load_model(tmp_path / "run.mct").optimizer.step
    assert k >= 200
    r = sub("train", "--resume", "run.mct", "--steps", str(k + 150), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert cli("train", *args, "--steps", str(k + 150), "-o", str(tmp_path / "ref.mct")).exit_code == 0
    _compare_checkpoints(tmp_path / "ref.mct", tmp_path / "run.mct")


# ---------------------------------------------------------------- eval, info, plot, boards


def test_eval_reports_loss_accuracy_and_confusion(model: Path, tmp_path: Path) -> None:
    x, labels = modadd_all()
    np.savez(tmp_path / "all.npz", x=x, y=labels)
    r = cli("eval", str(model), "--data", str(tmp_path / "all.npz"), "--classify", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    y = load_model(model).net.forward(x).astype(np.float64)
    assert res["samples"] == 100
    assert res["accuracy"] == pytest.approx(np.mean(y.argmax(axis=1) == labels))
    assert res["loss"] == pytest.approx(np.mean(-np.log(np.maximum(y[np.arange(100), labels], 1e-30))), rel=1e-5)
    want = np.zeros((10, 10), int)
    np.add.at(want, (labels, y.argmax(axis=1)), 1)
    assert np.array_equal(np.array(res["confusion"]), want)
    text = cli("eval", str(model)).stdout  # its own data: fresh samples of modadd10
    assert "accuracy" in text and "confusion matrix" in text and "modadd10" in text


def test_eval_quantized_through_the_c_kernels(model: Path, tmp_path: Path) -> None:
    """--quant evaluates the model the device would run: its accuracy is the one the device's own layer
    table gives (the exporter's device model run by the host twin), and close to the f32 network's."""
    from mcutrain.exporter.device import build_device_model
    from mcutrain.exporter.twin import DeviceTwin

    ck = load_model(model)
    x, labels = modadd_all()
    np.savez(tmp_path / "all.npz", x=x, y=labels)
    f32 = json.loads(cli("eval", str(model), "--data", str(tmp_path / "all.npz"), "--classify", "--json").stdout)
    for quant in ("int8", "int8-full"):
        r = cli(
            "eval",
            str(model),
            "--data",
            str(tmp_path / "all.npz"),
            "--classify",
            "--quant",
            quant,
            "--trainable",
            "none",
            "--calibration",
            str(tmp_path / "all.npz"),
            "--json",
        )
        assert r.exit_code == 0, r.output
        res = json.loads(r.stdout)
        q = res["quantization"]
        assert q["quant"] == quant and q["f32_accuracy"] == pytest.approx(f32["accuracy"])
        # the device's model, built here from the model file and run by the host twin of the device
        m = build_device_model(ck, "none", quant, calibration=x if quant == "int8-full" else None)
        device_accuracy = float(np.mean(DeviceTwin(m).predict(x).argmax(axis=1) == labels))
        assert q["device_accuracy"] == device_accuracy and res["accuracy"] == device_accuracy
        assert 0 < q["max_abs_diff"] < 0.5  # really quantized, and still close
        assert res["accuracy"] >= f32["accuracy"] - 0.1
    r = sub("eval", str(model), "--problem", "modadd10", "--quant", "int8", "--trainable", "none", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "int8" in r.stdout and "accuracy" in r.stdout


def test_info_layer_table_and_memory_plan(model: Path, tmp_path: Path) -> None:
    r = cli("info", str(model))
    assert r.exit_code == 0
    for cell in ("Linear(20, 35)", "735", "700", "Linear(35, 10)", "360", "350", "1,095", "1,050", "adam"):
        assert cell in r.stdout
    r = sub("info", str(model), "--board", "uno", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "memory plan for uno" in r.stdout and "fits uno: NO" in r.stdout
    r = sub("info", str(model), "--board", "native", cwd=tmp_path)
    assert "fits native: yes" in r.stdout


def test_plot_log_and_weights(model: Path, workdir: Path, tmp_path: Path) -> None:
    import matplotlib.image as mpimg

    r = cli("plot", str(workdir / "model.jsonl"), "-o", str(tmp_path / "loss.png"))
    assert r.exit_code == 0, r.output
    r = sub("plot", str(model), "--weights", "-o", str(tmp_path / "w.png"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for png in ("loss.png", "w.png"):
        img = mpimg.imread(tmp_path / png)
        assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300
        assert img[..., :3].std() > 0.05  # not a blank canvas
    r = cli("plot", str(model), "-o", str(tmp_path / "w.png"))
    assert r.exit_code == EXIT_ERROR and "--force" in r.stderr
    (tmp_path / "junk.txt").write_text("not a log\n")
    r = cli("plot", str(tmp_path / "junk.txt"))
    assert_clean_error(r.exit_code, EXIT_ERROR, r.stderr, "no training steps")


def test_boards_table(tmp_path: Path) -> None:
    from mcutrain.exporter.boards import all_boards

    rows = json.loads(cli("boards", "--json").stdout)
    by_name = {r["name"]: r for r in rows}
    assert set(by_name) == {b.name for b in all_boards()}
    assert by_name["uno"]["ram"] == 2048 and by_name["uno"]["fpu"] is False
    assert by_name["native"]["simulator"] == "native" and by_name["native"]["simulator_status"] == "ready"
    r = sub("boards", cwd=tmp_path)
    assert r.returncode == 0
    assert all(name in r.stdout for name in by_name) and "simulator" in r.stdout


# ---------------------------------------------------------------- export, build, flash, sim


def test_export_writes_the_project_and_refuses_to_overwrite(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "p"
    r = cli("export", str(model), "--board", "native", "-o", str(out))
    assert r.exit_code == 0, r.output
    meta = json.loads((out / "mcutrain.json").read_text())
    assert meta["board"] == "native" and meta["hash"] in r.stdout and "memory plan" in r.stdout
    assert (out / "model.mct").read_bytes() == model.read_bytes()
    r = cli("export", str(model), "--board", "native", "-o", str(out))
    assert_clean_error(r.exit_code, EXIT_ERROR, r.stderr, "--force")
    assert cli("export", str(model), "--board", "native", "-o", str(out), "--force").exit_code == 0
    r = cli(
        "export", str(model), "--board", "native", "--quant", "int8", "--trainable", "last:1", "-o", str(tmp_path / "q")
    )
    assert r.exit_code == 0 and "quantization int8" in r.stdout


def test_export_errors(model: Path, tmp_path: Path) -> None:
    r = cli("export", str(model), "--board", "nosuch", "-o", str(tmp_path / "x"))
    assert_clean_error(r.exit_code, EXIT_ERROR, r.stderr, "unknown board", "uno", "mcutrain boards")
    r = sub("export", str(model), "--board", "nosuch", cwd=tmp_path)
    assert_clean_error(r.returncode, EXIT_ERROR, r.stderr, "unknown board")
    r = cli("export", str(model), "--board", "uno", "-o", str(tmp_path / "u"))
    assert_clean_error(r.exit_code, EXIT_NO_FIT, r.stderr, "does not fit", "2,048")
    r = sub("export", str(model), "--board", "uno", "-o", "u", cwd=tmp_path)
    assert_clean_error(r.returncode, EXIT_NO_FIT, r.stderr, "does not fit", "--trainable")
    assert not (tmp_path / "u").exists()
    r = cli("export", str(model), "--board", "native", "--trainable", "last:9", "-o", str(tmp_path / "t"))
    assert_clean_error(r.exit_code, EXIT_ERROR, r.stderr, "last:9")


def test_build_flash_and_sim_in_process(native_project: Path, tmp_path: Path) -> None:
    r = cli("build", str(native_project), "--env", "native")
    assert r.exit_code == 0, r.output
    assert "built" in r.stdout
    r = cli("build", str(native_project), "--board", "uno")
    assert_clean_error(r.exit_code, EXIT_ERROR, r.stderr, "exported for native")
    r = cli("build", str(native_project), "--env", "nosuch")
    assert_clean_error(r.exit_code, EXIT_ERROR, r.stderr, "no env")
    # the native "upload" runs the program; with stdin at end of file it ends at once
    saved = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        r = cli("flash", str(native_project), "--board", "native")
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(null)
    assert r.exit_code == 0, r.output
    report = tmp_path / "sim.json"
    r = cli("sim", str(native_project), "--no-build", "--report", str(report))
    assert r.exit_code == 0, r.output
    assert "predictions on 5 samples" in r.stdout and "match bit for bit" in r.stdout
    checks = json.loads(report.read_text())["check"]
    assert checks["predict"]["ok"] and checks["predict"]["max_diff"] == 0.0
    assert checks["train"]["ok"] and checks["train"]["device_loss"] == checks["train"]["host_loss"]
    r = cli("sim", str(tmp_path))
    assert_clean_error(r.exit_code, EXIT_ERROR, r.stderr, "not an exported project")


def test_flash_through_the_entry_point(native_project: Path, tmp_path: Path) -> None:
    """`pio run -t upload` for real: on the native board "upload" runs the program, which ends at once
    because its stdin (the subprocess's) is at end of file."""
    r = sub("flash", str(native_project), "--board", "native", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "flashed" in r.stdout
    r = sub("flash", str(native_project), "--board", "uno", "--port", "/dev/null", cwd=tmp_path)
    assert_clean_error(r.returncode, EXIT_ERROR, r.stderr, "exported for native")


def test_missing_platformio(native_project: Path, tmp_path: Path) -> None:
    """build, flash and sim need PlatformIO: through the entry point with platformio made unimportable (a
    shadowing package that raises ImportError, the honest way to hide an installed module) and no
    pio/platformio on PATH, each exits 4 saying how to install it."""
    shadow = tmp_path / "shadow" / "platformio"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('platformio hidden by the test')\n")
    path = os.pathsep.join(
        d
        for d in os.environ["PATH"].split(os.pathsep)
        if not any((Path(d) / n).exists() for n in ("pio", "platformio"))
    )
    env = {**os.environ, "PYTHONPATH": str(shadow.parent), "PATH": path}
    for args in (["build", str(native_project)], ["flash", str(native_project)], ["sim", str(native_project)]):
        r = sub(*args, cwd=tmp_path, env=env)
        assert_clean_error(
            r.returncode, EXIT_MISSING_TOOL, r.stderr, "PlatformIO is not installed", "pip install platformio"
        )


def test_missing_simulator(native_project: Path, model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    r = sub("sim", str(native_project), cwd=tmp_path, env={**os.environ, "PATH": str(empty)})
    assert_clean_error(r.returncode, EXIT_MISSING_TOOL, r.stderr, "gcc not found", "apt-get install")
    assert cli("export", str(model), "--board", "nucleo_f401re", "-o", str(tmp_path / "q")).exit_code == 0
    no_qemu = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "qemu-system-arm").exists()
    )
    monkeypatch.setenv("PATH", no_qemu)
    r = cli("sim", str(tmp_path / "q"))
    assert_clean_error(r.exit_code, EXIT_MISSING_TOOL, r.stderr, "qemu-system-arm", "not found")


def test_end_to_end_through_the_entry_point(tmp_path: Path) -> None:
    """train -> export (native) -> build -> sim: the device's predictions match the host's."""
    steps = [
        ["train", "--steps", "800", "-o", "m.mct", "--log", "m.jsonl"],
        ["export", "m.mct", "--board", "native", "-o", "fw"],
        ["build", "fw"],
        ["sim", "fw", "--report", "report.json"],
    ]
    outputs = []
    for args in steps:
        r = sub(*args, cwd=tmp_path)
        assert r.returncode == 0, (args, r.stderr)
        outputs.append(r.stdout)
    assert "saved m.mct" in outputs[0] and "wrote fw" in outputs[1] and "built fw" in outputs[2]
    assert "device and host (same C core) match bit for bit" in outputs[3]
    assert json.loads((tmp_path / "report.json").read_text())["check"]["predict"]["ok"]


@pytest.mark.parametrize("board", ["nucleo_f401re", "uno"])
def test_sim_on_a_simulated_board(tmp_path: Path, board: str) -> None:
    """Boards that are not this computer: QEMU stands in for the Nucleo-F401RE (Cortex-M4F), simavr for
    the Uno (ATmega328P)."""
    small = ["--net", "linear:8x6,tanh,linear:6x2,softmax", "--problem", "parity8", "--steps", "200"]
    assert cli("train", *small, "-o", str(tmp_path / "s.mct")).exit_code == 0
    assert cli("export", str(tmp_path / "s.mct"), "--board", board, "--sim", "-o", str(tmp_path / "q")).exit_code == 0
    r = sub("sim", "q", "--report", "q.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "match bit for bit" in r.stdout and "per PREDICT" in r.stdout
    rep = json.loads((tmp_path / "q.json").read_text())
    assert rep["predict"] > 0 and rep["check"]["train"]["ok"]


# ---------------------------------------------------------------- device commands over a pty


def _host_training(project: Path, x: np.ndarray, t: np.ndarray) -> tuple:
    """What the device's TRAIN does, sample after sample, on the host's C core (from the exported state)."""
    from mcutrain import losses
    from mcutrain.exporter.device import build_device_model
    from mcutrain.exporter.twin import DeviceTwin

    ck = load_model(project / "model.mct")
    m = build_device_model(ck, "all", "f32", losses.cross_entropy)
    twin = DeviceTwin(m)
    for xi, ti in zip(x, t):
        twin.train(xi, ti)
    return twin.params.copy(), twin.state.reshape(m.opt_slots, twin.n_params).copy()


def _write_samples(path: Path, n: int, seed: int) -> tuple:
    """n modadd10 samples as a CSV (20 inputs and the label), in file order."""
    x, labels = modadd_all()
    idx = np.random.default_rng(seed).permutation(100)[:n]
    np.savetxt(path, np.column_stack([x[idx], labels[idx]]), delimiter=",", fmt="%g")
    t = np.zeros((n, 10), np.float32)
    t[np.arange(n), labels[idx]] = 1
    return x[idx], t


def test_device_commands_in_process(
    firmware: NativeFirmware, native_project: Path, model: Path, tmp_path: Path
) -> None:
    port, proj = firmware.port, str(native_project)
    meta = json.loads((native_project / "mcutrain.json").read_text())
    r = cli("device", "info", "--port", port, "--project", proj)
    assert r.exit_code == 0, r.output
    assert meta["hash"] in r.stdout and "matches" in r.stdout
    # predict from a CSV: the device's outputs are the host's, bit for bit
    x, _ = modadd_all()
    np.savetxt(tmp_path / "in.csv", x[:7], delimiter=",", fmt="%g")
    r = cli("device", "predict", "--port", port, "--data", str(tmp_path / "in.csv"), "-o", str(tmp_path / "out.csv"))
    assert r.exit_code == 0, r.output
    got = np.loadtxt(tmp_path / "out.csv", delimiter=",", skiprows=1, dtype=np.float64).astype(np.float32)
    assert same_bits(got, load_model(model).net.forward(x[:7]))
    # train on 30 labelled samples, pull: exactly the host's C core after the same 30 updates
    xs, ts = _write_samples(tmp_path / "train.csv", 30, seed=5)
    r = cli("device", "train", "--port", port, "--data", str(tmp_path / "train.csv"), "--classify")
    assert r.exit_code == 0, r.output
    assert "trained on 30 samples" in r.stdout and "device step 30" in r.stdout
    r = cli("device", "pull", "--port", port, "--project", proj, "-o", str(tmp_path / "pulled.mct"))
    assert r.exit_code == 0, r.output
    pulled = load_model(tmp_path / "pulled.mct")
    want_params, want_state = _host_training(native_project, xs, ts)
    assert same_bits(pulled.net.params, want_params)
    assert same_bits(pulled.optimizer.state, want_state) and pulled.optimizer.step == 30
    assert (
        cli("device", "pull", "--port", port, "--project", proj, "-o", str(tmp_path / "pulled.mct")).exit_code
        == EXIT_ERROR
    )
    # push another model's parameters: the device now predicts like that model
    other = tmp_path / "other.mct"
    assert cli("train", "--steps", "300", "--seed", "9", "-o", str(other), "-q").exit_code == 0
    r = cli("device", "push", "--port", port, "--project", proj, "--model", str(other))
    assert r.exit_code == 0, r.output
    r = cli("device", "predict", "--port", port, "--data", str(tmp_path / "in.csv"), "--argmax")
    rows = np.array([line.split(",") for line in r.stdout.strip().splitlines()[1:]], np.float64)
    assert same_bits(rows[:, :10].astype(np.float32), load_model(other).net.forward(x[:7]))
    assert np.array_equal(rows[:, 10], rows[:, :10].argmax(axis=1))
    r = cli("device", "save", "--port", port)
    assert r.exit_code == 0 and "save #1" in r.stdout
    assert firmware.store.stat().st_size > 0


def test_device_errors(firmware: NativeFirmware, model: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    assert cli("train", "--steps", "10", "--seed", "4", "-o", str(tmp_path / "o.mct")).exit_code == 0
    assert cli("export", str(tmp_path / "o.mct"), "--board", "native", "-o", str(other)).exit_code == 0
    r = cli("device", "info", "--port", firmware.port, "--project", str(other))
    assert_clean_error(r.exit_code, EXIT_ERROR, r.stderr, "the device runs model")
    r = cli("device", "train", "--port", firmware.port, "--problem", "parity8")
    assert_clean_error(r.exit_code, EXIT_ERROR, r.stderr, "the device's model takes 20")
    r = cli("device", "info", "--port", str(tmp_path / "no-such-port"))
    assert_clean_error(r.exit_code, EXIT_ERROR, r.stderr, "cannot open")


def test_device_commands_through_the_entry_point(
    firmware: NativeFirmware, native_project: Path, model: Path, tmp_path: Path
) -> None:
    port, proj = firmware.port, str(native_project)
    r = sub("device", "info", "--port", port, "--project", proj, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    x, labels = modadd_all()
    values = ",".join(f"{v:g}" for v in x[42])
    r = sub("device", "predict", "--port", port, "--values", values, "--argmax", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    row = np.array(r.stdout.strip().splitlines()[1].split(","), np.float64)
    assert same_bits(row[:10].astype(np.float32), load_model(model).net.forward(x[42]))
    xs, ts = _write_samples(tmp_path / "train.csv", 12, seed=8)
    r = sub("device", "train", "--port", port, "--data", "train.csv", "--classify", "--save", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "trained on 12 samples" in r.stdout and "saved" in r.stdout
    r = sub("device", "pull", "--port", port, "--project", proj, "-o", "pulled.mct", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert same_bits(load_model(tmp_path / "pulled.mct").net.params, _host_training(native_project, xs, ts)[0])
    r = sub("device", "push", "--port", port, "--project", proj, "--with-state", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = sub("device", "save", "--port", port, cwd=tmp_path)
    assert r.returncode == 0 and "save #2" in r.stdout
    r = sub("device", "info", "--port", port, cwd=tmp_path)
    assert re.search(r"training step\s+1,?500", r.stdout), r.stdout  # the pushed optimizer's step
