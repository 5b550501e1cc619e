"""`mcutrain layers`: every layer type with its inline (--net) form and its network-file (--net-file)
arguments, generated from the layer registry (mcutrain.architecture.layer_catalogue), and the network
file format with examples."""

from __future__ import annotations

import json
from typing import Any

import click

from mcutrain.architecture import COMPOSITIONS, layer_catalogue

from .common import example, table

# The --net-file format, shown by `mcutrain layers` and in docs/networks.md (tests/test_discoverable.py
# builds every example of both).
NET_FILE_TOML = """\
# net.toml: the layers in order; "type" is a layer name (any case), the other keys its arguments
[[layers]]
type = "Linear"
n_in = 4
n_out = 16

[[layers]]
type = "Relu"            # activations take their size from the layer before

[[layers]]
type = "Linear"
n_in = 16
n_out = 3

[[layers]]
type = "Softmax"
"""

NET_FILE_JSON = """\
[
  {"type": "Linear", "n_in": 8, "n_out": 8},
  {"type": "Residual", "inner": {"type": "Sequential", "layers": [
    {"type": "Linear", "n_in": 8, "n_out": 8}, {"type": "Tanh"}]}},
  {"type": "LR", "divisor": 10, "inner": {"type": "Linear", "n_in": 8, "n_out": 2}},
  {"type": "Softmax", "temperature": 1.0}
]
"""


def _arguments(args: list) -> str:
    """'n_in, n_out, gate=sigmoid' for a layer's file arguments."""
    return ", ".join(name if default is None else f"{name}={default}" for name, default in args) or "-"


def _name(d: Any) -> str:
    """'LeakyRelu (leaky_relu)': a layer's name and its aliases."""
    return d.name + (f" ({', '.join(d.aliases)})" if d.aliases else "")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the layers as JSON.")
@example("""
mcutrain layers
mcutrain train --net "linear:4x16,relu,linear:16x3,softmax" --data iris.csv --classify
mcutrain train --net-file net.toml --data iris.csv --classify""")
def layers(as_json: bool) -> None:
    """The layer types a network is built from: the name --net takes (any case, with its sizes after a
    colon), the arguments a --net-file layer takes, and what each layer computes.

    \b
    --net: comma-separated items NAME[:SIZES], e.g. "linear:20x35,sigmoid,linear:35x10,softmax".
    IxO: inputs x outputs; IxOxF: Conv1d's inputs, outputs and filter size; [:N] an optional size
    (by default the size of the layer before); leakyrelu:ALPHA and softmax:T set the slope and
    the temperature.

    \b
    --net-file: a TOML or JSON file holding a list of layers (TOML: [[layers]] tables; JSON: a list,
    or {"layers": [...]}). Each layer is {type = NAME, ARGUMENT = VALUE, ...}; besides the layers,
    Sequential (layers), Residual (inner, and optionally shortcut: y = inner(x) + shortcut(x)) and
    LR (inner, divisor) nest other layers.
    """
    cat = layer_catalogue()
    if as_json:
        rows = [
            {
                "name": d.name,
                "aliases": d.aliases,
                "inline": d.inline,
                "arguments": [{"name": n, "default": v} for n, v in d.arguments],
                "summary": d.summary,
            }
            for d in cat
        ]
        click.echo(json.dumps({"layers": rows, "compositions": COMPOSITIONS}, indent=2))
        return
    click.echo(
        table(
            ["layer", "--net", "--net-file arguments", "computes"],
            [[_name(d), d.inline or "(--net-file)", _arguments(d.arguments), d.summary] for d in cat],
            right=[False, False, False, False],
        )
    )
    click.echo("\ncompositions (--net-file only):")
    for name, what in COMPOSITIONS.items():
        click.echo(f"  {name:<11} {what}")
    click.echo("\nA --net-file in TOML:\n")
    click.echo(NET_FILE_TOML)
    click.echo("A --net-file in JSON, with a residual block and a layer that learns at a tenth of the rate:\n")
    click.echo(NET_FILE_JSON)
