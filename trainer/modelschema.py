"""The schema of a model file's header: every field of every section, its type and range, in one table.

`decode_model` checks a header against HEADER before it uses any of it, so a field of the wrong type, a
negative or fractional count or a string where a table belongs is a ModelFileError that names the field
(`metadata.train.batch must be a whole number from 1 to 2147483647, got -3`), never an AttributeError or a
ValueError in `info`, `eval`, `export` or `train --resume`. What one field says about another (an array's
shape against its bytes, the parameter count against the architecture) is checked by modelfile after this.

Two sections have their own, stricter checker and are only required to be tables here: `architecture`
(mcutrain.architecture.from_architecture: layer types, sizes, nesting) and `optimizer`
(mcutrain.optim.Optimizer.from_config: kind and every setting).

Adding a field: one line in its table, e.g. ``"labels": Field("list", item=Field("str"), max_len=MAX_CLASSES)``
in METADATA. Fields are optional unless `required`; a missing optional field means "not recorded". Keys a
table does not list are kept as they are and not read by this version (files written by a newer mcutrain
keep loading), except in tables marked `closed`, where an unknown key is refused (the arrays).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from .errors import ModelFileError

# plain JSON types of a kind ("number": int or float; bool is never a number here)
_KINDS = {"str": (str,), "int": (int,), "number": (int, float), "bool": (bool,), "table": (dict,), "list": (list,)}
_WORDS = {
    "str": "a string",
    "int": "a whole number",
    "number": "a finite number",
    "bool": "true or false",
    "table": "an object",
    "list": "a list",
}
MAX_TEXT = 4096  # characters of a text field (a path, a name, a port)
INT32_MAX = 2**31 - 1
INT63_MAX = 2**63 - 1


@dataclass(frozen=True)
class Field:
    """One field: its kind (str, int, number, bool, table, list), whether it must be there, whether null is
    allowed, its range (lo to hi; hi_open: below hi) or length (max_len), and the fields of a table or the
    item of a list."""

    kind: str
    required: bool = False
    null: bool = False
    lo: Optional[float] = None
    hi: Optional[float] = None
    hi_open: bool = False
    max_len: Optional[int] = None
    fields: Optional[Mapping[str, Field]] = None
    item: Optional[Field] = None
    closed: bool = False  # a table that refuses keys it does not list
    doc: str = ""

    def describe(self) -> str:
        """What a value must be, for a message: 'a whole number from 1 to 256', 'a string or null'."""
        words = _WORDS[self.kind]
        if self.kind in ("int", "number") and (self.lo is not None or self.hi is not None):
            lo = "-inf" if self.lo is None else f"{self.lo:g}" if self.kind == "number" else f"{int(self.lo)}"
            hi = "inf" if self.hi is None else f"{self.hi:g}" if self.kind == "number" else f"{int(self.hi)}"
            close = ")" if self.hi_open else "]"
            words += f" in [{lo}, {hi}{close}" if self.kind == "number" else f" from {lo} to {hi}"
        if self.kind in ("str", "list") and self.max_len is not None:
            words += f" of at most {self.max_len:,} {'characters' if self.kind == 'str' else 'items'}"
        return f"{words} or null" if self.null else words


def _short(v: Any) -> str:
    """repr of a value, cut short for a message (a header may hold a string of megabytes)."""
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def check(value: Any, spec: Field, where: str, name: str = "model file") -> None:
    """ModelFileError '<name>: header field <where> must be ..., got ...' unless value fits spec (and, for a
    table or a list, every field or item fits its own)."""

    def fail(what: str) -> None:
        raise ModelFileError(f"{name}: header field {where} {what}")

    if value is None:
        if not spec.null:
            fail(f"must be {spec.describe()}, got null")
        return
    ok = isinstance(value, _KINDS[spec.kind]) and (spec.kind == "bool" or not isinstance(value, bool))
    if ok and spec.kind == "number":
        ok = math.isfinite(value)
    if ok and spec.kind in ("int", "number"):
        ok = (spec.lo is None or value >= spec.lo) and (
            spec.hi is None or (value < spec.hi if spec.hi_open else value <= spec.hi)
        )
    if ok and spec.kind in ("str", "list") and spec.max_len is not None:
        ok = len(value) <= spec.max_len
    if not ok:
        fail(f"must be {spec.describe()}, got {_short(value)}")
    if spec.kind == "table" and spec.fields is not None:
        check_table(value, spec.fields, where, name, spec.closed)
    if spec.kind == "list" and spec.item is not None:
        for i, v in enumerate(value):
            check(v, spec.item, f"{where}[{i}]", name)


def check_table(value: Mapping[str, Any], fields: Mapping[str, Field], where: str, name: str, closed: bool) -> None:
    """Every listed field of a table (value is already a dict): missing required ones, wrong ones and, when
    closed, unknown keys are ModelFileErrors naming the field."""
    prefix = f"{where}." if where else ""
    for key, spec in fields.items():
        if key in value:
            check(value[key], spec, prefix + key, name)
        elif spec.required:
            raise ModelFileError(f"{name}: header field {prefix}{key} is missing")
    if closed:
        for key in value:
            if key not in fields:
                raise ModelFileError(
                    f"{name}: header field {prefix}{key} is not one this mcutrain knows ({', '.join(fields)})"
                )


def text(doc: str = "", *, null: bool = False, required: bool = False) -> Field:
    """A text field of at most MAX_TEXT characters."""
    return Field("str", required=required, null=null, max_len=MAX_TEXT, doc=doc)


def count(lo: int = 0, hi: int = INT63_MAX, doc: str = "", *, null: bool = False, required: bool = False) -> Field:
    """A whole number from lo to hi."""
    return Field("int", required=required, null=null, lo=lo, hi=hi, doc=doc)


def table(fields: Mapping[str, Field], doc: str = "", *, null: bool = False, required: bool = False) -> Field:
    """A table of the given fields (unknown keys kept)."""
    return Field("table", required=required, null=null, fields=fields, doc=doc)


# ------------------------------------------------------------------------------------------ the tables

# metadata.train.data: where the samples came from (mcutrain.sources.DataSettings)
RUN_DATA: Mapping[str, Field] = {
    "problem": text("built-in problem, e.g. modadd10", null=True),
    "path": text("data file", null=True),
    "inputs": text("CSV input columns", null=True),
    "targets": text("CSV target columns", null=True),
    "labels": text("IDX labels file", null=True),
    "x_key": text("NPZ inputs array"),
    "y_key": text("NPZ targets array"),
    "classify": Field("bool", doc="targets are class labels made one-hot"),
}

# metadata.train: how the run trains (mcutrain.run.RunSettings) and how far it got
RUN: Mapping[str, Field] = {
    "data": table(RUN_DATA, "the data source"),
    "loss": text("loss name"),
    "batch": count(1, INT32_MAX, "batch size"),
    "threads": count(1, 256, "threads per batch (mcutrain.train.MAX_THREADS)"),
    "seed": count(0, INT63_MAX, "seed of batches and split"),
    "val": Field("number", lo=0.0, hi=1.0, hi_open=True, doc="held-out fraction"),
    "steps": count(0, INT63_MAX, "total steps of the run"),
    "epochs": count(1, INT63_MAX, "what --epochs was", null=True),
    "init_scale": Field("number", doc="scale of the initial weights"),
    "eval_every": count(0, INT63_MAX, "steps between validations (0: about 20 per run)"),
    "log_every": count(0, INT63_MAX, "steps between log lines"),
    "batches": count(0, INT63_MAX, "steps done"),
    "data_crc": count(0, 2**32 - 1, "CRC-32 of the data file(s)", null=True),
}

# metadata: what the file records about where it came from (every section optional)
METADATA: Mapping[str, Field] = {
    "loss": text("the loss it trains with (mcutrain.losses.by_name)"),
    "train": table(RUN, "the `mcutrain train` run"),
    "imported": table({"from": text("the imported file"), "format": text("onnx, keras, ...")}, "`mcutrain import`"),
    "device": table(
        {
            "hash": text("model hash of the device's firmware"),
            "board": text("board name"),
            "step": count(0, 2**32 - 1, "the device's training step"),
            "port": text("serial port", null=True),
        },
        "`mcutrain device pull`",
    ),
    "fleet": table(
        {
            "round": count(0, INT63_MAX, "last round"),
            "strategy": text("aggregation strategy"),
            "devices": count(0, INT63_MAX, "devices in the fleet"),
            "answered": count(0, INT63_MAX, "devices that answered the round"),
            "test_accuracy": Field("number", null=True, lo=0.0, hi=1.0, doc="accuracy on the test set"),
        },
        "`mcutrain fleet`",
    ),
}

# arrays.NAME: where an array lies in the payload (offset and bytes relative to its start)
ARRAY: Mapping[str, Field] = {
    "offset": count(0, INT63_MAX, "byte offset in the payload, a multiple of 4", required=True),
    "bytes": count(0, INT63_MAX, "bytes of the array", required=True),
    "shape": Field("list", required=True, item=count(0, INT63_MAX), max_len=8, doc="sizes"),
    "dtype": text("'<f4', or 'train_state' (the core's struct)", required=True),
}
ARRAYS: Mapping[str, Field] = {
    "params": table(ARRAY, "the parameters", required=True),
    "opt_state": table(ARRAY, "the optimizer state (with an optimizer)"),
    "train_state": table(ARRAY, "the optimizer's step and Adam powers, one record (with an optimizer)"),
}

# the header
HEADER: Mapping[str, Field] = {
    "format": count(1, INT63_MAX, "format version (as in the binary header)"),
    "mcutrain": text("version that wrote it"),
    "saved": text("when"),
    "architecture": Field("table", required=True, doc="checked by mcutrain.architecture.from_architecture"),
    "n_params": count(0, INT63_MAX, "parameters", required=True),
    "optimizer": Field("table", null=True, doc="checked by mcutrain.optim.Optimizer.from_config"),
    "metadata": Field("table", fields=METADATA, doc="what the file records about its origin"),
    "arrays": Field("table", required=True, fields=ARRAYS, closed=True, doc="the arrays of the payload"),
}


def check_header(header: Any, name: str = "model file") -> None:
    """The header against HEADER: ModelFileError naming the first field that does not fit."""
    check(header, Field("table", fields=HEADER), "(the header)" if not isinstance(header, dict) else "", name)


def schema_rows(fields: Mapping[str, Field] = HEADER, where: str = "") -> list:
    """(field path, what it must be, required, meaning) of every field, for documentation and tests."""
    out = []
    for key, spec in fields.items():
        path = f"{where}.{key}" if where else key
        out.append((path, spec.describe(), spec.required, spec.doc))
        if spec.fields is not None:
            out += schema_rows(spec.fields, path)
    return out
