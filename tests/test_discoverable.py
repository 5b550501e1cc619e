"""Issue 26, "Discoverable CLI": the layer names and their arguments come from `mcutrain layers` (built from the
layer registry), the --net-file format is documented with examples that build, board names are found in any case
with suggestions for misspellings, and hints never ask for what the command line already says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from helpers import cli
from mcutrain import layers as L
from mcutrain.architecture import from_architecture, load_architecture_file, parse_inline

DOCS = Path(__file__).resolve().parent.parent / "docs" / "networks.md"


def test_layers_command_lists_every_registered_layer_with_a_working_inline_form() -> None:
    r = cli("layers", "--json")
    assert r.exit_code == 0, r.output
    listed = json.loads(r.stdout)
    names = [d["name"] for d in listed["layers"]]
    assert names == list(L.LAYER_TYPES)  # every registered layer, nothing retyped
    for d in listed["layers"]:
        # the inline form as listed, with sizes filled in, builds that very layer
        spatial = "input_shape" in {a["name"] for a in d["arguments"]}  # their inline forms: tests/test_cnn*
        if d["inline"] is not None and not spatial:
            item = d["inline"].replace("IxOxF", "16x14x3").replace("IxO", "4x6")
            item = re.sub(r"\[:[A-Z]+\]", "", item)
            net = parse_inline(("linear:4x4," if ":" not in item else "") + item)
            assert type(list(net.layers())[-1]).__name__ == d["name"], item
        elif d["inline"] is None:  # arguments only a file gives, and --net says so
            r = cli("train", "--net", d["name"].lower() + ":3")
            assert r.exit_code == 1 and "in a --net-file" in r.stderr, r.stderr
        # the file arguments listed are the constructor's: the required ones build it
        spec = {"type": d["name"]}
        values = {"n_in": 16, "n_out": 14, "filter_size": 3, "in_channels": 2, "out_channels": 3, "channels": 2}
        for a in d["arguments"]:
            if a["default"] is None:
                spec[a["name"]] = values[a["name"]]
        if "n" in {a["name"] for a in d["arguments"]}:
            spec["n"] = 5
        assert type(from_architecture(spec)).__name__ == d["name"]
    text = cli("layers").stdout
    for d in listed["layers"]:
        assert (d["inline"] or "(--net-file)") in text
    assert "[[layers]]" in text and '"type": "Residual"' in text  # the --net-file format, with examples
    help_text = cli("train", "--help").stdout
    assert "mcutrain layers" in help_text and "[[layers]]" in help_text


def test_net_file_examples_in_the_docs_and_the_command_build(tmp_path: Path) -> None:
    from mcutrain.cli.layers import NET_FILE_JSON, NET_FILE_TOML

    blocks = re.findall(r"```(toml|json)\n(.*?)```", DOCS.read_text(), re.S)
    assert len(blocks) >= 3
    for i, (kind, text) in enumerate(blocks + [("toml", NET_FILE_TOML), ("json", NET_FILE_JSON)]):
        p = tmp_path / f"net{i}.{kind}"
        p.write_text(text)
        net = load_architecture_file(p)
        net.rand_params(seed=1, scale=1.0)
        y = net.forward(np.ones((2, net.n_in), np.float32))
        assert y.shape == (2, net.n_out) and np.isfinite(y).all()
    # and training from the documented file works end to end
    p = tmp_path / "net.toml"
    p.write_text(NET_FILE_TOML)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 4)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, y=x[:, :3].argmax(axis=1))
    r = cli(
        "train",
        "--net-file",
        str(p),
        "--data",
        str(tmp_path / "d.npz"),
        "--classify",
        "--steps",
        "20",
        "-q",
        "-o",
        str(tmp_path / "m.mct"),
    )
    assert r.exit_code == 0, r.output


def test_misspelt_layer_names_get_suggestions() -> None:
    r = cli("train", "--net", "lineer:3x4,relu")
    assert r.exit_code == 1
    assert "did you mean 'linear'" in r.stderr and "mcutrain layers" in r.stderr


def test_board_names_in_any_case_and_suggestions(tmp_path: Path) -> None:
    from mcutrain.exporter.boards import get_board

    assert get_board("Uno").name == "uno" and get_board("NUCLEO_F401RE").name == "nucleo_f401re"
    r = cli("boards", "--json")
    for b in json.loads(r.stdout):
        assert get_board(b["name"].upper()).name == b["name"]
    r = cli("info", "--help")
    assert r.exit_code == 0
    ck = tmp_path / "m.mct"
    assert cli("train", "--steps", "5", "-q", "-o", str(ck)).exit_code == 0
    r = cli("info", str(ck), "--board", "UNO", "--trainable", "biases")
    assert r.exit_code == 0, r.output
    assert "fits uno" in r.stdout
    r = cli("export", str(ck), "--board", "nucelo_f401re", "-o", str(tmp_path / "fw"))
    assert r.exit_code == 1
    assert "did you mean nucleo_f401re" in r.stderr
    assert not (tmp_path / "fw").exists()


def test_the_classify_hint_is_not_given_to_who_gave_classify(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(40) % 4)
    out = str(tmp_path / "m.mct")
    r = cli("train", "--net", "linear:3x3,softmax", "--data", str(tmp_path / "d.npz"), "--classify", "-o", out)
    assert r.exit_code == 1
    assert "make the last layer output 4" in r.stderr and "--classify" not in r.stderr
    r = cli("train", "--net", "linear:3x3,softmax", "--data", str(tmp_path / "d.npz"), "-o", out)
    assert r.exit_code == 1
    assert "make the last layer output 1" in r.stderr and "add --classify" in r.stderr
