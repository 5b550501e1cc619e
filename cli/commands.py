"""`mcutrain`: train small networks on the host, export them to a board, build, flash, simulate, and
talk to the device. Each command lives in its own module; this one ties them together."""

from __future__ import annotations

import click

from mcutrain.version import __version__

from .common import EXIT_CODES_HELP, ErrorPolicyGroup


@click.group(cls=ErrorPolicyGroup, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mcutrain")
@click.option("--debug", is_flag=True, help="Show Python tracebacks for errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Train tiny neural networks on this computer, export them as firmware for a microcontroller,
    and keep training them on the device.

    \b
    The whole path on the built-in example, without hardware:
      mcutrain train                                  # -> model.mct
      mcutrain export model.mct --board native -o fw  # -> a PlatformIO project
      mcutrain sim fw                                 # build, run, compare with the host

    Every command has --help with an example.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _register() -> None:
    """Add every command to the group."""
    from .device import device
    from .export import build, export, flash, sim
    from .features import features
    from .fleet import fleet
    from .interop import export_onnx, import_cmd
    from .layers import layers
    from .model import boards, eval_cmd, info, plot
    from .serve import serve
    from .train import train

    for cmd in (train, layers, eval_cmd, info, plot, boards, export, build, flash, sim, serve, device):
        main.add_command(cmd)
    for cmd in (import_cmd, export_onnx):
        main.add_command(cmd)
    main.add_command(fleet)
    main.add_command(features)


_register()


if __name__ == "__main__":  # pragma: no cover
    main()
