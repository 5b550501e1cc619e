"""`mcutrain`: train small networks on the host, export them to a board, build, flash, simulate, and
talk to the device. Each command lives in its own module; this one ties them together."""

from __future__ import annotations

import click

from mcutrain.version import __version__

from .common import EXIT_CODES_HELP, ErrorPolicyGroup


def version_text() -> str:
    """What `mcutrain --version` prints: the version, the kernel variant that runs (and the ones this CPU
    runs), and the format versions this mcutrain reads and writes."""
    from mcutrain import corefacts, isa

    formats = ", ".join(f"{k.lower()} {v}" for k, v in corefacts.FORMAT_VERSIONS.items())
    return (
        f"mcutrain {__version__}\nkernels: {isa.active()} (this CPU runs: {', '.join(isa.runnable())}; "
        f"MCUTRAIN_ISA selects one)\nformats: {formats}"
    )


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(version_text())
        ctx.exit()


@click.group(cls=ErrorPolicyGroup, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version, the kernel variant that runs and the format versions, and exit.",
)
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
    from .collect import collect
    from .device import device
    from .doctor import doctor
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
    main.add_command(collect)
    main.add_command(doctor)


_register()


if __name__ == "__main__":  # pragma: no cover
    main()
