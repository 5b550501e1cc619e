"""A network's architecture as plain data, and back: what model files store (Module.architecture()) and
what the command line reads (a TOML or JSON file, or an inline string like
"linear:20x35,sigmoid,linear:35x10,softmax")."""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from . import layers as L
from .compose import LR, Residual, Sequential
from .errors import ArchitectureError, ShapeError
from .files import read_bounded
from .module import Module
from .plaindata import parse_json, parse_toml

_ALIASES = {
    "leaky_relu": L.LeakyRelu,
    "bias": L.Bias1d,
    "scale": L.ScalarScale,
    "glu_leaky_relu": L.GLULeakyRelu,
    "dwconv2d": L.DepthwiseConv2d,
}
_LOWER = {name.lower(): cls for name, cls in L.LAYER_TYPES.items()}
_LOWER.update(_ALIASES)  # aliases besides the lower-case class names
COMPOSITIONS = {
    "Sequential": "layers = [...]: the layers in order (a file's top level is one)",
    "Residual": "inner = {...}: y = x + inner(x); with shortcut = {...}: y = inner(x) + shortcut(x)",
    "LR": "inner = {...}, divisor = D: inner learns at lr / D",
}  # the compositions a network file may use besides the layers (from_architecture builds them)


MAX_NESTING = 64  # compositions inside compositions, at most
MAX_LAYERS = 65535  # layers in one Sequential (the layer table counts them in 16 bits)
MAX_ARCHITECTURE_BYTES = 1 << 20


def from_architecture(spec: Dict[str, Any], where: str = "network", _depth: int = 0) -> Module:
    """Build a module from plain data, e.g. {"type": "Linear", "n_in": 20, "n_out": 35}. Nothing is
    allocated for the parameters until they are used (so the size can be checked first)."""
    if _depth > MAX_NESTING:
        raise ArchitectureError(f"{where}: compositions nest deeper than {MAX_NESTING} levels")
    if not isinstance(spec, dict) or "type" not in spec:
        raise ArchitectureError(f"{where}: each layer needs a 'type', got {_short(spec)}")
    if not isinstance(spec["type"], str):
        raise ArchitectureError(f"{where}: the layer type must be a name, got {_short(spec['type'])}")
    t = spec["type"]
    args = {k: v for k, v in spec.items() if k != "type"}
    try:
        if t.lower() == "sequential":
            items = args.get("layers")
            if not isinstance(items, list) or not items:
                raise ArchitectureError(f"{where}: Sequential needs a non-empty 'layers' list")
            if len(items) > MAX_LAYERS:
                raise ArchitectureError(f"{where}: {len(items)} layers; a network has at most {MAX_LAYERS}")
            shape = args.get("input_shape")
            if shape is not None and (
                not isinstance(shape, list) or not all(isinstance(d, int) and 1 <= d <= 65535 for d in shape)
            ):
                raise ArchitectureError(f"{where}: input_shape must be a list of sizes such as [49, 10, 1]")
            return Sequential(
                *[from_architecture(s, f"{where} layer {i + 1}", _depth + 1) for i, s in enumerate(items)],
                input_shape=shape,
            )
        if t.lower() == "residual":
            inner = from_architecture(args["inner"], f"{where} (residual body)", _depth + 1)
            if args.get("shortcut") is None:
                return Residual(inner)
            shortcut = from_architecture(args["shortcut"], f"{where} (residual shortcut)", _depth + 1)
            return Residual(inner, shortcut=shortcut)
        if t.lower() == "lr":
            return LR(from_architecture(args["inner"], f"{where} (LR body)", _depth + 1), args["divisor"])
        cls = _LOWER.get(t.lower())
        if cls is L.Conv1d and "filter_size" in args:  # model files from before Conv1d took channels
            cls = L.SingleChannelConv1d
        if cls is None:
            raise _unknown_layer(t, where)
        if args.get("n", 0) is None:  # a size left to the Sequential
            del args["n"]
        _check_arguments(cls, t, args, where)
        return cls(**args)
    except ShapeError as e:
        raise ArchitectureError(f"{where}: {e}") from None
    except KeyError as e:
        raise ArchitectureError(f"{where}: {t} needs the argument {e}") from None
    except TypeError as e:
        raise ArchitectureError(f"{where}: bad arguments for {t}: {e}") from None


def _check_arguments(cls: Any, t: str, args: Dict[str, Any], where: str) -> None:
    """ArchitectureError naming the arguments a layer type does not take, or the ones it needs and lacks."""
    params = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    names = [n for n, p in params.items() if p.kind not in (inspect.Parameter.VAR_POSITIONAL,)]
    unknown = [k for k in args if k not in params]
    if unknown:
        raise ArchitectureError(
            f"{where}: {t} takes {', '.join(names) or 'no arguments'}, not {', '.join(map(_short, unknown))}"
        )
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in args]
    if missing:
        raise ArchitectureError(f"{where}: {t} needs {', '.join(missing)}")


def _short(v: Any) -> str:
    """repr(v), cut to 80 characters for messages."""
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def _inline_sizes(cls: type) -> Optional[str]:
    """The sizes an inline item of this layer class must give ('IxO', 'IxOxF'), or None when a size is
    optional (left to the layer before)."""
    if issubclass(cls, L._Sized):
        return "IxOxF" if cls is L.SingleChannelConv1d else "IxO"
    return None


_INLINE_NUMBER = {L.LeakyRelu: "ALPHA", L.Softmax: "T"}  # layers whose inline number is not a size
# spatial layers inline: name[:part/part/...] with the parts below, in any order (their channels in come from
# the input shape): a plain number C (Conv2d/Conv1d output channels, depthwise multiplier 'xM'), the window
# KxK (K for 1-D and pooling), sS the stride, 'same' / 'valid' / pP the padding, 'nobias'
_SPATIAL_INLINE = {
    L.Conv2d: "C/KxK[/sS][/same|pP][/nobias]",
    L.Conv1d: "C/K[/sS][/same|pP][/nobias]",
    L.DepthwiseConv2d: "KxK[/xM][/sS][/same|pP][/nobias]",
    L.MaxPool2d: "K[xK][/sS][/same|pP]",
    L.AvgPool2d: "K[xK][/sS][/same|pP]",
    L.MaxPool1d: "K[/sS][/same|pP]",
    L.AvgPool1d: "K[/sS][/same|pP]",
    L.GlobalAvgPool2d: "",
    L.GlobalAvgPool1d: "",
    L.Flatten: "",
    L.BatchNorm: "",
}


def _parse_spatial(cls: type, arg: str, where: str) -> Module:
    """One spatial layer from its inline parts (see _SPATIAL_INLINE)."""
    kw: Dict[str, Any] = {}
    channels: Optional[int] = None
    for part in (q.strip().lower() for q in arg.split("/") if q.strip()):
        if part in ("same", "valid"):
            kw["padding"] = part
        elif part == "nobias":
            kw["bias"] = False
        elif part[0] == "s" and part[1:].isdigit():
            kw["stride"] = int(part[1:])
        elif part[0] == "p" and part[1:].isdigit():
            kw["padding"] = int(part[1:])
        elif part[0] == "x" and part[1:].isdigit():
            kw["depth_multiplier"] = int(part[1:])
        elif "x" in part and all(d.isdigit() for d in part.split("x")) and part.count("x") == 1:
            kw["kernel_size"] = tuple(int(d) for d in part.split("x"))
        elif part.isdigit():
            if cls in (L.Conv2d, L.Conv1d) and channels is None:
                channels = int(part)
            else:
                kw["kernel_size"] = int(part)
        else:
            raise ArchitectureError(f"{where}: {part!r} is not a part of {cls.__name__.lower()}:{_SPATIAL_INLINE[cls]}")
    if cls in (L.Conv2d, L.Conv1d):
        if channels is None or "kernel_size" not in kw:
            raise ArchitectureError(
                f"{where}: {cls.__name__.lower()} needs its output channels and window, e.g. "
                f"{cls.__name__.lower()}:{'16/3x3/same' if cls is L.Conv2d else '16/5/same'}"
            )
        return cls(None, channels, **kw)
    if cls is L.Conv1d and isinstance(kw.get("kernel_size"), tuple):
        raise ArchitectureError(f"{where}: a 1-D window is one number")
    return cls(**kw)


def _required_args(cls: type) -> List[str]:
    """The constructor arguments a layer class cannot do without."""
    return [
        n
        for n, p in inspect.signature(cls.__init__).parameters.items()
        if n != "self" and p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def inline_form(cls: type) -> Optional[str]:
    """How --net writes a layer class: 'linear:IxO', 'leakyrelu[:ALPHA]', 'relu[:N]', 'flatten' (what parse_inline
    reads; spatial layers as _SPATIAL_INLINE says); None for a layer whose arguments only a network file gives."""
    name = cls.__name__.lower()
    if cls in _SPATIAL_INLINE:
        return f"{name}:{_SPATIAL_INLINE[cls]}" if _SPATIAL_INLINE[cls] else name
    sizes = _inline_sizes(cls)
    if sizes is not None:
        return f"{name}:{sizes}"
    if cls in _INLINE_NUMBER or issubclass(cls, L._SameSize):
        return f"{name}[:{_INLINE_NUMBER.get(cls, 'N')}]"
    spatial = "input_shape" in inspect.signature(cls.__init__).parameters  # (H, W, C) / (T, C): a file gives it
    return None if _required_args(cls) or spatial else name


@dataclass
class LayerDoc:
    """One layer type as users write it: its name, aliases, inline form, file arguments and what it does."""

    name: str
    aliases: List[str]
    inline: Optional[str]  # None: only a network file gives its arguments
    arguments: List[Tuple[str, Optional[str]]]  # (argument of a network file, its default or None if required)
    summary: str


def layer_catalogue() -> List[LayerDoc]:
    """Every layer type of mcutrain.layers.LAYER_TYPES, as `mcutrain layers` lists it (generated from the
    registry, the class signatures and docstrings)."""
    out = []
    for name, cls in L.LAYER_TYPES.items():
        args: List[Tuple[str, Optional[str]]] = []
        for pname, prm in inspect.signature(cls.__init__).parameters.items():
            if pname == "self" or prm.kind in (prm.VAR_POSITIONAL, prm.VAR_KEYWORD):
                continue
            default = None if prm.default is prm.empty else repr(prm.default)
            if pname == "n" and default == "None":
                default = "the size of the layer before"
            if pname == "gate" and default == "None":
                default = repr(cls.gate_default)  # type: ignore[attr-defined]
            args.append((pname, default))
        doc = inspect.getdoc(cls) or ""
        out.append(
            LayerDoc(
                name=name,
                aliases=sorted(a for a, c in _ALIASES.items() if c is cls),
                inline=inline_form(cls),
                arguments=args,
                summary=doc.split("\n\n")[0].replace("\n", " ").split(". ")[0].rstrip(".") + ".",
            )
        )
    return out


def _unknown_layer(name: str, where: str) -> ArchitectureError:
    """ArchitectureError for an unknown layer name, with the closest known names."""
    close = difflib.get_close_matches(name.strip().lower(), list(_LOWER), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return ArchitectureError(
        f"{where}: unknown layer {name!r}; {hint}`mcutrain layers` lists them: "
        f"{', '.join(sorted(k.lower() for k in L.LAYER_TYPES))}"
    )


def parse_inline(text: str, input_shape: Optional[Tuple[int, ...]] = None) -> Sequential:
    """'linear:20x35,sigmoid,linear:35x10,softmax' -> Sequential. Sizes: IxO for Dense/Linear/GLUs,
    IxOxF for SingleChannelConv1d, N for sized same-size layers; a number after leaky_relu/softmax is alpha/T.
    Spatial layers take their input channels from input_shape (e.g. (8, 8, 1)) and the layers before:
    'conv2d:8/3x3/same,relu,maxpool2d:2,flatten,linear:128x10' (the parts: _SPATIAL_INLINE)."""
    mods: List[Module] = []
    for i, item in enumerate(p.strip() for p in text.split(",")):
        if not item:
            raise ArchitectureError(f"--net item {i + 1} is empty")
        name, _, arg = item.partition(":")
        cls = _LOWER.get(name.strip().lower())
        if cls is None:
            raise _unknown_layer(name, f"--net item {i + 1}")
        try:
            shape = _inline_sizes(cls)
            if cls in _SPATIAL_INLINE:
                mods.append(_parse_spatial(cls, arg, f"--net item {i + 1}"))
            elif shape is not None:
                dims = [int(d) for d in arg.lower().split("x")] if arg else []
                want = shape.count("x") + 1
                if len(dims) != want:
                    raise ArchitectureError(
                        f"--net item {i + 1}: {name} needs sizes as {name}:{shape}, e.g. "
                        f"{name}:{'16x14x3' if want == 3 else '20x35'}"
                    )
                mods.append(cls(*dims))
            elif cls in _INLINE_NUMBER:
                mods.append(cls(float(arg)) if arg else cls())
            elif inline_form(cls) is None or (arg and not issubclass(cls, L._SameSize)):
                params = [n for n in inspect.signature(cls.__init__).parameters if n != "self"]
                raise ArchitectureError(
                    f"--net item {i + 1}: {cls.__name__} goes in a --net-file, with its arguments "
                    f"({', '.join(params)}); `mcutrain layers` shows them"
                )
            else:
                mods.append(cls(int(arg)) if arg else cls())
        except ValueError as e:
            if isinstance(e, ArchitectureError):
                raise
            raise ArchitectureError(f"--net item {i + 1} ({item}): {e}") from None
    try:
        net = Sequential(*mods, input_shape=input_shape)
    except ShapeError as e:
        raise ArchitectureError(str(e)) from None
    if net.n_in is None:
        raise ArchitectureError(
            "the network starts with a spatial layer: give its input shape, e.g. --input-shape 8x8x1"
        )
    return net


def parse_shape(text: str) -> Tuple[int, ...]:
    """'49x10x1' -> (49, 10, 1): an input shape (H x W x C, T x C, or N)."""
    try:
        dims = tuple(int(d) for d in text.lower().replace(" ", "").split("x"))
    except ValueError:
        raise ArchitectureError(f"input shape {text!r}: write it as HxWxC, e.g. 49x10x1 (or TxC, or N)") from None
    if not 1 <= len(dims) <= 3 or any(not 1 <= d <= 65535 for d in dims):
        raise ArchitectureError(f"input shape {text!r}: one to three sizes from 1 to 65535, e.g. 49x10x1")
    return dims


def load_architecture_file(path: Union[str, Path], input_shape: Optional[Tuple[int, ...]] = None) -> Module:
    """Read a TOML or JSON architecture file: {type = "Sequential", layers = [...]} or just a 'layers' list; an
    `input_shape = [49, 10, 1]` beside the layers (or input_shape here) sizes networks that start spatial."""
    p = Path(path)
    raw = read_bounded(p, MAX_ARCHITECTURE_BYTES, "architecture file", ArchitectureError)
    parse = parse_json if p.suffix.lower() == ".json" else parse_toml
    data = parse(raw, f"architecture file {p}", ArchitectureError)
    if isinstance(data, dict) and "network" in data:
        data = data["network"]
    if isinstance(data, list):
        data = {"type": "Sequential", "layers": data}
    if isinstance(data, dict) and "type" not in data and "layers" in data:
        data = {k: v for k, v in data.items() if k in ("layers", "input_shape")}
        data["type"] = "Sequential"
    if input_shape is not None and isinstance(data, dict):
        data = {**data, "input_shape": list(input_shape)}
    net = from_architecture(data, str(p))
    if net.n_in is None:
        raise ArchitectureError(
            f"{p}: the network starts with a spatial layer: add input_shape = [H, W, C] to the file"
        )
    return net
