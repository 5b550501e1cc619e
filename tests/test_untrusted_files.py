"""Every JSON, JSON-lines and TOML file mcutrain reads is untrusted (issue 25, class 3): a training log for
`mcutrain plot`, an architecture file, a fleet file, a board file, an exported project's marker, a Keras
archive's config.json. Text that is not UTF-8, that does not parse, that nests 100,000 deep or holds values
of the wrong kind ends in the reader's own error (an McuTrainError naming the file) and on the command line in
one line with exit code 1: never a UnicodeDecodeError, a RecursionError or "unexpected ... please report it".

The property-based tests feed each reader generated files: random bytes, random JSON/TOML values, and
mutations of a valid file (bytes replaced, a nesting of random depth spliced in, a non-UTF-8 byte added)."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcutrain import McuTrainError
from mcutrain.architecture import load_architecture_file
from mcutrain.exporter.boards import BoardError, load_board_file
from mcutrain.exporter.paths import boards_dir
from mcutrain.plaindata import MAX_DEPTH, json_lines, parse_json, parse_toml
from mcutrain.recorder import Recorder, read_log

FILES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def good_log() -> bytes:
    """A log as `mcutrain train --log` writes it (fixed times): start, 5 steps with a validation metric, end."""
    recs = [{"event": "start", "net": "linear:2x2", "time": 1.0}]
    recs += [{"event": "step", "step": i, "loss": 1.0 / i, "lr": 0.01, "elapsed": 0.1 * i, "val_loss": 0.5 / i}
             for i in range(1, 6)]  # fmt: skip
    recs.append({"event": "end", "time": 2.0})
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in recs).encode()


GOOD_TOML = {
    "arch.toml": b'[network]\ntype = "Sequential"\n'
    b'layers = [{type = "Linear", n_in = 3, n_out = 2}, {type = "Relu"}]\n',
    "fleet.toml": b'model = "m.mct"\nrounds = 2\n[data]\npath = "d.npz"\n[[device]]\nboard = "native"\n',
}
GOOD_JSON = {"arch.json": b'[{"type": "Linear", "n_in": 3, "n_out": 2}, {"type": "Relu"}]'}


def fleet_reader(path: Path) -> Any:
    pytest.importorskip("flwr")
    from mcutrain.fleet.config import load_config

    return load_config(path)


def board_reader(path: Path) -> Any:
    return load_board_file(path)


READERS: Dict[str, Callable[[Path], Any]] = {
    "log.jsonl": read_log,
    "arch.json": load_architecture_file,
    "arch.toml": load_architecture_file,
    "fleet.toml": fleet_reader,
    "uno.toml": board_reader,
}


def good_bytes(name: str, tmp: Path) -> bytes:
    if name == "log.jsonl":
        return good_log()
    if name == "uno.toml":
        return (boards_dir() / "uno.toml").read_bytes()
    return {**GOOD_TOML, **GOOD_JSON}[name]


def deep(kind: str, depth: int) -> bytes:
    """A value nested `depth` levels deep in the syntax of a file kind."""
    if kind == "json":
        return b'{"a":' * depth + b"1" + b"}" * depth
    return b"a = " + b"[" * depth + b"1" + b"]" * depth + b"\n"


def read_or_refuse(reader: Callable[[Path], Any], path: Path) -> str:
    """'ok' or 'refused' (the reader's McuTrainError); any other exception fails the test."""
    try:
        reader(path)
        return "ok"
    except McuTrainError as e:
        assert str(e) and "\n" not in str(e).strip(), str(e)
        return "refused"


@FILES
@given(
    name=st.sampled_from(sorted(READERS)),
    how=st.sampled_from(["random", "splice-deep", "not-utf8", "replace-bytes", "truncate"]),
    data=st.data(),
)
def test_mutated_files_into_every_reader(
    tmp_path_factory: pytest.TempPathFactory, name: str, how: str, data: st.DataObject
) -> None:
    """A valid file of each kind, mutated: the reader returns or raises its McuTrainError (one line)."""
    tmp = tmp_path_factory.mktemp("f")
    good = good_bytes(name, tmp)
    if how == "random":
        blob = data.draw(st.binary(max_size=300))
    elif how == "splice-deep":
        at = data.draw(st.integers(0, len(good)))
        depth = data.draw(st.sampled_from([MAX_DEPTH - 1, MAX_DEPTH + 1, 5_000, 100_000]))
        blob = good[:at] + deep("json" if name.endswith(("json", "jsonl")) else "toml", depth) + good[at:]
    elif how == "not-utf8":
        at = data.draw(st.integers(0, len(good)))
        blob = good[:at] + data.draw(st.sampled_from([b"\xff", b"\xc3", b"\xe9", b"\x80\x80"])) + good[at:]
    elif how == "replace-bytes":
        b = bytearray(good)
        for _ in range(data.draw(st.integers(1, 8))):
            b[data.draw(st.integers(0, len(b) - 1))] = data.draw(st.integers(0, 255))
        blob = bytes(b)
    else:
        blob = good[: data.draw(st.integers(0, len(good)))]
    path = tmp / name
    path.write_bytes(blob)
    read_or_refuse(READERS[name], path)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats() | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=10,
)


@FILES
@given(records=st.lists(JSON | st.fixed_dictionaries({"event": st.just("step")}, optional={
    "step": JSON, "loss": JSON, "lr": JSON, "val_accuracy": JSON}), min_size=1, max_size=6))  # fmt: skip
def test_logs_of_random_records_plot_or_are_refused(tmp_path_factory: pytest.TempPathFactory, records: list) -> None:
    """A log whose lines are random JSON values and step records with fields of random kinds: read_log and the
    plot either work or refuse with a DataError naming the line; no other exception."""
    from mcutrain import DataError
    from mcutrain import plot as plots

    tmp = tmp_path_factory.mktemp("log")
    path = tmp / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    try:
        recs = read_log(path)
    except DataError as e:
        assert "line" in str(e), str(e)
        return
    assert all(isinstance(r, dict) for r in recs)
    if any(r.get("event") == "step" for r in recs):
        try:
            plots.plot_log(recs)
        except DataError:
            pass


@pytest.mark.parametrize("kind", ["json", "toml"])
def test_parsers_refuse_deep_nesting_and_bad_encodings_in_one_line(kind: str) -> None:
    """100,000 levels (a RecursionError in the parsers), one level past MAX_DEPTH, and a byte that is not UTF-8:
    the caller's error in one line saying what and where; MAX_DEPTH levels are read."""
    parse = parse_json if kind == "json" else parse_toml

    class Refused(McuTrainError):
        pass

    for depth in (100_000, MAX_DEPTH + 1):
        with pytest.raises(Refused, match=f"nests lists or tables deeper than {MAX_DEPTH} levels"):
            parse(deep(kind, depth), "the file", Refused)
    parse(deep(kind, MAX_DEPTH - 1), "the file", Refused)
    with pytest.raises(Refused, match=r"not UTF-8 text: byte 0xe9 on line 2"):
        parse(b"\n" + "caf\xe9".encode("latin-1"), "the file", Refused)
    lines = list(json_lines(b'{"a": 1}\n\n{"b": 2}\n{"c": ', "log", Refused))  # a torn last line is skipped
    assert lines == [(1, {"a": 1}), (3, {"b": 2})]
    with pytest.raises(Refused, match="log line 2 is not valid JSON"):
        list(json_lines(b'{"a": 1}\n{"c": \n{"b": 2}\n', "log", Refused))


def test_a_keras_archive_whose_config_nests_100000_deep(tmp_path: Path) -> None:
    """config.json of a .keras archive nested 100,000 deep: ImportModelError, before Keras sees it."""
    from mcutrain.errors import ImportModelError
    from mcutrain.exporter.keras_import import _check_archive

    p = tmp_path / "m.keras"
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr("config.json", deep("json", 100_000))
    with pytest.raises(ImportModelError, match="nests lists or tables deeper"):
        _check_archive(p)


@pytest.mark.parametrize(
    "content,words",
    [
        (b'{"event": "step", "step": 1, "loss": 0.5}\n\xff\xfe\n{"event": "step", "step": 2, "loss": 0.4}\n',
         "is not UTF-8 text: byte 0xff on line 2"),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"\n{}\n", "nests lists or tables deeper than"),
        (b'[1, 2]\n{"event": "step", "step": 1, "loss": 0.5}\n', "line 1 is not a record"),
        (b'{"event": "step", "step": 1, "loss": "low"}\n{}\n', "line 1: loss must be a number"),
        (b'{"event": "step", "loss": 0.5}\n{}\n', "a step record without its step number"),
    ],
    ids=["not-utf8", "deep", "not-a-record", "text-loss", "no-step"],
)  # fmt: skip
def test_plot_of_a_hostile_log_is_one_line(tmp_path: Path, content: bytes, words: str) -> None:
    """`mcutrain plot` on a log that is not UTF-8 JSON lines, nests 100,000 deep or holds records of the wrong
    kind: exit code 1, one line naming the file and the line, no PNG written."""
    log = tmp_path / "run.jsonl"
    log.write_bytes(content)
    r = subprocess.run(["mcutrain", "plot", str(log)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 1 and words in r.stderr and str(log) in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "run.png").exists()


def test_the_log_of_a_real_run_reads_back(tmp_path: Path) -> None:
    """What the Recorder writes is what read_log accepts (the checks refuse only what it never writes)."""
    with Recorder(tmp_path / "r.jsonl") as r:
        r.start(net="linear:2x2")
        r.step(1, 0.5, 0.01, force=True, val_loss=0.25, val_accuracy=1.0)
        r.end()
    recs = read_log(tmp_path / "r.jsonl")
    assert [x["event"] for x in recs] == ["start", "step", "end"] and recs[1]["val_accuracy"] == 1.0
    with pytest.raises(BoardError, match="says name = 'uno' but is named nano.toml"):
        (tmp_path / "nano.toml").write_bytes((boards_dir() / "uno.toml").read_bytes())
        load_board_file(tmp_path / "nano.toml")
