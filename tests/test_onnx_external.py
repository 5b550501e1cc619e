"""External data of ONNX files stays inside the model's folder after following symbolic links (issue 25,
class 6). A tensor's data file is named without a folder, and that name, followed through any chain of links
(to files, through linked folders, relative or absolute), must end inside the model's own folder (itself
followed through links); otherwise the import is an ImportModelError naming the file and where it leads.

The property-based test builds random chains of links from the data file's name to a file inside or outside
the model's folder and checks that the import succeeds exactly when the chain ends inside."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from mcutrain.errors import ImportModelError  # noqa: E402
from mcutrain.exporter.onnx_import import from_onnx  # noqa: E402

WEIGHTS = np.arange(16, dtype="<f4").reshape(4, 4)


def write_model(folder: Path) -> Path:
    """A Gemm model whose weight keeps its 16 floats in the external file 'w.bin'."""
    t = TensorProto()
    t.name, t.data_type = "w", TensorProto.FLOAT
    t.dims.extend([4, 4])
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="w.bin")
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])],
        [t],
    )
    p = folder / "m.onnx"
    p.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    return p


# where each link of the chain points: a file inside the model's folder, one in a subfolder of it, one outside,
# the next link (in the folder, in the subfolder or outside), a linked folder that leads inside or outside
HOPS = ["file-in", "file-sub", "file-out", "next-in", "next-sub", "next-out", "dirlink-in", "dirlink-out"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hops=st.lists(st.sampled_from(HOPS), min_size=1, max_size=5), relative=st.booleans(), via=st.booleans())
def test_external_data_is_read_only_inside_the_model_folder(
    tmp_path_factory: pytest.TempPathFactory, hops: list, relative: bool, via: bool
) -> None:
    """w.bin is a chain of links drawn at random: the import reads the weights exactly when the chain ends in
    a file inside the model's folder (also when the model is opened through a link to its folder)."""
    root = tmp_path_factory.mktemp("x")
    home, sub, out = root / "model", root / "model" / "sub", root / "elsewhere"
    for d in (home, sub, out):
        d.mkdir(parents=True, exist_ok=True)
    model = write_model(home)
    data = WEIGHTS.tobytes()
    for d in (home, sub, out):
        (d / "data.bin").write_bytes(data)
    (home / "inner").symlink_to(sub, target_is_directory=True)
    (home / "outer").symlink_to(out, target_is_directory=True)
    link, inside = home / "w.bin", None
    for i, hop in enumerate(hops):
        last = i == len(hops) - 1
        if hop.startswith("next") and not last:
            where = {"next-in": home, "next-sub": sub, "next-out": out}[hop]
            target = where / f"hop{i}.bin"
        elif hop.startswith("dirlink"):
            target = home / ("inner" if hop == "dirlink-in" else "outer") / "data.bin"
            inside = hop == "dirlink-in"
        else:
            kind = hop.split("-")[1]
            target = {"in": home, "sub": sub, "out": out}[kind] / "data.bin"
            inside = kind != "out"
        link.symlink_to(os.path.relpath(target, link.parent) if relative else target)
        if inside is not None:
            break
        link = target
    if inside is None:  # the chain ended on a 'next' hop: that link points at a file where it lives
        inside = link.parent != out
        link.write_bytes(data)
    opened = model
    if via:
        (root / "alias").symlink_to(home, target_is_directory=True)
        opened = root / "alias" / "m.onnx"
    if inside:
        net = from_onnx(opened)[0]
        assert np.array_equal(net.weight, WEIGHTS)  # Gemm without transB: (in, out) as stored
    else:
        with pytest.raises(ImportModelError, match="outside the model's folder"):
            from_onnx(opened)


def test_a_link_to_a_file_outside_names_where_it_leads(tmp_path: Path) -> None:
    """The README's promise, the plain case: w.bin -> /etc/passwd is refused, naming the target."""
    (tmp_path / "m").mkdir()
    model = write_model(tmp_path / "m")
    (tmp_path / "m" / "w.bin").symlink_to("/etc/passwd")
    with pytest.raises(ImportModelError, match=r"'w.bin', a link to /etc/passwd, outside the model's folder"):
        from_onnx(model)
