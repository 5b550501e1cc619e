"""`mcutrain import` and `mcutrain export-onnx`: models of other frameworks in, ONNX out."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

from .common import CliError, OutputPath, check_output, example, note, write_output


@click.command("import")
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o",
    "--output",
    type=OutputPath(dir_okay=False),
    default="model.mct",
    show_default=True,
    help="Model file to write.",
)
@click.option(
    "--trust-pickle",
    is_flag=True,
    help="Load a scikit-learn estimator from a pickle or joblib file. Loading a pickle runs code stored in "
    "the file: use it only for files you made or trust.",
)
@click.option(
    "--loss",
    "loss_name",
    default=None,
    help="Loss to record for training [default: cross_entropy after a softmax, logit_bce after a sigmoid, else mse].",
)
@click.option(
    "--features",
    "spec_text",
    default=None,
    help="The network's inputs are these features (e.g. 'kws'): the model keeps the pipeline, takes raw windows "
    "in eval and on the device.",
)
@click.option("--labels", default=None, help="With --features: the class names of the outputs, comma-separated.")
@click.option("--force", is_flag=True, help="Replace an existing model file.")
@example("""
mcutrain import net.onnx -o model.mct             # PyTorch (torch.onnx.export) or any ONNX opset 13+
mcutrain import kws.onnx --features kws --labels yes,no,up,down -o kws.mct   # a network on 49x10 MFCCs
mcutrain import net.keras -o model.mct            # a Keras 3 Sequential model
mcutrain import net.tflite -o model.mct           # an int8 TFLite CNN (TFLiteConverter, full integer)
mcutrain import mlp.joblib --trust-pickle -o model.mct   # a fitted scikit-learn MLPClassifier/MLPRegressor
mcutrain train --resume model.mct --data more.csv --classify --steps 2000   # fine-tune it""")
def import_cmd(
    model: str,
    output: str,
    trust_pickle: bool,
    loss_name: Optional[str],
    spec_text: Optional[str],
    labels: Optional[str],
    force: bool,
) -> None:
    """Import a model from another framework as an mcutrain model file: ONNX (.onnx, opset 13+), Keras 3
    (.keras, a Sequential of Dense and activations), a full-integer int8 TensorFlow Lite file (.tflite; it keeps
    its quantization, which export --quant int8-full uses) or a scikit-learn MLP saved with pickle or joblib (.pkl,
    .pickle, .joblib; needs --trust-pickle, because unpickling runs code from the file).

    The network keeps the source's weights and predicts what the source predicts (within float32
    rounding); train, export and run it on a device like any other model. What is supported: ONNX Gemm,
    MatMul+Add, Relu, LeakyRelu, Sigmoid, Tanh, Softplus, Sin, Cos, Softmax, Mul/Add by constants, residual
    Adds and a one-channel Conv; Keras Dense with activations and Softmax; scikit-learn MLPs. Anything else
    fails with the node or layer it cannot import.

    With --features, the network's inputs are the features of a pipeline (docs/features.md; frame-major, as
    mcutrain computes them): the model keeps it, `eval --data` takes raw data and the export computes the features
    on the device from raw windows. A scikit-learn scaler becomes the pipeline's normalisation.
    """
    from mcutrain import losses
    from mcutrain.exporter.interop import PICKLE_SUFFIXES, suggested_loss
    from mcutrain.exporter.model_import import import_checkpoint
    from mcutrain.modelfile import encode_model

    out = check_output(Path(output), force, "model file")
    ck = import_checkpoint(model, allow_pickle=trust_pickle)
    net = ck.net
    loss = losses.by_name(loss_name or suggested_loss(net))
    imported = {"from": str(model), "format": Path(model).suffix.lower().lstrip(".")}
    metadata = {**ck.metadata, "loss": str(loss), "imported": imported}
    if labels is not None and spec_text is None:
        raise CliError("--labels names the outputs of a network on features: give --features too")
    if spec_text is not None:
        from mcutrain.featdata import imported_frontend
        from mcutrain.features import FeatureSpec

        names = [t.strip() for t in labels.split(",")] if labels is not None else None
        spec = FeatureSpec.parse(spec_text)
        metadata = imported_frontend(metadata, net.n_in, net.n_out, spec, names)
    write_output(out, encode_model(net, None, metadata), force, "model file")
    click.echo(f"imported {model}: {net.describe()}")
    if spec_text is not None:
        click.echo(f"its inputs are the features of {FeatureSpec.parse(spec_text).text()} (kept in the model)")
    for step in metadata.get("input_steps", []):
        click.echo(f"inputs are scaled first as the {step['source']} does (kept as the model's input steps)")
    click.echo(f"{net.n_in} inputs, {net.n_out} outputs, {net.param_count():,} parameters, loss {loss} -> {out}")
    shape = net.in_shape or ()
    if len(shape) > 1 and Path(model).suffix.lower() == ".onnx":
        note(
            f"note: the input is {'x'.join(map(str, shape))}, channels-last: give images (N, C, H, W) made for the "
            "source model as x.transpose(0, 2, 3, 1) (a series (N, C, T) as x.transpose(0, 2, 1))"
        )
    if Path(model).suffix.lower() in PICKLE_SUFFIXES and net.n_out == 1 and str(loss) == "logit_bce":
        note("note: a binary classifier has one output, the probability of the second class (predict_proba[:, 1])")


@click.command("export-onnx")
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o", "--output", type=OutputPath(dir_okay=False), default=None, help="ONNX file [default: MODEL with .onnx]."
)
@click.option("--force", is_flag=True, help="Replace an existing ONNX file.")
@example("""
mcutrain export-onnx model.mct -o model.onnx
mcutrain device pull --port /dev/ttyACM0 --project fw -o learned.mct && mcutrain export-onnx learned.mct""")
def export_onnx(model: str, output: Optional[str], force: bool) -> None:
    """Write a model file's network, with its current weights, as an ONNX file (opset 13; input `x` of shape
    (batch, inputs), or (batch, H, W, C) channels-last for a convolutional network, output `y`), e.g. after
    `mcutrain device pull`, to inspect, serve or fine-tune elsewhere."""
    from mcutrain.exporter.onnx_export import onnx_model
    from mcutrain.modelfile import load_model

    out = check_output(Path(output) if output else Path(model).with_suffix(".onnx"), force, "ONNX file")
    ck = load_model(model)
    from mcutrain.modelmeta import input_steps

    steps = input_steps(ck.metadata, ck.net.n_in)
    write_output(out, onnx_model(ck.net, out.stem or "mcutrain", steps).SerializeToString(), force, "ONNX file")
    click.echo(f"wrote {out}: {ck.net.describe()} ({ck.net.param_count():,} parameters, ONNX opset 13)")
